//! Cost of the write-time check (`tracesync_core::sync::covering`) per packet,
//! next to the arrival mapping it checks (`to_host` + `bound_at`) on the
//! same estimates: 10 Hz samples, packets spread over the last 500 ms.

use divan::{Bencher, black_box};
use tracesync_core::sync::covering::{CoveringEstimates, Mapping, refine};
use tracesync_core::sync::{CheckedSample, SyncEstimate};

const SAMPLE_EVERY_NS: u64 = 100_000_000;
const START_NS: u64 = 1_000_000_000_000;

fn main() {
    divan::main();
}

fn estimate(k: u64) -> SyncEstimate {
    let at = START_NS + k * SAMPLE_EVERY_NS;
    SyncEstimate {
        ref_relay_ns: at,
        offset_ns: 5_000_000_000 + (k % 7) as i64,
        freq_ppm: 12.5,
        error_bound_ns: 4_000,
        freq_bound_ppm: 0.3,
        wander_ppm_per_sqrt_s: 0.01,
        covered_through_relay_ns: at,
        checked: Some(CheckedSample {
            relay_ns: at,
            offset_ns: 5_000_000_100,
            half_width_ns: 60_000,
        }),
        ..SyncEstimate::default()
    }
}

/// The ring after 64 samples, and the estimate packets arrive under.
fn setup() -> (CoveringEstimates, SyncEstimate) {
    let mut ring = CoveringEstimates::new(10_500_000_000, 1024);
    for k in 0..64 {
        ring.push(&estimate(k));
    }
    (ring, estimate(58))
}

/// Relay times cycling over the 500 ms before the newest sample.
fn relay_ns(i: &mut u64) -> u64 {
    *i = (*i + 1) % 5_000;
    START_NS + 58 * SAMPLE_EVERY_NS + *i * 100_000
}

#[divan::bench(sample_count = 200, sample_size = 10_000)]
fn arrival_mapping(bencher: Bencher) {
    let (_, arrival) = setup();
    let mut i = 0;
    bencher.bench_local(|| {
        let c = black_box(relay_ns(&mut i));
        (arrival.to_host(c), arrival.bound_at(c))
    });
}

#[divan::bench(sample_count = 200, sample_size = 10_000)]
fn write_time_check(bencher: Bencher) {
    let (mut ring, arrival) = setup();
    let mut i = 0;
    bencher.bench_local(|| {
        let c = black_box(relay_ns(&mut i));
        let provisional = Mapping {
            host_ns: arrival.to_host(c),
            bound_ns: arrival.bound_at(c),
        };
        refine(provisional, c, ring.from(c).map(|x| x.estimate))
    });
}
