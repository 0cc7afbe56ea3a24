//! Vectors of Perfetto's clock tracker unit tests
//! (`src/trace_processor/importers/common/clock_tracker_unittest.cc`, test
//! names as there), of its clock-sync docs (the seed's worked examples) and
//! of clock diff tests, each as one input trace: snapshots in the order the
//! test adds them, then one event per conversion, read back from the jsonl.

use tracesync_protocol::clock_ids::{MONOTONIC_COARSE, MONOTONIC_RAW};
use tracesync_protocol::perfetto::TracePacket;
use tracesync_tests::build::{SnapshotClockSpec as C, clock_snapshot_ext};
use tracesync_tests::cases::{Case, instant, seq, snap, snap_primary, track};

use super::common::*;

const MONOC: u32 = MONOTONIC_COARSE;
const RAW: u32 = MONOTONIC_RAW;

/// An event named `clock:value` at `value` on `clock`, sequence 1.
fn ev(clock: u32, value: u64) -> TracePacket {
    instant(1, 1, Some(clock), value, &format!("{clock}:{value}"))
}

fn ev_on(sq: u32, clock: u32, value: u64, name: &str) -> TracePacket {
    instant(sq, 1, Some(clock), value, name)
}

fn run(origin: &'static str, mut packets: Vec<TracePacket>) -> tracesync_tests::cases::Merged {
    packets.insert(0, track(1, 1));
    merged(Case::new(origin).file("t.pb", &packets))
}

fn expect(m: &tracesync_tests::cases::Merged, clock: u32, pairs: &[(u64, i64)]) {
    for &(v, want) in pairs {
        assert_eq!(
            m.slice(&format!("{clock}:{v}")).ts,
            want,
            "{}: {clock}:{v}",
            m.origin
        );
    }
}

#[test]
fn clock_domain_conversions() {
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
    let mut p = vec![
        snap(&[(RT, 10), (BT, 10010)]),
        snap(&[(RT, 20), (BT, 20220)]),
        snap(&[(RT, 30), (BT, 30030)]),
        snap(&[(MONO, 1000), (BT, 100000)]),
    ];
    p.extend(rt.iter().map(|&(v, _)| ev(RT, v)));
    p.extend(mono.iter().map(|&(v, _)| ev(MONO, v)));
    let m = run("ClockTrackerTest.ClockDomainConversions", p);
    expect(&m, RT, &rt);
    expect(&m, MONO, &mono);
}

#[test]
fn real_time_clock_moving_backwards() {
    // RT 11 converts while REALTIME is monotonic; after it goes back it is
    // only a target: the same value then has no path.
    let p = vec![
        snap(&[(BT, 10010), (RT, 10)]),
        ev(RT, 11),
        snap(&[(BT, 10020), (RT, 20)]),
        snap(&[(BT, 30040), (RT, 40)]),
        snap(&[(BT, 40030), (RT, 30)]),
        ev_on(1, RT, 11, "after"),
    ];
    let m = run("ClockTrackerTest.RealTimeClockMovingBackwards", p);
    expect(&m, RT, &[(11, 10011)]);
    assert!(!m.has_slice("after"));
    assert_eq!(m.stat("clock_sync_failure_no_path"), 1);
}

#[test]
fn chained_resolution_simple() {
    let p = vec![
        snap(&[(MONOC, 1), (MONO, 11)]),
        snap(&[(MONO, 100), (BT, 1100)]),
        snap(&[(MONO, 200), (BT, 2200)]),
        ev(MONO, 110),
        ev(MONOC, 100),
        ev(MONOC, 202),
    ];
    let m = run("ClockTrackerTest.ChainedResolutionSimple", p);
    expect(&m, MONO, &[(110, 1110)]);
    expect(&m, MONOC, &[(100, 1110), (202, 2212)]);
}

#[test]
fn non_strictly_monotonic() {
    let p = vec![
        snap(&[(BT, 101), (MONO, 51), (MONOC, 50)]),
        snap(&[(BT, 105), (MONO, 55), (MONOC, 50)]),
        snap(&[(BT, 105), (MONO, 55), (MONOC, 50)]),
        ev(MONOC, 40),
        ev(MONOC, 50),
        ev(MONOC, 55),
    ];
    let m = run("ClockTrackerTest.NonStrictlyMonotonic", p);
    expect(&m, MONOC, &[(40, 91), (50, 105), (55, 110)]);
}

#[test]
fn sequence_scoped_clocks() {
    let p = vec![
        clock_snapshot_ext(1, &[C::ns(MONO, 1000), C::ns(BT, 100000)], None),
        clock_snapshot_ext(
            1,
            &[
                C::ns(MONO, 10000),
                C::ns(64, 100000),
                C::unit(65, 100, 1000),
                C::incremental(66, 10, 1000),
            ],
            None,
        ),
        ev_on(1, 64, 150000, "a"),
        ev_on(1, 65, 150, "b"),
        ev_on(1, 66, 1, "c1"),
        ev_on(1, 66, 1, "c2"),
        ev_on(1, 66, 1, "c3"),
        ev_on(1, 66, 2, "c4"),
    ];
    let m = run("ClockTrackerTest.SequenceScopedClocks", p);
    // a 150000 -> MONO 60000 -> 159000; b 150 µs the same; c 11, 12, 13, 15 µs.
    for (name, want) in [
        ("a", 159000),
        ("b", 159000),
        ("c1", 110000),
        ("c2", 111000),
        ("c3", 112000),
        ("c4", 114000),
    ] {
        assert_eq!(m.slice(name).ts, want, "{name}");
    }
}

#[test]
fn cache_boundaries() {
    let pairs = [
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
    let mut p = vec![
        snap(&[(MONO, 100), (BT, 1000)]),
        snap(&[(MONO, 200), (BT, 2000)]),
        snap(&[(MONO, 300), (BT, 3000)]),
    ];
    p.extend(pairs.iter().map(|&(v, _)| ev(MONO, v)));
    let m = run("ClockTrackerTest.CacheBoundaries", p);
    expect(&m, MONO, &pairs);
}

#[test]
fn cache_invalidation_and_path_reoptimization() {
    let p = vec![
        snap(&[(MONO, 100), (RAW, 200)]),
        snap(&[(RAW, 300), (BT, 4000)]),
        ev(MONO, 50),
        snap(&[(MONO, 500), (BT, 6000)]),
        ev(MONO, 400),
    ];
    let m = run("ClockTrackerTest.CacheInvalidationAndPathReoptimization", p);
    expect(&m, MONO, &[(50, 3850), (400, 5900)]);
}

#[test]
fn multi_hop_cache_is_hit() {
    let p = vec![
        snap(&[(RAW, 100), (MONO, 200)]),
        snap(&[(MONO, 300), (BT, 4000)]),
        ev(RAW, 10),
        ev(RAW, 20),
    ];
    let m = run("ClockTrackerTest.MultiHopCacheIsHit", p);
    expect(&m, RAW, &[(10, 3810), (20, 3820)]);
}

#[test]
fn seed_nearest_snapshot() {
    let mut p: Vec<TracePacket> = [
        (1000, 2000),
        (1100, 2100),
        (1200, 2200),
        (1900, 2900),
        (2000, 3500),
        (2100, 3600),
    ]
    .iter()
    .map(|&(m, b)| snap(&[(MONO, m), (BT, b)]))
    .collect();
    p.push(ev(MONO, 1104));
    p.push(ev(MONO, 2050));
    let m = run("docs/concepts/clock-sync.md: nearest snapshot", p);
    expect(&m, MONO, &[(1104, 2104), (2050, 3550)]);
}

#[test]
fn seed_multi_hop() {
    let custom = tracesync_protocol::clock_ids::named_global_clock_id("com.example.custom");
    let p = vec![
        snap(&[(custom, 1000), (MONO, 1100)]),
        snap(&[(MONO, 1200), (BT, 5200)]),
        snap(&[(custom, 3000), (MONO, 3200)]),
        snap(&[(MONO, 4000), (BT, 9000)]),
        ev(custom, 3503),
    ];
    let m = run("docs/concepts/clock-sync.md: multi-hop path", p);
    expect(&m, custom, &[(3503, 7703)]);
}

#[test]
fn track_event_monotonic_trace_clock_slices() {
    // parser/track_event: primary_trace_clock MONOTONIC.
    let p = vec![
        snap_primary(&[(MONO, 1000), (BT, 11000)], Some(MONO)),
        ev(MONO, 1000),
        ev(BT, 12000),
    ];
    let m = run("test_track_event_monotonic_trace_clock_slices", p);
    expect(&m, MONO, &[(1000, 1000)]);
    expect(&m, BT, &[(12000, 2000)]);
}

#[test]
fn power_rails_custom_clock() {
    // parser/power/power_rails_custom_clock.textproto: global clock 128.
    let p = vec![
        snap(&[(BT, 101_000_002), (128, 2)]),
        ev(128, 3_000_000),
        ev(128, 5_000_000),
    ];
    let m = run("test_power_rails_custom_clock", p);
    expect(
        &m,
        128,
        &[(3_000_000, 104_000_000), (5_000_000, 106_000_000)],
    );
}

fn invalid(origin: &'static str, bad: Vec<TracePacket>) {
    let mut p = vec![snap(&[(BT, 1000), (MONO, 100)])];
    p.extend(bad);
    p.push(ev(MONO, 150));
    let m = run(origin, p);
    assert_eq!(m.stat("invalid_clock_snapshots"), 1, "{origin}");
    expect(&m, MONO, &[(150, 1050)]);
}

#[test]
fn duplicate_clock_domain() {
    invalid(
        "ClockTracker AddSnapshot: duplicate clock domain",
        vec![snap(&[(MONO, 1), (MONO, 2)])],
    );
}

#[test]
fn global_clock_cannot_be_incremental() {
    invalid(
        "ClockTracker AddSnapshot: global clock cannot use incremental encoding",
        vec![clock_snapshot_ext(
            1,
            &[C::incremental(128, 5, 1), C::ns(BT, 7)],
            None,
        )],
    );
}

#[test]
fn clock_with_different_properties() {
    invalid(
        "ClockTracker AddSnapshot: previously registered with different properties",
        vec![
            clock_snapshot_ext(1, &[C::unit(130, 1, 1), C::ns(BT, 2000)], None),
            clock_snapshot_ext(1, &[C::unit(130, 2, 1000), C::ns(BT, 3000)], None),
        ],
    );
}

#[test]
fn trace_clock_not_monotonic() {
    let p = vec![
        snap(&[(BT, 1000), (MONO, 100)]),
        seq(snap(&[(BT, 2000), (MONO, 200)]), 2),
        snap(&[(BT, 500), (MONO, 300)]),
        ev(MONO, 150),
    ];
    let m = run("ClockTracker AddSnapshot: trace clock is not monotonic", p);
    assert_eq!(m.stat("invalid_clock_snapshots"), 1);
    expect(&m, MONO, &[(150, 1050)]);
}
