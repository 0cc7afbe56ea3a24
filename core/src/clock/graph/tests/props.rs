//! Property tests: round trips inside segments, and a hot cache against a
//! cold one on arbitrary and on monotonic inputs.

use super::*;
use proptest::prelude::*;

/// Strictly increasing values for `clocks` clocks over `n` snapshots:
/// (start, gaps) per clock.
fn monotonic_sets(clocks: usize) -> impl Strategy<Value = Vec<Vec<u64>>> {
    (1usize..12).prop_flat_map(move |n| {
        prop::collection::vec(
            (0u64..1 << 40, prop::collection::vec(1u64..5000, n - 1)),
            clocks,
        )
        .prop_map(|per_clock| {
            per_clock
                .into_iter()
                .map(|(start, gaps)| {
                    let mut v = vec![start];
                    for gap in gaps {
                        v.push(v.last().unwrap() + gap);
                    }
                    v
                })
                .collect()
        })
    })
}

proptest! {
    #[test]
    fn round_trip_inside_segments(
        values in (2usize..=3).prop_flat_map(monotonic_sets),
        pick in any::<prop::sample::Index>(),
        frac in 0.0f64..1.0,
        below in 1u64..1000,
    ) {
        let nodes = [global(128), global(129), global(130)];
        let nodes = &nodes[..values.len()];
        let n = values[0].len();
        let mut g = ClockGraph::new();
        for i in 0..n {
            let clocks: Vec<_> = nodes.iter().zip(&values)
                .map(|(&node, v)| SnapshotClock::ns(node, v[i])).collect();
            g.add_snapshot(&clocks, EdgeOrigin::Snapshot).unwrap();
        }
        // Offsets stay inside the segment where every clock still maps
        // one-to-one; the last segment is unbounded.
        let i = pick.index(n + 1);
        let a = &values[0];
        let inputs: Vec<u64> = if i == n {
            a[0].checked_sub(below).into_iter().collect()
        } else {
            let span = values.iter().map(|v| v.get(i + 1).map_or(1 << 20, |next| next - v[i])).min().unwrap();
            vec![a[i] + (frac * span as f64) as u64 % span]
        };
        for v in inputs {
            for &other in &nodes[1..] {
                let there = g.convert(nodes[0], v, other).unwrap();
                let back = g.convert(other, u64::try_from(there).unwrap(), nodes[0]).unwrap();
                prop_assert_eq!(back, v as i64);
            }
        }
    }

    #[test]
    fn arbitrary_inputs_never_panic_and_cache_is_never_stale(ops in prop::collection::vec(op(), 1..40)) {
        // `cold` replays the same calls with a cold cache each time: any
        // difference means a stale or mis-ranged cache entry.
        let (mut hot, mut cold) = (ClockGraph::new(), ClockGraph::new());
        for op in ops {
            match op {
                Op::Snapshot(clocks) => {
                    let clocks: Vec<_> = clocks.into_iter()
                        .map(|(n, value, unit, incr)| clk(pool(n), value, unit, incr)).collect();
                    prop_assert_eq!(
                        hot.add_snapshot(&clocks, EdgeOrigin::Snapshot),
                        cold.add_snapshot(&clocks, EdgeOrigin::Snapshot)
                    );
                }
                Op::Convert(s, v, d, restricted) => {
                    let (s, d) = (pool(s), pool(d));
                    cold.clear_cache();
                    let has = if restricted { hot.has_path_within_machine(s, d) } else { hot.has_path(s, d) };
                    let (h, c) = if restricted {
                        (hot.convert_within_machine(s, v, d), cold.convert_within_machine(s, v, d))
                    } else {
                        (hot.convert(s, v, d), cold.convert(s, v, d))
                    };
                    prop_assert_eq!(h, c);
                    let pathless = matches!(h, Err(ConvertError::NoPath { .. }
                        | ConvertError::UnknownSourceClock(_) | ConvertError::UnknownTargetClock(_)));
                    prop_assert_eq!(has, !pathless);
                }
                Op::Reset(n, v) => {
                    hot.reset_incremental(pool(n), v);
                    cold.reset_incremental(pool(n), v);
                }
                Op::SetTrace(n) => {
                    hot.set_trace_time_clock(pool(n));
                    cold.set_trace_time_clock(pool(n));
                }
            }
        }
        prop_assert_eq!(hot.stats().invalid_clock_snapshots, cold.stats().invalid_clock_snapshots);
    }
}

/// A step of [`cached_equals_cold_on_monotonic_graphs`]: a snapshot of
/// the clocks in `mask` (each advanced by its gap, 0 allowed), or a query.
#[derive(Clone, Debug)]
enum MonoOp {
    Snapshot(u8, [u64; 4]),
    Query(usize, u64, usize),
}

fn mono_op() -> impl Strategy<Value = MonoOp> {
    prop_oneof![
        // Mostly a chain of pairs, so that most paths are multi-hop.
        1 => (prop::sample::select(vec![3u8, 6, 12, 3, 6, 12, 9, 7, 15]),
              [0u64..300, 0u64..300, 0u64..300, 0u64..300])
            .prop_map(|(m, g)| MonoOp::Snapshot(m, g)),
        // Values are taken back from the clock's latest value.
        3 => (0usize..4, 0u64..1500, 0usize..4).prop_map(|(s, v, d)| MonoOp::Query(s, v, d)),
    ]
}

proptest! {
    // More cases than the default: a mis-ranged multi-hop entry needs a
    // later query in a narrow band to show.
    #![proptest_config(ProptestConfig::with_cases(1500))]
    #[test]
    fn cached_equals_cold_on_monotonic_graphs(ops in prop::collection::vec(mono_op(), 1..80)) {
        let nodes = [global(128), global(129), global(130), MONO];
        let (mut hot, mut cold) = (ClockGraph::new(), ClockGraph::new());
        let mut now = [1500u64, 0, 1000, 500];
        for op in ops {
            match op {
                MonoOp::Snapshot(mask, gaps) => {
                    let mut clocks = Vec::new();
                    for i in (0..4).filter(|i| mask & (1 << i) != 0) {
                        now[i] += gaps[i];
                        clocks.push(SnapshotClock::ns(nodes[i], now[i]));
                    }
                    hot.add_snapshot(&clocks, EdgeOrigin::Snapshot).unwrap();
                    cold.add_snapshot(&clocks, EdgeOrigin::Snapshot).unwrap();
                }
                MonoOp::Query(s, back, d) => {
                    let v = now[s].saturating_sub(back);
                    cold.clear_cache();
                    // Repeat and probe neighbours: segment edges are
                    // where a mis-ranged entry shows.
                    for v in [v, v, v.saturating_sub(1), v + 1] {
                        let h = hot.convert(nodes[s], v, nodes[d]);
                        prop_assert_eq!(h, cold.convert(nodes[s], v, nodes[d]));
                    }
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Snapshot(Vec<(usize, u64, u64, bool)>),
    Convert(usize, u64, usize, bool),
    Reset(usize, u64),
    SetTrace(usize),
}

/// Builtin, sequence and global clocks on two machines.
fn pool(i: usize) -> ClockNode {
    const POOL: [ClockNode; 8] = [
        ClockNode::new(0, 0, 0, BOOTTIME),
        ClockNode::new(0, 0, 0, MONOTONIC),
        ClockNode::new(0, 0, 0, REALTIME),
        ClockNode::new(0, 0, 1, 64),
        ClockNode::new(0, 0, 0, 128),
        ClockNode::new(1, 0, 0, BOOTTIME),
        ClockNode::new(1, 0, 0, MONOTONIC),
        ClockNode::new(1, 2, 3, 64),
    ];
    POOL[i % POOL.len()]
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![4 => 0u64..2000, 1 => any::<u64>()]
}

fn op() -> impl Strategy<Value = Op> {
    let unit = prop_oneof![6 => Just(1u64), 2 => Just(1000), 1 => Just(0), 1 => any::<u64>()];
    let clock = (0usize..8, value(), unit, prop::bool::weighted(0.2));
    prop_oneof![
        4 => prop::collection::vec(clock, 0..4).prop_map(Op::Snapshot),
        6 => (0usize..8, value(), 0usize..8, any::<bool>())
            .prop_map(|(s, v, d, r)| Op::Convert(s, v, d, r)),
        1 => (0usize..8, value()).prop_map(|(n, v)| Op::Reset(n, v)),
        1 => (0usize..8).prop_map(Op::SetTrace),
    ]
}
