//! Fault injection suite, bounded CI edition (scripts/fault-suite.sh runs
//! the long edition: the same scenarios with more cycles).
//!
//! - disk full: the daemon's output is a small tmpfs in a private mount
//!   namespace; filled mid-stream, the daemon stops acknowledging (relays
//!   keep their data), says so in its status, and resumes once space
//!   returns.
//! - random faults (seeded, printed): kill -9 of the daemon and of relays
//!   at random points, SIGSTOP of either, a silent partition and a reset of
//!   a relay's link (through a userspace forwarder), forward relay clock
//!   steps, and a stuck tail subscriber all along.
//! - a reconnect storm: 64 relays reconnecting at once after a daemon
//!   restart.
//!
//! Every scenario counts the synthetic packets produced, written, lost and
//! duplicated by identity and requires lost = 0 and duplicated = 0; every
//! relay must stop with everything acknowledged, and every rolled file must
//! load alone in the trace processor.
//!
//! Knobs (environment): TRACESYNC_FAULT_SEED, TRACESYNC_FAULT_CYCLES (kill
//! -9 cycles, default 6), TRACESYNC_FAULT_DISK_EPISODES (default 1),
//! TRACESYNC_FAULT_STORMS (default 1), TRACESYNC_FAULT_STORM_RELAYS
//! (default 64), TRACESYNC_FAULT_BACKWARD_STEPS=1 (clock steps may go
//! back: the trace processor then counts invalid_clock_snapshots).

use std::time::Duration;

use tracesync_tests::faults::{self, Cluster, ClusterOpts, Rng, SmallDisk, env_u64};
use tracesync_tests::live::DaemonOpts;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[test]
fn disk_full_stops_acks_then_resumes_losing_nothing() {
    const TEST: &str = "disk_full_stops_acks_then_resumes_losing_nothing";
    const RATE: u64 = 2000;
    let _one = faults::one_at_a_time();
    if !faults::disk::require_or_skip(TEST) {
        return;
    }
    let rng = Rng::from_env(TEST);
    let episodes = env_u64("TRACESYNC_FAULT_DISK_EPISODES", 1).max(1);
    let disk = SmallDisk::mount(48 << 20).unwrap_or_else(|e| panic!("{e}"));
    let out = disk.dir.join("out");
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "disk".into(),
        relays: 2,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(100),
            // Rotations fall into the full-disk episodes too.
            rotate_bytes: Some(1 << 20),
            output_dir: Some(out.clone()),
            command_prefix: disk.command_prefix(),
            ..DaemonOpts::default()
        },
        output_view: Some(disk.view(&out)),
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.wait_progress(RATE / 2);
    for episode in 1..=episodes {
        let filled = disk.fill().unwrap_or_else(|e| panic!("fill: {e}"));
        c.tally.add("disk-full");
        let s = c
            .daemon
            .wait_status("the output to fail", Duration::from_secs(30), |s| {
                s["output"]["failing"] == true
            });
        eprintln!(
            "{TEST}: episode {episode}: filled {filled} bytes; daemon: {}",
            s["output"]
        );
        // Full for a while: the relays keep generating into their spools.
        std::thread::sleep(Duration::from_secs(2));
        let s = c.daemon.status().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s["output"]["failing"], true, "{}", s["output"]);
        assert!(
            disk.free_bytes().unwrap_or(0) < 64 << 10,
            "the disk is not full"
        );
        disk.release().unwrap_or_else(|e| panic!("release: {e}"));
        let s = c
            .daemon
            .wait_status("the output to recover", Duration::from_secs(30), |s| {
                s["output"]["failing"] == false
            });
        assert!(
            s["output"]["episodes"].as_u64() >= Some(episode)
                && s["output"]["errors"].as_u64() >= Some(1),
            "status does not count the episode: {}",
            s["output"]
        );
        c.wait_progress(RATE / 2);
    }
    // One error line and one recovery line per episode, however many
    // retries failed.
    let s = c.daemon.status().unwrap_or_else(|e| panic!("{e}"));
    let counted = s["output"]["episodes"].as_u64().unwrap_or(0);
    let log = c.daemon.log();
    let said = log.matches("relays are not acknowledged and wait").count() as u64;
    let recovered = log.matches("the output is writable again").count() as u64;
    assert!(
        counted >= episodes && said == counted && recovered == counted,
        "{counted} episodes in status, {said} error lines, {recovered} recovery lines:\n{log}"
    );
    let (row, check) = c.finish(TEST, rng.seed, true);
    assert!(row.tally.faults["disk-full"] >= 1);
    assert!(check.files.len() >= 2, "{}", check.summary());
}

/// One fault of the random plan.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill9,
    FreezeDaemon,
    FreezeRelay,
    Partition,
    Cut,
    ClockStep,
}

#[test]
fn random_kills_partitions_freezes_and_clock_steps_lose_nothing() {
    const TEST: &str = "random_kills_partitions_freezes_and_clock_steps_lose_nothing";
    const RATE: u64 = 1000;
    const RELAYS: usize = 3;
    let _one = faults::one_at_a_time();
    let mut rng = Rng::from_env(TEST);
    let kills = env_u64("TRACESYNC_FAULT_CYCLES", 6).max(1);
    let backward_steps = env_u64("TRACESYNC_FAULT_BACKWARD_STEPS", 0) != 0;
    let others = (kills / 5).max(1);
    let mut plan = vec![Fault::Kill9; kills as usize];
    for f in [
        Fault::FreezeDaemon,
        Fault::FreezeRelay,
        Fault::Partition,
        Fault::Cut,
        Fault::ClockStep,
    ] {
        plan.extend(std::iter::repeat_n(f, others as usize));
    }
    rng.shuffle(&mut plan);

    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "mix".into(),
        relays: RELAYS,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(100),
            rotate_bytes: Some(4 << 20),
            ..DaemonOpts::default()
        },
        forwarders: true,
        time_namespace_s: Some(1000),
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.hold_stuck_tail();
    c.wait_progress(RATE / 2);
    for (i, fault) in plan.iter().enumerate() {
        // A random point mid-stream.
        std::thread::sleep(ms(rng.range(0, 700)));
        let relay = rng.below(RELAYS);
        match fault {
            Fault::Kill9 => match rng.below(3) {
                0 => c.kill9_daemon(ms(rng.range(0, 1000))),
                1 => c.kill9_relay(relay, ms(rng.range(0, 1000))),
                _ => {
                    // Both at once: the relay comes back first or last.
                    c.relays[relay].kill9();
                    c.tally.add("kill9-relay");
                    c.kill9_daemon(ms(rng.range(0, 500)));
                    std::thread::sleep(ms(rng.range(0, 500)));
                    c.relays[relay].restart();
                }
            },
            Fault::FreezeDaemon => c.freeze_daemon(ms(rng.range(500, 3000))),
            Fault::FreezeRelay => c.freeze_relay(relay, ms(rng.range(500, 3000))),
            Fault::Partition => c.partition(relay, ms(rng.range(500, 3000))),
            Fault::Cut => c.cut(relay),
            // Forward only: BOOTTIME and MONOTONIC never go back within
            // one boot, and a relay that did would give the trace
            // processor non-monotonic clock snapshots
            // (invalid_clock_snapshots), whatever the daemon does.
            // TRACESYNC_FAULT_BACKWARD_STEPS=1 allows backward steps (to
            // reproduce that).
            Fault::ClockStep => {
                let step = rng.range(100, 5000) as i64 * 1_000_000;
                let back = backward_steps && rng.below(2) == 0;
                c.step_clock(relay, if back { -step } else { step });
            }
        }
        eprintln!(
            "{TEST}: fault {}/{}: {fault:?} (relay {relay})",
            i + 1,
            plan.len()
        );
        c.wait_progress(RATE / 5);
    }
    let seed = rng.seed;
    let (row, _) = c.finish(TEST, seed, true);
    assert!(row.tally.total() as usize > plan.len());
}

#[test]
fn reconnect_storm_of_64_relays_loses_nothing() {
    const TEST: &str = "reconnect_storm_of_64_relays_loses_nothing";
    const RATE: u64 = 20;
    let relays = env_u64("TRACESYNC_FAULT_STORM_RELAYS", 64) as usize;
    let _one = faults::one_at_a_time();
    let mut rng = Rng::from_env(TEST);
    let storms = env_u64("TRACESYNC_FAULT_STORMS", 1).max(1);
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "storm".into(),
        relays,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(200),
            max_relays: Some(128),
            ..DaemonOpts::default()
        },
        // Low-rate relays batch longer (fewer, larger batches).
        relay_args: vec!["--linger-ms".into(), "200".into()],
        ..ClusterOpts::default()
    });
    let first = c.wait_connected();
    eprintln!("{TEST}: {relays} relays connected in {first:?}");
    c.wait_progress(RATE / 2);
    for storm in 1..=storms {
        // Down long enough that every relay is retrying, then all at once.
        c.kill9_daemon(ms(rng.range(1000, 2000)));
        c.tally.add("reconnect-storm-64");
        let took = c.wait_connected();
        eprintln!("{TEST}: storm {storm}: all {relays} relays back in {took:?}");
        c.wait_progress(RATE / 2);
    }
    let seed = rng.seed;
    c.finish(TEST, seed, true);
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
            let name = format!(
                "tracesync-{}-{next:06}.pftrace.sync.jsonl",
                tracesync_daemon::rolling::utc_stamp(start)
            );
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
