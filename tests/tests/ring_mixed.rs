//! A mixed fleet's snapshot with the real binaries over loopback: two
//! relays in ring mode and two streaming (clocks seconds apart in time
//! namespaces where the kernel allows them, else simulated offsets), one
//! trigger with `tracesync trigger`: the ring relays ship their windows,
//! the stream relays' windows are read back from the daemon's own rolled
//! output once it is durable past the window's end, and one snapshot holds
//! every machine's synthetic events of [T - before, T + after] on one
//! timeline (each once, none missing, within the bound), loading alone in
//! the trace processor.

use std::process::Command;
use std::time::{Duration, Instant};

use tracesync_tests::live::{self, Daemon, DaemonOpts, Relay, RelayOpts, bin};
use tracesync_tests::tp;

const RATE: u64 = 500;
/// Packets are placed by the latest sync point written, which may lag the
/// estimate by the daemon's sync-point threshold (1 us by default).
const SYNC_POINT_THRESHOLD_NS: i64 = 1_000;

fn relay_opts(name: &str, offset_s: i64, ring: bool) -> RelayOpts {
    let extra_args = if ring {
        vec!["--mode".into(), "ring".into()]
    } else {
        Vec::new()
    };
    let opts = RelayOpts {
        extra_args,
        ..RelayOpts::synthetic(name, RATE)
    };
    if live::time_namespaces().is_ok() {
        opts.in_time_namespace(offset_s)
    } else {
        RelayOpts {
            clock_offset_ns: Some(offset_s * 1_000_000_000),
            ..opts
        }
    }
}

fn trigger(daemon: &Daemon, name: &str, before: &str, after: &str) -> String {
    let out = Command::new(bin("tracesync"))
        .arg("trigger")
        .arg(name)
        .args(["--before", before, "--after", after, "--connect"])
        .arg(&daemon.control)
        .output()
        .unwrap_or_else(|e| panic!("run tracesync trigger: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tracesync trigger: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    s.split_once(start)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(v, _)| v)
        .unwrap_or_else(|| panic!("no {start:?}..{end:?} in {s:?}"))
}

fn wait_for(limit: Duration, mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{}", what());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn one_snapshot_holds_ring_and_stream_relays_windows_on_one_timeline() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut relays = vec![
        Relay::start(&daemon, relay_opts("ring-plus-7", 7, true)),
        Relay::start(&daemon, relay_opts("ring-plus-300", 300, true)),
        Relay::start(&daemon, relay_opts("stream-plus-40", 40, false)),
        Relay::start(&daemon, relay_opts("stream-plus-2000", 2000, false)),
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
    let name = between(&stdout, "; snapshot ", "\n").trim().to_owned();
    let t: i64 = between(&stdout, "at host time ", " ns")
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let path = daemon.output.join(&name);
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
    let status = daemon.status().unwrap_or_else(|e| panic!("{e}"));
    check_machines(
        &path,
        &names,
        &status,
        (t - 2_000_000_000, t + 1_000_000_000),
    );
    if tp::require_or_skip("ring_mixed snapshot") {
        let stats = tp::error_stats(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            stats.is_empty(),
            "{}: error stats {stats:?}",
            path.display()
        );
    }
    for r in &mut relays {
        let status = r.stop();
        assert!(
            status.success(),
            "relay {}: {status}\n{}",
            r.name(),
            r.log()
        );
    }
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd: {status}\n{}", daemon.log());
}

/// Every machine's synthetic events of [`from`, `to`] are in the snapshot,
/// each once, none missing between the window's ends, each at its true
/// host time within its machine's error bound.
fn check_machines(
    path: &std::path::Path,
    names: &[&str],
    status: &serde_json::Value,
    (from, to): (i64, i64),
) {
    let scan = live::output::scan_file(path, None);
    assert!(scan.error.is_none(), "{:?}", scan.error);
    for &name in names {
        let machine = scan
            .machine_names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(&m, _)| m)
            .unwrap_or_else(|| panic!("no SystemInfo names {name} in {:?}", scan.machine_names));
        let bound = live::process::machine(status, name)
            .map_or(0, |m| m["error_bound_ns"].as_u64().unwrap_or(0));
        let mut ns = Vec::new();
        let mut truths = Vec::new();
        let mut worst = 0i64;
        for e in scan.events.iter().filter(|e| e.machine == machine) {
            assert!(!e.unsynced, "{name}: an event before any sync point");
            ns.push(e.id.n);
            let truth = e.id.truth_ns as i64;
            truths.push(truth);
            worst = worst.max((e.ts_host - truth).abs());
        }
        assert!(!ns.is_empty(), "{name}: no events in the snapshot");
        ns.sort_unstable();
        let count = ns.len();
        ns.dedup();
        assert_eq!(ns.len(), count, "{name}: duplicated events");
        let (first, last) = (ns[0], ns[count - 1]);
        assert_eq!(
            (last - first + 1) as usize,
            count,
            "{name}: events missing between n={first} and n={last}"
        );
        let lo = truths.iter().min().copied().unwrap_or(0);
        let hi = truths.iter().max().copied().unwrap_or(0);
        // The generator's ticks (events come in bursts) at each end.
        let slack = 20_000_000;
        assert!(
            (from - slack..=from + slack).contains(&lo) && (to - slack..=to + slack).contains(&hi),
            "{name}: events' true times [{lo}, {hi}] do not span the window [{from}, {to}]"
        );
        let allowed = bound as i64 + SYNC_POINT_THRESHOLD_NS;
        eprintln!(
            "mixed snapshot: {name}: {count} events, n {first}..={last}, \
             max |ts - truth| {worst} ns, bound {allowed} ns"
        );
        assert!(bound > 0, "{name}: no error bound in the status");
        assert!(
            worst <= allowed,
            "{name}: max |ts - truth| {worst} ns over {allowed} ns"
        );
    }
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
    let mut relay = Relay::start(&daemon, relay_opts("ring-alone", 50, true));
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
    let name = between(&stdout, "; snapshot ", "\n").trim().to_owned();
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
    let (code, out, err) = cli(&[
        "report".as_ref(),
        path.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
    assert_eq!(code, 0, "report FILE: {out}{err}");
    assert!(out.contains("ring-alone"), "{out}");
    // report and refine take the output directory with the snapshot in it.
    let (code, out, err) = cli(&[
        "report".as_ref(),
        daemon.output.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
    ]);
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
    // refine SNAPSHOT: one line saying what to give instead, exit 64.
    let (code, _, err) = cli(&["refine".as_ref(), path.as_os_str()]);
    assert_eq!(code, 64, "refine SNAPSHOT: {err}");
    assert!(err.contains("refine its output directory"), "{err}");
    check_restart(&mut daemon, &name);
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
