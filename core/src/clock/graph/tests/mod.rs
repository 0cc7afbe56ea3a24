//! Perfetto's clock tracker test vectors (clock_tracker_unittest.cc), worked
//! examples of the clock rules (docs/clock-sync.md), and property tests.

use super::*;
use tracesync_protocol::clock_ids::{
    BOOTTIME, MONOTONIC, MONOTONIC_COARSE, MONOTONIC_RAW, REALTIME,
};

mod later_vectors;

const RT: ClockNode = ClockNode::new(0, 0, 0, REALTIME);
const MONO: ClockNode = ClockNode::new(0, 0, 0, MONOTONIC);
const MONOC: ClockNode = ClockNode::new(0, 0, 0, MONOTONIC_COARSE);
const RAW: ClockNode = ClockNode::new(0, 0, 0, MONOTONIC_RAW);
const BT: ClockNode = ClockNode::new(0, 0, 0, BOOTTIME);

fn global(clock: u32) -> ClockNode {
    ClockNode::new(0, 0, 0, clock)
}

fn seq(seq: u32, clock: u32) -> ClockNode {
    ClockNode::new(0, 0, seq, clock)
}

fn clk(node: ClockNode, value: u64, unit: u64, incremental: bool) -> SnapshotClock {
    SnapshotClock {
        node,
        value,
        unit_multiplier_ns: unit,
        is_incremental: incremental,
    }
}

/// Adds a snapshot of ns clocks and expects success.
fn snap(g: &mut ClockGraph, clocks: &[(ClockNode, u64)]) {
    let clocks: Vec<_> = clocks
        .iter()
        .map(|&(n, v)| SnapshotClock::ns(n, v))
        .collect();
    g.add_snapshot(&clocks, EdgeOrigin::Snapshot).unwrap();
}

fn try_snap(g: &mut ClockGraph, clocks: &[SnapshotClock]) -> Result<SnapshotId, SnapshotError> {
    g.add_snapshot(clocks, EdgeOrigin::Snapshot)
}

fn check(g: &mut ClockGraph, src: ClockNode, dst: ClockNode, cases: &[(u64, i64)]) {
    for &(v, want) in cases {
        assert_eq!(g.convert(src, v, dst), Ok(want), "{src} {v} -> {dst}");
    }
}

fn trace_graph() -> ClockGraph {
    let mut g = ClockGraph::new();
    g.set_trace_time_clock(BT);
    g
}

#[test]
fn tv1_clock_domain_conversions() {
    let mut g = trace_graph();
    assert_eq!(
        g.convert(RT, 0, BT),
        Err(ConvertError::UnknownSourceClock(RT))
    );
    snap(&mut g, &[(RT, 10), (BT, 10010)]);
    snap(&mut g, &[(RT, 20), (BT, 20220)]);
    snap(&mut g, &[(RT, 30), (BT, 30030)]);
    snap(&mut g, &[(MONO, 1000), (BT, 100000)]);
    #[rustfmt::skip]
    check(&mut g, RT, BT, &[
        (0, 10000), (1, 10001), (9, 10009), (10, 10010), (11, 10011), (19, 10019),
        (20, 20220), (21, 20221), (29, 20229), (30, 30030), (40, 30040),
    ]);
    #[rustfmt::skip]
    check(&mut g, MONO, BT, &[(0, 99000), (999, 99999), (1000, 100000), (1000000, 1099000)]);
}

#[test]
fn tv2_realtime_moving_backwards_is_target_only() {
    let mut g = trace_graph();
    snap(&mut g, &[(BT, 10010), (RT, 10)]);
    check(&mut g, RT, BT, &[(11, 10011)]);
    snap(&mut g, &[(BT, 10020), (RT, 20)]);
    snap(&mut g, &[(BT, 30040), (RT, 40)]);
    assert!(g.is_monotonic(RT));
    snap(&mut g, &[(BT, 40030), (RT, 30)]);
    assert!(!g.is_monotonic(RT));
    assert_eq!(
        g.convert(RT, 11, BT),
        Err(ConvertError::NoPath { src: RT, dst: BT })
    );
    assert!(!g.has_path(RT, BT));
    assert!(g.has_path(BT, RT));
    check(
        &mut g,
        BT,
        RT,
        &[(10011, 11), (10029, 29), (40030, 30), (40040, 40)],
    );
    snap(&mut g, &[(BT, 50000), (RT, 50)]);
    check(&mut g, BT, RT, &[(50005, 55)]);
    snap(&mut g, &[(BT, 60020), (RT, 20)]);
    check(&mut g, BT, RT, &[(60020, 20)]);
    // Still never a source, even after later snapshots.
    assert!(g.convert(RT, 55, BT).is_err());
}

#[test]
fn tv3_chained_resolution() {
    let mut g = trace_graph();
    snap(&mut g, &[(MONOC, 1), (MONO, 11)]);
    snap(&mut g, &[(MONO, 100), (BT, 1100)]);
    snap(&mut g, &[(MONO, 200), (BT, 2200)]);
    check(&mut g, MONO, BT, &[(110, 1110)]);
    check(&mut g, MONOC, BT, &[(100, 1110), (202, 2212)]);
}

#[test]
fn tv5_equal_values_are_not_regressions() {
    let mut g = trace_graph();
    snap(&mut g, &[(BT, 101), (MONO, 51), (MONOC, 50)]);
    snap(&mut g, &[(BT, 105), (MONO, 55), (MONOC, 50)]);
    snap(&mut g, &[(BT, 105), (MONO, 55), (MONOC, 50)]);
    assert!(g.is_monotonic(MONOC) && g.is_monotonic(BT) && g.is_monotonic(MONO));
    check(&mut g, MONOC, MONO, &[(49, 50), (50, 55), (51, 56)]);
    check(&mut g, MONOC, BT, &[(40, 91), (50, 105), (55, 110)]);
    check(&mut g, BT, MONOC, &[(91, 40), (105, 50), (110, 55)]);
}

#[test]
fn tv6_sequence_scoped_and_incremental_clocks() {
    let mut g = trace_graph();
    let (a, b, c, d) = (seq(1, 64), seq(1, 65), seq(1, 66), seq(2, 64));
    snap(&mut g, &[(MONO, 1000), (BT, 100000)]);
    try_snap(
        &mut g,
        &[
            clk(MONO, 10000, 1, false),
            clk(a, 100000, 1, false),
            clk(b, 100, 1000, false),
            clk(c, 10, 1000, true),
        ],
    )
    .unwrap();
    assert!(g.is_incremental(c) && !g.is_incremental(b));
    check(&mut g, a, MONO, &[(150000, 60000)]);
    check(&mut g, a, BT, &[(150000, 159000)]);
    check(&mut g, b, MONO, &[(150, 60000)]);
    check(&mut g, b, BT, &[(150, 159000)]);
    check(&mut g, c, MONO, &[(1, 11000), (1, 12000)]);
    check(&mut g, c, BT, &[(1, 112000), (2, 114000)]);

    try_snap(
        &mut g,
        &[clk(MONO, 20000, 1, false), clk(c, 20, 1000, true)],
    )
    .unwrap();
    try_snap(
        &mut g,
        &[clk(MONO, 20000, 1, false), clk(d, 20, 1000, true)],
    )
    .unwrap();
    // The exact interleaving matters: one accumulator per (sequence, clock).
    check(&mut g, c, MONO, &[(1, 21000)]);
    check(&mut g, d, MONO, &[(2, 22000)]);
    check(&mut g, c, MONO, &[(1, 22000)]);
    check(&mut g, d, MONO, &[(2, 24000)]);
    check(&mut g, c, BT, &[(1, 122000)]);
    check(&mut g, d, BT, &[(2, 125000)]);
    check(&mut g, c, BT, &[(2, 124000)]);
    check(&mut g, d, BT, &[(4, 129000)]);
}

#[test]
fn tv7_cache_boundaries() {
    let mut g = trace_graph();
    snap(&mut g, &[(MONO, 100), (BT, 1000)]);
    snap(&mut g, &[(MONO, 200), (BT, 2000)]);
    snap(&mut g, &[(MONO, 300), (BT, 3000)]);
    #[rustfmt::skip]
    let cases = [
        (99, 999), (100, 1000), (101, 1001), (199, 1099), (200, 2000),
        (201, 2001), (299, 2099), (300, 3000), (301, 3001),
    ];
    check(&mut g, MONO, BT, &cases);
    // Second round is served by the cache and must agree.
    let misses = g.stats().clock_sync_cache_miss;
    check(&mut g, MONO, BT, &cases);
    assert_eq!(g.stats().clock_sync_cache_miss, misses);
}

#[test]
fn tv8_cache_invalidation_and_path_reoptimization() {
    let mut g = trace_graph();
    snap(&mut g, &[(MONO, 100), (RAW, 200)]);
    snap(&mut g, &[(RAW, 300), (BT, 4000)]);
    check(&mut g, MONO, BT, &[(50, 3850)]);
    assert_eq!(
        (
            g.stats().clock_sync_cache_miss,
            g.stats().clock_sync_cache_hit
        ),
        (1, 0)
    );
    check(&mut g, MONO, BT, &[(50, 3850)]);
    assert_eq!(
        (
            g.stats().clock_sync_cache_miss,
            g.stats().clock_sync_cache_hit
        ),
        (1, 1)
    );
    snap(&mut g, &[(MONO, 500), (BT, 6000)]);
    // 1-hop path now: 6000 - 100; the 2-hop path would give 3850 + 350.
    check(&mut g, MONO, BT, &[(400, 5900)]);
    assert_eq!(g.stats().clock_sync_cache_miss, 2);
}

#[test]
fn tv10_multi_hop_results_are_cached() {
    let mut g = trace_graph();
    snap(&mut g, &[(RAW, 100), (MONO, 200)]);
    snap(&mut g, &[(MONO, 300), (BT, 4000)]);
    check(&mut g, RAW, BT, &[(10, 3810)]);
    assert_eq!(
        (
            g.stats().clock_sync_cache_miss,
            g.stats().clock_sync_cache_hit
        ),
        (1, 0)
    );
    check(&mut g, RAW, BT, &[(10, 3810), (20, 3820)]);
    assert_eq!(
        (
            g.stats().clock_sync_cache_miss,
            g.stats().clock_sync_cache_hit
        ),
        (1, 2)
    );
    snap(&mut g, &[(MONO, 500), (BT, 6000)]);
    check(&mut g, RAW, BT, &[(10, 3810)]);
    assert_eq!(g.stats().clock_sync_cache_miss, 2);
}

/// The graph part of TV-11 (RemoteNoClockOffset numbers; the offset itself
/// is applied elsewhere).
#[test]
fn tv11_graph_part() {
    let mut g = trace_graph();
    let (s1, s2) = (seq(1, 64), seq(2, 64));
    snap(&mut g, &[(RT, 10), (BT, 10010)]);
    snap(&mut g, &[(RT, 20), (BT, 20220)]);
    snap(&mut g, &[(RT, 30), (BT, 30030)]);
    snap(&mut g, &[(MONO, 1000), (BT, 100000)]);
    snap(&mut g, &[(MONO, 2000), (s1, 1200)]);
    try_snap(&mut g, &[clk(s1, 1300, 1, false), clk(s2, 2000, 10, false)]).unwrap();
    #[rustfmt::skip]
    check(&mut g, RT, BT, &[
        (0, 10000), (1, 10001), (9, 10009), (10, 10010), (11, 10011), (19, 10019),
        (20, 20220), (21, 20221), (29, 20229), (30, 30030), (40, 30040),
    ]);
    #[rustfmt::skip]
    check(&mut g, MONO, BT, &[(0, 99000), (999, 99999), (1000, 100000), (1000000, 1099000)]);
    check(&mut g, s1, BT, &[(1100, 100900)]);
    // s2 21000 ns -> s1 2300 -> MONO 3100 -> BT 102100 (three hops).
    check(&mut g, s2, BT, &[(2100, 102100)]);
}

/// The graph part of TV-12: trace time MONO, offsets left out.
#[test]
fn tv12_graph_part() {
    let mut g = ClockGraph::new();
    g.set_trace_time_clock(MONO);
    let s1 = seq(1, 64);
    snap(&mut g, &[(RT, 10), (BT, 10010)]);
    snap(&mut g, &[(MONO, 1000), (BT, 100000)]);
    snap(&mut g, &[(MONO, 2000), (s1, 1200)]);
    check(&mut g, RT, MONO, &[(9, -88991), (10, -88990), (20, -88980)]);
    check(
        &mut g,
        MONO,
        MONO,
        &[(0, 0), (999, 999), (1000000, 1000000)],
    );
    check(&mut g, s1, MONO, &[(1100, 1900)]);
}

#[test]
fn tv25_invalid_snapshots() {
    let mut g = trace_graph();
    let e = try_snap(
        &mut g,
        &[SnapshotClock::ns(MONO, 1), SnapshotClock::ns(MONO, 2)],
    );
    assert_eq!(e, Err(SnapshotError::DuplicateClock(MONO)));
    // Partial application: the first MONO stays.
    assert!(g.is_known(MONO));

    let g128 = global(128);
    let e = try_snap(&mut g, &[clk(g128, 5, 1, true)]);
    assert_eq!(e, Err(SnapshotError::IncrementalGlobalClock(g128)));
    let e = try_snap(&mut g, &[clk(RAW, 5, 1, true)]);
    assert_eq!(e, Err(SnapshotError::IncrementalGlobalClock(RAW)));
    assert!(!g.is_known(g128));

    let x = global(200);
    try_snap(&mut g, &[clk(x, 1, 1, false)]).unwrap();
    let e = try_snap(&mut g, &[clk(x, 2, 1000, false)]);
    assert_eq!(e, Err(SnapshotError::ChangedProperties(x)));
    let s = seq(3, 70);
    try_snap(&mut g, &[clk(s, 1, 1, true)]).unwrap();
    let e = try_snap(&mut g, &[clk(s, 2, 1, false)]);
    assert_eq!(e, Err(SnapshotError::ChangedProperties(s)));

    let e = try_snap(&mut g, &[clk(BT, 1, 1000, false)]);
    assert_eq!(e, Err(SnapshotError::TraceClockUnit(BT)));
    let e = try_snap(&mut g, &[SnapshotClock::ns(RAW, u64::MAX)]);
    assert_eq!(e, Err(SnapshotError::Overflow(RAW)));
    let e = try_snap(&mut g, &[clk(global(201), 1 << 62, 4, false)]);
    assert_eq!(e, Err(SnapshotError::Overflow(global(201))));
    assert_eq!(g.stats().invalid_clock_snapshots, 8);
}

#[test]
fn tv25_trace_clock_not_monotonic_partial_application() {
    let mut g = trace_graph();
    snap(&mut g, &[(BT, 100), (MONO, 1)]);
    let e = try_snap(
        &mut g,
        &[SnapshotClock::ns(BT, 50), SnapshotClock::ns(MONO, 2)],
    );
    assert_eq!(e, Err(SnapshotError::TraceClockNotMonotonic(BT)));
    // BT failed first: nothing of that snapshot was appended, no record.
    assert_eq!(g.edges().len(), 1);
    check(&mut g, MONO, BT, &[(5, 104)]);
    // MONO before the failing BT: MONO 3 is appended (same clock set, so
    // the same series), which the next snapshot proves by regressing it.
    let e = try_snap(
        &mut g,
        &[SnapshotClock::ns(MONO, 3), SnapshotClock::ns(BT, 40)],
    );
    assert_eq!(e, Err(SnapshotError::TraceClockNotMonotonic(BT)));
    assert!(g.is_monotonic(MONO));
    snap(&mut g, &[(MONO, 2), (BT, 200)]);
    assert!(!g.is_monotonic(MONO));
    assert!(g.convert(MONO, 5, BT).is_err());
    check(&mut g, BT, MONO, &[(100, 1), (210, 12)]);
    assert_eq!(g.stats().invalid_clock_snapshots, 2);
}

#[test]
fn series_is_keyed_by_clock_set_not_order() {
    let mut g = ClockGraph::new();
    snap(&mut g, &[(MONO, 100), (BT, 1000)]);
    snap(&mut g, &[(BT, 1000), (MONO, 100)]);
    assert!(g.is_monotonic(BT));
    // In the same series as the first snapshot, so BT went backwards.
    snap(&mut g, &[(BT, 900), (MONO, 200)]);
    assert!(!g.is_monotonic(BT) && g.is_monotonic(MONO));
}

#[test]
fn seed_worked_examples() {
    let mut g = trace_graph();
    #[rustfmt::skip]
    let pairs = [(1000, 2000), (1100, 2100), (1200, 2200), (1900, 2900), (2000, 3500), (2100, 3600)];
    for (mono, bt) in pairs {
        snap(&mut g, &[(MONO, mono), (BT, bt)]);
    }
    check(&mut g, MONO, BT, &[(1104, 2104)]);

    let mut g = trace_graph();
    let custom = global(0x8000_1234);
    snap(&mut g, &[(custom, 1000), (MONO, 1100)]);
    snap(&mut g, &[(MONO, 1200), (BT, 5200)]);
    snap(&mut g, &[(custom, 3000), (MONO, 3200)]);
    snap(&mut g, &[(MONO, 4000), (BT, 9000)]);
    check(&mut g, custom, MONO, &[(3503, 3703)]);
    check(&mut g, custom, BT, &[(3503, 7703)]);
}

#[test]
fn convert_errors_are_distinguished() {
    let mut g = ClockGraph::new();
    let (x, y) = (global(300), global(301));
    snap(&mut g, &[(MONO, 1), (BT, 2)]);
    snap(&mut g, &[(x, 1), (y, 2)]);
    let unknown = global(999);
    assert_eq!(
        g.convert(unknown, 1, BT),
        Err(ConvertError::UnknownSourceClock(unknown))
    );
    assert_eq!(
        g.convert(MONO, 1, unknown),
        Err(ConvertError::UnknownTargetClock(unknown))
    );
    assert_eq!(
        g.convert(MONO, 1, x),
        Err(ConvertError::NoPath { src: MONO, dst: x })
    );
    assert!(!g.has_path(MONO, x) && !g.has_path(unknown, BT));
    // Every slow path counts as a miss, failed ones included.
    assert_eq!(g.stats().clock_sync_cache_miss, 3);
    // Identity needs nothing to exist.
    assert_eq!(g.convert(unknown, 7, unknown), Ok(7));
    assert!(g.has_path(unknown, unknown));
}

#[test]
fn within_machine_refuses_foreign_clocks() {
    let mut g = ClockGraph::new();
    let host_bt = BT;
    let m1 = |scope, clock| ClockNode::new(1, scope, 0, clock);
    // m1 MONO and m1 BT are linked only through the host's BOOTTIME.
    snap(&mut g, &[(m1(0, MONOTONIC), 100), (host_bt, 1000)]);
    snap(&mut g, &[(host_bt, 2000), (m1(0, BOOTTIME), 500)]);
    assert_eq!(g.convert(m1(0, MONOTONIC), 100, m1(0, BOOTTIME)), Ok(-500));
    assert!(g.has_path(m1(0, MONOTONIC), m1(0, BOOTTIME)));
    assert!(!g.has_path_within_machine(m1(0, MONOTONIC), m1(0, BOOTTIME)));
    let (src, dst) = (m1(0, MONOTONIC), m1(0, BOOTTIME));
    assert_eq!(
        g.convert_within_machine(src, 100, dst),
        Err(ConvertError::NoPath { src, dst })
    );
    // Other scopes of the same machine are allowed.
    snap(&mut g, &[(m1(0, MONOTONIC), 100), (m1(2, BOOTTIME), 7100)]);
    snap(&mut g, &[(m1(2, BOOTTIME), 7000), (m1(0, BOOTTIME), 40)]);
    assert_eq!(g.convert_within_machine(src, 100, dst), Ok(140));
    // The unrestricted cache entry did not leak into the restricted lookup.
    assert_eq!(g.convert(src, 100, dst), Ok(-500));
}

#[test]
fn failed_conversion_does_not_advance_accumulator() {
    let mut g = ClockGraph::new();
    let c = seq(1, 64);
    try_snap(&mut g, &[clk(MONO, 1000, 1, false), clk(c, 1, 1000, true)]).unwrap();
    assert!(g.convert(c, 5, global(999)).is_err());
    check(&mut g, c, MONO, &[(1, 2000), (1, 3000)]);
    // reset_incremental re-anchors at an absolute raw value.
    g.reset_incremental(c, 10);
    check(&mut g, c, MONO, &[(1, 11000)]);
    // Identity conversion accumulates too, in ns.
    assert_eq!(g.convert(c, 1, c), Ok(12000));
}

#[test]
fn path_is_capped_at_eight_hops() {
    let mut g = ClockGraph::new();
    let chain: Vec<ClockNode> = (0..10).map(|i| global(1000 + i)).collect();
    for pair in chain.windows(2) {
        snap(&mut g, &[(pair[0], 10), (pair[1], 20)]);
    }
    assert_eq!(g.convert(chain[0], 10, chain[8]), Ok(90));
    assert!(g.has_path(chain[0], chain[8]));
    assert!(!g.has_path(chain[0], chain[9]));
    assert!(matches!(
        g.convert(chain[0], 10, chain[9]),
        Err(ConvertError::NoPath { .. })
    ));
}

#[test]
fn bfs_prefers_fewest_hops_then_lowest_clock() {
    let mut g = ClockGraph::new();
    let (x, y) = (global(500), global(501));
    // Two 2-hop paths: via BT (offset +20) and via MONO (offset +10).
    snap(&mut g, &[(x, 0), (BT, 10)]);
    snap(&mut g, &[(BT, 10), (y, 20)]);
    snap(&mut g, &[(x, 0), (MONO, 5)]);
    snap(&mut g, &[(MONO, 5), (y, 10)]);
    assert_eq!(
        g.convert(x, 0, y),
        Ok(10),
        "MONOTONIC (3) sorts before BOOTTIME (6)"
    );
    snap(&mut g, &[(x, 0), (y, 1000)]);
    assert_eq!(g.convert(x, 0, y), Ok(1000), "a direct edge beats both");
}

#[test]
fn edges_list_successful_snapshots_in_ns() {
    let mut g = ClockGraph::new();
    let s = seq(1, 64);
    try_snap(&mut g, &[clk(BT, 5, 1, false), clk(s, 3, 1000, false)]).unwrap();
    try_snap(
        &mut g,
        &[SnapshotClock::ns(BT, 1), SnapshotClock::ns(BT, 2)],
    )
    .unwrap_err();
    g.add_snapshot(&[SnapshotClock::ns(BT, 9)], EdgeOrigin::Sync)
        .unwrap();
    let edges = g.edges();
    assert_eq!(edges.len(), 2);
    assert_eq!(edges[0].clocks, vec![(BT, 5), (s, 3000)]);
    assert_eq!(
        (edges[1].snapshot_id, edges[1].origin),
        (2, EdgeOrigin::Sync)
    );
}

mod props;

/// A clock converted to itself takes its unit once a snapshot made it
/// known: the memo of the last identity conversion must not outlive the
/// snapshot (and an unknown clock passes its raw value through).
#[test]
fn identity_follows_the_clock_becoming_known() {
    let mut g = ClockGraph::new();
    let us = global(64);
    let other = global(65);
    assert_eq!(g.convert(us, 7, us), Ok(7));
    assert_eq!(g.convert(us, 7, us), Ok(7));
    try_snap(&mut g, &[clk(us, 1, 1000, false), clk(other, 1, 1, false)]).unwrap();
    assert_eq!(g.convert(us, 7, us), Ok(7000));
    // Alternating clocks replace the memo each time.
    assert_eq!(g.convert(other, 7, other), Ok(7));
    assert_eq!(g.convert(us, 8, us), Ok(8000));
}

/// A source clock found unknown stays unknown only until a snapshot names
/// it: the memo of the last unknown source must not outlive the snapshot,
/// and each ask still counts as a miss.
#[test]
fn unknown_source_memo_ends_with_the_snapshot_that_names_it() {
    let mut g = ClockGraph::new();
    let private = global(64);
    snap(&mut g, &[(MONO, 10), (BT, 20)]);
    for _ in 0..3 {
        assert_eq!(
            g.convert(private, 5, BT),
            Err(ConvertError::UnknownSourceClock(private))
        );
    }
    assert_eq!(g.stats().clock_sync_cache_miss, 3);
    // Another unknown source replaces the memo; the first is found again.
    let other = global(65);
    assert_eq!(
        g.convert(other, 5, BT),
        Err(ConvertError::UnknownSourceClock(other))
    );
    snap(&mut g, &[(private, 100), (BT, 1000)]);
    assert_eq!(g.convert(private, 105, BT), Ok(1005));
    assert_eq!(g.convert(private, 105, MONO), Ok(995));
}
