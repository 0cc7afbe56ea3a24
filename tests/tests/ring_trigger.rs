//! The flight recorder's daemon half with the real binaries over loopback:
//! relays in ring mode (clocks truly apart: time namespaces where the
//! kernel allows them, else simulated offsets, one drifting), a trigger
//! fired with `tracesync trigger`, the Trigger fanned out to every ring
//! relay with its window on the relay's own clock (the relay collects the
//! window into its spool), and a storm of triggers held to the name's
//! limit while capture runs on.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tracesync_tests::live::{self, Daemon, DaemonOpts, Relay, RelayOpts, bin};

const RATE: u64 = 500;

/// Four ring relays: three clocks seconds apart (namespaces, or simulated
/// offsets without them), one drifting 50 ppm.
fn ring_relays(daemon: &Daemon) -> Vec<Relay> {
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
    specs.into_iter().map(|o| Relay::start(daemon, o)).collect()
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
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut relays = ring_relays(&daemon);
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
    // hold): the file is named by the trigger's id.
    let want = format!("window-{id:016x}.tsw");
    let deadline = Instant::now() + Duration::from_secs(20);
    for relay in &relays {
        loop {
            let found = windows(&relay.spool);
            if found.iter().any(|p| p.ends_with(&want)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "relay {} collected no {want} (has {found:?}):\n{}\n{}",
                relay.name(),
                relay.log(),
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let log = daemon.log();
    assert!(log.contains("trigger crash fired"), "{log}");
    stop_all(&mut relays, &mut daemon);
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
