//! The flight recorder's daemon half with the real binaries over loopback:
//! four relays in ring mode over mutual TLS (clocks truly apart: time
//! namespaces where the kernel allows them, else simulated offsets; one
//! drifting), a trigger fired with `tracesync trigger`, the Trigger fanned
//! out to every ring relay with its window on the relay's own clock, one
//! snapshot with every machine's synthetic events of the window (each
//! once, none missing, each within the error bound the file gives it; the
//! file loads alone in the trace processor); a relay killed with -9 inside
//! the window ships it after its restart and the snapshot is written again
//! whole; a storm of triggers held to the name's limit while capture runs
//! on.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracesync_tests::live::{self, Daemon, DaemonOpts, Relay, RelayOpts};
use tracesync_tests::ring::{
    FLEET, Fired, RATE, Window, check_snapshot, start_fleet, stop_all, trigger, wait_for,
    wait_listed,
};

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

#[test]
fn a_trigger_reaches_every_ring_relay_on_its_own_clock() {
    let (_pki, mut daemon, mut relays) = start_fleet();
    let names = FLEET;

    let (code, stdout, stderr) = trigger(&daemon, "crash", "2s", "1s");
    assert_eq!(code, 0, "tracesync trigger: {stdout}{stderr}");
    assert!(
        stdout.contains("trigger crash fired") && stdout.contains("4 ring relay(s) asked"),
        "{stdout}"
    );
    assert!(stdout.contains("-crash.pftrace"), "{stdout}");
    let fired = Fired::parse(&stdout);

    // Each relay collects its window (the window's end plus its 2 s
    // hold), ships it, and is acknowledged once the snapshot is durable.
    let acked = fired.acked();
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
    let name = &fired.snapshot;
    let path = daemon.output.join(name);
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
    wait_listed(&daemon, name);
    check_snapshot(
        "ring_trigger snapshot",
        &path,
        &names,
        Window::two_one(fired.host_time),
        &[],
    );
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
    let fired = Fired::parse(&stdout);
    let (id, name) = (fired.id, &fired.snapshot);
    let path = daemon.output.join(name);
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
    let acked = fired.acked();
    wait_for(
        Duration::from_secs(40),
        || relays[1].log().contains(&acked),
        || format!("{}\n{}", relays[1].log(), daemon.log()),
    );
    check_snapshot(
        "ring_trigger snapshot",
        &path,
        &names,
        Window::two_one(fired.host_time),
        &[("ring-killed", killed_at)],
    );
    let written = daemon
        .log()
        .matches(&format!("snapshot {name} written"))
        .count();
    assert_eq!(written, 2, "{}", daemon.log());
    stop_all(&mut relays, &mut daemon);
}
