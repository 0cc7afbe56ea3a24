//! A relay that reconnects gets a fresh estimator (a new session): its
//! first estimates come from a burst of a few samples over ~100 ms, and a
//! window held in its ring from tens of seconds before the reconnect is
//! mapped with one of them. The hard bound must hold there too, at every
//! estimate, however far back the window lies: |mapped - truth| <=
//! `bound_at` at each of the window's times.

use super::*;

use super::test_model::{RelayModel, Rng, exchange_with};

const START: u64 = 1_000_000_000_000;

/// |estimated host time - true host time| at host time `host_ns`.
fn mapping_error(estimate: &SyncEstimate, model: &RelayModel, host_ns: u64) -> i64 {
    (estimate.to_host(model.relay(host_ns)) - host_ns as i64).abs()
}

/// The prober's schedule after a (re)connect: a burst of 8 probes 15 ms
/// apart, then trains of 2 every 100 ms (the warm-up spacing).
fn reconnect_schedule(start: u64, seconds: u64) -> Vec<u64> {
    let mut times: Vec<u64> = (0..8).map(|i| start + i * 15_000_000).collect();
    let mut t = start + 8 * 15_000_000;
    while t < start + seconds * 1_000_000_000 {
        times.push(t);
        times.push(t + 300_000);
        t += 100_000_000;
    }
    times
}

/// Feeds a fresh estimator the reconnect schedule with legs drawn by
/// `leg`; after every sample, checks the estimate against the truth at
/// every 100 ms of the window [window_from, window_to] (host times before
/// the reconnect) and at the sample itself. Returns the worst error and
/// the smallest margin (bound - error) seen in the window, and the number
/// of checks.
fn check_young(
    model: &RelayModel,
    seed: u64,
    window: (u64, u64),
    reconnect: u64,
    leg: impl Fn(&mut Rng) -> u64 + Copy,
) -> (u64, i128, u64) {
    let mut rng = Rng(seed);
    let mut estimator = Estimator::default();
    let (mut worst, mut margin, mut checks) = (0u64, i128::MAX, 0u64);
    for t in reconnect_schedule(reconnect, 20) {
        let [t1, t2, t3, t4] = exchange_with(model, &mut rng, t, leg);
        let Some(e) = estimator.add_sample(t1, t2, t3, t4, 0) else {
            continue;
        };
        let mut host = window.0;
        let mut hosts = vec![t4];
        while host <= window.1 {
            hosts.push(host);
            host += 100_000_000;
        }
        for host in hosts {
            let relay = model.relay(host);
            let error = mapping_error(&e, model, host) as u64;
            let bound = e.bound_at(relay);
            assert!(
                error <= bound,
                "seed {seed}: |error| {error} ns over the bound {bound} ns at host {host} \
                 ({} s before the reconnect), estimate {e:?}",
                (reconnect as i128 - host as i128) / 1_000_000_000
            );
            if host != t4 {
                worst = worst.max(error);
                margin = margin.min(bound as i128 - error as i128);
            }
            checks += 1;
        }
    }
    (worst, margin, checks)
}

fn models() -> [RelayModel; 3] {
    [
        // A time namespace: seconds apart, same rate.
        RelayModel {
            offset_ns: 20_000_000_000,
            drift_ppm: 0.0,
            origin_ns: START,
        },
        RelayModel {
            offset_ns: 2_500_000_000,
            drift_ppm: 50.0,
            origin_ns: START,
        },
        RelayModel {
            offset_ns: -4_000_000_000,
            drift_ppm: -120.0,
            origin_ns: START,
        },
    ]
}

#[test]
fn a_young_estimate_bounds_a_window_held_from_before_the_reconnect() {
    // The window [T - 2 s, T + 1 s]; the relay reconnects 30 s after T
    // (an outage, or a kill -9 and a restart).
    let t = START + 100_000_000_000;
    let reconnect = t + 30_000_000_000;
    let window = (t - 2_000_000_000, t + 1_000_000_000);
    let mut worst = 0;
    let mut checks = 0;
    for (m, model) in models().iter().enumerate() {
        for seed in 1..=12u64 {
            // Loopback under load: a few µs of base, one-sided queueing
            // of tens of µs, now and then a scheduling stall of ms.
            let seed = seed * 7919 + m as u64;
            let (w, margin, n) = check_young(model, seed, window, reconnect, |rng| {
                let stall = if rng.unit() < 0.05 {
                    rng.exponential(3_000_000.0)
                } else {
                    0
                };
                5_000 + rng.exponential(40_000.0) + stall
            });
            assert!(margin >= 0, "seed {seed}");
            worst = worst.max(w);
            checks += n;
        }
    }
    eprintln!("young estimates: {checks} checks, worst window error {worst} ns, all inside");
}

#[test]
fn a_young_estimate_bounds_the_window_on_an_asymmetric_jittery_link() {
    // Wi-Fi-like: 1 ms of base per leg, queueing of a ms, bursts of 20 ms.
    let t = START + 100_000_000_000;
    let reconnect = t + 180_000_000_000;
    let window = (t - 2_000_000_000, t + 1_000_000_000);
    for (m, model) in models().iter().enumerate() {
        for seed in 1..=6u64 {
            let seed = seed * 104_729 + m as u64;
            check_young(model, seed, window, reconnect, |rng| {
                let burst = if rng.unit() < 0.1 {
                    rng.exponential(20_000_000.0)
                } else {
                    0
                };
                1_000_000 + rng.exponential(1_000_000.0) + burst
            });
        }
    }
}
