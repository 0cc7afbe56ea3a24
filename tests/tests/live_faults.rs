//! kill -9 mid-stream, then restart: the daemon on the same output dir,
//! a relay on the same spool. Counted by the synthetic identities, no
//! event is lost and none is written twice, and every file (the one cut
//! back by recovery included) still loads alone in the trace processor.

use std::time::Duration;

use tracesync_tests::live::{
    Daemon, DaemonOpts, OutputCheck, Relay, RelayOpts, check_output, judge,
};
use tracesync_tests::tp;

const RATE: u64 = 2000;

fn relays(daemon: &Daemon) -> Vec<Relay> {
    vec![
        Relay::start(
            daemon,
            RelayOpts {
                clock_offset_ns: Some(12_000_000_000),
                ..RelayOpts::synthetic("fault-a", RATE)
            },
        ),
        Relay::start(
            daemon,
            RelayOpts {
                clock_offset_ns: Some(-700_000_000),
                clock_drift_ppm: Some(10.0),
                ..RelayOpts::synthetic("fault-b", RATE)
            },
        ),
    ]
}

const NAMES: [&str; 2] = ["fault-a", "fault-b"];

fn finish(test: &str, relays: &mut [Relay], daemon: &mut Daemon, min_events: u64) -> OutputCheck {
    for r in relays.iter_mut() {
        let status = r.stop();
        assert!(status.success(), "relay {} exit: {status}", r.name());
    }
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd exit: {status}");
    let check = check_output(&daemon.output);
    eprintln!("{test}: {}", check.summary());
    check.assert_complete();
    for n in NAMES {
        let src = check
            .source_of(n, 1)
            .unwrap_or_else(|| panic!("no events of {n}:\n{}", check.summary()));
        assert!(
            src.events >= min_events,
            "{n}: only {} events (expected >= {min_events}):\n{}",
            src.events,
            check.summary()
        );
    }
    if tp::require_or_skip(test) {
        judge::judge_all(&check).unwrap_or_else(|e| panic!("{e}"));
    }
    check
}

#[test]
fn daemon_kill9_mid_stream_loses_and_duplicates_nothing() {
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(100),
        ..DaemonOpts::default()
    });
    let mut relays = relays(&daemon);
    daemon.wait_connected(&NAMES, Duration::from_secs(30));
    daemon.wait_progress(&NAMES, RATE);

    daemon.kill9();
    // The relays keep generating into their spools while the daemon is down.
    std::thread::sleep(Duration::from_secs(1));
    daemon.restart();
    daemon.wait_connected(&NAMES, Duration::from_secs(30));
    daemon.wait_progress(&NAMES, RATE);

    daemon.kill9();
    daemon.restart();
    daemon.wait_connected(&NAMES, Duration::from_secs(30));
    daemon.wait_progress(&NAMES, RATE);

    let check = finish(
        "daemon_kill9_mid_stream_loses_and_duplicates_nothing",
        &mut relays,
        &mut daemon,
        2 * RATE,
    );
    // Every start begins a new file.
    assert!(check.files.len() >= 3, "{}", check.summary());
}

#[test]
fn relay_kill9_mid_stream_loses_and_duplicates_nothing() {
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(100),
        ..DaemonOpts::default()
    });
    let mut relays = relays(&daemon);
    daemon.wait_connected(&NAMES, Duration::from_secs(30));
    daemon.wait_progress(&NAMES, RATE);

    for _ in 0..2 {
        relays[0].kill9();
        std::thread::sleep(Duration::from_millis(300));
        relays[0].restart();
        daemon.wait_connected(&NAMES, Duration::from_secs(30));
        daemon.wait_progress(&NAMES, RATE);
    }
    // Down while the daemon is up, then back: resumes from its spool.
    relays[1].kill9();
    std::thread::sleep(Duration::from_secs(1));
    relays[1].restart();
    daemon.wait_connected(&NAMES, Duration::from_secs(30));
    daemon.wait_progress(&NAMES, RATE);

    let check = finish(
        "relay_kill9_mid_stream_loses_and_duplicates_nothing",
        &mut relays,
        &mut daemon,
        2 * RATE,
    );
    // A restarted relay is the same machine (same name and boot id).
    assert_eq!(
        check.machine_names.len(),
        NAMES.len() + 1,
        "{:?}",
        check.machine_names
    );
}
