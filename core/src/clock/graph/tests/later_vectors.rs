//! Vectors of Perfetto's ClockTrackerTest (clock_tracker_unittest.cc, the
//! 2026 version) beyond those in `tests.rs`: a harder chain with a
//! clock going backwards, a three-hop path, and the cache's equivalence on
//! randomised snapshot series. Each test is named after Perfetto's.

use super::*;

fn convert(g: &mut ClockGraph, src: ClockNode, v: i64, dst: ClockNode) -> i64 {
    g.convert(src, v as u64, dst)
        .unwrap_or_else(|e| panic!("{src} {v} -> {dst}: {e:?}"))
}

#[test]
fn chained_resolution_hard() {
    let mut g = trace_graph();
    // MONOTONIC_COARSE = MONOTONIC_RAW - 1; MONOTONIC = MONOTONIC_COARSE - 50.
    snap(&mut g, &[(RAW, 10), (MONOC, 9)]);
    snap(&mut g, &[(MONOC, 100), (MONO, 50)]);
    // BOOTTIME = MONOTONIC + 1000 until MONOTONIC 100, + 2000 after; REALTIME
    // goes backwards at the same time.
    snap(&mut g, &[(MONO, 1), (BT, 1001), (RT, 10001)]);
    snap(&mut g, &[(MONO, 101), (BT, 2101), (RT, 9101)]);

    // One hop.
    assert_eq!(convert(&mut g, RAW, 2, MONOC), 1);
    assert_eq!(convert(&mut g, MONOC, 1, RAW), 2);
    assert_eq!(convert(&mut g, RAW, 100_001, MONOC), 100_000);
    assert_eq!(convert(&mut g, MONOC, 100_000, RAW), 100_001);
    // Two hops.
    assert_eq!(convert(&mut g, RAW, 53, MONO), 53 - 1 - 50);
    assert_eq!(convert(&mut g, MONO, 2, RAW), 2 + 1 + 50);
    // Three hops, both ways.
    assert_eq!(convert(&mut g, RAW, 53, BT), 53 - 1 - 50 + 1000);
    assert_eq!(convert(&mut g, BT, 1002, RAW), 1002 - 1000 + 1 + 50);
    assert_eq!(convert(&mut g, RAW, 753, BT), 753 - 1 - 50 + 2000);
    assert_eq!(convert(&mut g, BT, 2702, RAW), 2702 - 2000 + 1 + 50);
    // To REALTIME only: it went backwards, so it is never a source.
    assert_eq!(convert(&mut g, RAW, 53, RT), 53 - 1 - 50 + 10000);
    assert_eq!(convert(&mut g, RAW, 753, RT), 753 - 1 - 50 + 9000);
    assert!(g.convert(RT, 10_000, RAW).is_err());
}

#[test]
fn three_hop_conversion() {
    let mut g = trace_graph();
    // REALTIME -> MONOTONIC_RAW -> MONOTONIC -> BOOTTIME.
    snap(&mut g, &[(RT, 1000), (RAW, 100)]);
    snap(&mut g, &[(RAW, 200), (MONO, 3000)]);
    snap(&mut g, &[(MONO, 4000), (BT, 50000)]);
    let want = 10 + (100 - 1000) + (3000 - 200) + (50000 - 4000);
    let hits = g.stats().clock_sync_cache_hit;
    assert_eq!(convert(&mut g, RT, 10, BT), want);
    assert_eq!(g.stats().clock_sync_cache_hit, hits, "the first is a miss");
    assert_eq!(convert(&mut g, RT, 10, BT), want);
    assert_eq!(g.stats().clock_sync_cache_hit, hits + 1);
    assert_eq!(convert(&mut g, RT, 20, BT), want + 10);
    assert_eq!(g.stats().clock_sync_cache_hit, hits + 2);
}

/// Perfetto draws from `std::minstd_rand`; any fixed sequence tests the
/// same property (this is that generator: x = x * 48271 mod 2^31 - 1).
struct MinStd(u64);

impl MinStd {
    fn next(&mut self) -> u64 {
        self.0 = self.0 * 48271 % 2_147_483_647;
        self.0
    }

    fn increment(&mut self) -> u64 {
        [1, 2, 10][(self.next() % 3) as usize]
    }
}

/// Every conversion gives the same value from the walk (cache emptied
/// first) as from the cache it then filled.
fn cached_equals_walked(g: &mut ClockGraph, rnd: &mut MinStd, pairs: &[(ClockNode, ClockNode)]) {
    for _ in 0..1000 {
        let v = rnd.next() % 10_000;
        for &(src, dst) in pairs {
            g.clear_cache();
            let walked = g.convert(src, v, dst);
            let hits = g.stats().clock_sync_cache_hit;
            let cached = g.convert(src, v, dst);
            assert_eq!(
                g.stats().clock_sync_cache_hit,
                hits + 1,
                "{src} {v} -> {dst} hit the cache"
            );
            assert_eq!(walked, cached, "{src} {v} -> {dst}");
            assert!(walked.is_ok(), "{src} {v} -> {dst}: {walked:?}");
        }
    }
}

#[test]
fn cache_doesnt_affect_results() {
    let mut g = trace_graph();
    let mut rnd = MinStd(1);
    let (mut mono, mut boot, mut raw) = (0, 0, 0);
    for _ in 0..1000 {
        mono += rnd.increment();
        boot += rnd.increment();
        snap(&mut g, &[(MONO, mono), (BT, boot)]);
        raw += rnd.increment();
        boot += rnd.increment();
        snap(&mut g, &[(RAW, raw), (BT, boot)]);
    }
    cached_equals_walked(
        &mut g,
        &mut rnd,
        &[(MONO, BT), (RAW, BT), (BT, MONO), (BT, RAW), (RAW, MONO)],
    );
}

#[test]
fn cache_doesnt_affect_results_two_step() {
    let mut g = trace_graph();
    let mut rnd = MinStd(1);
    let (mut raw, mut mono, mut boot) = (0, 0, 0);
    for _ in 0..1000 {
        raw += rnd.increment();
        mono += rnd.increment();
        snap(&mut g, &[(RAW, raw), (MONO, mono)]);
        mono += rnd.increment();
        boot += rnd.increment();
        snap(&mut g, &[(MONO, mono), (BT, boot)]);
    }
    cached_equals_walked(&mut g, &mut rnd, &[(RAW, BT)]);
}
