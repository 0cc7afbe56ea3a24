//! Re-merging tracesync's own output is idempotent, on a capture of the
//! real daemon with drifting relays: their sync points change all over the
//! file. Each rolled file merged by `tracesync merge` keeps every synthetic
//! event at the trace time Perfetto gives it in the rolled file (machine id
//! and the sync point in effect, as `tests/src/live/output.rs` resolves
//! it), and merging that merged output again changes nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tracesync_tests::live::output::{FileScan, rolled_files, scan_file};
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts};
use tracesync_tests::run::tracesync;

/// (source, n, TrackEvent type) -> trace time, of every synthetic event.
fn times(scan: &FileScan) -> BTreeMap<(Arc<str>, u64, u64), i64> {
    assert!(scan.error.is_none(), "{:?}", scan.error);
    scan.events
        .iter()
        .map(|e| ((e.id.src.clone(), e.id.n, e.kind), e.ts_host))
        .collect()
}

fn merge(input: &Path, out: &Path) {
    let run = tracesync(&[
        "merge",
        "-o",
        out.to_str().expect("utf-8 path"),
        input.to_str().expect("utf-8 path"),
    ]);
    assert!(
        run.status.success(),
        "merge {}: {}",
        input.display(),
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn remerging_a_drifting_capture_keeps_every_timestamp() {
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(200),
        ..DaemonOpts::default()
    });
    let specs = [
        RelayOpts {
            clock_offset_ns: Some(2_500_000_000),
            clock_drift_ppm: Some(300.0),
            ..RelayOpts::synthetic("drift-plus", 500)
        },
        RelayOpts {
            clock_offset_ns: Some(-1_500_000_000),
            clock_drift_ppm: Some(-200.0),
            ..RelayOpts::synthetic("drift-minus", 500)
        },
    ];
    let names = ["drift-plus", "drift-minus"];
    let mut relays: Vec<Relay> = specs
        .into_iter()
        .map(|o| Relay::start(&daemon, o))
        .collect();
    daemon.wait_connected(&names, Duration::from_secs(30));
    daemon.wait_synced(&names, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(4));
    for r in &mut relays {
        assert!(r.stop().success(), "{}", r.log());
    }
    assert!(daemon.stop().success(), "{}", daemon.log());

    let work = tempfile::tempdir().expect("tempdir");
    let files = rolled_files(&daemon.output);
    assert!(!files.is_empty(), "no rolled file");
    let mut events = 0;
    for (i, rolled) in files.iter().enumerate() {
        let first = scan_file(rolled, None);
        let want = times(&first);
        let m1 = work.path().join(format!("m1-{i}.pftrace"));
        let m2 = work.path().join(format!("m2-{i}.pftrace"));
        merge(rolled, &m1);
        merge(&m1, &m2);
        let once = scan_file(&m1, None);
        let twice = scan_file(&m2, None);
        assert_eq!(times(&once), want, "{}: merged", rolled.display());
        assert_eq!(times(&twice), want, "{}: merged twice", rolled.display());
        eprintln!(
            "remerge: {}: {} events, {} sync points in the capture, {} after one merge, {} after two",
            rolled.display(),
            want.len(),
            first.sync_points,
            once.sync_points,
            twice.sync_points
        );
        events += want.len();
        // The drift moves the mapping by more than the sync-point
        // threshold many times over: the sync points change in the file.
        assert!(first.sync_points >= 10, "{} sync points", first.sync_points);
    }
    assert!(events >= 2000, "only {events} events");
}
