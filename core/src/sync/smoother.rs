//! Two-sided re-estimation of a closed capture (sans-IO): every probe
//! exchange of a relay known at once, each timestamp is mapped from the
//! samples before it *and* after it.
//!
//! The live [`Estimator`] must decide a packet's time from the samples
//! before it. Once the capture is closed the samples after it exist too.
//! The smoother runs the same estimator twice over each segment of the
//! relay's clock (a span with no step or suspend in it): forwards, and
//! backwards in time (every timestamp reflected, `t -> C - t`, so the
//! estimator's causal machinery — pop filter, gate, fit, hard bound — works
//! unchanged on the future). A timestamp between two samples gets the
//! forward estimate made at the earlier and the backward estimate made at
//! the later one.
//!
//! Invariants:
//! - **Hard.** Each side's interval (`to_host ± bound_at`) holds the truth
//!   under the estimator's model, so their intersection does; the result's
//!   point lies in it and its bound reaches both of its ends. When the two
//!   contradict (the model broke between them) the result is their hull.
//! - **Never across a step or suspend.** Segments end where the forward
//!   estimator started a new epoch, in hindsight: at the first sample that
//!   contradicted the old epoch (not the one that confirmed the step), or
//!   at the first sample of a new BOOTTIME-MONOTONIC. A timestamp that lies
//!   between the last sample of one segment and the first of the next may
//!   be on either side of the step: it gets the hull of both mappings.
//! - **Deterministic.** Same samples in, same mappings out.
//! - **Bounded.** Memory is one estimate per sample and direction of the
//!   samples given (the caller gives one relay, one capture or one epoch).

use super::{Estimator, EstimatorConfig, SyncEstimate};

/// One probe exchange as the prober saw it: t1/t4 host BOOTTIME, t2/t3
/// relay BOOTTIME (ns), and the relay's BOOTTIME-MONOTONIC at the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub t: [u64; 4],
    pub boottime_minus_monotonic_ns: i64,
}

impl Exchange {
    /// Relay time the estimator files the sample under.
    fn relay_mid_ns(&self) -> u64 {
        let [_, t2, t3, _] = self.t;
        t2 + t3.saturating_sub(t2) / 2
    }
}

/// Which samples a mapping rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sides {
    /// Samples before and after it, in its segment.
    Both,
    /// Only samples before it (after the segment's last sample).
    Before,
    /// Only samples after it (before the segment's first estimate).
    After,
    /// Between two segments: either side of a step; the hull of both.
    Straddling,
}

/// A relay timestamp mapped to host BOOTTIME, with a hard bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Smoothed {
    pub host_ns: i64,
    pub bound_ns: u64,
    pub sides: Sides,
}

/// One span of the relay clock without a step or suspend.
#[derive(Debug)]
struct Segment {
    boottime_minus_monotonic_ns: i64,
    /// Relay time of each sample, in the order given.
    mids: Vec<u64>,
    /// Largest relay time of samples `0..=i` (non-decreasing).
    prefix_max: Vec<u64>,
    /// Smallest relay time of samples `i..` (non-decreasing).
    suffix_min: Vec<u64>,
    /// The forward estimate after sample `i`.
    forward: Vec<Option<SyncEstimate>>,
    /// The backward estimate after sample `i` (reflected time: `C - t`).
    backward: Vec<Option<SyncEstimate>>,
    /// The reflection constant of `backward`.
    mirror_ns: u64,
    /// Host send time of its last sample and host receive time of its
    /// first: a step before or after it lies beyond them.
    last_send_ns: u64,
    first_receive_ns: u64,
}

/// The relay's whole capture, re-estimated.
#[derive(Debug)]
pub struct Smoother {
    config: EstimatorConfig,
    segments: Vec<Segment>,
}

impl Smoother {
    /// Re-estimates from `exchanges`, in the order the prober accepted them
    /// (as the live estimator was fed).
    pub fn new(config: EstimatorConfig, exchanges: &[Exchange]) -> Self {
        let segments = split(config, exchanges)
            .into_iter()
            .filter(|r| !r.is_empty())
            .map(|r| Segment::estimate(config, &exchanges[r]))
            .collect();
        Self { config, segments }
    }

    /// Segments found (steps and suspends + 1, when any sample was given).
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    /// Host BOOTTIME of relay BOOTTIME `relay_ns` taken while the relay's
    /// BOOTTIME-MONOTONIC was `boottime_minus_monotonic_ns`. None when no
    /// segment of that epoch has an estimate.
    pub fn map(&self, relay_ns: u64, boottime_minus_monotonic_ns: i64) -> Option<Smoothed> {
        let same_epoch = |s: &&Segment| {
            (s.boottime_minus_monotonic_ns as i128 - boottime_minus_monotonic_ns as i128)
                .unsigned_abs()
                <= self.config.epoch_jump_ns as u128
        };
        let epoch: Vec<&Segment> = self.segments.iter().filter(same_epoch).collect();
        // A segment's clock held from (host time) the last sample of the
        // one before to the first of the one after: a mapping landing
        // there, bound included, may be the right one. The true segment's
        // always does; with relay time alone a step backwards would hide
        // it (relay times repeat across it).
        let mut found: Vec<Smoothed> = Vec::new();
        for (k, seg) in epoch.iter().enumerate() {
            let Some(m) = seg.map(relay_ns) else {
                continue;
            };
            let from = if k == 0 {
                i128::MIN
            } else {
                epoch[k - 1].last_send_ns as i128
            };
            let to = match epoch.get(k + 1) {
                Some(next) => next.first_receive_ns as i128,
                None => i128::MAX,
            };
            let (lo, hi) = interval(m.host_ns, m.bound_ns);
            if hi >= from && lo <= to {
                found.push(m);
            }
        }
        match found.as_slice() {
            [] => None,
            [one] => Some(*one),
            many => {
                let (lo, hi) = many.iter().fold((i128::MAX, i128::MIN), |(lo, hi), m| {
                    let (l, h) = interval(m.host_ns, m.bound_ns);
                    (lo.min(l), hi.max(h))
                });
                let mut m = from_interval(lo, hi);
                m.sides = Sides::Straddling;
                Some(m)
            }
        }
    }
}

/// Index ranges of `exchanges`, one per segment, in order.
fn split(config: EstimatorConfig, exchanges: &[Exchange]) -> Vec<std::ops::Range<usize>> {
    let mut est = Estimator::new(config);
    let mut starts = vec![0usize];
    // An epoch begun by a step whose first sample is not known yet.
    let mut pending: Option<usize> = None;
    let mut epoch = 0;
    for (i, x) in exchanges.iter().enumerate() {
        let [t1, t2, t3, t4] = x.t;
        est.add_sample(t1, t2, t3, t4, x.boottime_minus_monotonic_ns);
        if est.epoch() != epoch {
            epoch = est.epoch();
            let suspended = i > 0
                && (x.boottime_minus_monotonic_ns as i128
                    - exchanges[i - 1].boottime_minus_monotonic_ns as i128)
                    .unsigned_abs()
                    > config.epoch_jump_ns as u128;
            if suspended {
                starts.push(i);
                pending = None;
            } else {
                pending = Some(i);
            }
        }
        if let (Some(at), Some(first)) = (pending, est.epoch_first_relay_ns()) {
            // The epoch's first fitted sample: at or before the one that
            // confirmed the step, after the previous segment's start.
            let floor = starts.last().copied().unwrap_or(0) + 1;
            let start = (floor..=at.max(i))
                .rev()
                .find(|&k| exchanges[k].relay_mid_ns() == first)
                .unwrap_or(at);
            if start > *starts.last().unwrap_or(&0) {
                starts.push(start);
            }
            pending = None;
        }
    }
    let mut ranges: Vec<_> = starts.windows(2).map(|w| w[0]..w[1]).collect();
    if let Some(&last) = starts.last() {
        ranges.push(last..exchanges.len());
    }
    ranges
}

impl Segment {
    fn estimate(config: EstimatorConfig, xs: &[Exchange]) -> Self {
        let mids: Vec<u64> = xs.iter().map(Exchange::relay_mid_ns).collect();
        let mut prefix_max = Vec::with_capacity(mids.len());
        let mut max = 0;
        for &m in &mids {
            max = max.max(m);
            prefix_max.push(max);
        }
        let mut suffix_min = vec![0; mids.len()];
        let mut min = u64::MAX;
        for (i, &m) in mids.iter().enumerate().rev() {
            min = min.min(m);
            suffix_min[i] = min;
        }

        let mut est = Estimator::new(config);
        let forward = xs
            .iter()
            .map(|x| {
                let [t1, t2, t3, t4] = x.t;
                est.add_sample(t1, t2, t3, t4, x.boottime_minus_monotonic_ns)
                    .or_else(|| est.estimate())
            })
            .collect();

        // Reflected: host send becomes C - t4, relay receive C - t3, and so
        // on, so the backward pass sees a forward-running clock.
        let mirror_ns = xs.iter().map(|x| x.t[3].max(x.t[2])).max().unwrap_or(0) + 1;
        let mut est = Estimator::new(config);
        let mut backward: Vec<Option<SyncEstimate>> = xs
            .iter()
            .rev()
            .map(|x| {
                let [t1, t2, t3, t4] = x.t.map(|t| mirror_ns - t);
                est.add_sample(t4, t3, t2, t1, x.boottime_minus_monotonic_ns)
                    .or_else(|| est.estimate())
            })
            .collect();
        backward.reverse();
        Segment {
            boottime_minus_monotonic_ns: xs[0].boottime_minus_monotonic_ns,
            mids,
            prefix_max,
            suffix_min,
            forward,
            backward,
            mirror_ns,
            last_send_ns: xs[xs.len() - 1].t[0],
            first_receive_ns: xs[0].t[3],
        }
    }

    /// The forward estimate made after every sample at or before
    /// `relay_ns`, and the backward one made after every sample at or
    /// after it.
    fn map(&self, relay_ns: u64) -> Option<Smoothed> {
        let before = self.prefix_max.partition_point(|&m| m <= relay_ns);
        let after = self.suffix_min.partition_point(|&m| m < relay_ns);
        let forward = before
            .checked_sub(1)
            .and_then(|i| self.forward[i])
            .map(|e| side(e.to_host(relay_ns), &e, relay_ns));
        let backward = self.backward.get(after).copied().flatten().map(|e| {
            let mirrored = self.mirror_ns.saturating_sub(relay_ns);
            let host = self.mirror_ns as i128 - e.to_host(mirrored) as i128;
            side(clamp(host), &e, mirrored)
        });
        debug_assert!(self.mids.len() == self.forward.len());
        match (forward, backward) {
            (Some(f), Some(b)) => Some(combine(f, b)),
            (Some(f), None) => Some(f.into_smoothed(Sides::Before)),
            (None, Some(b)) => Some(b.into_smoothed(Sides::After)),
            (None, None) => None,
        }
    }
}

/// One side's mapping: point, hard bound and sigma (ns).
#[derive(Clone, Copy, Debug)]
struct Side {
    host: i64,
    bound: u64,
    sigma: u64,
}

impl Side {
    fn into_smoothed(self, sides: Sides) -> Smoothed {
        Smoothed {
            host_ns: self.host,
            bound_ns: self.bound,
            sides,
        }
    }
}

fn side(host: i64, e: &SyncEstimate, at: u64) -> Side {
    Side {
        host,
        bound: e.bound_at(at),
        sigma: e.sigma_at(at),
    }
}

/// Both sides: the inverse-variance mean, kept inside the intersection of
/// the two hard intervals. When they do not meet, or their points differ
/// by more than [`DISAGREEMENT_SIGMAS`] of their spread, a step the
/// estimator took for noise lies between them (a step smaller than the
/// bound passes its hard test, and it takes three samples to confirm one
/// statistically): the hull of both, as one side is right.
fn combine(f: Side, b: Side) -> Smoothed {
    let (flo, fhi) = interval(f.host, f.bound);
    let (blo, bhi) = interval(b.host, b.bound);
    let (lo, hi) = (flo.max(blo), fhi.min(bhi));
    let spread = (f.sigma.max(1) as f64).hypot(b.sigma.max(1) as f64);
    let apart = (f.host as i128 - b.host as i128).unsigned_abs() as f64;
    if lo > hi || apart > DISAGREEMENT_SIGMAS * spread {
        let mut m = from_interval(flo.min(blo), fhi.max(bhi));
        m.sides = Sides::Both;
        return m;
    }
    let wf = 1.0 / (f.sigma.max(1) as f64).powi(2);
    let wb = 1.0 / (b.sigma.max(1) as f64).powi(2);
    let mean = (f.host as f64 * wf + b.host as f64 * wb) / (wf + wb);
    let point = (mean.round() as i128).clamp(lo, hi);
    let bound = (point - lo).max(hi - point);
    Smoothed {
        host_ns: clamp(point),
        bound_ns: u64::try_from(bound).unwrap_or(u64::MAX),
        sides: Sides::Both,
    }
}

/// How far apart (in sigmas of the two) the two sides' points may be
/// before they are taken to straddle an unnoticed step.
const DISAGREEMENT_SIGMAS: f64 = 5.0;

fn interval(host: i64, bound: u64) -> (i128, i128) {
    (host as i128 - bound as i128, host as i128 + bound as i128)
}

/// The midpoint of `[lo, hi]` with a bound reaching both ends.
fn from_interval(lo: i128, hi: i128) -> Smoothed {
    let mid = lo + (hi - lo) / 2;
    let bound = (mid - lo).max(hi - mid);
    Smoothed {
        host_ns: clamp(mid),
        bound_ns: u64::try_from(bound).unwrap_or(u64::MAX),
        sides: Sides::Both,
    }
}

fn clamp(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

#[cfg(test)]
#[path = "smoother_tests.rs"]
mod tests;
