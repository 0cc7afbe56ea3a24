//! The flight recorder's daemon half with the real binaries over loopback:
//! four relays in ring mode over mutual TLS (clocks truly apart: time
//! namespaces where the kernel allows them, else simulated offsets; one
//! drifting), a trigger fired with `tracesync trigger`, the Trigger fanned
//! out to every ring relay with its window on the relay's own clock, one
//! snapshot with every machine's synthetic events of the window (each
//! once, none missing, within the bound; the file loads alone in the trace
//! processor); a relay killed with -9 inside the window ships it after its
//! restart and the snapshot is written again whole; a storm of triggers
//! held to the name's limit while capture runs on.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tracesync_common::tls::pki;
use tracesync_tests::live::{self, Daemon, DaemonOpts, DaemonTls, Relay, RelayOpts, RelayTls, bin};
use tracesync_tests::tp;

const RATE: u64 = 500;
/// Packets are placed by the latest sync point written, which may lag the
/// estimate by the daemon's sync-point threshold (1 us by default).
const SYNC_POINT_THRESHOLD_NS: i64 = 1_000;
/// A relay killed with -9 loses the packets it had not cut into a batch
/// yet (its source's linger): its window ends up to this much before the
/// kill.
const KILL_SLACK_NS: i64 = 200_000_000;

/// A lab PKI: the daemon's certificate and one per relay name, as
/// `tracesync pki` makes them (mutual TLS, as shipped).
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new(relays: &[&str]) -> Pki {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let names = ["127.0.0.1".to_owned(), "localhost".to_owned()];
        pki::init(dir.path(), &names).unwrap_or_else(|e| panic!("pki init: {e}"));
        for name in relays {
            pki::issue(dir.path(), name, None).unwrap_or_else(|e| panic!("pki issue: {e}"));
        }
        Pki { dir }
    }

    fn daemon(&self) -> DaemonTls {
        DaemonTls {
            cert: self.dir.path().join("daemon.crt"),
            key: self.dir.path().join("daemon.key"),
            client_ca: self.dir.path().join("ca.crt"),
        }
    }

    fn relay(&self, name: &str) -> RelayTls {
        RelayTls {
            ca: self.dir.path().join("ca.crt"),
            cert: Some(self.dir.path().join(format!("{name}.crt"))),
            key: Some(self.dir.path().join(format!("{name}.key"))),
            server_name: None,
        }
    }
}

const FLEET: [&str; 4] = [
    "ring-plus-7",
    "ring-plus-300",
    "ring-plus-4000",
    "ring-drift-50ppm",
];

/// Four ring relays over mutual TLS: three clocks seconds apart
/// (namespaces, or simulated offsets without them), one drifting 50 ppm.
fn ring_relays(daemon: &Daemon, pki: &Pki) -> Vec<Relay> {
    let namespaces = live::time_namespaces().is_ok();
    let ring = |name: &str, offset_s: i64| {
        let opts = RelayOpts {
            extra_args: vec!["--mode".into(), "ring".into()],
            ..RelayOpts::synthetic(name, RATE)
        };
        if namespaces {
            opts.in_time_namespace(offset_s)
        } else {
            RelayOpts {
                clock_offset_ns: Some(offset_s * 1_000_000_000),
                ..opts
            }
        }
    };
    let mut specs = vec![
        ring("ring-plus-7", 7),
        ring("ring-plus-300", 300),
        ring("ring-plus-4000", 4000),
    ];
    specs.push(RelayOpts {
        clock_offset_ns: Some(2_500_000_000),
        clock_drift_ppm: Some(50.0),
        extra_args: vec!["--mode".into(), "ring".into()],
        ..RelayOpts::synthetic("ring-drift-50ppm", RATE)
    });
    specs
        .into_iter()
        .map(|o| {
            let tls = Some(pki.relay(&o.name));
            Relay::start(daemon, RelayOpts { tls, ..o })
        })
        .collect()
}

fn names(relays: &[Relay]) -> Vec<String> {
    relays.iter().map(|r| r.name().to_owned()).collect()
}

/// Runs `tracesync trigger` against the daemon: exit code, stdout, stderr.
fn trigger(daemon: &Daemon, name: &str, before: &str, after: &str) -> (i32, String, String) {
    let out = Command::new(bin("tracesync"))
        .arg("trigger")
        .arg(name)
        .args(["--before", before, "--after", after, "--connect"])
        .arg(&daemon.control)
        .output()
        .unwrap_or_else(|e| panic!("run tracesync trigger: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The trigger id `tracesync trigger` printed (`(id 0123...)`).
fn fired_id(stdout: &str) -> u64 {
    let hex = stdout
        .split_once("(id ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("no id in {stdout:?}"));
    u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("id {hex}: {e}"))
}

/// The window files of a relay's spool.
fn windows(spool: &Path) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(spool.join("windows")) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tsw"))
        .collect()
}

fn stop_all(relays: &mut [Relay], daemon: &mut Daemon) {
    for r in relays.iter_mut() {
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

#[test]
fn a_trigger_reaches_every_ring_relay_on_its_own_clock() {
    let pki = Pki::new(&FLEET);
    let mut daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let mut relays = ring_relays(&daemon, &pki);
    let names = names(&relays);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    daemon.wait_connected(&names, Duration::from_secs(30));
    daemon.wait_synced(&names, Duration::from_secs(30));
    // The ring fills for a while: the window's start is inside it.
    std::thread::sleep(Duration::from_secs(3));

    let (code, stdout, stderr) = trigger(&daemon, "crash", "2s", "1s");
    assert_eq!(code, 0, "tracesync trigger: {stdout}{stderr}");
    assert!(
        stdout.contains("trigger crash fired") && stdout.contains("4 ring relay(s) asked"),
        "{stdout}"
    );
    assert!(stdout.contains("-crash.pftrace"), "{stdout}");
    let id = fired_id(&stdout);

    // Each relay collects its window (the window's end plus its 2 s
    // hold), ships it, and is acknowledged once the snapshot is durable.
    let acked = format!("trigger {id:016x}: the daemon has the window");
    for relay in &relays {
        wait_for(
            Duration::from_secs(40),
            || relay.log().contains(&acked),
            || {
                format!(
                    "relay {}: no {acked:?}:\n{}\n{}",
                    relay.name(),
                    relay.log(),
                    daemon.log()
                )
            },
        );
    }
    let log = daemon.log();
    assert!(log.contains("trigger crash fired"), "{log}");

    // One snapshot with every machine's window; the relays' windows are
    // acknowledged once it is durable (their files go).
    let name = snapshot_name(&stdout);
    let path = daemon.output.join(&name);
    wait_for(
        Duration::from_secs(30),
        || path.exists(),
        || format!("no {name}:\n{}", daemon.log()),
    );
    wait_for(
        Duration::from_secs(15),
        || relays.iter().all(|r| windows(&r.spool).is_empty()),
        || "windows not acknowledged".into(),
    );
    let index = live::output::read_index(&daemon.output);
    assert!(
        index
            .iter()
            .any(|e| e["name"] == name.as_str() && e["complete"] == true),
        "{name} not in index.jsonl: {index:?}"
    );
    let host_time = host_time_of(&stdout);
    let status = daemon.status().unwrap_or_else(|e| panic!("{e}"));
    let bounds: Vec<u64> = names
        .iter()
        .map(|n| {
            live::process::machine(&status, n)
                .map_or(0, |m| m["error_bound_ns"].as_u64().unwrap_or(0))
        })
        .collect();
    check_snapshot(
        &[],
        &path,
        &names,
        &bounds,
        host_time,
        2_000_000_000,
        1_000_000_000,
    );
    stop_all(&mut relays, &mut daemon);
}

/// The snapshot file name `tracesync trigger` printed.
fn snapshot_name(stdout: &str) -> String {
    stdout
        .split_once("; snapshot ")
        .map(|(_, n)| n.trim().to_owned())
        .unwrap_or_else(|| panic!("no snapshot in {stdout:?}"))
}

fn host_time_of(stdout: &str) -> i64 {
    stdout
        .split_once("at host time ")
        .and_then(|(_, rest)| rest.split_once(" ns"))
        .and_then(|(t, _)| t.parse().ok())
        .unwrap_or_else(|| panic!("no host time in {stdout:?}"))
}

fn wait_for(limit: Duration, mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{}", what());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every machine's synthetic events of [T - before, T + after] are in the
/// snapshot, each once, none missing between the window's ends, each at
/// its true host time within the window's error bound; the file loads
/// alone in the trace processor.
fn check_snapshot(
    killed: &[(&str, i64)],
    path: &Path,
    names: &[&str],
    bounds: &[u64],
    t: i64,
    before: i64,
    after: i64,
) {
    let scan = live::output::scan_file(path, None);
    assert!(scan.error.is_none(), "{:?}", scan.error);
    let (from, to) = (t - before, t + after);
    for (name, bound) in names.iter().zip(bounds) {
        let machine = scan
            .machine_names
            .iter()
            .find(|(_, n)| n.as_str() == *name)
            .map(|(&m, _)| m)
            .unwrap_or_else(|| panic!("no SystemInfo names {name} in {:?}", scan.machine_names));
        let mut ns: Vec<u64> = Vec::new();
        let mut worst = 0i64;
        let mut truths = Vec::new();
        for e in scan.events.iter().filter(|e| e.machine == machine) {
            assert!(!e.unsynced, "{name}: an event before any sync point");
            ns.push(e.id.n);
            let truth = e.id.truth_ns as i64;
            truths.push(truth);
            worst = worst.max((e.ts_host - truth).abs());
        }
        ns.sort_unstable();
        let count = ns.len();
        ns.dedup();
        assert_eq!(ns.len(), count, "{name}: duplicated events");
        let (first, last) = (ns[0], ns[ns.len() - 1]);
        assert_eq!(
            (last - first + 1) as usize,
            count,
            "{name}: events missing between n={first} and n={last}"
        );
        let lo = truths.iter().min().copied().unwrap_or(0);
        let hi = truths.iter().max().copied().unwrap_or(0);
        // The generator's ticks (its events come in bursts) and the bound
        // at each end.
        let slack = 20_000_000;
        // A relay killed inside the window made no events after it died.
        let end = killed
            .iter()
            .find(|(n, _)| n == name)
            .map_or(to, |&(_, at)| (at - KILL_SLACK_NS).min(to));
        assert!(
            lo >= from - slack && lo <= from + slack && hi <= to + slack && hi >= end - slack,
            "{name}: events' true times [{lo}, {hi}] do not span the window [{from}, {end}]"
        );
        // The bound the estimate reports, and the sync point's threshold.
        let allowed = *bound as i64 + SYNC_POINT_THRESHOLD_NS;
        eprintln!(
            "snapshot: {name}: {count} events, n {first}..={last}, max |ts - truth| {worst} ns, \
             bound {allowed} ns"
        );
        assert!(*bound > 0, "{name}: no error bound in the status");
        assert!(
            worst <= allowed,
            "{name}: max |ts - truth| {worst} ns over {allowed} ns"
        );
    }
    if tp::require_or_skip("ring_trigger snapshot") {
        let stats = tp::error_stats(path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            stats.is_empty(),
            "{}: error stats {stats:?}",
            path.display()
        );
    }
}

#[test]
fn a_trigger_storm_stays_within_the_limit_and_capture_runs_on() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let relay = Relay::start(
        &daemon,
        RelayOpts {
            extra_args: vec!["--mode".into(), "ring".into()],
            ..RelayOpts::synthetic("ring-storm", RATE)
        },
    );
    let stream = Relay::start(&daemon, RelayOpts::synthetic("stream-storm", RATE));
    let mut relays = vec![relay, stream];
    daemon.wait_connected(&["ring-storm", "stream-storm"], Duration::from_secs(30));
    // `tracesync status` says each relay's mode.
    let status = daemon.status_cli().unwrap_or_else(|e| panic!("{e}"));
    for (name, mode) in [("ring-storm", "ring"), ("stream-storm", "stream")] {
        let m = live::process::machine(&status, name).unwrap_or_else(|| panic!("{status}"));
        assert_eq!(m["mode"], mode, "{m}");
    }
    let before = live::process::total_packets(&daemon.status().unwrap_or_default());

    // 1000 triggers of one name within a minute, straight on the socket.
    let started = Instant::now();
    let (mut fired, mut refused) = (0, 0);
    for _ in 0..1000 {
        let mut conn = daemon
            .control_request(
                "{\"cmd\":\"trigger\",\"name\":\"storm\",\"before_ns\":1000000000,\"after_ns\":0}\n",
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let mut line = String::new();
        std::io::Read::read_to_string(&mut conn, &mut line).unwrap_or_default();
        if line.contains("\"error\"") {
            assert!(line.contains("refused: it fired 10 times"), "{line}");
            refused += 1;
        } else {
            assert!(line.contains("\"snapshot\""), "{line}");
            fired += 1;
        }
    }
    let took = started.elapsed();
    eprintln!("storm: 1000 triggers in {took:?}: {fired} fired, {refused} refused");
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert_eq!((fired, refused), (10, 990));
    // The CLI says the refusal and exits 75.
    let (code, _, stderr) = trigger(&daemon, "storm", "1s", "0s");
    assert_eq!(code, 75, "{stderr}");
    assert!(stderr.contains("trigger storm not fired"), "{stderr}");

    // Capture ran on meanwhile.
    std::thread::sleep(Duration::from_secs(2));
    let after = live::process::total_packets(&daemon.status().unwrap_or_default());
    assert!(
        after > before,
        "no packets written since the storm: {before} -> {after}"
    );
    stop_all(&mut relays, &mut daemon);
}

#[test]
fn a_relay_killed_after_the_trigger_ships_its_window_after_restart_and_the_snapshot_is_made_whole()
{
    let mut daemon = Daemon::start(DaemonOpts::default());
    let ring = |name: &str, offset_s: i64| RelayOpts {
        extra_args: vec!["--mode".into(), "ring".into()],
        clock_offset_ns: Some(offset_s * 1_000_000_000),
        ..RelayOpts::synthetic(name, RATE)
    };
    // The killed relay's clock must go on across its restart as a
    // machine's does: a time namespace, or the host's clock (a simulated
    // offset starts again with the process).
    let killed = RelayOpts {
        clock_offset_ns: None,
        ..ring("ring-killed", 0)
    };
    let killed = if live::time_namespaces().is_ok() {
        killed.in_time_namespace(20)
    } else {
        killed
    };
    let mut relays = vec![
        Relay::start(&daemon, ring("ring-stays", 3)),
        Relay::start(&daemon, killed),
    ];
    let names = ["ring-stays", "ring-killed"];
    daemon.wait_connected(&names, Duration::from_secs(30));
    daemon.wait_synced(&names, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    let (code, stdout, stderr) = trigger(&daemon, "late", "2s", "1s");
    assert_eq!(code, 0, "{stdout}{stderr}");
    let id = fired_id(&stdout);
    let name = snapshot_name(&stdout);
    let path = daemon.output.join(&name);
    // Killed with its window taken and not yet collected (the window's
    // end is a second away): the trigger and the ring are on disk.
    let taken = format!("id {id:016x}): window taken");
    wait_for(
        Duration::from_secs(5),
        || relays[1].log().contains(&taken),
        || relays[1].log(),
    );
    relays[1].kill9();
    let killed_at = i64::try_from(live::host_boottime_ns()).unwrap_or(i64::MAX);

    // Past the snapshot's patience (30 s after the window's end) it is
    // written with the relay that stayed.
    wait_for(Duration::from_secs(60), || path.exists(), || daemon.log());
    let first = live::output::scan_file(&path, None);
    assert!(
        first.machine_names.values().all(|n| n != "ring-killed"),
        "{:?}",
        first.machine_names
    );
    assert!(
        first.machine_names.values().any(|n| n == "ring-stays"),
        "{:?}",
        first.machine_names
    );

    // Restarted: it collects the window from its ring on disk, ships it,
    // and the snapshot is made again, whole.
    relays[1].restart();
    let acked = format!("trigger {id:016x}: the daemon has the window");
    wait_for(
        Duration::from_secs(40),
        || relays[1].log().contains(&acked),
        || format!("{}\n{}", relays[1].log(), daemon.log()),
    );
    let status = daemon.status().unwrap_or_else(|e| panic!("{e}"));
    let bounds: Vec<u64> = names
        .iter()
        .map(|n| {
            live::process::machine(&status, n)
                .map_or(0, |m| m["error_bound_ns"].as_u64().unwrap_or(0))
        })
        .collect();
    check_snapshot(
        &[("ring-killed", killed_at)],
        &path,
        &names,
        &bounds,
        host_time_of(&stdout),
        2_000_000_000,
        1_000_000_000,
    );
    let written = daemon
        .log()
        .matches(&format!("snapshot {name} written"))
        .count();
    assert_eq!(written, 2, "{}", daemon.log());
    stop_all(&mut relays, &mut daemon);
}
