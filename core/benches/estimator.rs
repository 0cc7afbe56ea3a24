//! Cost of one probe sample in the live estimator
//! (`tracesync_core::sync::Estimator::add_sample`) once its window is full,
//! where the legs' floor is sharp (exponential queueing: the single
//! fastest legs set the slope) and where it is soft (the sum of four
//! exponentials, as scheduling on two hosts adds: the slope search over
//! the fastest few legs, `corridor/steady.rs`). The daemon pays this once
//! per probe sample per relay, 4-10 per second each, not per packet.

use divan::{Bencher, black_box};
use tracesync_core::sync::Estimator;

fn main() {
    divan::main();
}

const START_NS: u64 = 1_000_000_000_000;
const OFFSET_NS: u64 = 5_000_000_000;
/// The prober's steady spacing in its first minute (ns).
const SPACING_NS: u64 = 100_000_000;
/// Samples before the measured ones: past the 120 s window.
const WARM: u64 = 1_500;
/// Samples measured per iteration.
const MEASURED: u64 = 100;

/// A small deterministic generator (splitmix64) for the legs' queueing.
struct Draws(u64);

impl Draws {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn exponential(&mut self, mean_ns: f64) -> u64 {
        (-mean_ns * (1.0 - self.uniform()).ln()) as u64
    }
}

/// One leg's delay (ns): 100 µs plus exponential queueing of 25 µs
/// (sharp floor) or four exponentials of 8 µs (soft floor).
fn leg(draws: &mut Draws, soft: bool) -> u64 {
    if soft {
        100_000 + (0..4).map(|_| draws.exponential(8_000.0)).sum::<u64>()
    } else {
        100_000 + draws.exponential(25_000.0)
    }
}

/// Exchanges `[t1, t2, t3, t4]` of a relay `OFFSET_NS` ahead, no drift.
fn exchanges(soft: bool) -> Vec<[u64; 4]> {
    let mut draws = Draws(if soft { 2 } else { 1 });
    (0..WARM + MEASURED)
        .map(|i| {
            let t1 = START_NS + i * SPACING_NS;
            let t2_host = t1 + leg(&mut draws, soft);
            let t3_host = t2_host + 3_000;
            let t4 = t3_host + leg(&mut draws, soft);
            [t1, t2_host + OFFSET_NS, t3_host + OFFSET_NS, t4]
        })
        .collect()
}

fn per_sample(bencher: Bencher, soft: bool) {
    let all = exchanges(soft);
    let (warm, measured) = all.split_at(WARM as usize);
    bencher
        .with_inputs(|| {
            let mut estimator = Estimator::default();
            for &[t1, t2, t3, t4] in warm {
                estimator.add_sample(t1, t2, t3, t4, 0);
            }
            estimator
        })
        .input_counter(|_| divan::counter::ItemsCount::new(MEASURED))
        .bench_local_values(|mut estimator| {
            for &[t1, t2, t3, t4] in measured {
                black_box(estimator.add_sample(t1, t2, t3, t4, 0));
            }
        });
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn sharp_floor(bencher: Bencher) {
    per_sample(bencher, false);
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn soft_floor(bencher: Bencher) {
    per_sample(bencher, true);
}
