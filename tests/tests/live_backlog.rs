//! A daemon behind a backlog of small packets (four relays offering far more
//! than it takes, the bench's small-packet phase) keeps serving its
//! periodic work: the status report stays fresh and shows packets written
//! in every stretch of a few seconds.
//!
//! Before the ingest loop served its ticks first, one turn of its `select!`
//! could ingest and drain for half a second or more, and every ready branch
//! had the same odds per turn: the status (and the commits) went unserved
//! for 5-13 s, and `scripts/bench-live.sh` measured "no packet written" in
//! two of six small-packet phases while the output grew all along.

use std::time::{Duration, Instant};

use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, process};

const RELAYS: usize = 4;
/// Per relay: far more than a debug build of the daemon takes.
const RATE: u64 = 400_000;
const RUN: Duration = Duration::from_secs(12);
/// Longest acceptable time without a new status report: the status tick is
/// 250 ms, a turn of the loop about 20 ms plus the frame or drain round
/// begun. A debug build on a busy box takes up to ~1 s for a frame of 16 k
/// small packets and ~0.5-2 s for a drain round of 4 MiB (release: ~20x
/// less), 2-4 s in all were seen; with the unbiased loop a turn took up to
/// 32 frames, and the report was not renewed for over a minute (the waits
/// for the relays to show as connected timed out).
const MAX_STALE: Duration = Duration::from_secs(8);
/// Every report is followed by packets written within this long.
const MAX_IDLE: Duration = Duration::from_secs(5);

#[test]
fn a_backlog_of_small_packets_leaves_the_status_served() {
    const TEST: &str = "a_backlog_of_small_packets_leaves_the_status_served";
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(500),
        ..DaemonOpts::default()
    });
    let names: Vec<String> = (0..RELAYS).map(|i| format!("backlog-{i}")).collect();
    let mut relays = Relay::start_synced(&daemon, &names, |_, n| RelayOpts {
        sources: vec![format!("synthetic:{RATE},size=64")],
        ..RelayOpts::synthetic(n, RATE)
    });

    // Each distinct report (its host_boottime_ns), when it was first seen,
    // and the packets written it showed.
    let mut reports: Vec<(u64, Instant, u64)> = Vec::new();
    let start = Instant::now();
    while start.elapsed() < RUN {
        let status = daemon.status().unwrap_or_else(|e| panic!("status: {e}"));
        let at = status["host_boottime_ns"]
            .as_u64()
            .expect("host_boottime_ns");
        if reports.last().is_none_or(|&(last, _, _)| last != at) {
            reports.push((at, Instant::now(), process::total_packets(&status)));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let end = Instant::now();
    let mut stale = Duration::ZERO;
    let mut seen = start;
    for &(_, first_seen, _) in &reports {
        stale = stale.max(first_seen - seen);
        seen = first_seen;
    }
    stale = stale.max(end - seen);
    let written = reports.last().map_or(0, |r| r.2) - reports.first().map_or(0, |r| r.2);
    // Reports followed by MAX_IDLE or more without a new packet written.
    let idle_stretches = reports
        .iter()
        .filter(|a| {
            reports
                .iter()
                .find(|b| b.1 >= a.1 + MAX_IDLE)
                .is_some_and(|b| b.2 == a.2)
        })
        .count();
    eprintln!(
        "{TEST}: {} reports in {RUN:?}, longest without a new one {stale:?} (limit {MAX_STALE:?}); \
         {written} packets written meanwhile; {idle_stretches} reports with none written in the \
         next {MAX_IDLE:?}",
        reports.len()
    );
    for r in &mut relays {
        r.kill9();
    }
    daemon.stop();
    assert!(written > 0, "no packet written in {RUN:?}");
    assert!(
        stale <= MAX_STALE,
        "the status report went {stale:?} without an update (limit {MAX_STALE:?}): the ingest \
         loop did not serve its status tick"
    );
    assert_eq!(
        idle_stretches, 0,
        "{idle_stretches} status reports were followed by {MAX_IDLE:?} without a packet written"
    );
}
