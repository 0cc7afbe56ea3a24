//! Conversion cost: a cache hit next to the slow path (BFS + binary search)
//! on the same graph, MONOTONIC -> BOOTTIME with 1000 snapshots.

use divan::{Bencher, black_box};
use tracesync_core::clock::{ClockGraph, ClockNode, EdgeOrigin, SnapshotClock};
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC};

const MONO: ClockNode = ClockNode::new(0, 0, 0, MONOTONIC);
const BT: ClockNode = ClockNode::new(0, 0, 0, BOOTTIME);
const STEP: u64 = 1_000_000;

fn main() {
    divan::main();
}

/// 1000 snapshots 1 ms apart; BOOTTIME drifts 10 ns per snapshot, so every
/// segment has its own translation.
fn graph() -> ClockGraph {
    let mut g = ClockGraph::new();
    for i in 0..1000u64 {
        let clocks = [
            SnapshotClock::ns(MONO, i * STEP),
            SnapshotClock::ns(BT, 5_000_000_000 + i * (STEP + 10)),
        ];
        g.add_snapshot(&clocks, EdgeOrigin::Snapshot).unwrap();
    }
    g
}

/// Values cycling inside the segment starting at snapshot 500.
fn value(i: &mut u64) -> u64 {
    *i = (*i + 1) % 1024;
    500 * STEP + *i * 97
}

#[divan::bench(sample_count = 200, sample_size = 10_000)]
fn cached(bencher: Bencher) {
    let mut g = graph();
    let mut i = 0;
    bencher.bench_local(|| g.convert(black_box(MONO), black_box(value(&mut i)), black_box(BT)));
    // Only the very first conversion may miss (in test mode it is the only one).
    assert!(
        g.stats().clock_sync_cache_miss <= 1,
        "the cached bench must hit the cache"
    );
}

#[divan::bench(sample_count = 200, sample_size = 10_000)]
fn uncached(bencher: Bencher) {
    let mut g = graph();
    let mut i = 0;
    bencher.bench_local(|| {
        g.clear_cache();
        g.convert(black_box(MONO), black_box(value(&mut i)), black_box(BT))
    });
}

/// The loop and value generation alone, to read the rows above net of it.
#[divan::bench(sample_count = 200, sample_size = 10_000)]
fn overhead(bencher: Bencher) {
    let mut i = 0;
    bencher.bench_local(|| black_box(value(&mut i)));
}
