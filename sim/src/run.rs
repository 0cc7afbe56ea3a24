//! One scenario run: probe exchanges through the link, events uniform in
//! time, each mapped causally with the estimate of its own epoch available
//! at that moment and written a merge window later (checked against the
//! samples taken after it by then, as the live core does), beside two
//! baselines on the same samples.

use super::clock::{RelayClock, host_ns};
use super::metrics::{ErrorStats, Report, percentile};
use super::probing::{Exchange, probe};
use super::rng::Rng;
use super::scenarios::Scenario;
use tracesync_core::sync::covering::{CoveringEstimates, Mapping, Refinement, refine};
use tracesync_core::sync::smoother::{Exchange as SmootherExchange, Sides, Smoother};
use tracesync_core::sync::{Estimator, EstimatorConfig, SyncEstimate};

/// Run options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunOptions {
    pub seed: u64,
    /// Events drawn uniformly over the run.
    pub events: usize,
    /// Events before this (s) are left out of the error statistics (they
    /// still count for bound coverage).
    pub warmup_s: f64,
    /// How long after its mapping an event is written (s): the daemon's
    /// merge window (`[merge] window-ms`, 500 by default). The written
    /// mapping is checked against the samples that exist by then.
    pub write_delay_s: f64,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            seed: 1,
            events: 4_000,
            warmup_s: 10.0,
            write_delay_s: 0.5,
        }
    }
}

/// One event on the relay.
#[derive(Clone, Copy, Debug)]
struct Event {
    at_s: f64,
    relay_ns: u64,
    bmm: i64,
}

fn events(sc: &Scenario, clock: &RelayClock, count: usize, rng: &mut Rng) -> Vec<Event> {
    let mut times: Vec<f64> = (0..count)
        .map(|_| rng.uniform(0.0, sc.secs))
        .filter(|&t| !clock.asleep(t))
        .collect();
    times.sort_by(f64::total_cmp);
    times
        .into_iter()
        .map(|at_s| Event {
            at_s,
            relay_ns: clock.exact(at_s).round() as u64,
            bmm: clock.boottime_minus_monotonic(at_s),
        })
        .collect()
}

/// One event as written: signed error, hard bound and sigma (ns), and
/// whether no sample after it existed by then.
#[derive(Clone, Copy, Debug)]
struct Written {
    error: f64,
    bound: u64,
    sigma: u64,
    unprobed: bool,
}

fn sample_offset(x: &Exchange) -> i128 {
    let [t1, t2, t3, t4] = x.t.map(i128::from);
    ((t2 - t1) + (t3 - t4)) / 2
}

/// Runs `sc` once.
pub fn run(sc: &Scenario, opts: &RunOptions) -> Report {
    let name_hash = sc.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = Rng::new(opts.seed ^ name_hash);
    let clock = RelayClock::new(&sc.clock, sc.secs, &mut rng.fork(10));
    let probing = probe(sc, &clock, &mut rng.fork(11));
    let samples = probing.exchanges;
    let lost = probing.lost;
    let events = events(sc, &clock, opts.events, &mut rng.fork(12));

    let mut est = Estimator::new(EstimatorConfig::default());
    // Every estimate that checked a newer sample, and when (host s) it was
    // made: what the live core's covering check has at each moment.
    let mut covering = CoveringEstimates::new(u64::MAX, usize::MAX);
    let mut covering_at_s: Vec<f64> = Vec::new();
    let mut next = 0;
    let mut naive: Option<i128> = None;
    let mut deferred: Vec<usize> = Vec::new();
    // Per event: the estimate it was mapped with on arrival (or once its
    // epoch had one) and when that was (host s).
    let mut arrival: Vec<Option<(SyncEstimate, f64)>> = vec![None; events.len()];
    let mut naive_err: Vec<Option<f64>> = vec![None; events.len()];
    let mut late = 0;
    let mut freq_errs: Vec<f64> = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        while next < samples.len() && samples[next].done_s <= ev.at_s {
            let x = &samples[next];
            let [t1, t2, t3, t4] = x.t;
            let estimate = est.add_sample(t1, t2, t3, t4, x.bmm);
            if let Some(e) = estimate {
                if x.at_s >= 60.0 {
                    let truth = clock.freq(x.at_s) * 1e6;
                    freq_errs.push((e.freq_ppm - truth).abs());
                }
                if covering.push(&e) {
                    covering_at_s.push(x.done_s);
                }
            }
            naive = Some(sample_offset(x));
            next += 1;
            // Events waiting for their epoch's first estimate.
            deferred.retain(|&j| match est.estimate_for(events[j].bmm) {
                Some(e) => {
                    arrival[j] = Some((e, x.done_s));
                    late += 1;
                    false
                }
                None => true,
            });
        }
        match est.estimate_for(ev.bmm) {
            Some(e) => arrival[i] = Some((e, ev.at_s)),
            None => deferred.push(i),
        }
        naive_err[i] = naive.map(|off| (ev.relay_ns as i128 - off) as f64 - host_ns(ev.at_s));
    }
    // The samples after the last event, so the estimator ends where the
    // prober's did.
    for x in &samples[next..] {
        let [t1, t2, t3, t4] = x.t;
        if let Some(e) = est.add_sample(t1, t2, t3, t4, x.bmm)
            && covering.push(&e)
        {
            covering_at_s.push(x.done_s);
        }
    }

    // Each event as written: a merge window after it was mapped, checked
    // against the estimate right after the first sample taken after it, if
    // that existed by then (see `tracesync_core::sync::covering`).
    let mut wrong_epoch = 0;
    let mut remapped = 0;
    let ours: Vec<Option<Written>> = events
        .iter()
        .zip(&arrival)
        .map(|(ev, mapped)| {
            let (e, mapped_s) = (*mapped)?;
            if e.boottime_minus_monotonic_ns != ev.bmm {
                wrong_epoch += 1;
            }
            let written_s = mapped_s + opts.write_delay_s;
            let provisional = Mapping {
                host_ns: e.to_host(ev.relay_ns),
                bound_ns: e.bound_at(ev.relay_ns),
            };
            let later: Vec<&SyncEstimate> = covering
                .from(ev.relay_ns)
                .take_while(|c| covering_at_s[c.sequence as usize] <= written_s)
                .map(|c| c.estimate)
                .take_while(|c| c.boottime_minus_monotonic_ns == ev.bmm)
                .collect();
            let first = later.first().copied();
            let (m, how) = refine(provisional, ev.relay_ns, later);
            if how == Refinement::Remapped {
                remapped += 1;
            }
            let sigma = match (how, first) {
                (Refinement::Remapped, Some(c)) => c.sigma_at(ev.relay_ns),
                _ => e.sigma_at(ev.relay_ns),
            };
            Some(Written {
                error: m.host_ns as f64 - host_ns(ev.at_s),
                bound: m.bound_ns,
                sigma,
                unprobed: how == Refinement::Unprobed,
            })
        })
        .collect();

    // Final: the closed run re-estimated from every sample, both sides of
    // every event (`tracesync_core::sync::smoother`).
    let smoother = Smoother::new(
        EstimatorConfig::default(),
        &samples
            .iter()
            .map(|x| SmootherExchange {
                t: x.t,
                boottime_minus_monotonic_ns: x.bmm,
            })
            .collect::<Vec<_>>(),
    );
    let refined: Vec<Option<(f64, u64, Sides)>> = events
        .iter()
        .map(|ev| {
            let m = smoother.map(ev.relay_ns, ev.bmm)?;
            Some((m.host_ns as f64 - host_ns(ev.at_s), m.bound_ns, m.sides))
        })
        .collect();

    // Perfetto-style: one constant from the last 5 offsets, for all events.
    let tail = &samples[samples.len().saturating_sub(5)..];
    let constant = if tail.is_empty() {
        None
    } else {
        Some(tail.iter().map(sample_offset).sum::<i128>() / tail.len() as i128)
    };

    let steady = |ev: &Event| ev.at_s >= opts.warmup_s;
    let ours_steady: Vec<f64> = events
        .iter()
        .zip(&ours)
        .filter(|(ev, _)| steady(ev))
        .filter_map(|(_, o)| o.map(|o| o.error))
        .collect();
    let naive_steady: Vec<f64> = events
        .iter()
        .zip(&naive_err)
        .filter(|(ev, _)| steady(ev))
        .filter_map(|(_, n)| *n)
        .collect();
    let perfetto_steady: Vec<f64> = match constant {
        Some(c) => events
            .iter()
            .filter(|ev| steady(ev))
            .map(|ev| (ev.relay_ns as i128 - c) as f64 - host_ns(ev.at_s))
            .collect(),
        None => Vec::new(),
    };
    let ours_stats = ErrorStats::of(&ours_steady);
    let refined_steady: Vec<f64> = events
        .iter()
        .zip(&refined)
        .filter(|(ev, _)| steady(ev))
        .filter_map(|(_, r)| r.map(|r| r.0))
        .collect();
    let refined_all: Vec<(f64, u64, Sides)> = refined.iter().flatten().copied().collect();
    let mut refined_bounds: Vec<f64> = refined_all.iter().map(|r| r.1 as f64).collect();
    refined_bounds.sort_by(f64::total_cmp);

    let mapped: Vec<Written> = ours.iter().flatten().copied().collect();
    let inside = |m: &Written| m.error.abs() <= m.bound as f64;
    let covered = mapped.iter().filter(|m| inside(m)).count();
    let unprobed_outside = mapped.iter().filter(|m| m.unprobed && !inside(m)).count();
    let unprobed = mapped.iter().filter(|m| m.unprobed).count();
    let within_3sigma = mapped
        .iter()
        .filter(|m| m.error.abs() <= 3.0 * m.sigma as f64)
        .count();
    let mut bounds: Vec<f64> = mapped.iter().map(|m| m.bound as f64).collect();
    bounds.sort_by(f64::total_cmp);
    let worst_bound_ratio = mapped
        .iter()
        .map(|m| m.error.abs() / (m.bound as f64).max(1.0))
        .fold(0.0, f64::max);

    // Convergence: the last event in the first minute worse than 2x p99.
    let threshold = 2.0 * ours_stats.p99;
    let convergence_s = events
        .iter()
        .zip(&ours)
        .filter(|(ev, o)| ev.at_s < 60.0 && o.is_some_and(|o| o.error.abs() > threshold))
        .map(|(ev, _)| ev.at_s)
        .fold(0.0, f64::max);

    let resumes: Vec<f64> = clock.resumes().collect();
    let after_resume_p99 = (!resumes.is_empty()).then(|| {
        let mut errs: Vec<f64> = events
            .iter()
            .zip(&ours)
            .filter(|(ev, _)| {
                resumes
                    .iter()
                    .any(|r| ev.at_s >= r + 1.0 && ev.at_s < r + 60.0)
            })
            .filter_map(|(_, o)| o.map(|o| o.error.abs()))
            .collect();
        errs.sort_by(f64::total_cmp);
        percentile(&errs, 0.99)
    });

    Report {
        scenario: sc.name.to_string(),
        seed: opts.seed,
        secs: sc.secs,
        ours: ours_stats,
        naive: ErrorStats::of(&naive_steady),
        perfetto: ErrorStats::of(&perfetto_steady),
        refined: ErrorStats::of(&refined_steady),
        refined_mapped: refined_all.len(),
        refined_covered: refined_all
            .iter()
            .filter(|r| r.0.abs() <= r.1 as f64)
            .count(),
        refined_straddling: refined_all
            .iter()
            .filter(|r| r.2 == Sides::Straddling)
            .count(),
        refined_bound_p50: percentile(&refined_bounds, 0.5),
        refined_bound_p99: percentile(&refined_bounds, 0.99),
        events: events.len(),
        mapped: mapped.len(),
        deferred: late,
        unmapped: events.len() - mapped.len(),
        wrong_epoch,
        covered,
        unprobed,
        unprobed_outside,
        remapped,
        within_3sigma,
        bound_p50: percentile(&bounds, 0.5),
        worst_bound_ratio,
        convergence_s,
        after_resume_p99,
        freq_err_ppm: {
            freq_errs.sort_by(f64::total_cmp);
            (percentile(&freq_errs, 0.5), percentile(&freq_errs, 1.0))
        },
        samples: samples.len(),
        lost,
        prober_agrees: probing.final_estimate == est.estimate(),
        bursts: probing.stats.bursts,
        suspected_steps: probing.stats.suspected_steps,
        popped: est.popped(),
        steps: est.steps(),
        trimmed: est.trimmed(),
        epochs: est.epoch() + 1,
    }
}
