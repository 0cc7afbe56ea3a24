//! The benchmark's feeder against a real daemon: two feeders, the daemon
//! killed and restarted under them, and every acknowledged packet in the
//! output exactly once. Keeps the feeder (tests/src/feeder/) speaking the
//! protocol the relay speaks, resends included; at one and at two ingest
//! shards.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tracesync_tests::feeder::Summary;
use tracesync_tests::feeder::check::{parse_summary, tally};
use tracesync_tests::live::{Daemon, DaemonOpts};

fn start_feeder(daemon: &Daemon, name: &str, seconds: u64) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tracesync-feeder"))
        .args([
            "run",
            "--host",
            &daemon.data_addr.to_string(),
            "--name",
            name,
        ])
        .args([
            "--token",
            &daemon.token,
            "--tls",
            "off",
            "--batch-packets",
            "512",
        ])
        .args(["--seconds", &seconds.to_string(), "--drain-seconds", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn tracesync-feeder")
}

fn summary_of(child: Child) -> Summary {
    let out = child.wait_with_output().expect("wait for tracesync-feeder");
    assert!(
        out.status.success(),
        "tracesync-feeder failed: {:?}",
        out.status
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(parse_summary)
        .unwrap_or_else(|| panic!("no summary line in {text:?}"))
}

#[test]
fn feeders_survive_a_daemon_restart_with_every_acked_packet_once() {
    feeders_survive_a_restart(1);
}

/// The same at two ingest shards: the feeders' machines land on both (or
/// one), the writer merges, acks follow the writer's durable commits.
#[test]
fn feeders_survive_a_restart_of_a_sharded_daemon() {
    feeders_survive_a_restart(2);
}

fn feeders_survive_a_restart(shards: u32) {
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(100),
        extra_args: vec!["--ingest-shards".into(), shards.to_string()],
        ..DaemonOpts::default()
    });
    let feeders = [
        start_feeder(&daemon, "feeder-1", 6),
        start_feeder(&daemon, "feeder-2", 6),
    ];
    std::thread::sleep(Duration::from_secs(2));
    daemon.kill9();
    std::thread::sleep(Duration::from_millis(300));
    daemon.restart();
    let summaries: Vec<Summary> = feeders.into_iter().map(summary_of).collect();
    daemon.stop();
    for s in &summaries {
        eprintln!("{s}");
        assert!(s.drained, "not everything acknowledged: {s}");
        assert!(s.reconnects >= 1, "the restart went unnoticed: {s}");
        assert_eq!(s.acked_identities, s.identities, "{s}");
        assert!(s.acked_identities > 0, "{s}");
    }
    let counts = tally(Path::new(&daemon.output), &summaries).unwrap_or_else(|e| panic!("{e}"));
    let acked: u64 = summaries.iter().map(|s| s.acked_identities).sum();
    assert_eq!((counts.lost, counts.duplicated), (0, 0), "{counts:?}");
    assert_eq!(counts.written, acked, "{counts:?}");
}
