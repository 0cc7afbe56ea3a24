//! Worked examples of the clock rules (docs/clock-sync.md) and Perfetto's test
//! vectors (its clock tracker and proto reader unit tests), each as an end-to-end
//! `tracesync merge --format jsonl` run on a trace file built here.

use std::path::{Path, PathBuf};

use tracesync_protocol::clock_ids::{
    BOOTTIME, MONOTONIC, MONOTONIC_COARSE, MONOTONIC_RAW, REALTIME,
};
use tracesync_protocol::perfetto::TracePacket as Packet;
use tracesync_tests::build;
use tracesync_tests::run::{Record, merge_jsonl};

const RT: u32 = REALTIME;
const MONO: u32 = MONOTONIC;
const MONOC: u32 = MONOTONIC_COARSE;
const RAW: u32 = MONOTONIC_RAW;
const BT: u32 = BOOTTIME;

fn write(dir: &Path, name: &str, packets: &[Packet]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, build::encode_trace(packets)).expect("write trace");
    path
}

/// The resolved ts of the (first) record with this clock and raw value.
fn ts_of(records: &[Record], clock: u32, raw: u64) -> Option<i64> {
    records
        .iter()
        .find(|r| r["clock"] == clock && r["clock_ts"] == raw && r["kind"] == "track_event")
        .map(|r| r["ts"].as_i64().expect("ts"))
}

/// Every track event's ts, in output order, as (clock, raw, ts).
fn events(records: &[Record]) -> Vec<(u32, u64, i64)> {
    records
        .iter()
        .filter(|r| r["kind"] == "track_event")
        .map(|r| {
            (
                r["clock"].as_u64().unwrap() as u32,
                r["clock_ts"].as_u64().unwrap(),
                r["ts"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn merge_one(packets: &[Packet]) -> Vec<Record> {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "t.pftrace", packets);
    let (records, code, stderr) = merge_jsonl(&[&path], &[]);
    assert_eq!(code, 0, "merge failed: {stderr}");
    records
}

fn snap(clocks: &[(u32, u64)]) -> Packet {
    build::on_sequence(build::clock_snapshot(clocks), 1)
}

fn event(clock: u32, ts: u64) -> Packet {
    build::instant(ts, clock, 1, 1, "e")
}

/// An instant event on sequence `seq`.
fn event_on(seq: u32, clock: u32, ts: u64) -> Packet {
    build::instant(ts, clock, seq, 1, "e")
}

#[test]
fn seed_nearest_snapshot_example() {
    let mut p = vec![];
    for (m, b) in [
        (1000, 2000),
        (1100, 2100),
        (1200, 2200),
        (1900, 2900),
        (2000, 3500),
        (2100, 3600),
    ] {
        p.push(snap(&[(MONO, m), (BT, b)]));
    }
    p.push(event(MONO, 1104));
    p.push(event(MONO, 2050));
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, MONO, 1104), Some(2104));
    assert_eq!(ts_of(&r, MONO, 2050), Some(3550));
}

#[test]
fn seed_multi_hop_example() {
    let custom = tracesync_protocol::clock_ids::named_global_clock_id("com.example.custom");
    let p = vec![
        snap(&[(custom, 1000), (MONO, 1100)]),
        snap(&[(MONO, 1200), (BT, 5200)]),
        snap(&[(custom, 3000), (MONO, 3200)]),
        snap(&[(MONO, 4000), (BT, 9000)]),
        event(custom, 3503),
    ];
    assert_eq!(ts_of(&merge_one(&p), custom, 3503), Some(7703));
}

#[test]
fn tv1_clock_domain_conversions() {
    let mut p = vec![
        snap(&[(RT, 10), (BT, 10010)]),
        snap(&[(RT, 20), (BT, 20220)]),
        snap(&[(RT, 30), (BT, 30030)]),
        snap(&[(MONO, 1000), (BT, 100000)]),
    ];
    let rt = [
        (0, 10000),
        (1, 10001),
        (9, 10009),
        (10, 10010),
        (11, 10011),
        (19, 10019),
        (20, 20220),
        (21, 20221),
        (29, 20229),
        (30, 30030),
        (40, 30040),
    ];
    let mono = [
        (0, 99000),
        (999, 99999),
        (1000, 100000),
        (1_000_000, 1_099_000),
    ];
    p.extend(rt.iter().map(|&(v, _)| event(RT, v)));
    p.extend(mono.iter().map(|&(v, _)| event(MONO, v)));
    let r = merge_one(&p);
    for (v, want) in rt {
        assert_eq!(ts_of(&r, RT, v), Some(want), "RT {v}");
    }
    for (v, want) in mono {
        assert_eq!(ts_of(&r, MONO, v), Some(want), "MONO {v}");
    }
}

#[test]
fn tv3_chained_resolution() {
    let p = vec![
        snap(&[(MONOC, 1), (MONO, 11)]),
        snap(&[(MONO, 100), (BT, 1100)]),
        snap(&[(MONO, 200), (BT, 2200)]),
        event(MONO, 110),
        event(MONOC, 100),
        event(MONOC, 202),
    ];
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, MONO, 110), Some(1110));
    assert_eq!(ts_of(&r, MONOC, 100), Some(1110));
    assert_eq!(ts_of(&r, MONOC, 202), Some(2212));
}

#[test]
fn tv5_equal_values_are_not_regressions() {
    let p = vec![
        snap(&[(BT, 101), (MONO, 51), (MONOC, 50)]),
        snap(&[(BT, 105), (MONO, 55), (MONOC, 50)]),
        snap(&[(BT, 105), (MONO, 55), (MONOC, 50)]),
        event(MONOC, 40),
        event(MONOC, 50),
        event(MONOC, 55),
    ];
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, MONOC, 40), Some(91));
    assert_eq!(ts_of(&r, MONOC, 50), Some(105));
    assert_eq!(ts_of(&r, MONOC, 55), Some(110));
}

/// TV-6's snapshots: MONOTONIC against BOOTTIME, then on sequence 1 clock
/// 64 in ns, 65 in µs and 66 incremental in µs against MONOTONIC.
fn tv6_snapshots() -> [Packet; 2] {
    use build::SnapshotClockSpec as C;
    [
        build::clock_snapshot_ext(1, &[C::ns(MONO, 1000), C::ns(BT, 100000)], None),
        build::clock_snapshot_ext(
            1,
            &[
                C::ns(MONO, 10000),
                C::ns(64, 100000),
                C::unit(65, 100, 1000),
                C::incremental(66, 10, 1000),
            ],
            None,
        ),
    ]
}

#[test]
fn tv6_sequence_scoped_and_incremental_clocks() {
    use build::SnapshotClockSpec as C;
    // a=(seq1,64) ns; b=(seq1,65) µs; c=(seq1,66) µs incremental; d=(seq2,64) µs incremental.
    let [base, s1] = tv6_snapshots();
    let mut p = vec![base, s1, event_on(1, 64, 150000), event_on(1, 65, 150)];
    // c deltas 1, 1, 1, 2 -> 11, 12, 13, 15 µs on MONO -> BT.
    for d in [1, 1, 1, 2] {
        p.push(event_on(1, 66, d));
    }
    p.push(build::clock_snapshot_ext(
        1,
        &[C::ns(MONO, 20000), C::incremental(66, 20, 1000)],
        None,
    ));
    p.push(build::clock_snapshot_ext(
        2,
        &[C::ns(MONO, 20000), C::incremental(64, 20, 1000)],
        None,
    ));
    // Interleaved: the accumulators are per (sequence, clock).
    for (seq, clock, d) in [
        (1, 66, 1),
        (2, 64, 2),
        (1, 66, 1),
        (2, 64, 2),
        (1, 66, 1),
        (2, 64, 2),
        (1, 66, 2),
        (2, 64, 4),
    ] {
        p.push(event_on(seq, clock, d));
    }
    let r = merge_one(&p);
    let ts: Vec<i64> = events(&r).iter().map(|e| e.2).collect();
    assert_eq!(
        ts,
        vec![
            159000, 159000, // a, b
            110000, 111000, 112000, 114000, // c
            // c: 21, 22, 23, 25 µs; d: 22, 24, 26, 30 µs (TV-6: c 122000 and
            // 124000, d 125000 and 129000 at the third and fourth calls).
            120000, 121000, 121000, 123000, 122000, 125000, 124000, 129000,
        ]
    );
}

#[test]
fn tv7_cache_boundaries() {
    let mut p = vec![
        snap(&[(MONO, 100), (BT, 1000)]),
        snap(&[(MONO, 200), (BT, 2000)]),
        snap(&[(MONO, 300), (BT, 3000)]),
    ];
    let want = [
        (99, 999),
        (100, 1000),
        (101, 1001),
        (199, 1099),
        (200, 2000),
        (201, 2001),
        (299, 2099),
        (300, 3000),
        (301, 3001),
    ];
    p.extend(want.iter().map(|&(v, _)| event(MONO, v)));
    let r = merge_one(&p);
    for (v, t) in want {
        assert_eq!(ts_of(&r, MONO, v), Some(t), "MONO {v}");
    }
}

/// Perfetto converts with the snapshots seen so far: a shorter path that
/// appears later changes later packets only.
#[test]
fn tv8_tv10_paths_follow_stream_order() {
    let p = vec![
        snap(&[(MONO, 100), (RAW, 200)]),
        snap(&[(RAW, 300), (BT, 4000)]),
        event(MONO, 50),
        snap(&[(MONO, 500), (BT, 6000)]),
        event(MONO, 400),
        event(MONO, 51),
    ];
    let r = merge_one(&p);
    assert_eq!(
        ts_of(&r, MONO, 50),
        Some(3850),
        "two hops before the direct snapshot"
    );
    assert_eq!(ts_of(&r, MONO, 400), Some(5900));
    assert_eq!(ts_of(&r, MONO, 51), Some(5551), "one hop once it exists");

    let p = vec![
        snap(&[(RAW, 100), (MONO, 200)]),
        snap(&[(MONO, 300), (BT, 4000)]),
        event(RAW, 10),
        event(RAW, 20),
    ];
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, RAW, 10), Some(3810));
    assert_eq!(ts_of(&r, RAW, 20), Some(3820));
}

#[test]
fn tv16_global_clock() {
    let p = vec![
        snap(&[(BT, 101000002), (128, 2)]),
        event(128, 3000000),
        event(128, 5000000),
    ];
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, 128, 3000000), Some(104000000));
    assert_eq!(ts_of(&r, 128, 5000000), Some(106000000));
}

#[test]
fn tv17_primary_trace_clock_monotonic() {
    use build::SnapshotClockSpec as C;
    let p = vec![
        build::clock_snapshot_ext(1, &[C::ns(MONO, 1000), C::ns(BT, 11000)], Some(MONO)),
        event(MONO, 1000),
        event(BT, 12000),
    ];
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, MONO, 1000), Some(1000));
    assert_eq!(ts_of(&r, BT, 12000), Some(2000));
}

/// TV-23: a relay-recorded file: the host's packets and machine 7's, with
/// a RemoteClockSync giving offset 48e9 (client minus host).
#[test]
fn tv23_remote_clock_sync() {
    let host_snap = snap(&[(BT, 1_000_000_000)]);
    let sync = build::on_machine(
        build::remote_clock_sync(1, &[(50_000_000_000, 2_000_000_000); 2]),
        7,
    );
    let vm_slice = build::on_machine(event_on(3, BT, 50_100_000_000), 7);
    let host_slice = event_on(2, BT, 1_100_000_000);
    let r = merge_one(&[host_snap, sync, host_slice, vm_slice]);
    assert_eq!(ts_of(&r, BT, 1_100_000_000), Some(1_100_000_000));
    assert_eq!(ts_of(&r, BT, 50_100_000_000), Some(2_100_000_000));
    let vm = r
        .iter()
        .find(|x| x["clock_ts"] == 50_100_000_000u64)
        .unwrap();
    assert_eq!(vm["raw_id"], 7);
}

/// TV-24: machine 7 has no sync: BOOTTIME same-domain overlay.
#[test]
fn tv24_remote_machine_without_sync_overlays_boottime() {
    let p = vec![
        snap(&[
            (BT, 1_000_000_000),
            (RT, 1_700_000_001_000_000_000),
            (MONO, 500_000_000),
        ]),
        event_on(2, BT, 1_100_000_000),
        build::on_machine(
            build::on_sequence(build::clock_snapshot(&[(BT, 50_000_000_000)]), 3),
            7,
        ),
        build::on_machine(event_on(3, BT, 50_100_000_000), 7),
    ];
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, BT, 50_100_000_000), Some(50_100_000_000));
    assert_eq!(ts_of(&r, BT, 1_100_000_000), Some(1_100_000_000));
}

/// TV-21: each file on its own machine (here via --machine-per-file).
fn rendezvous_file(dir: &Path, name: &str, clocks: &[(u32, u64)], slice: u64) -> PathBuf {
    write(dir, name, &[snap(clocks), event_on(2, BT, slice)])
}

fn merged_slices(files: &[PathBuf]) -> Vec<i64> {
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (r, code, stderr) = merge_jsonl(&refs, &["--machine-per-file"]);
    assert_eq!(code, 0, "{stderr}");
    let mut by_src: Vec<(String, i64)> = r
        .iter()
        .filter(|x| x["kind"] == "track_event")
        .map(|x| {
            (
                x["src"].as_str().unwrap().to_owned(),
                x["ts"].as_i64().unwrap(),
            )
        })
        .collect();
    by_src.sort_by_key(|(src, _)| files.iter().position(|f| f.display().to_string() == *src));
    by_src.into_iter().map(|(_, ts)| ts).collect()
}

#[test]
fn tv21_realtime_rendezvous() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let r = |i: u64| 1_700_000_000_000_000_000 + i * 1_000_000_000;
    let a = rendezvous_file(d, "a", &[(BT, 1_000_000_000), (RT, r(1))], 1_100_000_000);
    let b = rendezvous_file(d, "b", &[(BT, 1_000_000_000), (RT, r(2))], 1_100_000_000);
    let c = rendezvous_file(d, "c", &[(BT, 1_000_000_000), (RT, r(3))], 1_100_000_000);
    assert_eq!(
        merged_slices(&[a.clone(), b.clone()]),
        vec![1_100_000_000, 2_100_000_000]
    );
    assert_eq!(
        merged_slices(&[a.clone(), b, c]),
        vec![1_100_000_000, 2_100_000_000, 3_100_000_000]
    );
    // A peer without REALTIME: same-domain BOOTTIME overlay.
    let bt_only = rendezvous_file(d, "bt", &[(BT, 1_000_000_000)], 3_000_000_000);
    assert_eq!(
        merged_slices(&[a.clone(), bt_only.clone()]),
        vec![1_100_000_000, 3_000_000_000]
    );
    // The trace-time machine without REALTIME: no rendezvous, overlay.
    let b2 = rendezvous_file(d, "b2", &[(BT, 1_000_000_000), (RT, r(2))], 1_100_000_000);
    let a_bt = rendezvous_file(d, "a_bt", &[(BT, 1_000_000_000)], 1_100_000_000);
    assert_eq!(
        merged_slices(&[a_bt, b2]),
        vec![1_100_000_000, 1_100_000_000]
    );
    // Both BOOTTIME-only: unchanged.
    let x = rendezvous_file(d, "x", &[(BT, 1_000_000_000)], 1_100_000_000);
    assert_eq!(
        merged_slices(&[x, bt_only]),
        vec![1_100_000_000, 3_000_000_000]
    );
}

/// Different real domains are never equated: the packets are dropped and
/// counted under Perfetto's stat names.
#[test]
fn unrelatable_domains_are_dropped_and_counted() {
    let d = tempfile::tempdir().unwrap();
    let host = write(
        d.path(),
        "host",
        &[snap(&[(BT, 1_000_000_000)]), event(BT, 1_100_000_000)],
    );
    let other = write(d.path(), "rt", &[snap(&[(RT, 5_000)]), event(RT, 6_000)]);
    let stats = d.path().join("stats.json");
    let (r, code, stderr) = merge_jsonl(
        &[&host, &other],
        &["--machine-per-file", "--stats", stats.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(events(&r).len(), 1, "only the host event is placed");
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!(stats["clock_sync_unrelatable_clock_domains"], 1, "{stats}");
    assert_eq!(stats["clock_sync_failure_no_path"], 1, "{stats}");
    // --strict refuses the same merge.
    let (_, code, stderr) = merge_jsonl(&[&host, &other], &["--machine-per-file", "--strict"]);
    assert_eq!(code, 65, "{stderr}");
}

/// TV-25: invalid snapshots are rejected and counted; the trace still merges.
#[test]
fn tv25_invalid_snapshots_are_counted() {
    use build::SnapshotClockSpec as C;
    let d = tempfile::tempdir().unwrap();
    let p = vec![
        snap(&[(BT, 100), (MONO, 1)]),
        snap(&[(MONO, 1), (MONO, 2)]), // duplicate clock
        build::clock_snapshot_ext(1, &[C::ns(BT, 200), C::incremental(128, 5, 1)], None), // incremental global
        build::clock_snapshot_ext(1, &[C::unit(RAW, 1, 1)], None),
        build::clock_snapshot_ext(1, &[C::unit(RAW, 2, 1000)], None), // unit changed
        snap(&[(BT, 50), (MONO, 2)]),                                 // trace clock went back
        event(MONO, 1),
    ];
    let path = write(d.path(), "bad", &p);
    let stats = d.path().join("stats.json");
    let (r, code, stderr) = merge_jsonl(&[&path], &["--stats", stats.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ts_of(&r, MONO, 1), Some(100));
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!(stats["invalid_clock_snapshots"], 4, "{stats}");
}

/// TV-11: a remote machine's clocks are resolved within that machine (to
/// its BOOTTIME), then moved by the sync offset (client - host = -10000).
#[test]
fn tv11_remote_machine_clocks_with_offset() {
    let on7 = |p: Packet| build::on_machine(p, 7);
    let p = vec![
        snap(&[(BT, 1000)]),
        on7(build::remote_clock_sync(1, &[(50_000, 60_000); 2])),
        on7(snap(&[(RT, 10), (BT, 10010)])),
        on7(snap(&[(RT, 20), (BT, 20220)])),
        on7(snap(&[(RT, 30), (BT, 30030)])),
        on7(snap(&[(MONO, 1000), (BT, 100000)])),
        on7(snap(&[(MONO, 2000), (64, 1200)])),
        on7(event(RT, 0)),
        on7(event(RT, 11)),
        on7(event(RT, 20)),
        on7(event(MONO, 999)),
        on7(event(64, 1100)),
    ];
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, RT, 0), Some(20000));
    assert_eq!(ts_of(&r, RT, 11), Some(20011));
    assert_eq!(ts_of(&r, RT, 20), Some(30220));
    assert_eq!(ts_of(&r, MONO, 999), Some(109999));
    assert_eq!(ts_of(&r, 64, 1100), Some(110900));
}

/// A sequence clock used before the snapshot that defines it: Perfetto
/// defers such packets to the end of the file; the two-pass merge resolves
/// them with the complete graph instead of losing them.
#[test]
fn sequence_clock_before_its_snapshot_is_not_lost() {
    let p = vec![
        snap(&[(BT, 1_000), (MONO, 500)]),
        event(64, 10),
        build::on_sequence(build::clock_snapshot(&[(64, 0), (MONO, 700)]), 1),
        event(64, 20),
    ];
    let r = merge_one(&p);
    assert_eq!(ts_of(&r, 64, 10), Some(1_210));
    assert_eq!(ts_of(&r, 64, 20), Some(1_220));
}

/// A ClockSnapshot whose body does not decode is reported as a fault and
/// counted with the rejected snapshots; the rest of the input still merges.
#[test]
fn undecodable_snapshot_is_counted() {
    use tracesync_protocol::wire;
    let d = tempfile::tempdir().unwrap();
    let mut bytes = build::encode_trace(&[snap(&[(BT, 1_000), (MONO, 500)]), event(MONO, 600)]);
    // A packet whose clock_snapshot (field 6) holds a truncated Clock.
    let mut packet = Vec::new();
    wire::put_len_field(&mut packet, 6, &[0x0a, 0x05, 0x08]);
    wire::put_trace_packet(&mut bytes, &packet);
    let path = d.path().join("t.pftrace");
    std::fs::write(&path, bytes).unwrap();
    let stats = d.path().join("stats.json");
    let (r, code, stderr) = merge_jsonl(&[&path], &["--stats", stats.to_str().unwrap()]);
    assert_eq!(code, 65, "{stderr}");
    assert!(stderr.contains("ClockSnapshot"), "{stderr}");
    assert_eq!(ts_of(&r, MONO, 600), Some(1_100));
    let stats: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!(stats["invalid_clock_snapshots"], 1, "{stats}");
}

/// `tracesync clocks`: the clocks of one snapshot were read at one instant,
/// so every row of a snapshot has the same trace time, whatever the unit
/// its clock counts in (the table's `clock_value` is in ns). Incremental
/// clocks have none.
#[test]
fn clocks_rows_of_one_snapshot_share_their_trace_time() {
    let dir = tempfile::tempdir().unwrap();
    let [base, s1] = tv6_snapshots();
    let path = write(dir.path(), "t.pftrace", &[base, s1, event(BT, 150000)]);
    let o = tracesync_tests::run::tracesync(&["clocks", "--json", path.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<Record> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = |clock: u32| {
        rows.iter()
            .find(|r| {
                r["snapshot_id"] == rows.last().unwrap()["snapshot_id"] && r["clock_id"] == clock
            })
            .unwrap_or_else(|| panic!("no row of clock {clock} in the last snapshot: {rows:#?}"))
    };
    // MONOTONIC 10 000 is BOOTTIME 109 000 by the first snapshot.
    for clock in [MONO, 64, 65] {
        assert_eq!(row(clock)["ts"], 109000, "clock {clock}: {rows:#?}");
    }
    assert_eq!(row(65)["clock_value"], 100000, "in ns");
    assert!(row(66)["ts"].is_null(), "{rows:#?}");
}

/// ProtoTraceReaderTest.DeferredClockSnapshotSequenceScopedClock: the only
/// snapshot comes after the packet on its sequence clock; the packet is
/// placed with it and nothing counts as an unknown source clock.
#[test]
fn deferred_clock_snapshot_sequence_scoped_clock() {
    let dir = tempfile::tempdir().unwrap();
    let p = [
        event(64, 1000),
        build::on_sequence(build::clock_snapshot(&[(64, 10), (BT, 10000)]), 1),
    ];
    let path = write(dir.path(), "t.pftrace", &p);
    let stats = dir.path().join("stats.json");
    let (r, code, stderr) = merge_jsonl(&[&path], &["--stats", stats.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ts_of(&r, 64, 1000), Some(1000 - 10 + 10000));
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(
        stats["clock_sync_failure_unknown_source_clock"], 0,
        "{stats}"
    );
}
