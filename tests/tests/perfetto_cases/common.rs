//! The inputs Perfetto's tests share (trace_manifest/tests.py: SPINE,
//! SOLO_PROTO, `_M7_SLICE`, `_proto_rt`, `_proto_boot_snap`), and checks
//! every case can make.

use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, REALTIME};
use tracesync_protocol::perfetto::TracePacket;
use tracesync_tests::cases::{Case, Layout, Merged, on, seq, slice, snap};

pub const BT: u32 = BOOTTIME;
pub const RT: u32 = REALTIME;
pub const MONO: u32 = MONOTONIC;
pub const S: u64 = 1_000_000_000;
/// REALTIME - BOOTTIME of the spine: 1_700_000_000 s.
pub const WALL: u64 = 1_700_000_000 * S;

/// `_SPINE_CLOCK_SNAPSHOT`: BOOTTIME 1 s, REALTIME 1_700_000_001 s,
/// MONOTONIC 0.5 s.
pub fn spine_snapshot() -> TracePacket {
    snap(&[(BT, S), (RT, WALL + S), (MONO, S / 2)])
}

/// `_PROTO_SLICE` named `name`: sequence 1, track 12345, BOOTTIME by
/// default (no clock id), 1.1 s to 1.2 s.
pub fn proto_slice(name: &str) -> Vec<TracePacket> {
    slice(1, 12345, None, 1_100_000_000, 1_200_000_000, name)
}

/// SPINE: the snapshot and `proto_slice`.
pub fn spine() -> Vec<TracePacket> {
    let mut p = vec![spine_snapshot()];
    p.extend(proto_slice("proto_slice"));
    p
}

/// SOLO_PROTO: `_PROTO_SLICE` with no clock snapshot.
pub fn solo(name: &str) -> Vec<TracePacket> {
    proto_slice(name)
}

/// `_M7_SLICE` named `name`: machine 7, snapshot BOOTTIME 50 s, a slice at
/// BOOTTIME 50.1 s on sequence 2.
pub fn m7_slice(name: &str) -> Vec<TracePacket> {
    let mut p = vec![on(7, snap(&[(BT, 50 * S)]))];
    p.extend(
        slice(2, 77, None, 50_100_000_000, 50_200_000_000, name)
            .into_iter()
            .map(|x| on(7, x)),
    );
    p
}

/// `_M7_PROCESS`: a packet of machine 7 (Perfetto's has a process tree;
/// any packet of machine 7 makes the file multi-machine).
pub fn m7_packet() -> TracePacket {
    on(7, seq(snap(&[(BT, 50 * S)]), 3))
}

/// `_proto_rt`: snapshot {BOOTTIME boot, REALTIME realtime} and a slice
/// `name` at BOOTTIME `at` (0.1 s long).
pub fn proto_rt(
    name: &str,
    sq: u32,
    uuid: u64,
    boot: u64,
    realtime: u64,
    at: u64,
) -> Vec<TracePacket> {
    let mut p = vec![snap(&[(BT, boot), (RT, realtime)])];
    p.extend(slice(sq, uuid, None, at, at + 100_000_000, name));
    p
}

/// `_proto_boot_snap`: snapshot {BOOTTIME boot} and a slice at `at`.
pub fn proto_boot_snap(name: &str, sq: u32, uuid: u64, boot: u64, at: u64) -> Vec<TracePacket> {
    let mut p = vec![snap(&[(BT, boot)])];
    p.extend(slice(sq, uuid, None, at, at + 100_000_000, name));
    p
}

/// `_machine_file(path, name)`.
pub fn machine_file(path: &str, name: &str) -> serde_json::Value {
    serde_json::json!({"path": path, "machine": {"name": name}})
}

/// Merges the case, judges it with the trace processor and checks that
/// re-merging the output gives the same slice timestamps.
pub fn merged(case: Case) -> Merged {
    let m = case.merge().ok();
    m.judge();
    remerge_same(&m);
    m
}

/// Re-merges tracesync's own output: every slice keeps its ts and its
/// machine's name.
pub fn remerge_same(m: &Merged) {
    let again = Case::new(m.origin)
        .bytes(
            "first.pftrace",
            std::fs::read(&m.out).expect("merged trace"),
        )
        .layout(Layout::Files)
        .merge()
        .ok();
    let key = |x: &Merged| {
        let mut v: Vec<(String, i64, Option<String>)> = x
            .slices
            .iter()
            .map(|s| (s.name.clone(), s.ts, s.machine.clone()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        key(&again),
        key(m),
        "{}: re-merging the output moved slices",
        m.origin
    );
}
