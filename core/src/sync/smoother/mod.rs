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
//! the later one; their intersection is its hard interval. Its point is
//! the one-way envelope fit of its segment ([`Corridor`]: the line midway
//! between the fastest request legs and the fastest reply legs within
//! 16 s), kept inside that interval; or, where the two sides agree with
//! each other but not with it (a slew's first legs at a segment's edge
//! tilt the envelope, not the regressions), the two sides' mean.
//!
//! Invariants:
//! - **Hard.** Each side's interval (`to_host ± bound_at`) holds the truth
//!   under the estimator's model, so their intersection does; the result's
//!   point lies in it and its bound reaches both of its ends. When the two
//!   contradict (the model broke between them) the result is their hull.
//! - **Never across a step or suspend.** A suspend ends a segment at the
//!   first sample of the new BOOTTIME-MONOTONIC. A step ends the segment
//!   before it where the backward pass detected it and begins the one
//!   after where the forward pass did (each at the first sample that
//!   contradicted the other side); the samples between belong to neither.
//!   A step below the link's queueing, which neither pass confirms, is
//!   found by its envelopes (`hidden_steps`) and cut the same way.
//!   A run of "steps" that one line holds (a slew's pieces) is one
//!   segment again (`short_runs`). A slew the estimator confirmed as
//!   one step (a jittery link) is a ramp from one segment's line to the
//!   next (`slew`), the segments fitted again without its samples.
//!   A timestamp a segment's mapping places between the host times of its
//!   neighbours' nearest samples may be in it; when several segments may
//!   hold it (either side of a step), it gets a bound over all of them.
//!   The samples between the two detections are then split where each
//!   side sits closest to its own segment's mapping; the split narrows
//!   the span either segment may hold only as far as no other split is
//!   nearly as good, and picks the point (never the bound) inside it
//!   (at the crossing of the two segments' lines where they cross
//!   between their edge samples: a change of rate).
//! - **Deterministic.** Same samples in, same mappings out.
//! - **Bounded.** Memory is one estimate per sample and direction of the
//!   samples given, and one line per second of the span near samples (a
//!   gap without samples costs none; the caller gives one relay, one
//!   capture or one epoch).

use super::corridor::Corridor;
use candidates::Candidates;
use gap::between;
use sides::{agrees, clamp, combine, envelope, interval, mature, midway, side, spanning};
use slew::{Ramp, StepFound, settle_slew};

mod candidates;
mod gap;
mod hidden_steps;
mod short_runs;
mod sides;
mod slew;
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
    /// The one-way envelope fit: the point of a mapping with both sides.
    corridor: Corridor,
    /// Host times between which the samples place this segment's clock
    /// most likely (wider than its samples when a neighbour's step lies
    /// among the samples between them): where a timestamp either side of
    /// a step may hold is given this segment's point.
    likely_from_ns: i128,
    likely_to_ns: i128,
    /// A slew between the segment before and this one.
    ramp_before: Option<Ramp>,
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
        let parts = split(config, exchanges)
            .into_iter()
            .filter(|r| !r.0.is_empty())
            .collect();
        let (ranges, found_steps): (Vec<_>, Vec<_>) = short_runs::join(config, exchanges, parts)
            .into_iter()
            .unzip();
        let mut segments: Vec<Segment> = ranges
            .iter()
            .map(|r| Segment::estimate(config, &exchanges[r.clone()]))
            .collect();
        // The samples between two segments' detections of a step: each
        // side of the step joins its segment, so only the span between
        // two samples stays unknown.
        let mut ranges = ranges;
        for k in 1..ranges.len() {
            // Any step within one epoch may be a slew: one the estimator
            // confirmed (with or without samples left between its
            // detections) or one the envelopes found inside a segment (a
            // slew on a jittery link the estimator never confirmed).
            let found = if found_steps[k].is_some() {
                StepFound::ByEnvelopes
            } else if ranges[k - 1].end < ranges[k].start {
                StepFound::BetweenDetections
            } else {
                StepFound::AtOneSample
            };
            let settled = short_runs::same_epoch(config, exchanges, &ranges[k - 1], &ranges[k])
                && settle_slew(config, &mut segments, k, exchanges, &mut ranges, found);
            if !settled {
                between(&mut segments, k, exchanges, &ranges, found_steps[k]);
            }
        }
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
        let mut epoch = self.segments.iter().filter(same_epoch).peekable();
        // A segment's clock held from (host time) the last sample of the
        // one before to the first of the one after: a mapping landing
        // there, bound included, may be the right one. The true segment's
        // always does; with relay time alone a step backwards would hide
        // it (relay times repeat across it).
        let mut found = Candidates::default();
        let mut previous: Option<&Segment> = None;
        let mut previous_mapping: Option<Smoothed> = None;
        // On a slew's ramp (between two neighbours: ramps are found only
        // where a step was, in one epoch):
        // the point that far along from one mapping to the other.
        let mut on_ramp: Option<i64> = None;
        while let Some(seg) = epoch.next() {
            let from = previous.map_or(i128::MIN, |p| p.last_send_ns as i128);
            let to = epoch
                .peek()
                .map_or(i128::MAX, |n| n.first_receive_ns as i128);
            previous = Some(seg);
            let mapping = seg.map(relay_ns);
            let ramp = seg.ramp_before.and_then(|r| r.share(relay_ns));
            if let (Some(share), Some(p), Some(m)) = (ramp, previous_mapping, mapping) {
                let along = (m.host_ns as i128 - p.host_ns as i128) as f64 * share;
                on_ramp = Some(clamp(p.host_ns as i128 + along.round() as i128));
                found.cover(p);
                found.cover(m);
            }
            previous_mapping = mapping;
            let Some(m) = mapping else {
                continue;
            };
            let (lo, hi) = interval(m.host_ns, m.bound_ns);
            if hi >= from && lo <= to {
                let host = m.host_ns as i128;
                found.add(m, seg.likely_from_ns <= host && host <= seg.likely_to_ns);
            }
        }
        match on_ramp {
            Some(point) => found.result_at(point),
            None => found.result(),
        }
    }
}

/// Index ranges of `exchanges`, one per segment, in order, each with the
/// relay time where a step found by [`hidden_steps`] most likely lies
/// between it and the range before (None: a step or suspend the
/// estimator confirmed, or the first range).
///
/// A step the estimator confirms only statistically is confirmed some
/// samples after it going forwards, and some samples before it going
/// backwards. The samples between the two detections may lie on either
/// side: they belong to no segment, so neither side's fit is bent by them
/// and a timestamp among them straddles both (see [`Smoother::map`]).
/// The same holds for the samples whose side of a hidden step the legs
/// cannot tell.
fn split(
    config: EstimatorConfig,
    exchanges: &[Exchange],
) -> Vec<(std::ops::Range<usize>, Option<u64>)> {
    let n = exchanges.len();
    if n == 0 {
        return Vec::new();
    }
    let forward = epoch_starts(config, exchanges.iter().copied());
    // Backwards: reflected time, so the estimator sees a forward clock.
    let mirror = mirror_ns(exchanges);
    let reflected = exchanges.iter().rev().map(|x| reflect(x, mirror));
    // The first sample of a backward epoch is the last one before the
    // step as far as the backward pass can tell.
    let before_step: Vec<usize> = epoch_starts(config, reflected)
        .into_iter()
        .skip(1)
        .filter(|&(_, suspended)| !suspended)
        .map(|(ri, _)| n - 1 - ri)
        .collect();
    let mut ranges = Vec::with_capacity(forward.len());
    for (k, &(start, _)) in forward.iter().enumerate() {
        let end = match forward.get(k + 1) {
            None => n,
            Some(&(next, true)) => next,
            // Only a gap of a few seconds, and never one that would leave
            // the segment too few samples to fit (a slew is a run of
            // "steps" seconds apart: cutting it up helps no one).
            Some(&(next, false)) => before_step
                .iter()
                .copied()
                .filter(|&q| q + 1 >= start + MIN_SEGMENT_SAMPLES && q < next)
                .filter(|&q| next - (q + 1) <= MAX_UNPLACED_SAMPLES)
                .max()
                .map_or(next, |q| q + 1),
        };
        ranges.push(start..end);
    }
    // Steps the estimator took for queueing: each range cut around them.
    let mut parts = Vec::with_capacity(ranges.len());
    for r in ranges {
        let mut start = r.start;
        let mut found_step = None;
        for step in hidden_steps::find(&exchanges[r.clone()], config.max_abs_freq_ppm * 1e-6) {
            // Surely before: up to the first sample past `from_ns`; surely
            // after: from the one following the last sample short of
            // `to_ns` (exchanges come in acceptance order, nearly sorted).
            let rest = &exchanges[start..r.end];
            let mid = |x: &Exchange| x.relay_mid_ns();
            let gap_start = start
                + rest
                    .iter()
                    .position(|x| mid(x) > step.from_ns)
                    .unwrap_or(rest.len());
            let gap_end = start
                + rest
                    .iter()
                    .rposition(|x| mid(x) < step.to_ns)
                    .map_or(0, |i| i + 1);
            let gap_end = gap_end.max(gap_start);
            if gap_start >= start + MIN_SEGMENT_SAMPLES && gap_end + MIN_SEGMENT_SAMPLES <= r.end {
                parts.push((start..gap_start, found_step));
                start = gap_end;
                found_step = Some(step.likely_ns);
            }
        }
        parts.push((start..r.end, found_step));
    }
    parts
}

/// How far from zero the corridor's slopes are searched (dimensionless):
/// twice the crystal tolerance, as a relay NTP slew (500 ppm on Linux)
/// adds to the crystal's own error, and a line held at the tolerance
/// misses such a clock by 20 µs a second at 20 ppm beyond it. The point
/// only: the bound rests on the estimator's hard interval.
pub(super) fn slope_range(config: EstimatorConfig) -> f64 {
    2.0 * config.max_abs_freq_ppm * 1e-6
}

/// Fewest samples a segment keeps when samples are left out of it.
const MIN_SEGMENT_SAMPLES: usize = 8;
/// Most samples left out between two segments (30 s at 4 Hz).
const MAX_UNPLACED_SAMPLES: usize = 120;

/// Where the estimator fed `xs` in order started each epoch: the index of
/// the epoch's first fitted sample (for a step: the first sample that
/// contradicted the old epoch), and whether a suspend started it.
fn epoch_starts(config: EstimatorConfig, xs: impl Iterator<Item = Exchange>) -> Vec<(usize, bool)> {
    let mut est = Estimator::new(config);
    let mut starts = vec![(0usize, false)];
    let mut seen: Vec<u64> = Vec::new();
    // An epoch begun by a step whose first sample is not known yet.
    let mut pending: Option<usize> = None;
    let mut epoch = 0;
    let mut previous_bmm: Option<i64> = None;
    for (i, x) in xs.enumerate() {
        let [t1, t2, t3, t4] = x.t;
        seen.push(x.relay_mid_ns());
        est.add_sample(t1, t2, t3, t4, x.boottime_minus_monotonic_ns);
        if est.epoch() != epoch {
            epoch = est.epoch();
            let suspended = previous_bmm.is_some_and(|b| {
                (x.boottime_minus_monotonic_ns as i128 - b as i128).unsigned_abs()
                    > config.epoch_jump_ns as u128
            });
            if suspended {
                starts.push((i, true));
                pending = None;
            } else {
                pending = Some(i);
            }
        }
        previous_bmm = Some(x.boottime_minus_monotonic_ns);
        if let (Some(at), Some(first)) = (pending, est.epoch_first_relay_ns()) {
            // The epoch's first fitted sample: at or before the one that
            // confirmed the step, after the previous segment's start.
            let last_start = starts.last().map_or(0, |s| s.0);
            let start = (last_start + 1..=at.max(i))
                .rev()
                .find(|&k| seen[k] == first)
                .unwrap_or(at);
            if start > last_start {
                starts.push((start, false));
            }
            pending = None;
        }
    }
    starts
}

/// A constant past every timestamp of `xs` (at u64::MAX, at it), to
/// reflect time about.
fn mirror_ns(xs: &[Exchange]) -> u64 {
    xs.iter()
        .map(|x| x.t[3].max(x.t[2]))
        .max()
        .unwrap_or(0)
        .saturating_add(1)
}

/// `x` in reflected time (`t -> mirror - t`): host send is the reflected
/// receive, relay receive the reflected reply, and so on.
fn reflect(x: &Exchange, mirror: u64) -> Exchange {
    let [t1, t2, t3, t4] = x.t.map(|t| mirror.saturating_sub(t));
    Exchange {
        t: [t4, t3, t2, t1],
        boottime_minus_monotonic_ns: x.boottime_minus_monotonic_ns,
    }
}

/// The estimate after each sample of `xs`, fed in order.
fn forward_pass(config: EstimatorConfig, xs: &[Exchange]) -> Vec<Option<SyncEstimate>> {
    let mut est = Estimator::new(config);
    xs.iter()
        .map(|x| {
            let [t1, t2, t3, t4] = x.t;
            est.add_sample(t1, t2, t3, t4, x.boottime_minus_monotonic_ns)
                .or_else(|| est.estimate())
        })
        .collect()
}

/// The estimate after each sample of `xs` fed last first, in time
/// reflected about `mirror_ns`; in the order of `xs`.
fn backward_pass(
    config: EstimatorConfig,
    xs: &[Exchange],
    mirror_ns: u64,
) -> Vec<Option<SyncEstimate>> {
    let mut est = Estimator::new(config);
    let mut backward: Vec<Option<SyncEstimate>> = xs
        .iter()
        .rev()
        .map(|x| {
            let [t1, t2, t3, t4] = reflect(x, mirror_ns).t;
            est.add_sample(t1, t2, t3, t4, x.boottime_minus_monotonic_ns)
                .or_else(|| est.estimate())
        })
        .collect();
    backward.reverse();
    backward
}

impl Segment {
    fn estimate(config: EstimatorConfig, xs: &[Exchange]) -> Self {
        let mirror_ns = mirror_ns(xs);
        let forward = forward_pass(config, xs);
        let backward = backward_pass(config, xs, mirror_ns);
        Self::from_passes(config, xs, forward, backward, mirror_ns)
    }

    /// This segment (fitted over `xs`) fitted again without its samples
    /// after the first `keep` (at least one). The forward estimate after
    /// a sample reads only the samples before it, so those are kept; the
    /// backward pass runs again.
    fn without_end(&self, config: EstimatorConfig, xs: &[Exchange], keep: usize) -> Self {
        debug_assert_eq!(xs.len(), self.mids.len(), "the samples it was fitted over");
        let xs = &xs[..keep];
        let mirror_ns = mirror_ns(xs);
        let forward = self.forward[..keep].to_vec();
        let backward = backward_pass(config, xs, mirror_ns);
        Self::from_passes(config, xs, forward, backward, mirror_ns)
    }

    /// This segment (fitted over `xs`) fitted again without its first
    /// `cut` samples (fewer than it has): the mirror of
    /// [`Self::without_end`], the backward estimates kept where the
    /// reflection constant is the same.
    fn without_start(&self, config: EstimatorConfig, xs: &[Exchange], cut: usize) -> Self {
        debug_assert_eq!(xs.len(), self.mids.len(), "the samples it was fitted over");
        let xs = &xs[cut..];
        let mirror_ns = mirror_ns(xs);
        let forward = forward_pass(config, xs);
        let backward = if mirror_ns == self.mirror_ns {
            self.backward[cut..].to_vec()
        } else {
            backward_pass(config, xs, mirror_ns)
        };
        Self::from_passes(config, xs, forward, backward, mirror_ns)
    }

    fn from_passes(
        config: EstimatorConfig,
        xs: &[Exchange],
        forward: Vec<Option<SyncEstimate>>,
        backward: Vec<Option<SyncEstimate>>,
        mirror_ns: u64,
    ) -> Self {
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
            corridor: Corridor::fit(xs.iter().map(|x| x.t), slope_range(config)),
            likely_from_ns: i128::MIN,
            likely_to_ns: i128::MAX,
            ramp_before: None,
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
            .and_then(|e| Some(side(e.checked_to_host(relay_ns)?, &e, relay_ns)));
        // A host time beyond i64 (a damaged sidecar) has no mapping, not
        // a saturated one that would pass for a time.
        let backward = self.backward.get(after).copied().flatten().and_then(|e| {
            let mirrored = self.mirror_ns.saturating_sub(relay_ns);
            let host = self.mirror_ns as i128 - e.checked_to_host(mirrored)? as i128;
            Some(side(i64::try_from(host).ok()?, &e, mirrored))
        });
        debug_assert!(self.mids.len() == self.forward.len());
        match (forward, backward) {
            (Some(f), Some(b)) => {
                // The envelope's point, unless the two sides' fits, both
                // close to it, disagree with it: edge legs of a slew the
                // step test let in tilt the envelope's line far more than
                // the regressions, which weigh them as two of many.
                // Where the envelope has no line (a segment's first and
                // last second), a young side's sigma is no measure.
                let corridor = self.corridor.to_host(relay_ns).filter(|&c| agrees(c, f, b));
                // Beyond a segment's outer grid points with legs either
                // side only a segment fitted as one curve has a line. There
                // a full side facing a young one and the curve are both
                // estimates off in ways nothing here tells apart: the side's
                // regression lags a wandering clock (the first second after
                // a step, 10-18 µs off on real captures), the curve misses
                // a bend beyond its shape at its ends (12 µs in one). Their
                // mean halves the worse one's error. (The curve alone can
                // sit at an end of the narrow interval a full side leaves:
                // a refined capture's p99 bound 77 -> 106 µs in 1 of 5 runs
                // of tests/tests/refine_capture.rs.)
                let point = if self.corridor.surrounds(relay_ns) {
                    corridor.or_else(|| mature(f, b))
                } else {
                    match (mature(f, b), corridor) {
                        (Some(side), Some(curve)) => Some(midway(side, curve)),
                        (side, curve) => side.or(curve),
                    }
                };
                Some(envelope(combine(f, b), point))
            }
            (Some(f), None) => Some(f.into_smoothed(Sides::Before)),
            (None, Some(b)) => Some(b.into_smoothed(Sides::After)),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests;
