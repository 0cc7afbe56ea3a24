//! trace_manifest/tests.py, machines: each test named after Perfetto's.

use serde_json::json;
use tracesync_protocol::perfetto::TracePacket;
use tracesync_tests::cases::{Case, Round, on, remote_sync, slice, snap};

use super::common::*;

const NAMED: u64 = 1 << 32;

fn multi(host_slice: &str, vm_slice: &str) -> Vec<TracePacket> {
    let mut p = vec![spine_snapshot()];
    p.extend(proto_slice(host_slice));
    p.extend(m7_slice(vm_slice));
    p
}

#[test]
fn machines_remap() {
    let m = merged(
        Case::new("test_machines_remap")
            .manifest(json!({"version": 1, "files": [{"path": "multi.pb",
                "machines": [{"id": 0, "name": "phone"}, {"id": 7, "name": "vm"}]}]}))
            .file("multi.pb", &multi("proto_slice", "vm_slice")),
    );
    assert_eq!(m.at("proto_slice"), (1_100_000_000, "phone".into()));
    assert_eq!(m.at("vm_slice"), (50_100_000_000, "vm".into()));
    assert!(m.slice("vm_slice").raw_id >= NAMED);
}

/// `test_machines_remote_clock_sync`'s multi.pb.
pub fn relay_recorded() -> Vec<TracePacket> {
    let mut p = vec![snap(&[(BT, S)])];
    p.extend(slice(
        1,
        1,
        Some(BT),
        1_100_000_000,
        1_200_000_000,
        "host_slice",
    ));
    let round: Round = (&[(BT, 50 * S)], &[(BT, 2 * S)]);
    p.push(on(7, remote_sync(&[round, round])));
    p.extend(
        slice(2, 7, Some(BT), 50_100_000_000, 50_200_000_000, "vm_slice")
            .into_iter()
            .map(|x| on(7, x)),
    );
    p
}

#[test]
fn machines_remote_clock_sync() {
    let m = merged(
        Case::new("test_machines_remote_clock_sync")
            .manifest(json!({"version": 1, "files": [{"path": "multi.pb",
                "machines": [{"id": 0, "name": "host"}, {"id": 7, "name": "vm"}]}]}))
            .file("multi.pb", &relay_recorded()),
    );
    assert_eq!(m.at("host_slice"), (1_100_000_000, "host".into()));
    assert_eq!(m.at("vm_slice"), (2_100_000_000, "vm".into()));
}

#[test]
fn machines_remote_clock_sync_without_manifest() {
    // The same trace with no manifest: machine 7 keeps its embedded raw id.
    let m = merged(
        Case::new("test_machines_remote_clock_sync (no manifest)")
            .file("multi.pb", &relay_recorded()),
    );
    assert_eq!(m.slice("vm_slice").ts, 2_100_000_000);
    assert_eq!(m.slice("vm_slice").raw_id, 7);
    assert_eq!(m.slice("vm_slice").stamped, 7);
    assert_eq!(m.slice("host_slice").raw_id, 0);
}

#[test]
fn machines_embedded_ids_scoped_per_file() {
    let m = merged(
        Case::new("test_machines_embedded_ids_scoped_per_file")
            .manifest(json!({"version": 1, "files": [
                {"path": "p.pb", "machines": [{"id": 0, "name": "pa"}, {"id": 7, "name": "pb"}]},
                {"path": "q.pb", "machines": [{"id": 0, "name": "qa"}, {"id": 7, "name": "qb"}]}]}))
            .file("p.pb", &multi("proto_slice", "vm_slice"))
            .file("q.pb", &multi("q_slice", "qvm_slice")),
    );
    for (slice, machine) in [
        ("proto_slice", "pa"),
        ("q_slice", "qa"),
        ("qvm_slice", "qb"),
        ("vm_slice", "pb"),
    ] {
        assert_eq!(m.at(slice).1, machine, "{slice}");
    }
}

#[test]
fn machines_shared_name_merges() {
    let m = merged(
        Case::new("test_machines_shared_name_merges")
            .manifest(json!({"version": 1, "files": [
                {"path": "p.pb", "machines": [{"id": 0, "name": "host_p"}, {"id": 7, "name": "shared"}]},
                {"path": "q.pb", "machines": [{"id": 0, "name": "host_q"}, {"id": 7, "name": "shared"}]}]}))
            .file("p.pb", &multi("proto_slice", "vm_slice"))
            .file("q.pb", &multi("q_slice", "qvm_slice")),
    );
    let (a, b) = (m.slice("vm_slice"), m.slice("qvm_slice"));
    assert_eq!(a.machine.as_deref(), Some("shared"));
    assert_eq!((a.raw_id, a.stamped), (b.raw_id, b.stamped), "one machine");
}

#[test]
fn machine_override_with_sibling_proto() {
    let m = merged(
        Case::new("test_machine_override_with_sibling_proto")
            .manifest(
                json!({"version": 1, "files": [{"path": "m7.pb", "machine": {"name": "vm"}}]}),
            )
            .file("m7.pb", &solo("m7_slice"))
            .file("solo.pb", &solo("proto_slice")),
    );
    assert_eq!(m.slices.len(), 2);
    assert_eq!(m.at("m7_slice").1, "vm");
}

#[test]
fn machine_name_assignment() {
    // Adapted: app.json is a proto without snapshots.
    let m = merged(
        Case::new("test_machine_name_assignment")
            .manifest(
                json!({"version": 1, "files": [{"path": "app.pb", "machine": {"name": "phone"}}]}),
            )
            .file("app.pb", &solo("json_slice"))
            .file("spine.pb", &spine()),
    );
    assert_eq!(m.at("json_slice"), (1_100_000_000, "phone".into()));
    assert!(m.slice("json_slice").raw_id >= NAMED);
}

#[test]
fn machine_name_dedup() {
    // Adapted: the three JSON files are protos without snapshots.
    let m = merged(
        Case::new("test_machine_name_dedup")
            .manifest(json!({"version": 1, "files": [
                machine_file("a.pb", "phone"), machine_file("b.pb", "phone"),
                machine_file("c.pb", "watch")]}))
            .file("a.pb", &solo("slice_a"))
            .file("b.pb", &solo("slice_b"))
            .file("c.pb", &solo("slice_c"))
            .file("spine.pb", &spine()),
    );
    let machines: std::collections::BTreeSet<_> = ["slice_a", "slice_b", "slice_c"]
        .iter()
        .map(|s| m.slice(s).raw_id)
        .collect();
    assert_eq!(machines.len(), 2);
}

/// Issue 15, behaviour 3: a file whose packets all carry machine_id 7 keeps
/// one machine with raw id 7 (Perfetto's ResolveAdoptedMachine relabels the
/// host row), and the same id in another file is that machine again.
pub fn m7_only(name: &str, at: u64) -> Vec<TracePacket> {
    let mut p = vec![on(7, snap(&[(BT, S), (MONO, S / 2)]))];
    p.extend(
        slice(2, 7, None, at, at + 1_000, name)
            .into_iter()
            .map(|x| on(7, x)),
    );
    p
}

#[test]
fn adopted_machine_keeps_its_raw_id() {
    let m = merged(
        Case::new("proto_trace_reader.cc ResolveAdoptedMachine")
            .file("m7.pb", &m7_only("only", 1_100_000_000)),
    );
    let s = m.slice("only");
    assert_eq!((s.ts, s.raw_id, s.stamped), (1_100_000_000, 7, 7));
    assert_eq!(m.stat("machines"), 1);
    assert_eq!(m.slice_machines().len(), 1);
}

#[test]
fn same_embedded_id_in_two_files_is_one_machine() {
    let m = merged(
        Case::new("ForkContextForTrace: one context per raw machine id")
            .file("a.pb", &m7_only("a", 1_100_000_000))
            .file("b.pb", &m7_only("b", 1_200_000_000)),
    );
    let (a, b) = (m.slice("a"), m.slice("b"));
    assert_eq!((a.raw_id, b.raw_id), (7, 7));
    assert_eq!(a.machine, b.machine);
    assert_eq!((a.ts, b.ts), (1_100_000_000, 1_200_000_000));
    assert_eq!(m.stat("machines"), 1);
}
