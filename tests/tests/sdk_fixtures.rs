//! The real-producer fixtures (recorded by tools/sdk-fixtures with the
//! official Perfetto SDK) load in the trace processor with slices, a counter,
//! clock snapshots and no clock errors.

use std::path::PathBuf;

use tracesync_tests::tp;

fn fixture(name: &str) -> PathBuf {
    tp::repo_root().join("tests").join("fixtures").join(name)
}

/// Checks common to both fixtures; returns the raw machine ids of the slices.
fn check_fixture(name: &str) -> Vec<i64> {
    let trace = fixture(name);
    assert!(trace.is_file(), "missing fixture {}", trace.display());
    let res = tp::query(
        &trace,
        &[
            "SELECT name, count(*) FROM slice GROUP BY name ORDER BY name",
            "SELECT DISTINCT t.name FROM slice s JOIN thread_track tt ON s.track_id = tt.id \
             JOIN thread t USING (utid) ORDER BY t.name",
            "SELECT count(*) FROM counter c JOIN counter_track t ON c.track_id = t.id \
             WHERE t.name = 'queue_depth'",
            "SELECT count(DISTINCT snapshot_id) FROM clock_snapshot WHERE clock_name = 'MONOTONIC'",
            "SELECT DISTINCT m.raw_id FROM slice s JOIN track t ON s.track_id = t.id \
             JOIN machine m ON t.machine_id = m.id",
        ],
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let names: Vec<_> = res[0].rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(names, ["inner", "work"], "{name}: slice names");
    for r in &res[0].rows {
        assert_eq!(
            r[1],
            serde_json::json!(20),
            "{name}: 10 rounds x 2 threads of {}",
            r[0]
        );
    }
    assert_eq!(
        res[1].rows,
        vec![
            vec![serde_json::json!("worker-a")],
            vec![serde_json::json!("worker-b")]
        ],
        "{name}: slices on both worker threads"
    );
    assert_eq!(
        res[2].rows,
        vec![vec![serde_json::json!(5)]],
        "{name}: counter values"
    );
    let snapshots = tp::as_i64(&res[3].rows[0][0]).unwrap();
    assert!(
        snapshots >= 2,
        "{name}: service clock snapshots: {snapshots}"
    );
    let errors = tp::error_stats(&trace).unwrap();
    assert!(
        errors.is_empty(),
        "{name}: error/data_loss stats: {errors:?}"
    );
    // The slice tracks carry machine_id only on a non-host machine.
    res[4]
        .rows
        .iter()
        .map(|r| tp::as_i64(&r[0]).unwrap())
        .collect()
}

#[test]
fn sdk_host_fixture_loads_cleanly() {
    if !tp::require_or_skip("sdk_host_fixture_loads_cleanly") {
        return;
    }
    assert_eq!(check_fixture("sdk_host.pftrace"), Vec::<i64>::new());
}

#[test]
fn sdk_machine7_fixture_loads_cleanly() {
    if !tp::require_or_skip("sdk_machine7_fixture_loads_cleanly") {
        return;
    }
    assert_eq!(check_fixture("sdk_machine7.pftrace"), [7]);
    let res = tp::query(
        &fixture("sdk_machine7.pftrace"),
        &["SELECT raw_id, sysname FROM machine ORDER BY raw_id"],
    )
    .unwrap();
    assert_eq!(
        res[0].rows,
        vec![
            vec![0.into(), serde_json::Value::Null],
            vec![7.into(), "Linux".into()]
        ],
        "machine 7 has the SystemInfo; the host row is empty"
    );
}
