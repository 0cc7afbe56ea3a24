//! A mixed fleet's snapshot with the real binaries over loopback: two
//! relays in ring mode and two streaming (clocks seconds apart in time
//! namespaces where the kernel allows them, else simulated offsets), one
//! trigger with `tracesync trigger`: the ring relays ship their windows,
//! the stream relays' windows are read back from the daemon's own rolled
//! output once it is durable past the window's end, and one snapshot holds
//! every machine's synthetic events of [T - before, T + after] on one
//! timeline (each once, none missing, each within the error bound the file
//! gives it), loading alone in the trace processor.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tracesync_cli::check::check_dir;
use tracesync_core::sync_quality::{QualityTrack, read_sample};
use tracesync_protocol::reader::TraceFile;
use tracesync_protocol::scan::scan_packet;
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, bin};
use tracesync_tests::ring::{self, Fired, Window, check_snapshot, stop_all, wait_for};

/// `tracesync trigger`, which must fire: its stdout.
fn trigger(daemon: &Daemon, name: &str, before: &str, after: &str) -> String {
    let (code, stdout, stderr) = ring::trigger(daemon, name, before, after);
    assert_eq!(code, 0, "tracesync trigger: {stdout}{stderr}");
    stdout
}

#[test]
fn one_snapshot_holds_ring_and_stream_relays_windows_on_one_timeline() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut relays = vec![
        Relay::start(&daemon, ring::relay_opts("ring-plus-7", 7, true)),
        Relay::start(&daemon, ring::relay_opts("ring-plus-300", 300, true)),
        Relay::start(&daemon, ring::relay_opts("stream-plus-40", 40, false)),
        Relay::start(&daemon, ring::relay_opts("stream-plus-2000", 2000, false)),
    ];
    let names = [
        "ring-plus-7",
        "ring-plus-300",
        "stream-plus-40",
        "stream-plus-2000",
    ];
    daemon.wait_connected(&names, Duration::from_secs(30));
    daemon.wait_synced(&names, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));

    let stdout = trigger(&daemon, "mixed", "2s", "1s");
    assert!(stdout.contains("2 ring relay(s) asked"), "{stdout}");
    let fired = Fired::parse(&stdout);
    let name = &fired.snapshot;
    let path = daemon.output.join(name);
    // Written once both ring windows are whole and the output is durable
    // past T + after.
    wait_for(
        Duration::from_secs(40),
        || daemon.log().contains(&format!("snapshot {name} written")),
        || format!("no {name}:\n{}", daemon.log()),
    );
    let log = daemon.log();
    assert!(
        log.contains("output_whole=true"),
        "the snapshot was written before the output was past its window:\n{log}"
    );
    check_snapshot(
        "ring_mixed snapshot",
        &path,
        &names,
        Window::two_one(fired.host_time),
        &[],
    );
    // The snapshot holds one machine after another (the stream relays'
    // from the output first): `report` counts none of the ring relays'
    // packets late against another machine's (the table's last column).
    let svg = daemon.output.with_file_name("mixed.svg");
    let (code, out, err) = report(&path, &svg);
    assert_eq!(code, 0, "report FILE: {out}{err}");
    let late: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("ring-plus-"))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(late, ["0", "0"], "report FILE: {out}");
    stop_all(&mut relays, &mut daemon);
}

/// Runs `tracesync report TARGET -o SVG`: exit code, stdout, stderr.
fn report(target: &Path, svg: &Path) -> (i32, String, String) {
    cli(&[
        "report".as_ref(),
        target.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
    ])
}

/// Runs `tracesync ARGS`: exit code, stdout, stderr.
fn cli(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(bin("tracesync"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run tracesync: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_tools_read_a_snapshot_as_they_read_rolled_files() {
    // Retention of one byte: every complete rolled file goes at the next
    // start, the snapshot stays.
    let mut daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--retain-bytes".into(), "1".into()],
        ..DaemonOpts::default()
    });
    let mut relay = Relay::start(&daemon, ring::relay_opts("ring-alone", 50, true));
    daemon.wait_connected(&["ring-alone"], Duration::from_secs(30));
    daemon.wait_synced(&["ring-alone"], Duration::from_secs(30));
    // `tail DIR` follows the stream and says the snapshot when it appears.
    let mut follower = Command::new(bin("tracesync"))
        .arg("tail")
        .arg(&daemon.output)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("tracesync tail DIR: {e}"));
    std::thread::sleep(Duration::from_secs(2));
    let stdout = trigger(&daemon, "alone", "1s", "500ms");
    let name = Fired::parse(&stdout).snapshot;
    let path = daemon.output.join(&name);
    wait_for(
        Duration::from_secs(40),
        || daemon.log().contains(&format!("snapshot {name} written")),
        || format!("no {name}:\n{}", daemon.log()),
    );
    std::thread::sleep(Duration::from_secs(1));
    let _ = follower.kill();
    let said = follower
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    assert!(
        said.contains(&format!("snapshot {name} written")),
        "tail DIR did not say the snapshot: {said:?}"
    );

    check_merges(&daemon.output, &path);

    // tail FILE prints it and exits; report FILE reads it.
    let (code, out, err) = cli(&[
        "tail".as_ref(),
        "--format".as_ref(),
        "jsonl".as_ref(),
        path.as_os_str(),
    ]);
    assert_eq!(code, 0, "tail FILE: {err}");
    let events = out
        .lines()
        .filter(|l| l.contains("\"machine\":\"ring-alone\"") && l.contains("track_event"))
        .count();
    assert!(
        events >= 500,
        "tail FILE: {events} events of ring-alone\n{err}"
    );
    let svg = daemon.output.with_file_name("alone.svg");
    let (code, out, err) = report(&path, &svg);
    assert_eq!(code, 0, "report FILE: {out}{err}");
    // report and refine take the output directory with the snapshot in it.
    let (code, out, err) = report(&daemon.output, &svg);
    assert_eq!(code, 0, "report DIR: {out}{err}");

    let status = relay.stop();
    assert!(status.success(), "relay: {status}\n{}", relay.log());
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd: {status}\n{}", daemon.log());
    let refined = daemon.output.with_file_name("refined");
    let (code, out, err) = cli(&[
        "refine".as_ref(),
        daemon.output.as_os_str(),
        "-o".as_ref(),
        refined.as_os_str(),
    ]);
    assert_eq!(code, 0, "refine DIR: {out}{err}");
    assert!(
        refined.join(&name).is_file(),
        "refine DIR left the snapshot out: {out}{err}"
    );
    check_refined_snapshot(&path, &refined.join(&name));
    // refine SNAPSHOT: one line saying what to give instead, exit 64.
    let (code, _, err) = cli(&["refine".as_ref(), path.as_os_str()]);
    assert_eq!(code, 64, "refine SNAPSHOT: {err}");
    assert!(err.contains("refine its output directory"), "{err}");
    check_restart(&mut daemon, &name);
}

/// The snapshot `refine DIR` wrote: the live one's packets in the same
/// order but for the sync points and offset/bound samples, its index line
/// with its new length, every event inside its refined bound (no wider
/// than the live one, as for the rolled files), opening alone in the trace
/// processor.
fn check_refined_snapshot(live: &Path, refined: &Path) {
    let (live_kept, live_replaced) = packets(live);
    let (kept, replaced) = packets(refined);
    assert!(!kept.is_empty(), "{}: no packets", refined.display());
    assert!(
        kept == live_kept,
        "{}: {} packets besides the alignment, the live snapshot {}",
        refined.display(),
        kept.len(),
        live_kept.len()
    );
    assert!(
        live_replaced > 0 && replaced > 0,
        "alignment packets: live {live_replaced}, refined {replaced}"
    );
    let name = refined.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let out_dir = refined.parent().unwrap_or(Path::new("."));
    let index = std::fs::read_to_string(out_dir.join("index.jsonl")).unwrap_or_default();
    let len = std::fs::metadata(refined).map(|m| m.len()).unwrap_or(0);
    let line = index
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no index line for {name}:\n{index}"));
    assert_eq!(line["bytes"].as_u64(), Some(len), "{line}");

    // Each alone in a directory of its own, judged against its sources.
    let alone = |p: &Path, dir: &str| {
        let d = out_dir.with_file_name(dir);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        std::fs::copy(p, d.join(name)).unwrap_or_else(|e| panic!("{e}"));
        check_dir(&d).unwrap_or_else(|e| panic!("{e:?}"))
    };
    let live_check = alone(live, "snapshot-live");
    let refined_check = alone(refined, "snapshot-refined");
    assert!(!refined_check.sources.is_empty(), "no synthetic sources");
    for (src, r) in &refined_check.sources {
        let l = &live_check.sources[src];
        println!(
            "{src}: {} packets, p50/p99 bound live {}/{} ns, refined {}/{} ns; inside live {}, refined {}",
            r.packets,
            l.p50_bound_ns,
            l.p99_bound_ns,
            r.p50_bound_ns,
            r.p99_bound_ns,
            l.inside,
            r.inside
        );
        assert_eq!(r.packets, l.packets, "{src}: packets");
        assert_eq!(r.inside, r.packets, "{src}: outside the refined bound");
        assert!(
            r.p50_bound_ns <= 2 * l.p50_bound_ns + 5_000,
            "{src}: refined p50 bound {} ns, live {} ns",
            r.p50_bound_ns,
            l.p50_bound_ns
        );
    }
    if !tracesync_tests::tp::require_or_skip("ring_mixed refined snapshot") {
        return;
    }
    let errors = tracesync_tests::tp::error_stats(refined).unwrap_or_else(|e| panic!("{e}"));
    assert!(errors.is_empty(), "{}: {errors:?}", refined.display());
    let count = |p: &Path| {
        let r = tracesync_tests::tp::query(p, &["select count(*) as n from slice"])
            .unwrap_or_else(|e| panic!("{e}"));
        r[0].rows
            .first()
            .and_then(|row| row.first())
            .and_then(tracesync_tests::tp::as_i64)
    };
    let n = count(refined);
    assert!(n.is_some_and(|n| n > 0), "{n:?} slices");
    assert_eq!(n, count(live), "slices in the refined and live snapshot");
}

/// A trace file's packets but its sync points and offset/bound samples,
/// and how many of those.
fn packets(path: &Path) -> (Vec<Vec<u8>>, usize) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut trace = TraceFile::new(std::io::BufReader::new(file)).unwrap_or_else(|e| panic!("{e}"));
    let (mut kept, mut alignment) = (Vec::new(), 0);
    while let Some(p) = trace.next_packet().unwrap_or_else(|e| panic!("{e}")) {
        let fields = scan_packet(p.bytes).unwrap_or_else(|e| panic!("{e}"));
        let aligns = fields.remote_clock_sync.is_some()
            || read_sample(&fields, p.bytes).is_some_and(|s| {
                matches!(s.track, QualityTrack::Offset | QualityTrack::ErrorBound)
            });
        if aligns {
            alignment += 1;
        } else {
            kept.push(p.bytes.to_vec());
        }
    }
    (kept, alignment)
}

/// A restart removes a temporary snapshot a crash left (and says so), and
/// retention deletes the complete rolled files but not the snapshot.
fn check_restart(daemon: &mut Daemon, name: &str) {
    let stale = daemon.output.join(format!(".{name}.tmp"));
    std::fs::write(&stale, b"torn").unwrap_or_else(|e| panic!("{e}"));
    let rolled_before = rolled_files(&daemon.output);
    assert!(!rolled_before.is_empty());
    daemon.restart();
    wait_for(
        Duration::from_secs(20),
        || !stale.exists(),
        || format!("{} still there:\n{}", stale.display(), daemon.log()),
    );
    let log = daemon.log();
    assert!(
        log.contains("removed 1 temporary snapshot file(s)"),
        "{log}"
    );
    assert!(
        daemon.output.join(name).is_file(),
        "retention took the snapshot"
    );
    let rolled_after = rolled_files(&daemon.output);
    assert!(
        rolled_before.iter().all(|f| !rolled_after.contains(f)),
        "retention of 1 byte kept {rolled_before:?} (now {rolled_after:?})"
    );
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd: {status}\n{}", daemon.log());
}

fn rolled_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("tracesync-") && n.ends_with(".pftrace"))
        .collect()
}

/// `merge` of the snapshot alone and with a rolled file of `output`: two
/// machines, the host and the relay, both times.
fn check_merges(output: &std::path::Path, path: &std::path::Path) {
    // merge: the host and the relay, two machines (the host's state opens
    // the file, so no reader takes the relay for the file's host).
    let stats = output.with_file_name("alone-stats.json");
    let merged = output.with_file_name("alone-merged.pftrace");
    let (code, out, err) = cli(&[
        "merge".as_ref(),
        "-o".as_ref(),
        merged.as_os_str(),
        "--stats".as_ref(),
        stats.as_os_str(),
        path.as_os_str(),
    ]);
    assert_eq!(code, 0, "merge: {out}{err}");
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stats).unwrap_or_default())
            .unwrap_or_else(|e| panic!("stats: {e}"));
    assert_eq!(stats["machines"], 2, "{stats}");
    // With another trace (a rolled file): an ordinary merge, the host
    // kept apart from the relay.
    let rolled = std::fs::read_dir(output)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("tracesync-") && n.ends_with(".pftrace"))
        })
        .unwrap_or_else(|| panic!("no rolled file"));
    let stats2 = output.with_file_name("both-stats.json");
    let (code, out, err) = cli(&[
        "merge".as_ref(),
        "-o".as_ref(),
        output.with_file_name("both.pftrace").as_os_str(),
        "--stats".as_ref(),
        stats2.as_os_str(),
        path.as_os_str(),
        rolled.as_os_str(),
    ]);
    assert_eq!(code, 0, "merge snapshot + rolled: {out}{err}");
    let stats2: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stats2).unwrap_or_default())
            .unwrap_or_else(|e| panic!("stats: {e}"));
    assert_eq!(stats2["machines"], 2, "{stats2}");
}
