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
    let mut rng = Rng::new(opts.seed ^ name_hash(sc.name));
    let clock = RelayClock::new(&sc.clock, sc.secs, &mut rng.fork(10));
    let probing = probe(sc, &clock, &mut rng.fork(11));
    let samples = probing.exchanges;
    let lost = probing.lost;
    let events = events(sc, &clock, opts.events, &mut rng.fork(12));

    let mut live = Live::replay(&samples, &events, &clock);
    let writes = live.write(&events, opts.write_delay_s);
    let refined = final_mapping(&samples, &events);
    let constant = perfetto_constant(&samples);

    let ours = &writes.ours;
    let warmup_s = opts.warmup_s;
    let ours_steady = steady_errors(&events, ours.iter().map(|o| o.map(|o| o.error)), warmup_s);
    let naive_steady = steady_errors(&events, live.naive_err.iter().copied(), warmup_s);
    let perfetto_steady = constant.map_or_else(Vec::new, |c| {
        let errors = events
            .iter()
            .map(|ev| Some((ev.relay_ns as i128 - c) as f64 - host_ns(ev.at_s)));
        steady_errors(&events, errors, warmup_s)
    });
    let refined_steady = steady_errors(&events, refined.iter().map(|r| r.map(|r| r.0)), warmup_s);
    let ours_stats = ErrorStats::of(&ours_steady);
    let final_stats = FinalStats::of(&refined);
    let written = WrittenStats::of(ours);

    Report {
        scenario: sc.name.to_string(),
        seed: opts.seed,
        secs: sc.secs,
        ours: ours_stats,
        naive: ErrorStats::of(&naive_steady),
        perfetto: ErrorStats::of(&perfetto_steady),
        refined: ErrorStats::of(&refined_steady),
        refined_mapped: final_stats.mapped,
        refined_covered: final_stats.covered,
        refined_straddling: final_stats.straddling,
        refined_bound_p50: final_stats.bound_p50,
        refined_bound_p99: final_stats.bound_p99,
        events: events.len(),
        mapped: written.mapped,
        deferred: live.late,
        unmapped: events.len() - written.mapped,
        wrong_epoch: writes.wrong_epoch,
        covered: written.covered,
        unprobed: written.unprobed,
        unprobed_outside: written.unprobed_outside,
        remapped: writes.remapped,
        within_3sigma: written.within_3sigma,
        bound_p50: written.bound_p50,
        worst_bound_ratio: written.worst_bound_ratio,
        convergence_s: convergence_s(&events, ours, 2.0 * ours_stats.p99),
        after_resume_p99: after_resume_p99(&clock, &events, ours),
        freq_err_ppm: median_and_max(live.freq_errs),
        samples: samples.len(),
        lost,
        prober_agrees: probing.final_estimate == live.est.estimate(),
        bursts: probing.stats.bursts,
        suspected_steps: probing.stats.suspected_steps,
        popped: live.est.popped(),
        steps: live.est.steps(),
        trimmed: live.est.trimmed(),
        epochs: live.est.epoch() + 1,
    }
}

/// FNV-1a of the scenario's name: each scenario draws its own numbers
/// from the same seed.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The live mapping replayed in virtual time: the estimator fed each
/// sample once it completed, each event mapped on arrival with what the
/// estimator had then.
struct Live {
    est: Estimator,
    /// Every estimate that checked a newer sample, and when (host s) it was
    /// made: what the live core's covering check has at each moment.
    covering: CoveringEstimates,
    covering_at_s: Vec<f64>,
    /// Per event: the estimate it was mapped with on arrival (or once its
    /// epoch had one) and when that was (host s).
    arrival: Vec<Option<(SyncEstimate, f64)>>,
    /// Per event: the naive last-sample mapping's signed error (ns).
    naive_err: Vec<Option<f64>>,
    /// Events mapped late: their epoch had no estimate on arrival.
    late: usize,
    /// |frequency error| (ppm) of the estimates at samples from 60 s on.
    freq_errs: Vec<f64>,
}

impl Live {
    fn replay(samples: &[Exchange], events: &[Event], clock: &RelayClock) -> Self {
        let mut live = Self {
            est: Estimator::new(EstimatorConfig::default()),
            covering: CoveringEstimates::new(u64::MAX, usize::MAX),
            covering_at_s: Vec::new(),
            arrival: vec![None; events.len()],
            naive_err: vec![None; events.len()],
            late: 0,
            freq_errs: Vec::new(),
        };
        let mut next = 0;
        let mut naive: Option<i128> = None;
        let mut deferred: Vec<usize> = Vec::new();
        for (i, ev) in events.iter().enumerate() {
            while next < samples.len() && samples[next].done_s <= ev.at_s {
                let x = &samples[next];
                if let Some(e) = live.add_sample(x)
                    && x.at_s >= 60.0
                {
                    let truth = clock.freq(x.at_s) * 1e6;
                    live.freq_errs.push((e.freq_ppm - truth).abs());
                }
                naive = Some(sample_offset(x));
                next += 1;
                live.map_deferred(&mut deferred, events, x.done_s);
            }
            match live.est.estimate_for(ev.bmm) {
                Some(e) => live.arrival[i] = Some((e, ev.at_s)),
                None => deferred.push(i),
            }
            live.naive_err[i] =
                naive.map(|off| (ev.relay_ns as i128 - off) as f64 - host_ns(ev.at_s));
        }
        // The samples after the last event, so the estimator ends where the
        // prober's did.
        for x in &samples[next..] {
            live.add_sample(x);
        }
        live
    }

    /// Feeds one sample to the estimator; its estimate, if any.
    fn add_sample(&mut self, x: &Exchange) -> Option<SyncEstimate> {
        let [t1, t2, t3, t4] = x.t;
        let e = self.est.add_sample(t1, t2, t3, t4, x.bmm)?;
        if self.covering.push(&e) {
            self.covering_at_s.push(x.done_s);
        }
        Some(e)
    }

    /// Maps the events waiting for their epoch's first estimate that have
    /// one now (host `now_s`).
    fn map_deferred(&mut self, deferred: &mut Vec<usize>, events: &[Event], now_s: f64) {
        deferred.retain(|&j| match self.est.estimate_for(events[j].bmm) {
            Some(e) => {
                self.arrival[j] = Some((e, now_s));
                self.late += 1;
                false
            }
            None => true,
        });
    }

    /// Each event as written: a merge window after it was mapped, checked
    /// against the estimate right after the first sample taken after it, if
    /// that existed by then (see `tracesync_core::sync::covering`).
    fn write(&mut self, events: &[Event], write_delay_s: f64) -> Writes {
        let mut ours = Vec::with_capacity(events.len());
        let mut wrong_epoch = 0;
        let mut remapped = 0;
        for (ev, i) in events.iter().zip(0..self.arrival.len()) {
            let Some((e, mapped_s)) = self.arrival[i] else {
                ours.push(None);
                continue;
            };
            if e.boottime_minus_monotonic_ns != ev.bmm {
                wrong_epoch += 1;
            }
            let (written, how) = self.write_one(ev, &e, mapped_s + write_delay_s);
            if how == Refinement::Remapped {
                remapped += 1;
            }
            ours.push(Some(written));
        }
        Writes {
            ours,
            wrong_epoch,
            remapped,
        }
    }

    /// `ev` mapped with `e`, as written at host `written_s`.
    fn write_one(&mut self, ev: &Event, e: &SyncEstimate, written_s: f64) -> (Written, Refinement) {
        let provisional = Mapping {
            host_ns: e.to_host(ev.relay_ns),
            bound_ns: e.bound_at(ev.relay_ns),
        };
        let later: Vec<&SyncEstimate> = self
            .covering
            .from(ev.relay_ns)
            .take_while(|c| self.covering_at_s[c.sequence as usize] <= written_s)
            .map(|c| c.estimate)
            .take_while(|c| c.boottime_minus_monotonic_ns == ev.bmm)
            .collect();
        let first = later.first().copied();
        let (m, how) = refine(provisional, ev.relay_ns, later);
        let sigma = match (how, first) {
            (Refinement::Remapped, Some(c)) => c.sigma_at(ev.relay_ns),
            _ => e.sigma_at(ev.relay_ns),
        };
        let written = Written {
            error: m.host_ns as f64 - host_ns(ev.at_s),
            bound: m.bound_ns,
            sigma,
            unprobed: how == Refinement::Unprobed,
        };
        (written, how)
    }
}

/// The live mapping's events as written.
struct Writes {
    /// Per event; None if never mapped.
    ours: Vec<Option<Written>>,
    /// Mapped with an estimate of another relay epoch.
    wrong_epoch: usize,
    /// Written with a covering estimate's mapping.
    remapped: usize,
}

/// The errors (ns) of the events from `warmup_s` on, in event order;
/// `errors` has one per event, None where the event was not mapped.
fn steady_errors(
    events: &[Event],
    errors: impl Iterator<Item = Option<f64>>,
    warmup_s: f64,
) -> Vec<f64> {
    events
        .iter()
        .zip(errors)
        .filter(|(ev, _)| ev.at_s >= warmup_s)
        .filter_map(|(_, e)| e)
        .collect()
}

/// Final: the closed run re-estimated from every sample, both sides of
/// every event (`tracesync_core::sync::smoother`). Per event: signed error
/// and hard bound (ns), and its sides.
fn final_mapping(samples: &[Exchange], events: &[Event]) -> Vec<Option<(f64, u64, Sides)>> {
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
    events
        .iter()
        .map(|ev| {
            let m = smoother.map(ev.relay_ns, ev.bmm)?;
            Some((m.host_ns as f64 - host_ns(ev.at_s), m.bound_ns, m.sides))
        })
        .collect()
}

/// Perfetto-style: one constant from the last 5 offsets, for all events.
fn perfetto_constant(samples: &[Exchange]) -> Option<i128> {
    let tail = &samples[samples.len().saturating_sub(5)..];
    if tail.is_empty() {
        None
    } else {
        Some(tail.iter().map(sample_offset).sum::<i128>() / tail.len() as i128)
    }
}

/// The final mapping's coverage and bounds, over all events.
struct FinalStats {
    mapped: usize,
    covered: usize,
    straddling: usize,
    bound_p50: f64,
    bound_p99: f64,
}

impl FinalStats {
    fn of(refined: &[Option<(f64, u64, Sides)>]) -> Self {
        let refined_all: Vec<(f64, u64, Sides)> = refined.iter().flatten().copied().collect();
        let mut bounds: Vec<f64> = refined_all.iter().map(|r| r.1 as f64).collect();
        bounds.sort_by(f64::total_cmp);
        Self {
            mapped: refined_all.len(),
            covered: refined_all
                .iter()
                .filter(|r| r.0.abs() <= r.1 as f64)
                .count(),
            straddling: refined_all
                .iter()
                .filter(|r| r.2 == Sides::Straddling)
                .count(),
            bound_p50: percentile(&bounds, 0.5),
            bound_p99: percentile(&bounds, 0.99),
        }
    }
}

/// The live mapping's coverage and bounds, over all events written.
struct WrittenStats {
    mapped: usize,
    covered: usize,
    unprobed: usize,
    unprobed_outside: usize,
    within_3sigma: usize,
    bound_p50: f64,
    worst_bound_ratio: f64,
}

impl WrittenStats {
    fn of(ours: &[Option<Written>]) -> Self {
        let mapped: Vec<Written> = ours.iter().flatten().copied().collect();
        let inside = |m: &Written| m.error.abs() <= m.bound as f64;
        let mut bounds: Vec<f64> = mapped.iter().map(|m| m.bound as f64).collect();
        bounds.sort_by(f64::total_cmp);
        Self {
            mapped: mapped.len(),
            covered: mapped.iter().filter(|m| inside(m)).count(),
            unprobed: mapped.iter().filter(|m| m.unprobed).count(),
            unprobed_outside: mapped.iter().filter(|m| m.unprobed && !inside(m)).count(),
            within_3sigma: mapped
                .iter()
                .filter(|m| m.error.abs() <= 3.0 * m.sigma as f64)
                .count(),
            bound_p50: percentile(&bounds, 0.5),
            worst_bound_ratio: mapped
                .iter()
                .map(|m| m.error.abs() / (m.bound as f64).max(1.0))
                .fold(0.0, f64::max),
        }
    }
}

/// Convergence: the last event in the first minute worse than `threshold`.
fn convergence_s(events: &[Event], ours: &[Option<Written>], threshold: f64) -> f64 {
    events
        .iter()
        .zip(ours)
        .filter(|(ev, o)| ev.at_s < 60.0 && o.is_some_and(|o| o.error.abs() > threshold))
        .map(|(ev, _)| ev.at_s)
        .fold(0.0, f64::max)
}

/// p99 of |error| of the events 1-60 s after a resume, if the clock
/// resumed.
fn after_resume_p99(clock: &RelayClock, events: &[Event], ours: &[Option<Written>]) -> Option<f64> {
    let resumes: Vec<f64> = clock.resumes().collect();
    (!resumes.is_empty()).then(|| {
        let mut errs: Vec<f64> = events
            .iter()
            .zip(ours)
            .filter(|(ev, _)| {
                resumes
                    .iter()
                    .any(|r| ev.at_s >= r + 1.0 && ev.at_s < r + 60.0)
            })
            .filter_map(|(_, o)| o.map(|o| o.error.abs()))
            .collect();
        errs.sort_by(f64::total_cmp);
        percentile(&errs, 0.99)
    })
}

/// Median and largest of `values`.
fn median_and_max(mut values: Vec<f64>) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    (percentile(&values, 0.5), percentile(&values, 1.0))
}
