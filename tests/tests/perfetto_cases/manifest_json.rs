//! trace_manifest/tests.py cases with Chrome JSON members: each test named
//! after Perfetto's. `_json_trace(name, pid)` is one complete event at
//! 2000 µs lasting 500 µs on thread `pid` of process `pid`; a clockless
//! file's events land at their own time (2_000_000 ns) unless a manifest
//! pins the file's private clock elsewhere.

use serde_json::json;
use tracesync_tests::cases::{Case, Layout};

use super::common::*;

/// `_json_trace(name, pid)`.
pub fn json_trace(name: &str, pid: u32) -> Vec<u8> {
    json!({"traceEvents": [{"pid": pid, "tid": pid, "ts": 2000, "dur": 500,
        "ph": "X", "name": name}]})
    .to_string()
    .into_bytes()
}

/// `_M7_PROCESS` beside the spine: a file with machines 0 and 7.
fn spine_with_m7() -> Vec<tracesync_protocol::perfetto::TracePacket> {
    let mut p = spine();
    p.push(m7_packet());
    p
}

/// The thread rows of `tid` in the merged trace, and whether `slice`'s
/// thread is on the machine its packet was stamped with, as the trace
/// processor (v52: machines by raw id) reads them; None without it.
fn thread_machine(
    m: &tracesync_tests::cases::Merged,
    tid: u32,
    slice: &str,
) -> Option<(i64, bool)> {
    use tracesync_tests::tp;
    if !tp::available() {
        return None;
    }
    let res = tp::query(
        &m.out,
        &[
            &format!("SELECT count(*) FROM thread WHERE tid = {tid}"),
            &format!(
                "SELECT COALESCE(m.raw_id, 0) FROM slice s JOIN thread_track tt ON s.track_id = tt.id \
                 JOIN thread t USING(utid) LEFT JOIN machine m ON t.machine_id = m.id \
                 WHERE s.name = '{slice}'"
            ),
        ],
    )
    .expect("trace processor");
    let threads = tp::as_i64(&res[0].rows[0][0]).expect("count");
    let raw_id = res[1].rows.first().and_then(|r| tp::as_i64(&r[0]));
    Some((threads, raw_id == Some(i64::from(m.slice(slice).stamped))))
}

#[test]
fn json_only_trace_time_clock() {
    let m = merged(
        Case::new("test_json_only_trace_time_clock")
            .manifest(json!({"version": 1, "trace_time": {"clock": "BOOTTIME"}}))
            .bytes("app.json", json_trace("json_slice", 10)),
    );
    assert_eq!(m.slice("json_slice").ts, 2_000_000);
}

#[test]
fn detected_and_processed_first() {
    // The manifest of a zip is read first; the JSON member merges.
    let m = merged(
        Case::new("test_detected_and_processed_first")
            .manifest(json!({"version": 1, "files": [{"path": "app.json"}]}))
            .bytes("app.json", json_trace("json_slice", 10)),
    );
    assert_eq!(m.slice("json_slice").ts, 2_000_000);
}

#[test]
fn detected_in_tar_json() {
    let m = merged(
        Case::new("test_detected_in_tar")
            .manifest(json!({"version": 1, "files": [{"path": "app.json"}]}))
            .bytes("app.json", json_trace("json_slice", 10))
            .layout(Layout::Tar),
    );
    assert_eq!(m.slice("json_slice").ts, 2_000_000);
}

#[test]
fn machine_assignment_merges_with_proto() {
    let m = merged(
        Case::new("test_machine_assignment_merges_with_proto")
            .manifest(json!({"version": 1, "files": [
                machine_file("app.json", "vm"),
                {"path": "spine.pb", "machines": [{"id": 7, "name": "vm"}]}]}))
            .bytes("app.json", json_trace("m7_json_slice", 30))
            .file("spine.pb", &spine_with_m7()),
    );
    assert_eq!(m.at("m7_json_slice"), (2_000_000, "vm".into()));
    if let Some(got) = thread_machine(&m, 30, "m7_json_slice") {
        assert_eq!(got, (1, true), "Perfetto: 1 thread 30, on vm");
    }
}

#[test]
fn machines_two_siblings_merge_distinct() {
    let m = merged(
        Case::new("test_machines_two_siblings_merge_distinct")
            .manifest(json!({"version": 1, "files": [
                machine_file("host.json", "host"),
                machine_file("vm.json", "vm"),
                {"path": "spine.pb", "machines": [{"id": 0, "name": "host"}, {"id": 7, "name": "vm"}]}]}))
            .bytes("host.json", json_trace("host_json", 100))
            .bytes("vm.json", json_trace("vm_json", 30))
            .file("spine.pb", &spine_with_m7()),
    );
    assert_eq!(m.at("host_json").1, "host");
    assert_eq!(m.at("vm_json").1, "vm");
    for (tid, slice) in [(30, "vm_json"), (100, "host_json")] {
        if let Some(got) = thread_machine(&m, tid, slice) {
            assert!(got.1, "{slice}'s thread is on its machine");
        }
    }
}

#[test]
fn machine_name_assignment() {
    let m = merged(
        Case::new("test_machine_name_assignment")
            .manifest(json!({"version": 1, "files": [machine_file("app.json", "phone")]}))
            .bytes("app.json", json_trace("json_slice", 10))
            .file("spine.pb", &spine()),
    );
    assert_eq!(m.at("json_slice"), (2_000_000, "phone".into()));
    if let Some(got) = thread_machine(&m, 10, "json_slice") {
        assert!(got.1, "the thread is on phone");
    }
}

#[test]
fn machine_name_dedup() {
    let m = merged(
        Case::new("test_machine_name_dedup")
            .manifest(json!({"version": 1, "files": [
                machine_file("a.json", "phone"),
                machine_file("b.json", "phone"),
                machine_file("c.json", "watch")]}))
            .bytes("a.json", json_trace("slice_a", 10))
            .bytes("b.json", json_trace("slice_b", 10))
            .bytes("c.json", json_trace("slice_c", 10))
            .file("spine.pb", &spine()),
    );
    assert_eq!(m.at("slice_a").1, "phone");
    assert_eq!(m.at("slice_b").1, "phone");
    assert_eq!(m.at("slice_c").1, "watch");
    assert_eq!(m.slice("slice_a").raw_id, m.slice("slice_b").raw_id);
    assert_ne!(m.slice("slice_a").raw_id, m.slice("slice_c").raw_id);
}

#[test]
fn clockless_manual_cross_machine() {
    let m = merged(
        Case::new("test_clockless_manual_cross_machine")
            .manifest(json!({"version": 1, "files": [
                machine_file("phone.pb", "phone"),
                {"path": "app.json", "machine": {"name": "server"},
                 "clocks": {"offset_ns": 500, "sync_to": {"file": "phone.pb", "clock": "BOOTTIME"}}}]}))
            .file(
                "phone.pb",
                &proto_boot_snap("phone_slice", 1, 111, 1_000_000_000, 1_100_000_000),
            )
            .bytes("app.json", json_trace("json_slice", 10)),
    );
    assert_eq!(m.at("json_slice"), (2_000_500, "server".into()));
    assert_eq!(m.at("phone_slice"), (1_100_000_000, "phone".into()));
}

#[test]
fn sync_to_clock_omitted_clockless_ref() {
    let m = merged(
        Case::new("test_sync_to_clock_omitted_clockless_ref")
            .manifest(json!({"version": 1, "files": [
                {"path": "a.json"},
                {"path": "b.json", "clocks": {"offset_ns": 500, "sync_to": {"file": "a.json"}}}]}))
            .bytes("a.json", json_trace("a_slice", 10))
            .bytes("b.json", json_trace("b_slice", 11)),
    );
    assert_eq!(m.slice("a_slice").ts, 2_000_000);
    assert_eq!(m.slice("b_slice").ts, 2_000_500);
}

#[test]
fn error_proto_multi_clock_json_reference() {
    Case::new("test_error_proto_multi_clock")
        .manifest(json!({"version": 1, "files": [
            {"path": "spine.pb", "clocks": {"sync_to": {"file": "app.json", "clock": "BOOTTIME"}}},
            {"path": "app.json"}]}))
        .file("spine.pb", &spine())
        .bytes("app.json", json_trace("json_slice", 10))
        .merge()
        .fails_with("clock overrides require the trace to use a single clock");
}

#[test]
fn error_proto_multi_machine_clock_override_json_reference() {
    let mut p = proto_slice("proto_slice");
    p.push(m7_packet());
    Case::new("test_error_proto_multi_machine_clock_override")
        .manifest(json!({"version": 1, "files": [
            {"path": "spine.pb", "clocks": {"sync_to": {"file": "app.json", "clock": "BOOTTIME"}}},
            {"path": "app.json"}]}))
        .file("spine.pb", &p)
        .bytes("app.json", json_trace("json_slice", 10))
        .merge()
        .fails_with("a `clocks` override applies only to a single-machine file");
}

#[test]
fn sync_to_clock_omitted_clockless_ref_members_out_of_order() {
    // Adapted: the same archive with b.json stored before a.json. Perfetto
    // processes the non-proto members by name, so a.json still keeps its
    // identity timestamps.
    let m = merged(
        Case::new("test_sync_to_clock_omitted_clockless_ref (b.json first)")
            .manifest(json!({"version": 1, "files": [
                {"path": "a.json"},
                {"path": "b.json", "clocks": {"offset_ns": 500, "sync_to": {"file": "a.json"}}}]}))
            .bytes("b.json", json_trace("b_slice", 11))
            .bytes("a.json", json_trace("a_slice", 10)),
    );
    assert_eq!(m.slice("a_slice").ts, 2_000_000);
    assert_eq!(m.slice("b_slice").ts, 2_000_500);
}
