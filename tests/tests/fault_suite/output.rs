//! The output directory under a clumsy operator or an attacker: deleted
//! while the daemon runs (what was produced from 1 s after the deletion is
//! all written, once, in a directory made again with its mode) and symlinks
//! planted at the daemon's own file names (never followed, counted).

use std::time::Duration;

use tracesync_capture::names::RolledName;
use tracesync_capture::sidecar::sidecar_name;
use tracesync_tests::faults::{self, Cluster, ClusterOpts, Rng};
use tracesync_tests::live::DaemonOpts;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Per source, every counter seen after the preamble: how often, and its
/// true host BOOTTIME.
fn sightings(
    check: &tracesync_tests::live::OutputCheck,
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<u64, (u32, u64)>> {
    let mut out: std::collections::BTreeMap<_, std::collections::BTreeMap<_, _>> =
        std::collections::BTreeMap::new();
    for file in &check.files {
        for e in file.events.iter().filter(|e| !e.in_preamble) {
            let seen = out
                .entry(e.id.src.to_string())
                .or_default()
                .entry(e.id.n)
                .or_insert((0, e.id.truth_ns));
            seen.0 += 1;
        }
    }
    out
}

/// Removes `dir` and everything in it; again if the daemon made it again
/// in the middle (its next commit may).
fn remove_dir_repeatedly(dir: &std::path::Path) {
    for attempt in 0.. {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) if attempt < 50 => {
                eprintln!("remove {}: {e}; again", dir.display());
                std::thread::sleep(ms(20));
            }
            Err(e) => panic!("remove {}: {e}", dir.display()),
        }
    }
}

#[test]
fn output_directory_deleted_while_running_loses_nothing_acknowledged_after() {
    const TEST: &str = "output_directory_deleted_while_running_loses_nothing_acknowledged_after";
    const RATE: u64 = 1000;
    let _one = faults::one_at_a_time();
    let rng = Rng::from_env(TEST);
    // A mode of its own, to be made again with.
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().expect("tempdir");
    let out = base.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o751)).expect("chmod");
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "rmdir".into(),
        relays: 2,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(100),
            output_dir: Some(out.clone()),
            // The default commit interval (100 ms) and hourly rotation: the
            // check at every commit is what notices.
            ..DaemonOpts::default()
        },
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.hold_stuck_tail();
    c.wait_progress(RATE);
    remove_dir_repeatedly(&out);
    let deleted_ns = tracesync_common::clock::boottime_ns();
    c.tally.add("output-dir-removed");
    let s = c
        .daemon
        .wait_status("the daemon to find its output gone", ms(30_000), |s| {
            s["output"]["vanished"].as_u64() >= Some(1)
        });
    eprintln!("{TEST}: daemon: {}", s["output"]);
    let s = c
        .daemon
        .wait_status("the output to be written again", ms(30_000), |s| {
            s["output"]["failing"] == false
        });
    c.wait_progress(RATE);
    let mode = std::fs::metadata(&out)
        .expect("made again")
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o751, "the directory is made again with its mode");
    // The new journal resumes a daemon killed afterwards: nothing twice.
    c.kill9_daemon(ms(300));
    c.wait_connected();
    c.wait_progress(RATE);
    let vanished = s["output"]["vanished"].as_u64().unwrap_or(0);
    let log = c.daemon.log();
    let said = log.matches("is no longer in the output directory").count() as u64;
    assert!(
        vanished >= 1 && said == vanished,
        "{vanished} vanished in status, {said} error lines:\n{log}"
    );
    let (row, check) = c.stop_and_check(TEST, rng.seed, true);
    // Judge by identity: whatever was produced from 1 s after the deletion
    // is there, once; nothing anywhere twice.
    let cutoff = deleted_ns + 1_000_000_000;
    let (mut after, mut after_deletion, mut missing_in_second) = (0u64, 0u64, 0u64);
    for (src, seen) in sightings(&check) {
        let twice: Vec<u64> = seen
            .iter()
            .filter(|(_, s)| s.0 > 1)
            .map(|(n, _)| *n)
            .collect();
        assert!(twice.is_empty(), "{src}: counters written twice: {twice:?}");
        let Some(first) = seen.iter().find(|(_, s)| s.1 >= cutoff).map(|(n, _)| *n) else {
            panic!(
                "{src}: nothing produced after the deletion:\n{}",
                check.summary()
            );
        };
        let last = *seen.keys().next_back().expect("seen");
        let missing: Vec<u64> = (first..=last).filter(|n| !seen.contains_key(n)).collect();
        assert!(
            missing.is_empty(),
            "{src}: {} counters produced after the deletion are missing, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
        // And the one before the first past the cutoff (produced after the
        // deletion too): no gap hides at the boundary.
        assert!(
            first == 0 || seen.contains_key(&(first - 1)),
            "{src}: counter {} (just before the cutoff) is missing",
            first - 1
        );
        after += last - first + 1;
        // For the record: the second after the deletion.
        if let Some(from) = seen
            .iter()
            .find(|(_, s)| s.1 >= deleted_ns)
            .map(|(n, _)| *n)
        {
            after_deletion += last - from + 1;
            missing_in_second += (from..first).filter(|n| !seen.contains_key(n)).count() as u64;
        }
    }
    assert!(
        check.errors.is_empty() && check.events_in_preamble == 0 && check.unsynced_events == 0,
        "{}",
        check.summary()
    );
    // The recreated directory's index lists exactly its files.
    let indexed: Vec<&str> = check
        .index
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    let files: Vec<String> = check
        .files
        .iter()
        .filter_map(|f| Some(f.path.file_name()?.to_str()?.to_owned()))
        .collect();
    assert_eq!(indexed, files);
    eprintln!(
        "{TEST}: {vanished} vanished; {after} events produced from 1 s after the deletion, all \
         written once ({after_deletion} from the deletion on, {missing_in_second} of them \
         missing); {} events before it gone with the directory; {} files in the new directory, \
         judged {:?}",
        row.counts.lost, row.files, row.files_judged
    );
    assert_eq!(row.counts.duplicated, 0);
}

#[test]
fn symlinks_planted_in_the_output_directory_are_never_followed() {
    const TEST: &str = "symlinks_planted_in_the_output_directory_are_never_followed";
    const RATE: u64 = 1000;
    const WINDOW_S: u64 = 20;
    let _one = faults::one_at_a_time();
    let rng = Rng::from_env(TEST);
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "links".into(),
        relays: 2,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(100),
            // A rotation every few seconds.
            rotate_bytes: Some(256 << 10),
            ..DaemonOpts::default()
        },
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.daemon
        .wait_synced(&c.name_refs(), Duration::from_secs(60));
    c.wait_progress(RATE / 2);
    let out = c.daemon.output.clone();
    let targets = tempfile::tempdir().expect("tempdir");
    let precious = b"not the daemon's\n";
    let index_target = targets.path().join("index-target");
    let sidecar_target = targets.path().join("sidecar-target");
    std::fs::write(&index_target, precious).expect("write");
    std::fs::write(&sidecar_target, precious).expect("write");
    // index.jsonl.tmp, and the sidecar names of the next three files for
    // every second of the window (a file's name carries its start).
    let current = c.daemon.status().expect("status")["current_file"]
        .as_str()
        .map(str::to_owned)
        .expect("current file");
    let seq: u64 = current
        .rsplit('-')
        .next()
        .and_then(|s| s.strip_suffix(".pftrace"))
        .and_then(|s| s.parse().ok())
        .expect("a rolled file's number");
    std::os::unix::fs::symlink(&index_target, out.join("index.jsonl.tmp")).expect("symlink");
    let now = std::time::SystemTime::now();
    let mut planted = Vec::new();
    for second in 0..WINDOW_S {
        let start = now + Duration::from_secs(second);
        for next in seq + 1..=seq + 3 {
            let name = sidecar_name(&RolledName::new(start, next).to_string());
            let link = out.join(name);
            if std::os::unix::fs::symlink(&sidecar_target, &link).is_ok() {
                planted.push(link);
            }
        }
    }
    c.tally.add("symlinks-planted");
    c.daemon.wait_status(
        "a rotation past the planted names",
        Duration::from_secs(60),
        |s| {
            s["current_file"].as_str().is_some_and(|f| {
                f.rsplit('-')
                    .next()
                    .and_then(|s| s.strip_suffix(".pftrace"))
                    .and_then(|s| s.parse::<u64>().ok())
                    .is_some_and(|n| n > seq + 3)
            })
        },
    );
    // Writing on, with probe samples in the new files' sidecars.
    std::thread::sleep(Duration::from_secs(3));
    c.wait_progress(RATE);
    let show = |p: &std::path::Path| {
        String::from_utf8_lossy(&std::fs::read(p).expect("read")).into_owned()
    };
    assert_eq!(
        show(&index_target),
        "not the daemon's\n",
        "written through index.jsonl.tmp"
    );
    assert_eq!(
        show(&sidecar_target),
        "not the daemon's\n",
        "written through a sidecar link"
    );
    let output = &c.daemon.status().expect("status")["output"];
    eprintln!("{TEST}: daemon: {output}");
    // index.jsonl.tmp, and at least one of the next sidecar names.
    let refused = output["symlinks_refused"].as_u64().unwrap_or(0);
    assert!(refused >= 2, "{output}");
    // The sidecar links are left; the one at the daemon's temporary name
    // (its own directory) was removed. (The output dir goes with the
    // daemon at the end: look now.)
    let left = planted.iter().filter(|l| l.is_symlink()).count();
    assert_eq!(left, planted.len());
    assert!(!out.join("index.jsonl.tmp").is_symlink());
    let sidecars = std::fs::read_dir(&out)
        .expect("read_dir")
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name().to_string_lossy().ends_with(".sync.jsonl")
                && e.file_type().is_ok_and(|t| t.is_file())
        })
        .count();
    assert!(sidecars >= 2, "{sidecars} sidecars written");
    let (row, check) = c.finish(TEST, rng.seed, true);
    assert_eq!(std::fs::read(&index_target).expect("read"), precious);
    assert_eq!(std::fs::read(&sidecar_target).expect("read"), precious);
    eprintln!(
        "{TEST}: {} links planted, {refused} refused (counted), {} files, {} written, {} \
         sidecars; targets untouched",
        planted.len() + 1,
        check.files.len(),
        row.counts.written,
        sidecars
    );
}
