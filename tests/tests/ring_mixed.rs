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
