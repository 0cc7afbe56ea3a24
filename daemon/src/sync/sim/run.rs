//! One scenario run: probe exchanges through the link, events uniform in
//! time, each mapped causally with the estimate of its own epoch available
//! at that moment, beside two baselines on the same samples.

use super::clock::{RelayClock, host_ns};
use super::link::LossState;
use super::metrics::{ErrorStats, Report, percentile};
use super::rng::Rng;
use super::scenarios::Scenario;
use crate::sync::{Estimator, EstimatorConfig, SyncEstimate};

/// Run options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunOptions {
    pub seed: u64,
    /// Events drawn uniformly over the run.
    pub events: usize,
    /// Events before this (s) are left out of the error statistics (they
    /// still count for bound coverage).
    pub warmup_s: f64,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            seed: 1,
            events: 4_000,
            warmup_s: 10.0,
        }
    }
}

/// One completed probe exchange.
#[derive(Clone, Copy, Debug)]
struct Exchange {
    /// Host time of the reply's arrival (s): when the sample is usable.
    done_s: f64,
    t: [u64; 4],
    bmm: i64,
    /// Host time at the relay's receive (s), for the frequency check.
    at_s: f64,
}

/// One event on the relay.
#[derive(Clone, Copy, Debug)]
struct Event {
    at_s: f64,
    relay_ns: u64,
    bmm: i64,
}

const BURST: usize = 8;
const BURST_SPACING_S: f64 = 0.015;

/// Scheduled probe times (host s) and whether each is a train (a
/// follow-up probe leaves as soon as the reply is in, as the prober does).
fn probe_times(sc: &Scenario, clock: &RelayClock, rng: &mut Rng) -> Vec<(f64, bool)> {
    let mut times: Vec<(f64, bool)> = (0..BURST)
        .map(|i| (0.05 + i as f64 * BURST_SPACING_S, false))
        .collect();
    let period = 1.0 / sc.probe_hz;
    let mut t = 0.05 + BURST as f64 * BURST_SPACING_S + period;
    while t < sc.secs {
        times.push((t + rng.uniform(0.0, 0.005), true));
        t += period;
    }
    // The prober bursts when a reply shows a new epoch: about one period
    // after the resume.
    for resume in clock.resumes() {
        let first = resume + rng.uniform(0.0, period);
        times.extend((0..BURST).map(|i| (first + 0.001 + i as f64 * BURST_SPACING_S, false)));
    }
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    times
}

fn exchanges(sc: &Scenario, clock: &RelayClock, rng: &mut Rng) -> (Vec<Exchange>, usize) {
    let mut schedule_rng = rng.fork(1);
    let mut fwd_rng = rng.fork(2);
    let mut bwd_rng = rng.fork(3);
    let mut read_rng = rng.fork(4);
    let mut loss_rng = rng.fork(5);
    let (mut fwd_loss, mut bwd_loss) = (LossState::new(), LossState::new());
    let link = &sc.link;
    let partitioned = |a: f64, b: f64| link.partitions.iter().any(|p| a < p.1 && b >= p.0);
    let mut out = Vec::new();
    let mut lost = 0;
    let mut attempt = |h1: f64| -> Option<Exchange> {
        let h2 = h1 + link.forward.delay(&mut fwd_rng) * 1e-9;
        let hold = link.hold_ns + fwd_rng.exponential(link.hold_exp_ns);
        let h3 = h2 + hold * 1e-9;
        let h4 = h3 + link.backward.delay(&mut bwd_rng) * 1e-9;
        let dropped =
            fwd_loss.lost(&link.loss, &mut loss_rng) | bwd_loss.lost(&link.loss, &mut loss_rng);
        if dropped || partitioned(h1, h4) || clock.asleep(h2) || clock.asleep(h3) {
            return None;
        }
        Some(Exchange {
            done_s: h4,
            t: [
                clock.read_host(h1, &mut read_rng),
                clock.read(h2, &mut read_rng),
                clock.read(h3, &mut read_rng),
                clock.read_host(h4, &mut read_rng),
            ],
            bmm: clock.boottime_minus_monotonic(h2),
            at_s: h2,
        })
    };
    for (h1, train) in probe_times(sc, clock, &mut schedule_rng) {
        let Some(first) = attempt(h1) else {
            lost += 1;
            continue;
        };
        out.push(first);
        if train {
            match attempt(first.done_s + 20e-6) {
                Some(second) => out.push(second),
                None => lost += 1,
            }
        }
    }
    // Replies are processed in arrival order (reordering shows here).
    out.sort_by(|a, b| a.done_s.total_cmp(&b.done_s));
    (out, lost)
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

fn signed_error(e: &SyncEstimate, ev: &Event) -> f64 {
    e.to_host(ev.relay_ns) as f64 - host_ns(ev.at_s)
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
    let (samples, lost) = exchanges(sc, &clock, &mut rng.fork(11));
    let events = events(sc, &clock, opts.events, &mut rng.fork(12));

    let mut est = Estimator::new(EstimatorConfig::default());
    let mut next = 0;
    let mut naive: Option<i128> = None;
    let mut deferred: Vec<usize> = Vec::new();
    // Per event: (signed error, bound, sigma) of ours; signed naive error.
    let mut ours: Vec<Option<(f64, u64, u64)>> = vec![None; events.len()];
    let mut naive_err: Vec<Option<f64>> = vec![None; events.len()];
    let mut late = 0;
    let mut wrong_epoch = 0;
    let mut freq_errs: Vec<f64> = Vec::new();
    let mut map = |e: &SyncEstimate, i: usize, out: &mut Vec<Option<(f64, u64, u64)>>| {
        let ev = &events[i];
        if e.boottime_minus_monotonic_ns != ev.bmm {
            wrong_epoch += 1;
        }
        out[i] = Some((
            signed_error(e, ev),
            e.bound_at(ev.relay_ns),
            e.sigma_at(ev.relay_ns),
        ));
    };
    for (i, ev) in events.iter().enumerate() {
        while next < samples.len() && samples[next].done_s <= ev.at_s {
            let x = &samples[next];
            let [t1, t2, t3, t4] = x.t;
            if let Some(e) = est.add_sample(t1, t2, t3, t4, x.bmm)
                && x.at_s >= 60.0
            {
                let truth = clock.freq(x.at_s) * 1e6;
                freq_errs.push((e.freq_ppm - truth).abs());
            }
            naive = Some(sample_offset(x));
            next += 1;
            // Events waiting for their epoch's first estimate.
            deferred.retain(|&j| match est.estimate_for(events[j].bmm) {
                Some(e) => {
                    map(&e, j, &mut ours);
                    late += 1;
                    false
                }
                None => true,
            });
        }
        match est.estimate_for(ev.bmm) {
            Some(e) => map(&e, i, &mut ours),
            None => deferred.push(i),
        }
        naive_err[i] = naive.map(|off| (ev.relay_ns as i128 - off) as f64 - host_ns(ev.at_s));
    }

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
        .filter_map(|(_, o)| o.map(|o| o.0))
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

    let mapped: Vec<(f64, u64, u64)> = ours.iter().flatten().copied().collect();
    let covered = mapped.iter().filter(|m| m.0.abs() <= m.1 as f64).count();
    let within_3sigma = mapped
        .iter()
        .filter(|m| m.0.abs() <= 3.0 * m.2 as f64)
        .count();
    let mut bounds: Vec<f64> = mapped.iter().map(|m| m.1 as f64).collect();
    bounds.sort_by(f64::total_cmp);
    let worst_bound_ratio = mapped
        .iter()
        .map(|m| m.0.abs() / (m.1 as f64).max(1.0))
        .fold(0.0, f64::max);

    // Convergence: the last event in the first minute worse than 2x p99.
    let threshold = 2.0 * ours_stats.p99;
    let convergence_s = events
        .iter()
        .zip(&ours)
        .filter(|(ev, o)| ev.at_s < 60.0 && o.is_some_and(|o| o.0.abs() > threshold))
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
            .filter_map(|(_, o)| o.map(|o| o.0.abs()))
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
        events: events.len(),
        mapped: mapped.len(),
        deferred: late,
        unmapped: events.len() - mapped.len(),
        wrong_epoch,
        covered,
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
        popped: est.popped(),
        steps: est.steps(),
        trimmed: est.trimmed(),
        epochs: est.epoch() + 1,
    }
}
