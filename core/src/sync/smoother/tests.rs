use super::*;

/// A relay clock: relay = host + offset + ppm * host, plus `step_ns` from
/// host time `step_at_ns` on.
#[derive(Clone, Copy)]
struct Clock {
    offset_ns: i64,
    ppm: f64,
    step_at_ns: u64,
    step_ns: i64,
}

impl Clock {
    fn relay(&self, host_ns: u64) -> u64 {
        let mut r = host_ns as f64 + self.offset_ns as f64 + self.ppm * 1e-6 * host_ns as f64;
        if host_ns >= self.step_at_ns {
            r += self.step_ns as f64;
        }
        r.round() as u64
    }
}

/// A small deterministic generator (splitmix64).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// One-way delay: `base` plus exponential queueing of mean `queue`.
    pub(super) fn delay(&mut self, base: u64, queue: f64) -> u64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        base + (-(1.0 - u).ln() * queue) as u64
    }
}

/// Exchanges at 4 Hz over `secs`, host time starting at 1000 s, over a
/// LAN: each leg 90 µs plus exponential queueing of mean 25 µs.
fn exchanges(clock: Clock, secs: u64, seed: u64) -> Vec<Exchange> {
    exchanges_over(clock, secs, seed, 90_000, 25_000.0)
}

/// The same over legs of `base` ns plus queueing of mean `queue` ns.
fn exchanges_over(clock: Clock, secs: u64, seed: u64, base: u64, queue: f64) -> Vec<Exchange> {
    let mut rng = Rng(seed);
    (0..secs * 4)
        .map(|i| {
            let h = 1_000_000_000_000 + i * 250_000_000;
            let (d1, d2) = (rng.delay(base, queue), rng.delay(base, queue));
            let t2 = clock.relay(h + d1);
            let t3 = t2 + 20_000;
            Exchange {
                t: [h, t2, t3, h + d1 + 20_000 + d2],
                boottime_minus_monotonic_ns: 0,
            }
        })
        .collect()
}

/// Host times of events every 37 ms between `from_s` and `to_s` after the
/// start.
fn event_hosts(from_s: u64, to_s: u64) -> impl Iterator<Item = u64> {
    let start = 1_000_000_000_000u64;
    (start + from_s * 1_000_000_000..start + to_s * 1_000_000_000).step_by(37_000_000)
}

/// Forward-only errors (the live estimator's estimate after every sample
/// before the event), for comparison.
fn live_errors(clock: Clock, xs: &[Exchange], hosts: &[u64]) -> Vec<f64> {
    let mut est = Estimator::new(EstimatorConfig::default());
    let mut next = 0;
    let mut errs = Vec::new();
    for &h in hosts {
        while next < xs.len() && xs[next].t[3] <= h {
            let [t1, t2, t3, t4] = xs[next].t;
            est.add_sample(t1, t2, t3, t4, 0);
            next += 1;
        }
        if let Some(e) = est.estimate() {
            errs.push((e.to_host(clock.relay(h)) - h as i64).abs() as f64);
        }
    }
    errs
}

pub(super) fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) * 99 / 100]
}

#[test]
fn both_sides_beat_one_and_always_hold_the_truth() {
    let clock = Clock {
        offset_ns: 17_000_000_000,
        ppm: 20.0,
        step_at_ns: u64::MAX,
        step_ns: 0,
    };
    let xs = exchanges(clock, 600, 7);
    let smoother = Smoother::new(EstimatorConfig::default(), &xs);
    assert_eq!(smoother.segments(), 1);
    let hosts: Vec<u64> = event_hosts(10, 590).collect();
    let mut errs = Vec::new();
    let mut bounds = Vec::new();
    for &h in &hosts {
        let m = smoother.map(clock.relay(h), 0).expect("mapped");
        let err = (m.host_ns - h as i64).unsigned_abs();
        assert!(
            err <= m.bound_ns,
            "at {h}: error {err} outside bound {}",
            m.bound_ns
        );
        assert_eq!(m.sides, Sides::Both);
        errs.push(err as f64);
        bounds.push(m.bound_ns as f64);
    }
    let live = p99(live_errors(clock, &xs, &hosts));
    let smoothed = p99(errs);
    assert!(
        smoothed <= live / 2.0,
        "two-sided p99 {smoothed} ns vs live {live} ns"
    );
    // The bound is the intersection of two hard bounds; neither side can
    // rule out an asymmetry of up to half the round trip (~90 µs here), so
    // it stays near the live one's 108 µs at this delay, and never above.
    let bound = p99(bounds);
    eprintln!("p99 error: live {live} ns, two-sided {smoothed} ns; p99 bound {bound} ns");
    assert!(bound < 115_000.0, "bound p99 {bound}");
}

#[test]
fn a_jittery_link_is_placed_by_its_fastest_legs() {
    // Wi-Fi-like legs: 500 µs plus 1 ms of exponential queueing each. A
    // sample whose round trip is within 100 µs of the floor comes once in
    // ~200; a leg within 10 µs of its own floor once in ~100.
    let clock = Clock {
        offset_ns: 2_000_000_000,
        ppm: 50.0,
        step_at_ns: u64::MAX,
        step_ns: 0,
    };
    let xs = exchanges_over(clock, 900, 5, 500_000, 1_000_000.0);
    let smoother = Smoother::new(EstimatorConfig::default(), &xs);
    let hosts: Vec<u64> = event_hosts(30, 870).collect();
    let mut errs = Vec::new();
    for &h in &hosts {
        let m = smoother.map(clock.relay(h), 0).expect("mapped");
        let err = (m.host_ns - h as i64).unsigned_abs();
        assert!(
            err <= m.bound_ns,
            "at {h}: error {err} outside {}",
            m.bound_ns
        );
        errs.push(err as f64);
    }
    let live = p99(live_errors(clock, &xs, &hosts));
    let smoothed = p99(errs);
    eprintln!("jittery link p99 error: live {live} ns, two-sided {smoothed} ns");
    assert!(smoothed <= 25_000.0, "two-sided p99 {smoothed} ns");
    assert!(
        smoothed <= live / 2.0,
        "two-sided {smoothed} vs live {live} ns"
    );
}

#[test]
fn a_step_noticed_late_is_placed_on_its_right_side() {
    let step_at = 1_000_000_000_000 + 300_000_000_000 + 100_000_000;
    let clock = Clock {
        offset_ns: -5_000_000_000,
        ppm: -35.0,
        step_at_ns: step_at,
        step_ns: 200_000,
    };
    let xs = exchanges(clock, 600, 11);
    let smoother = Smoother::new(EstimatorConfig::default(), &xs);
    assert_eq!(smoother.segments(), 2, "one step, two segments");
    // Every event from the first sample after the step to two samples
    // later (the live path confirms a step at the second contradiction).
    let mut checked = 0;
    for h in (step_at + 200_000_000..step_at + 1_000_000_000).step_by(1_000_000) {
        let m = smoother.map(clock.relay(h), 0).expect("mapped");
        let err = (m.host_ns - h as i64).unsigned_abs();
        assert!(err <= m.bound_ns, "error {err} outside {}", m.bound_ns);
        assert!(err < 20_000, "after the step at {h}: error {err} ns");
        checked += 1;
    }
    assert!(checked > 500);
    // Between the last sample before the step and the first after it the
    // side is unknown: the bound covers both.
    let m = smoother
        .map(clock.relay(step_at + 50_000_000), 0)
        .expect("mapped");
    assert_eq!(m.sides, Sides::Straddling);
    let err = (m.host_ns - (step_at + 50_000_000) as i64).unsigned_abs();
    assert!(err <= m.bound_ns && m.bound_ns >= 100_000, "{m:?}");
}

/// Which leg of the first sample after a step queueing delayed by 3 ms.
#[derive(Clone, Copy, Debug)]
enum Late {
    Neither,
    Request,
    Reply,
}

/// Events every ms between the samples around a step of `step_ns` at
/// `fraction` of the 250 ms between them: how many are placed on the
/// wrong side of the step (further than half of it from the truth).
fn wrong_side_between_samples(fraction: f64, step_ns: i64, late: Late) -> usize {
    let sample = 1_000_000_000_000 + 75_000_000_000;
    let step_at = sample + (fraction * 250e6) as u64;
    let clock = Clock {
        offset_ns: 40_000_000_000,
        ppm: 30.0,
        step_at_ns: step_at,
        step_ns,
    };
    let mut xs = exchanges(clock, 150, 13);
    let x = xs.iter_mut().find(|x| x.t[0] > step_at).expect("after");
    let delay = 3_000_000;
    match late {
        Late::Neither => {}
        Late::Request => x.t = [x.t[0], x.t[1] + delay, x.t[2] + delay, x.t[3] + delay],
        Late::Reply => x.t[3] += delay,
    }
    let smoother = Smoother::new(EstimatorConfig::default(), &xs);
    let mut wrong = 0;
    for h in (sample + 1_000_000..sample + 250_000_000).step_by(1_000_000) {
        let m = smoother.map(clock.relay(h), 0).expect("mapped");
        let err = (m.host_ns - h as i64).unsigned_abs();
        assert!(err <= m.bound_ns, "at {h}: error {err} outside {m:?}");
        wrong += usize::from(err > step_ns.unsigned_abs() / 2);
    }
    wrong
}

#[test]
fn a_step_between_two_samples_is_wrong_for_at_most_half_the_span() {
    // No sample tells the side of an event between the last sample before
    // a step and the first after it; the side its time is nearer is wrong
    // only between the step and the middle of the span, wherever the step
    // was. A sample tells its own side when the wrong mapping would make
    // one of its legs (~100 µs here) take negative time: the leg the step
    // shortens. When queueing delayed that leg by more than the step, the
    // sample tells nothing and the span reaches the next sample (500 ms).
    for step_ns in [200_000, -200_000] {
        for late in [Late::Neither, Late::Request, Late::Reply] {
            let tells = match late {
                Late::Neither => true,
                Late::Request => step_ns > 0,
                Late::Reply => step_ns < 0,
            };
            for fraction in [0.2, 0.8] {
                let wrong = wrong_side_between_samples(fraction, step_ns, late);
                let expected = match tells {
                    true => (fraction - 0.5).abs() * 250.0,
                    false => (1.0 - fraction) * 250.0,
                } as usize;
                assert!(
                    wrong <= expected + 5,
                    "step {step_ns} ns at {fraction} of the span, {late:?} late: \
                     {wrong} events on the wrong side, {expected} expected"
                );
            }
        }
    }
}

#[test]
fn a_suspend_starts_a_segment_of_its_own_epoch() {
    let clock = Clock {
        offset_ns: 3_000_000_000,
        ppm: 10.0,
        step_at_ns: u64::MAX,
        step_ns: 0,
    };
    let mut xs = exchanges(clock, 200, 3);
    // From sample 400 on the relay has been suspended: a new
    // BOOTTIME-MONOTONIC; its clock reads 30 s further.
    for x in &mut xs[400..] {
        x.boottime_minus_monotonic_ns = 30_000_000_000;
        x.t[1] += 30_000_000_000;
        x.t[2] += 30_000_000_000;
    }
    let smoother = Smoother::new(EstimatorConfig::default(), &xs);
    assert_eq!(smoother.segments(), 2);
    let h = 1_000_000_000_000 + 150_000_000_000;
    let m = smoother
        .map(clock.relay(h) + 30_000_000_000, 30_000_000_000)
        .expect("mapped in its epoch");
    assert!((m.host_ns - h as i64).unsigned_abs() <= m.bound_ns);
    assert!(smoother.map(clock.relay(h), 7_000_000_000).is_none());
}

#[test]
fn the_same_samples_give_the_same_mappings() {
    let clock = Clock {
        offset_ns: 1,
        ppm: 50.0,
        step_at_ns: 1_000_000_000_000 + 60_000_000_000,
        step_ns: -1_000_000,
    };
    let xs = exchanges(clock, 120, 5);
    let a = Smoother::new(EstimatorConfig::default(), &xs);
    let b = Smoother::new(EstimatorConfig::default(), &xs);
    for h in event_hosts(1, 119) {
        assert_eq!(a.map(clock.relay(h), 0), b.map(clock.relay(h), 0));
    }
}

#[test]
fn no_samples_no_mapping() {
    let s = Smoother::new(EstimatorConfig::default(), &[]);
    assert_eq!(s.segments(), 0);
    assert_eq!(s.map(5, 0), None);
}

#[test]
fn a_short_capture_is_placed_better_than_live_to_its_last_event() {
    // 40 s captures of Wi-Fi-like legs, events up to the last sample: the
    // final's windows at a capture's ends hold half the legs, and the side
    // that starts at an end has seen a handful of samples. Clipped windows
    // and the young side weighed by its own sigma placed the simulator's
    // 40 s Wi-Fi run's last seconds 8-18 µs off where the live side was
    // 2 µs off (seed 2); here they gave a pooled p99 of 40.6 µs against
    // a live 105 µs (0.39), now 29.6 µs (0.28).
    let clock = Clock {
        offset_ns: 2_000_000_000,
        ppm: 20.0,
        step_at_ns: u64::MAX,
        step_ns: 0,
    };
    let (mut live, mut smoothed) = (Vec::new(), Vec::new());
    for seed in 1..=8 {
        let xs = exchanges_over(clock, 40, seed, 500_000, 1_000_000.0);
        let smoother = Smoother::new(EstimatorConfig::default(), &xs);
        let last = xs.last().expect("samples").t[3];
        let hosts: Vec<u64> = event_hosts(10, 40).filter(|&h| h <= last).collect();
        for &h in &hosts {
            let m = smoother.map(clock.relay(h), 0).expect("mapped");
            let err = (m.host_ns - h as i64).unsigned_abs();
            assert!(err <= m.bound_ns, "seed {seed} at {h}: {err} outside {m:?}");
            smoothed.push(err as f64);
        }
        live.extend(live_errors(clock, &xs, &hosts));
    }
    let (live, smoothed) = (p99(live), p99(smoothed));
    eprintln!("40 s captures, pooled p99: live {live} ns, final {smoothed} ns");
    assert!(
        smoothed <= 0.35 * live,
        "final {smoothed} vs live {live} ns"
    );
}

/// A Wi-Fi-like relay (legs of 500 µs plus 1 ms of exponential queueing)
/// whose clock steps by +200 µs at 100 s of a 200 s capture: less than
/// the queueing, so the estimator confirms it neither way.
fn hidden_step_clock() -> Clock {
    Clock {
        offset_ns: 3_000_000_000,
        ppm: 20.0,
        step_at_ns: 1_000_000_000_000 + 100_000_000_000,
        step_ns: 200_000,
    }
}

#[test]
fn a_step_below_the_queueing_is_found_by_its_envelopes() {
    let clock = hidden_step_clock();
    let step_relay = clock.relay(clock.step_at_ns);
    for seed in 1..=4 {
        let xs = exchanges_over(clock, 200, seed, 500_000, 1_000_000.0);
        assert_eq!(
            split_by_estimator(&xs),
            1,
            "seed {seed}: the estimator confirmed it"
        );
        let found = hidden_steps::find(&xs, 500e-6);
        assert_eq!(found.len(), 1, "seed {seed}: {found:?}");
        let s = found[0];
        // The relay time jumps at the step: the span may end on either
        // side of the jump.
        assert!(
            s.from_ns <= step_relay && step_relay - 200_000 <= s.to_ns,
            "seed {seed}: step at {step_relay} outside {s:?}"
        );
        assert!(s.to_ns - s.from_ns <= 5_000_000_000, "seed {seed}: {s:?}");
    }
}

/// Segments the estimator's own step detection makes of `xs`.
fn split_by_estimator(xs: &[Exchange]) -> usize {
    epoch_starts(EstimatorConfig::default(), xs.iter().copied()).len()
}

#[test]
fn no_step_is_found_where_there_is_none() {
    let steady = Clock {
        step_at_ns: u64::MAX,
        step_ns: 0,
        ..hidden_step_clock()
    };
    for seed in 1..=4 {
        let wifi = exchanges_over(steady, 300, seed, 500_000, 1_000_000.0);
        assert_eq!(
            hidden_steps::find(&wifi, 500e-6),
            Vec::new(),
            "Wi-Fi seed {seed}"
        );
        let lan = exchanges(
            Clock {
                ppm: -50.0,
                ..steady
            },
            300,
            seed,
        );
        assert_eq!(
            hidden_steps::find(&lan, 500e-6),
            Vec::new(),
            "LAN seed {seed}"
        );
    }
}

#[test]
fn a_step_below_the_queueing_is_placed_on_its_right_side() {
    // Without the cut the final's lines bent across the step and the
    // events near it were up to ~100 µs off: pooled p99 97.8 µs, 33.0 µs
    // with it (the simulator's Wi-Fi +200 µs steps: 107-124 -> 13.5-28.9).
    let clock = hidden_step_clock();
    let mut errs = Vec::new();
    for seed in 1..=4 {
        let xs = exchanges_over(clock, 200, seed, 500_000, 1_000_000.0);
        let smoother = Smoother::new(EstimatorConfig::default(), &xs);
        assert_eq!(smoother.segments(), 2, "seed {seed}");
        for h in event_hosts(10, 190) {
            let m = smoother.map(clock.relay(h), 0).expect("mapped");
            let err = (m.host_ns - h as i64).unsigned_abs();
            assert!(err <= m.bound_ns, "seed {seed} at {h}: {err} outside {m:?}");
            errs.push(err as f64);
        }
    }
    let p99 = p99(errs);
    eprintln!("hidden +200 us step, pooled final p99 {p99} ns");
    assert!(p99 <= 40_000.0, "final p99 {p99} ns");
}

#[test]
fn samples_years_apart_cost_their_number_not_their_span() {
    // One segment (same offset either side) whose two halves lie three
    // years apart: the corridor's grid and the hidden-step search once
    // covered the span, 12.5 GB and 80 s for these 160 samples.
    let clock = Clock {
        offset_ns: 1_000_000_000,
        ppm: 0.0,
        step_at_ns: u64::MAX,
        step_ns: 0,
    };
    const YEARS_NS: u64 = 3 * 365 * 86_400 * 1_000_000_000;
    let mut xs = exchanges(clock, 20, 3);
    xs.extend(exchanges(clock, 20, 4).into_iter().map(|mut x| {
        x.t = x.t.map(|t| t + YEARS_NS);
        x
    }));
    let s = Smoother::new(EstimatorConfig::default(), &xs);
    for h in [
        1_000_000_000_000 + 10_000_000_000,
        1_000_000_000_000 + YEARS_NS + 10_000_000_000,
    ] {
        let m = s.map(clock.relay(h), 0).expect("mapped");
        let err = (m.host_ns - h as i64).unsigned_abs();
        assert!(err <= m.bound_ns, "at {h}: {err} outside {m:?}");
    }
}

#[test]
fn times_at_the_end_of_u64_cost_no_overflow() {
    // A damaged or hostile sidecar: host and relay timestamps whose last
    // is u64::MAX (host times that large cannot
    // be written as i64, so nothing maps). Grid rounding once added past
    // u64::MAX: a panic in debug builds, a wrapped range in release.
    let mut rng = Rng(7);
    let secs = 60;
    let start = u64::MAX - (secs + 2) * 1_000_000_000;
    let xs: Vec<Exchange> = (0..secs * 4)
        .map(|i| {
            let h = start + i * 250_000_000;
            let (d1, d2) = (rng.delay(90_000, 25_000.0), rng.delay(90_000, 25_000.0));
            let t2 = h + d1 + 1_000_000_000;
            Exchange {
                t: [h, t2, t2 + 20_000, h + d1 + 20_000 + d2],
                boottime_minus_monotonic_ns: 0,
            }
        })
        .collect();
    // And one exchange whose relay reply is u64::MAX itself.
    let t2 = u64::MAX - 20_000;
    let t1 = t2 - 1_000_000_000 - 90_000;
    let mut xs = xs;
    xs.push(Exchange {
        t: [t1, t2, u64::MAX, t1 + 200_000],
        boottime_minus_monotonic_ns: 0,
    });
    let s = Smoother::new(EstimatorConfig::default(), &xs);
    assert!(s.segments() >= 1);
    for relay_ns in (start..u64::MAX - 1_000_000)
        .step_by(37_000_000)
        .chain([u64::MAX])
    {
        assert_eq!(s.map(relay_ns, 0), None, "at {relay_ns}");
    }
}

#[test]
fn relay_times_from_zero_are_mapped() {
    // A relay that booted just before its first probe: relay times start
    // at a few ms, the host's at 1000 s.
    let mut rng = Rng(9);
    let start = 1_000_000_000_000u64;
    let offset = start - 3_000_000;
    let xs: Vec<Exchange> = (0..240u64)
        .map(|i| {
            let h = start + i * 250_000_000;
            let (d1, d2) = (rng.delay(90_000, 25_000.0), rng.delay(90_000, 25_000.0));
            let t2 = h + d1 - offset;
            Exchange {
                t: [h, t2, t2 + 20_000, h + d1 + 20_000 + d2],
                boottime_minus_monotonic_ns: 0,
            }
        })
        .collect();
    let s = Smoother::new(EstimatorConfig::default(), &xs);
    let mut mapped = 0;
    for relay_ns in (0..60_000_000_000u64).step_by(37_000_000) {
        let Some(m) = s.map(relay_ns, 0) else {
            continue;
        };
        mapped += 1;
        let err = (m.host_ns - (relay_ns + offset) as i64).unsigned_abs();
        assert!(err <= m.bound_ns, "at {relay_ns}: {err} outside {m:?}");
    }
    assert!(mapped > 1500, "{mapped} mapped");
}
