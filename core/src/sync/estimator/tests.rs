//! Estimator against synthetic exchanges with a known relay clock. The
//! statistical scenarios live in the simulator (`sync::sim`, tests/sync_sim.rs).

use proptest::prelude::*;

use super::*;

use super::test_model::{RelayModel, Rng, exchange_with};

/// One exchange starting at host time `t1` with base one-way delay `base`
/// and exponential queueing of mean `queue` on each leg.
fn exchange(model: &RelayModel, rng: &mut Rng, t1: u64, base: u64, queue: f64) -> [u64; 4] {
    exchange_with(model, rng, t1, |rng| base + rng.exponential(queue))
}

const START: u64 = 1_000_000_000_000;

/// Feeds `count` exchanges `interval` apart; returns the last estimate.
fn run(
    estimator: &mut Estimator,
    model: &RelayModel,
    rng: &mut Rng,
    start: u64,
    count: u64,
    interval: u64,
) -> SyncEstimate {
    let mut last = None;
    for i in 0..count {
        let [t1, t2, t3, t4] = exchange(model, rng, start + i * interval, 20_000, 25_000.0);
        last = estimator.add_sample(t1, t2, t3, t4, 0).or(last);
    }
    last.expect("valid samples give an estimate")
}

/// |estimated host time - true host time| at host time `host_ns`.
fn mapping_error(estimate: &SyncEstimate, model: &RelayModel, host_ns: u64) -> i64 {
    (estimate.to_host(model.relay(host_ns)) - host_ns as i64).abs()
}

#[test]
fn constant_offset_with_one_sided_noise() {
    let model = RelayModel {
        offset_ns: 5_000_000_000,
        drift_ppm: 0.0,
        origin_ns: START,
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut estimator = Estimator::default();
    let estimate = run(&mut estimator, &model, &mut rng, START, 64, 250_000_000);
    let error = (estimate.offset_ns - model.offset_ns).abs();
    assert!(error <= 5_000, "offset error {error} ns: {estimate:?}");
    assert!(estimate.error_bound_ns as i64 >= error, "{estimate:?}");
    assert!(estimate.freq_ppm.abs() < 2.0, "{estimate:?}");
    assert!(estimate.rtt_ns >= 40_000, "{estimate:?}");
    // The gate keeps the lowest-delay tenth (at least 3).
    assert!(
        estimate.samples >= 3 && estimate.samples <= 16,
        "{estimate:?}"
    );
}

#[test]
fn fifty_ppm_drift_is_fitted_within_one_ppm_after_ten_seconds() {
    let model = RelayModel {
        offset_ns: -3_000_000_000,
        drift_ppm: 50.0,
        origin_ns: START,
    };
    let mut rng = Rng(7);
    let mut estimator = Estimator::default();
    let estimate = run(&mut estimator, &model, &mut rng, START, 41, 250_000_000);
    assert!((estimate.freq_ppm - 50.0).abs() < 1.0, "{estimate:?}");
    // The mapping holds at the last sample and 1 s past it.
    let last_host = START + 40 * 250_000_000;
    for host in [last_host, last_host + 1_000_000_000] {
        let error = mapping_error(&estimate, &model, host);
        assert!(error <= 10_000, "error {error} ns at {host}: {estimate:?}");
    }
    assert!(estimate.error_bound_ns as i64 >= mapping_error(&estimate, &model, last_host));
}

#[test]
fn a_burst_alone_gives_an_honest_bound() {
    let model = RelayModel {
        offset_ns: 1_000_000,
        drift_ppm: 50.0,
        origin_ns: START,
    };
    let mut rng = Rng(11);
    let mut estimator = Estimator::default();
    // A burst: 8 samples 20 ms apart. The frequency is barely known yet.
    let estimate = run(&mut estimator, &model, &mut rng, START, 8, 20_000_000);
    assert!(
        (estimate.offset_ns - model.offset_ns).abs() <= 20_000,
        "{estimate:?}"
    );
    assert!(estimate.freq_bound_ppm >= 50.0, "{estimate:?}");
    // The hard bound holds at the burst and as the mapping ages.
    let last_host = START + 7 * 20_000_000;
    for later in [0, 250_000_000, 1_000_000_000, 10_000_000_000u64] {
        let host = last_host + later;
        let error = mapping_error(&estimate, &model, host) as u64;
        assert!(
            error <= estimate.bound_at(model.relay(host)),
            "error {error} at +{later}: {estimate:?}"
        );
    }
}

#[test]
fn suspend_offset_jump_starts_a_new_epoch() {
    let before = RelayModel {
        offset_ns: 2_000_000_000,
        drift_ppm: 0.0,
        origin_ns: START,
    };
    let mut rng = Rng(3);
    let mut estimator = Estimator::default();
    for i in 0..20 {
        let [t1, t2, t3, t4] =
            exchange(&before, &mut rng, START + i * 250_000_000, 20_000, 25_000.0);
        estimator.add_sample(t1, t2, t3, t4, 1_000_000_000);
    }
    assert_eq!(estimator.epoch(), 0);
    // The relay slept 30 s: its BOOTTIME jumped ahead of the fit.
    let after = RelayModel {
        offset_ns: 32_000_000_000,
        ..before
    };
    let t = START + 20 * 250_000_000;
    let [t1, t2, t3, t4] = exchange(&after, &mut rng, t, 20_000, 25_000.0);
    let estimate = estimator
        .add_sample(t1, t2, t3, t4, 31_000_000_000)
        .expect("valid sample");
    assert_eq!(estimate.epoch, 1);
    assert_eq!(estimate.samples, 1, "the old epoch's samples are gone");
    assert!(
        (estimate.offset_ns - after.offset_ns).abs() <= 200_000,
        "{estimate:?}"
    );
    // A jump below 1 ms is read noise, not a suspend.
    let [t1, t2, t3, t4] = exchange(&after, &mut rng, t + 250_000_000, 20_000, 25_000.0);
    let estimate = estimator
        .add_sample(t1, t2, t3, t4, 31_000_500_000)
        .expect("valid sample");
    assert_eq!(estimate.epoch, 1);
    assert_eq!(estimate.samples, 2, "the gate keeps at least 3 samples");
    // Events of the first epoch still map with the first epoch's estimate.
    let first = estimator.estimate_for(1_000_000_000).expect("epoch 0 kept");
    assert_eq!(first.epoch, 0);
    assert_eq!(
        estimator.estimate_for(31_000_000_000).map(|e| e.epoch),
        Some(1)
    );
    assert_eq!(estimator.estimate_for(7), None);
}

#[test]
fn an_unannounced_step_opens_a_counted_epoch() {
    let before = RelayModel {
        offset_ns: 2_000_000_000,
        drift_ppm: 10.0,
        origin_ns: START,
    };
    let mut rng = Rng(13);
    let mut estimator = Estimator::default();
    let mut t = START;
    for _ in 0..40 {
        let [t1, t2, t3, t4] = exchange(&before, &mut rng, t, 20_000, 25_000.0);
        estimator.add_sample(t1, t2, t3, t4, 0);
        t += 250_000_000;
    }
    // The relay clock jumps 5 ms; its BOOTTIME-MONOTONIC does not move.
    let after = RelayModel {
        offset_ns: 2_005_000_000,
        ..before
    };
    let [t1, t2, t3, t4] = exchange(&after, &mut rng, t, 20_000, 25_000.0);
    let held = estimator.add_sample(t1, t2, t3, t4, 0).expect("estimate");
    assert_eq!(
        (held.epoch, estimator.steps()),
        (0, 0),
        "one sample is not a step"
    );
    // Until the step is confirmed, mappings from the last fitted sample on
    // carry a bound that holds the new offset; before it, the old bound.
    assert!(held.suspect_extra_ns > 0, "{held:?}");
    for host_ns in [t - 200_000_000, t, t + 100_000_000] {
        let relay_ns = after.relay(host_ns);
        let error = mapping_error(&held, &after, host_ns).unsigned_abs();
        assert!(error <= held.bound_at(relay_ns), "{error} ns: {held:?}");
    }
    assert!(held.bound_at(held.ref_relay_ns - 1) < held.suspect_extra_ns);
    let [t1, t2, t3, t4] = exchange(&after, &mut rng, t + 250_000_000, 20_000, 25_000.0);
    let estimate = estimator.add_sample(t1, t2, t3, t4, 0).expect("estimate");
    assert_eq!((estimate.epoch, estimator.steps()), (1, 1), "{estimate:?}");
    assert!(
        (estimate.offset_ns - after.offset_ns).abs() <= 200_000,
        "{estimate:?}"
    );
}

#[test]
fn a_single_contradicting_sample_is_dropped() {
    let model = RelayModel {
        offset_ns: 0,
        drift_ppm: 0.0,
        origin_ns: START,
    };
    let mut rng = Rng(17);
    let mut estimator = Estimator::default();
    let mut t = START;
    for i in 0..41 {
        let [t1, mut t2, mut t3, t4] = exchange(&model, &mut rng, t, 20_000, 5_000.0);
        if i == 30 {
            // A garbled relay read: 3 ms off, normal delay.
            t2 += 3_000_000;
            t3 += 3_000_000;
        }
        estimator.add_sample(t1, t2, t3, t4, 0);
        t += 250_000_000;
    }
    assert_eq!((estimator.outliers(), estimator.steps()), (1, 0));
    let estimate = estimator.estimate().expect("estimate");
    assert!(estimate.offset_ns.abs() <= 5_000);
    // Rejected: the bound tightens again.
    assert_eq!(estimate.suspect_extra_ns, 0, "{estimate:?}");
}

#[test]
fn bound_grows_with_distance_from_the_reference() {
    let estimate = SyncEstimate {
        ref_relay_ns: 100_000_000_000,
        error_bound_ns: 1_000,
        freq_bound_ppm: 2.0,
        wander_ppm_per_sqrt_s: 0.0,
        ..SyncEstimate::default()
    };
    assert_eq!(estimate.bound_at(100_000_000_000), 1_001);
    // 2 ppm of 10 s either way is 20 µs.
    assert_eq!(estimate.bound_at(110_000_000_000), 21_001);
    assert_eq!(estimate.bound_at(90_000_000_000), 21_001);
    let wander = SyncEstimate {
        wander_ppm_per_sqrt_s: 0.5,
        ..estimate
    };
    // 2 ppm of 100 s (200 µs) plus (2/3) * 0.5e-6 * 100^1.5 s (333 µs).
    let far = wander.bound_at(200_000_000_000);
    assert!((534_000..=534_400).contains(&far), "{far}");
    let nan = SyncEstimate {
        freq_bound_ppm: f64::NAN,
        ..estimate
    };
    assert_eq!(nan.bound_at(0), u64::MAX);
}

#[test]
fn huge_delay_outliers_are_left_out() {
    let model = RelayModel {
        offset_ns: 42_000,
        drift_ppm: 0.0,
        origin_ns: START,
    };
    let mut rng = Rng(5);
    let mut estimator = Estimator::default();
    let mut last = None;
    for i in 0..60u64 {
        let t1 = START + i * 250_000_000;
        let sample = if i % 5 == 4 {
            // 50 ms stuck on the way there only: offset off by +25 ms.
            let t2 = model.relay(t1 + 50_000_000);
            [t1, t2, t2 + 3_000, t1 + 50_000_000 + 3_000 + 20_000]
        } else {
            exchange(&model, &mut rng, t1, 20_000, 10_000.0)
        };
        let [t1, t2, t3, t4] = sample;
        last = estimator.add_sample(t1, t2, t3, t4, 0).or(last);
    }
    let estimate = last.expect("estimate");
    assert!(
        (estimate.offset_ns - model.offset_ns).abs() <= 5_000,
        "{estimate:?}"
    );
    assert!(estimate.freq_ppm.abs() < 5.0, "{estimate:?}");
}

#[test]
fn reversed_or_absurd_timestamps_are_rejected() {
    let mut estimator = Estimator::default();
    // t4 before t1.
    assert_eq!(estimator.add_sample(1_000, 5_000, 5_100, 900, 0), None);
    // t3 before t2.
    assert_eq!(estimator.add_sample(1_000, 5_100, 5_000, 2_000, 0), None);
    // Relay held it longer than the whole round trip.
    assert_eq!(estimator.add_sample(1_000, 0, 1_000_000, 2_000, 0), None);
    // Round trip beyond the sanity limit.
    assert_eq!(estimator.add_sample(0, 5, 5, u64::MAX, 0), None);
    assert_eq!(estimator.rejected(), 4);
    assert_eq!(estimator.estimate(), None);
    // A sane sample still works afterwards.
    let estimate = estimator
        .add_sample(1_000, 10_500, 10_600, 2_100, 0)
        .expect("valid");
    assert_eq!(estimate.offset_ns, 9_000);
    assert_eq!(estimate.rtt_ns, 1_000);
    assert_eq!(estimate.error_bound_ns, 500 + 1_000);
}

#[test]
fn window_keeps_at_most_the_configured_samples_and_age() {
    let config = EstimatorConfig {
        window_samples: 16,
        window_ns: 2_000_000_000,
        gate_quantile: 1.0,
        ..EstimatorConfig::default()
    };
    let mut estimator = Estimator::new(config);
    let mut last = None;
    for i in 0..100u64 {
        let t1 = START + i * 100_000_000;
        last = estimator.add_sample(t1, t1 + 10, t1 + 20, t1 + 1_000, 0);
    }
    assert_eq!(last.expect("estimate").samples, 16);
    let mut estimator = Estimator::new(config);
    for i in 0..10u64 {
        let t1 = START + i * 1_000_000_000;
        last = estimator.add_sample(t1, t1 + 10, t1 + 20, t1 + 1_000, 0);
    }
    assert_eq!(
        last.expect("estimate").samples,
        3,
        "samples older than 2 s dropped"
    );
}

proptest! {
    #[test]
    fn never_panics_and_bounds_are_sane(
        samples in proptest::collection::vec(
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<i64>()),
            1..80,
        ),
        near in proptest::collection::vec((0u64..1_000_000, 0u64..1_000_000, 0u64..2_000_000, any::<i64>()), 0..80),
    ) {
        let mut estimator = Estimator::default();
        for (t1, t2, t3, t4, suspend) in samples {
            if let Some(estimate) = estimator.add_sample(t1, t2, t3, t4, suspend) {
                prop_assert!(estimate.error_bound_ns >= 1_000);
                prop_assert!(estimate.freq_ppm.is_finite());
                prop_assert!(estimate.samples >= 1);
                let _ = estimate.to_host(t2);
            }
        }
        // Plausible but noisy exchanges around one base time.
        let mut estimator = Estimator::default();
        for (i, (forward, hold, backward, offset)) in near.into_iter().enumerate() {
            let t1 = START + i as u64 * 50_000_000;
            let t2 = (t1 + forward).wrapping_add_signed(offset % 1_000_000_000);
            let t4 = t1 + forward + hold + backward;
            if let Some(estimate) = estimator.add_sample(t1, t2, t2 + hold, t4, 0) {
                prop_assert!(estimate.error_bound_ns >= 1_000);
                prop_assert!(estimate.freq_ppm.abs() <= 500.0);
                prop_assert!(estimate.freq_bound_ppm.is_finite());
            }
        }
    }
}

/// A LAN-like relay at -20 ppm, 60 s of it at 4 Hz, then `gap_ns` without
/// samples and 10 s of the same clock 40 µs off its line (inside the hard
/// interval of every sample: delay/2 >= 100 µs). Returns the estimator,
/// its epoch before the shift, the clock after it and the end time.
fn shifted_after(gap_ns: u64) -> (Estimator, u64, RelayModel, u64) {
    let before = RelayModel {
        offset_ns: 7_000_000,
        drift_ppm: -20.0,
        origin_ns: START,
    };
    let after = RelayModel {
        offset_ns: 7_040_000,
        ..before
    };
    let mut rng = Rng(19);
    let mut estimator = Estimator::default();
    let mut t = START;
    let mut feed = |estimator: &mut Estimator, model: &RelayModel, t: &mut u64, count: u32| {
        for _ in 0..count {
            let [t1, t2, t3, t4] = exchange(model, &mut rng, *t, 100_000, 5_000.0);
            estimator.add_sample(t1, t2, t3, t4, 0);
            *t += 250_000_000;
        }
    };
    feed(&mut estimator, &before, &mut t, 240);
    assert_eq!(estimator.steps(), 0, "no step in a steady clock");
    let epoch = estimator.epoch();
    t += gap_ns;
    feed(&mut estimator, &after, &mut t, 40);
    (estimator, epoch, after, t)
}

#[test]
fn a_step_below_half_the_round_trip_is_found_statistically() {
    let (estimator, _, after, t) = shifted_after(0);
    assert_eq!(estimator.steps(), 1);
    let estimate = estimator.estimate().expect("estimate");
    let error = mapping_error(&estimate, &after, t);
    assert!(error <= 3_000, "error {error} ns: {estimate:?}");
}

#[test]
fn after_a_long_gap_the_window_starts_over_without_a_step() {
    // 60 s without samples: a 40 µs wander is 1.5 sigmas of the default
    // wander over 60 s (27 µs), far outside the samples' noise (without
    // the gap it is a step, above).
    let (estimator, epoch, after, t) = shifted_after(60_000_000_000);
    assert_eq!(estimator.steps(), 0, "a gap's wander is no step");
    assert_eq!(estimator.epoch(), epoch);
    assert!(estimator.trimmed() >= 200, "{}", estimator.trimmed());
    let estimate = estimator.estimate().expect("estimate");
    let error = mapping_error(&estimate, &after, t);
    assert!(error <= 3_000, "error {error} ns: {estimate:?}");
}

#[test]
fn fastest_legs_without_a_sharp_floor_do_not_tilt_the_line() {
    // A relay with no drift at all, probed at 20 Hz, legs 100 µs plus
    // queueing whose fastest values are not a sharp floor (the sum of
    // four exponentials, as two hosts' scheduling adds over real
    // sockets): the line's slope comes from the legs, and a slope off by
    // tenths of a ppm moves the mapping half a second ahead by µs.
    let model = RelayModel {
        offset_ns: 5_000_000_000,
        drift_ppm: 0.0,
        origin_ns: START,
    };
    let mut worst = Vec::new();
    for seed in 1..=12u64 {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let mut estimator = Estimator::default();
        let soft = |rng: &mut Rng| 100_000 + (0..4).map(|_| rng.exponential(8_000.0)).sum::<u64>();
        let mut seed_worst = 0;
        for i in 0..600u64 {
            let t1 = START + i * 50_000_000;
            let [t1, t2, t3, t4] = exchange_with(&model, &mut rng, t1, soft);
            let estimate = estimator.add_sample(t1, t2, t3, t4, 0);
            if let (Some(e), true) = (estimate, i >= 200) {
                seed_worst = seed_worst.max(mapping_error(&e, &model, t1 + 500_000_000));
            }
        }
        worst.push(seed_worst);
    }
    // Median of the seeds' worst: 2.7 µs with the slope chosen by the
    // fastest 4% of each side's legs, 3.4 µs by the single fastest.
    worst.sort_unstable();
    assert!(
        worst[6] <= 3_000,
        "worst error per seed (ns), sorted: {worst:?}"
    );
}

/// 60 s of clean probes every 250 ms, then 10 s of a flood at the sync
/// port in which a share `loss` of the probes is lost and the rest carry
/// exponential queueing of mean `queue_ns` each way, then 10 s clean again.
/// The truth must stay inside the bound all along; returns the bound
/// before the flood, its peak during it, and how long after the flood it
/// took to come back within twice its level before + 20 us.
fn through_a_flood(loss: f64, queue_ns: f64) -> (u64, u64, u64) {
    const EVERY: u64 = 250_000_000;
    let model = RelayModel {
        offset_ns: -3_000_000_000,
        drift_ppm: 15.0,
        origin_ns: START,
    };
    let mut rng = Rng(50);
    let mut estimator = Estimator::default();
    let mut t = START;
    let check = |estimator: &Estimator, t: u64| -> u64 {
        let e = estimator.estimate().expect("estimate");
        let relay = model.relay(t);
        let bound = e.bound_at(relay);
        let error = (e.to_host(relay) - t as i64).unsigned_abs();
        assert!(
            error <= bound,
            "at {t}: error {error} ns outside bound {bound} ns: {e:?}"
        );
        bound
    };
    let sample = |estimator: &mut Estimator, rng: &mut Rng, t: u64, queue: f64| {
        let [t1, t2, t3, t4] = exchange(&model, rng, t, 50_000, queue);
        estimator.add_sample(t1, t2, t3, t4, 0);
    };
    for _ in 0..240 {
        sample(&mut estimator, &mut rng, t, 10_000.0);
        t += EVERY;
    }
    let before = check(&estimator, t);
    let mut peak = before;
    for _ in 0..40 {
        if rng.unit() > loss {
            sample(&mut estimator, &mut rng, t, queue_ns);
        }
        peak = peak.max(check(&estimator, t));
        t += EVERY;
    }
    let mut back_after = None;
    for i in 1..=40u64 {
        sample(&mut estimator, &mut rng, t, 10_000.0);
        let bound = check(&estimator, t);
        if back_after.is_none() && bound <= 2 * before + 20_000 {
            back_after = Some(i * EVERY);
        }
        t += EVERY;
    }
    (before, peak, back_after.expect("the bound came back"))
}

/// The flood (bounds of 20-50 ms that stayed for seconds after
/// it): 40% of probes lost, the rest queued 20 ms on average each way.
#[test]
fn after_a_flood_the_bound_is_back_within_seconds() {
    for (loss, queue_ns) in [(0.4, 20_000_000.0), (1.0, 0.0)] {
        let (before, peak, back_after) = through_a_flood(loss, queue_ns);
        println!(
            "loss {loss}, queueing {} ms: bound {before} ns before the flood, peak {peak} ns \
             during it, back within 2x + 20 us {} ms after it",
            queue_ns / 1e6,
            back_after / 1_000_000
        );
        assert!(back_after <= 3_000_000_000, "back after {back_after} ns");
    }
}
