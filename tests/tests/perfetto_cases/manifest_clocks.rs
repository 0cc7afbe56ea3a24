//! trace_manifest/tests.py, trace time and clocks: each test named after
//! Perfetto's (`test_<name>`), its expected CSV restated in the asserts.

use serde_json::json;
use tracesync_tests::cases::{Case, Layout};

use super::common::*;

#[test]
fn trace_time_clock_realtime() {
    // The spine's slice (BOOTTIME 1.1 s) on REALTIME trace time.
    let m = merged(
        Case::new("test_trace_time_clock_realtime")
            .manifest(json!({"version": 1, "trace_time": {"clock": "REALTIME"}}))
            .file("spine.pb", &spine()),
    );
    assert_eq!(m.slice("proto_slice").ts, (WALL + 1_100_000_000) as i64);
    // metadata trace_time_clock_id = 1: the output declares REALTIME.
    assert!(m.own.iter().any(|p| matches!(
        &p.data,
        Some(tracesync_protocol::perfetto::trace_packet::Data::ClockSnapshot(s))
            if s.primary_trace_clock == Some(RT as i32)
    )));
}

#[test]
fn realtime_two_machines() {
    let m = merged(
        Case::new("test_realtime_two_machines")
            .manifest(json!({"version": 1, "files": [
                machine_file("a.pb", "phone"), machine_file("b.pb", "server")]}))
            .file(
                "a.pb",
                &proto_rt("a_slice", 1, 111, S, WALL + S, 1_100_000_000),
            )
            .file(
                "b.pb",
                &proto_rt("b_slice", 2, 222, S, WALL + 2 * S, 1_100_000_000),
            ),
    );
    assert_eq!(m.at("a_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("b_slice"), (2_100_000_000, "server".into()));
}

#[test]
fn realtime_three_machines() {
    let m = merged(
        Case::new("test_realtime_three_machines")
            .manifest(json!({"version": 1, "files": [
                machine_file("a.pb", "phone"), machine_file("b.pb", "server"),
                machine_file("c.pb", "watch")]}))
            .file(
                "a.pb",
                &proto_rt("a_slice", 1, 111, S, WALL + S, 1_100_000_000),
            )
            .file(
                "b.pb",
                &proto_rt("b_slice", 2, 222, S, WALL + 2 * S, 1_100_000_000),
            )
            .file(
                "c.pb",
                &proto_rt("c_slice", 3, 333, S, WALL + 3 * S, 1_100_000_000),
            ),
    );
    assert_eq!(m.at("a_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("b_slice"), (2_100_000_000, "server".into()));
    assert_eq!(m.at("c_slice"), (3_100_000_000, "watch".into()));
}

#[test]
fn realtime_beats_boottime() {
    let m = merged(
        Case::new("test_realtime_beats_boottime")
            .manifest(json!({"version": 1, "files": [
                machine_file("a.pb", "phone"), machine_file("b.pb", "server")]}))
            .file(
                "a.pb",
                &proto_rt("a_slice", 1, 111, S, WALL + S, 1_100_000_000),
            )
            .file(
                "b.pb",
                &proto_rt("b_slice", 2, 222, 5 * S, WALL + S, 5_100_000_000),
            ),
    );
    assert_eq!(m.at("a_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("b_slice"), (1_100_000_000, "server".into()));
}

#[test]
fn no_realtime_on_peer_falls_back() {
    let m = merged(
        Case::new("test_no_realtime_on_peer_falls_back")
            .manifest(json!({"version": 1, "files": [
                machine_file("a.pb", "phone"), machine_file("b.pb", "server")]}))
            .file(
                "a.pb",
                &proto_rt("a_slice", 1, 111, S, WALL + S, 1_100_000_000),
            )
            .file("b.pb", &proto_boot_snap("b_slice", 2, 222, S, 3 * S)),
    );
    assert_eq!(m.at("a_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("b_slice"), (3_000_000_000, "server".into()));
}

#[test]
fn no_realtime_on_trace_time_machine_falls_back() {
    let m = merged(
        Case::new("test_no_realtime_on_trace_time_machine_falls_back")
            .manifest(json!({"version": 1, "files": [
                machine_file("a.pb", "phone"), machine_file("b.pb", "server")]}))
            .file(
                "a.pb",
                &proto_boot_snap("a_slice", 1, 111, S, 1_100_000_000),
            )
            .file(
                "b.pb",
                &proto_rt("b_slice", 2, 222, S, WALL + 2 * S, 1_100_000_000),
            ),
    );
    assert_eq!(m.at("a_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("b_slice"), (1_100_000_000, "server".into()));
}

/// Behaviour 1 of issue 15: REALTIME trace time with every file on a named
/// machine. Each machine's own snapshots relate BOOTTIME to REALTIME, so
/// phone's slice is placed; server has BOOTTIME only and is dropped.
fn cross_domain() -> Case {
    Case::new("test_cross_domain_clocks_not_assumed")
        .manifest(
            json!({"version": 1, "trace_time": {"clock": "REALTIME"}, "files": [
            machine_file("a.pb", "phone"), machine_file("b.pb", "server")]}),
        )
        .file(
            "a.pb",
            &proto_rt(
                "phone_slice",
                1,
                111,
                S,
                WALL + 1_500_000_000,
                1_100_000_000,
            ),
        )
        .file(
            "b.pb",
            &proto_boot_snap("boot_slice", 2, 222, S, 1_100_000_000),
        )
}

#[test]
fn cross_domain_clocks_not_assumed() {
    let m = merged(cross_domain());
    assert_eq!(
        m.at("phone_slice"),
        ((WALL + 1_600_000_000) as i64, "phone".into())
    );
    assert!(!m.has_slice("boot_slice"), "{:?}", m.slices);
}

#[test]
fn cross_domain_drop_is_logged() {
    let m = cross_domain().merge().ok();
    assert_eq!(m.stat("clock_sync_unrelatable_clock_domains"), 1);
    // server's slice begin and end; phone's are placed.
    assert_eq!(m.stat("clock_sync_failure_no_path"), 2);
}

#[test]
fn cross_domain_with_machine_per_file() {
    // The same files without a manifest machine, `--machine-per-file` and
    // `--manifest` trace time only: the same placement (issue 15, 1).
    let m = Case::new("test_cross_domain_clocks_not_assumed (--machine-per-file)")
        .manifest(json!({"version": 1, "trace_time": {"clock": "REALTIME"}}))
        .file(
            "a.pb",
            &proto_rt(
                "phone_slice",
                1,
                111,
                S,
                WALL + 1_500_000_000,
                1_100_000_000,
            ),
        )
        .file(
            "b.pb",
            &proto_boot_snap("boot_slice", 2, 222, S, 1_100_000_000),
        )
        .flag("--machine-per-file")
        .merge()
        .ok();
    m.judge();
    assert_eq!(m.slice("phone_slice").ts, (WALL + 1_600_000_000) as i64);
    assert!(!m.has_slice("boot_slice"));
    assert_eq!(m.stat("clock_sync_unrelatable_clock_domains"), 1);
}

fn phone_server(server_clocks: serde_json::Value) -> Case {
    Case::new("")
        .manifest(json!({"version": 1, "files": [
            {"path": "phone.pb", "machine": {"name": "phone"}},
            {"path": "server.pb", "machine": {"name": "server"}, "clocks": server_clocks}]}))
        .file(
            "phone.pb",
            &proto_boot_snap("phone_slice", 1, 111, S, 1_100_000_000),
        )
        .file(
            "server.pb",
            &proto_boot_snap("server_slice", 2, 222, S, 1_100_000_000),
        )
}

#[test]
fn sync_to_file_offset() {
    let mut case = phone_server(json!({"clock": "BOOTTIME", "offset_ns": 500,
        "sync_to": {"file": "phone.pb", "clock": "BOOTTIME"}}));
    case.origin = "test_sync_to_file_offset";
    let m = merged(case);
    assert_eq!(m.at("phone_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("server_slice"), (1_100_000_500, "server".into()));
}

#[test]
fn sync_to_machine_offset() {
    let mut case = phone_server(json!({"clock": "BOOTTIME", "offset_ns": 500,
        "sync_to": {"file": "phone.pb", "machine": "phone", "clock": "BOOTTIME"}}));
    case.origin = "test_sync_to_machine_offset";
    let m = merged(case);
    assert_eq!(m.at("phone_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("server_slice"), (1_100_000_500, "server".into()));
}

#[test]
fn trace_time_file() {
    let m = merged(
        Case::new("test_trace_time_file")
            .manifest(json!({"version": 1,
                "trace_time": {"file": "server.pb", "clock": "BOOTTIME"},
                "files": [
                {"path": "phone.pb", "machine": {"name": "phone"}},
                {"path": "server.pb", "machine": {"name": "server"}, "clocks": {
                    "clock": "BOOTTIME", "offset_ns": 500,
                    "sync_to": {"file": "phone.pb", "clock": "BOOTTIME"}}}]}))
            .file(
                "phone.pb",
                &proto_boot_snap("phone_slice", 1, 111, S, 1_100_000_000),
            )
            .file(
                "server.pb",
                &proto_boot_snap("server_slice", 2, 222, S, 1_100_000_000),
            ),
    );
    assert_eq!(m.at("phone_slice"), (1_099_999_500, "phone".into()));
    assert_eq!(m.at("server_slice"), (1_100_000_000, "server".into()));
}

#[test]
fn same_domain_boottime_overlay() {
    let m = merged(
        Case::new("test_same_domain_boottime_overlay")
            .manifest(json!({"version": 1, "files": [
                machine_file("a.pb", "phone"), machine_file("b.pb", "server")]}))
            .file(
                "a.pb",
                &proto_boot_snap("a_slice", 1, 111, S, 1_100_000_000),
            )
            .file("b.pb", &proto_boot_snap("b_slice", 2, 222, S, 3 * S)),
    );
    assert_eq!(m.at("a_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("b_slice"), (3_000_000_000, "server".into()));
}

fn multi() -> Vec<tracesync_protocol::perfetto::TracePacket> {
    let mut p = spine();
    p.extend(m7_slice("vm_slice"));
    p
}

#[test]
fn sync_to_file_machine_offset() {
    let m = merged(
        Case::new("test_sync_to_file_machine_offset")
            .manifest(json!({"version": 1,
                "trace_time": {"file": "multi.pb", "machine": "vm", "clock": "BOOTTIME"},
                "files": [
                {"path": "multi.pb", "machines": [{"id": 0, "name": "phone"}, {"id": 7, "name": "vm"}]},
                {"path": "server.pb", "machine": {"name": "server"}, "clocks": {
                    "clock": "BOOTTIME", "offset_ns": 500,
                    "sync_to": {"file": "multi.pb", "machine": "vm", "clock": "BOOTTIME"}}}]}))
            .file("multi.pb", &multi())
            .file("server.pb", &proto_boot_snap("server_slice", 3, 333, 50 * S, 50_100_000_000)),
    );
    assert_eq!(m.at("proto_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("vm_slice"), (50_100_000_000, "vm".into()));
    assert_eq!(m.at("server_slice"), (50_100_000_500, "server".into()));
}

#[test]
fn multi_machine_source_clock() {
    let m = merged(
        Case::new("test_multi_machine_source_clock")
            .manifest(json!({"version": 1,
                "trace_time": {"file": "server.pb", "clock": "BOOTTIME"},
                "files": [
                {"path": "multi.pb", "machines": [{"id": 0, "name": "phone"}, {"id": 7, "name": "vm"}],
                 "clocks": {"machine": "vm", "clock": "BOOTTIME", "offset_ns": 500,
                    "sync_to": {"file": "server.pb", "clock": "BOOTTIME"}}},
                {"path": "server.pb", "machine": {"name": "server"}}]}))
            .file("multi.pb", &multi())
            .file("server.pb", &proto_boot_snap("server_slice", 3, 333, 50 * S, 50_100_000_000)),
    );
    assert_eq!(m.at("proto_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("server_slice"), (50_100_000_000, "server".into()));
    assert_eq!(m.at("vm_slice"), (50_100_000_500, "vm".into()));
}

#[test]
fn detected_in_tar() {
    // Adapted: the manifest in a tar is read before the traces (here its
    // trace_time takes effect).
    let m = merged(
        Case::new("test_detected_in_tar")
            .manifest(json!({"version": 1, "trace_time": {"clock": "MONOTONIC"},
                "files": [{"path": "spine.pb"}]}))
            .file("spine.pb", &spine())
            .layout(Layout::Tar),
    );
    assert_eq!(m.slice("proto_slice").ts, 600_000_000);
}
