//! A relay NTP slew between two segments (sans-IO): the clock ran some
//! hundred ppm off for a few seconds, so its offset moved from one
//! segment's line to the next one's along a ramp. On a jittery link the
//! estimator confirms it as a step, going either way, some samples into
//! it: the segments either side end and begin on the ramp, and the
//! samples between them hold its middle. A step placed among them is
//! wrong by up to the whole change for a second or more either side
//! (Wi-Fi, 1 ms in 2 s: up to 0.8 ms). Where the estimator follows the
//! slew without confirming it, the envelopes find it as a step inside
//! one segment: the same holds there.
//!
//! A leg can never be faster than the link's floor (the fastest delay of
//! the segments' own samples further out). The best step among the
//! samples near the gap makes some legs on a ramp faster than that, a
//! ramp through them does not; a step's own legs fit a ramp no better
//! than the step, bar the floor's noise. So a ramp is taken where the
//! best step puts the legs below the floor by more than a
//! [`RAMP_EVIDENCE`]th of the segments' separation in all beyond what
//! the best ramp does (a [`RAMP_EVIDENCE_UNSURE_STEP`]th where the step
//! was not found between two detections). A ramp with any such evidence
//! is a candidate: the segments are fitted again without their samples
//! on it, and the ramp placed and tested again between the new lines.
//!
//! Invariants:
//! - **The point only.** A timestamp on the ramp gets the point that far
//!   along from one segment's mapping to the other's; its bound is the
//!   hull of both, as for a timestamp between a step's detections.
//! - **Steps stay steps.** On the simulator's LAN and Wi-Fi step rows no
//!   step's legs favour a ramp by more than 0.39% of the step between
//!   two detections (the threshold is 2.5%), 3.2% elsewhere (6.25%; see
//!   docs/clock-sync-refine.md).
//! - **Bounded.** The ramp search weighs pairs of cuts among the samples
//!   near the gap (at most 120 between the segments and
//!   [`RAMP_REACH_SAMPLES`] within [`RAMP_REACH_NS`] of each), a pass
//!   over the samples between each pair: ~500 pairs among every few
//!   cuts, then those near the best pair. A ramp found, or a step both
//!   passes confirmed at one sample, costs one pass of each of the two
//!   segments' fits again (the pass that reads the samples cut off),
//!   once, and a second search. Only between segments of at least
//!   [`MIN_NEIGHBOUR_NS`] each: at most one search per 10 s of capture,
//!   however often a relay's clock steps.

use std::ops::Range;

use super::gap::{Mapped, cut_totals, floors, map_all};
use super::{Exchange, MIN_SEGMENT_SAMPLES, Segment};
use crate::sync::EstimatorConfig;

/// How the step between two segments was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StepFound {
    /// Confirmed going either way, some samples apart: the samples
    /// between the two detections belong to neither segment.
    BetweenDetections,
    /// Confirmed going either way at the same sample.
    AtOneSample,
    /// Found by the envelopes inside a segment (hidden below the
    /// queueing).
    ByEnvelopes,
}

/// A slew between two segments: relay times where the clock left the
/// earlier segment's line and where it reached the later one's. Between
/// them the offset moved along a straight ramp from one to the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ramp {
    pub(super) from_relay_ns: u64,
    pub(super) to_relay_ns: u64,
}

impl Ramp {
    /// How far along the ramp relay time `relay_ns` is (0 at its start, 1
    /// at its end); None outside it.
    pub(super) fn share(&self, relay_ns: u64) -> Option<f64> {
        let (from, to) = (self.from_relay_ns, self.to_relay_ns);
        (from < to && (from..=to).contains(&relay_ns))
            .then(|| (relay_ns - from) as f64 / (to - from) as f64)
    }
}

/// Whether a slew lies between segment `k - 1` and segment `k` (index
/// ranges `ranges` of `exchanges`). The ramp that fits the samples near
/// the gap best is a candidate: the two segments are fitted again
/// without their samples on it (a slew's first and last legs bent their
/// lines toward it, so far that a step could fit them as well as a
/// ramp), and the ramp placed again between the new lines. If a ramp
/// then fits clearly better than any step, each segment is taken as
/// likely up to its end of the ramp; on it, a timestamp gets a point
/// along it (the bound over both). If not, the segments are as they were
/// and the caller places a step between them. `found`: how the step
/// between them was found.
pub(super) fn settle_slew(
    config: EstimatorConfig,
    segments: &mut [Segment],
    k: usize,
    exchanges: &[Exchange],
    ranges: &mut [Range<usize>],
    found: StepFound,
) -> bool {
    let (before, after) = (ranges[k - 1].clone(), ranges[k].clone());
    let mid = |i: usize| exchanges[i].relay_mid_ns();
    // A ramp no better than the best step (nearly every step, and the
    // kinks of a LAN slew's joined pieces) is not worth a refit. But
    // where both passes confirmed the step at one sample, one segment
    // may hold the slew whole (confirmed only at its end), its line bent
    // through it so far that no ramp beats a step: the two are fitted
    // again without their samples within reach of the step.
    let searched = slew_between(segments, k, exchanges, ranges);
    let (leave_from, leave_to) = match &searched {
        Some(fit) if fit.evidence > 0 => (fit.ramp.from_relay_ns, fit.ramp.to_relay_ns),
        Some(_) if found == StepFound::AtOneSample => (
            mid(before.end - 1).saturating_sub(RAMP_REACH_NS),
            mid(after.start).saturating_add(RAMP_REACH_NS),
        ),
        _ => return false,
    };
    let first = searched.filter(|fit| fit.evidence > 0);
    let before_end = (before.start..before.end)
        .rev()
        .find(|&i| mid(i) < leave_from)
        .map_or(before.start, |i| i + 1);
    let after_start = (after.start..after.end)
        .find(|&i| mid(i) > leave_to)
        .unwrap_or(after.end);
    let refit = before_end - before.start >= MIN_SEGMENT_SAMPLES
        && after.end - after_start >= MIN_SEGMENT_SAMPLES
        && (before_end < before.end || after_start > after.start);
    let mut kept = None;
    if refit {
        // What the gap before it settled about the earlier segment's
        // start stays.
        let old = &segments[k - 1];
        let settled = (old.likely_from_ns, old.first_receive_ns, old.ramp_before);
        let earlier_samples = &exchanges[before.clone()];
        let mut earlier = old.without_end(config, earlier_samples, before_end - before.start);
        (
            earlier.likely_from_ns,
            earlier.first_receive_ns,
            earlier.ramp_before,
        ) = settled;
        let later =
            segments[k].without_start(config, &exchanges[after.clone()], after_start - after.start);
        kept = Some((
            std::mem::replace(&mut segments[k - 1], earlier),
            std::mem::replace(&mut segments[k], later),
        ));
        ranges[k - 1].end = before_end;
        ranges[k].start = after_start;
    }
    // Without a refit the first search stands.
    let fit = if refit {
        slew_between(segments, k, exchanges, ranges)
    } else {
        first
    };
    let ramp = match fit {
        Some(fit) if fit.clear(found) => fit.ramp,
        _ => {
            if let Some((earlier, later)) = kept {
                (segments[k - 1], segments[k]) = (earlier, later);
                (ranges[k - 1], ranges[k]) = (before, after);
            }
            return false;
        }
    };
    if let Some(m) = segments[k - 1].map(ramp.from_relay_ns) {
        segments[k - 1].likely_to_ns = m.host_ns.into();
    }
    if let Some(m) = segments[k].map(ramp.to_relay_ns) {
        segments[k].likely_from_ns = m.host_ns.into();
    }
    segments[k].ramp_before = Some(ramp);
    true
}

/// [`slew`] between segment `k - 1` and segment `k`: over the samples
/// between them and those of each within [`RAMP_REACH_NS`] of them (a
/// slew's first and last legs pass the estimator's tests), against the
/// floor of the [`FLOOR_NS`] of samples further out.
fn slew_between(
    segments: &[Segment],
    k: usize,
    exchanges: &[Exchange],
    ranges: &[Range<usize>],
) -> Option<RampFit> {
    let (before, after) = (&ranges[k - 1], &ranges[k]);
    let mid = |i: usize| exchanges[i].relay_mid_ns();
    // A slew lies between spans of steady clock; a relay whose clock
    // steps every few seconds (or a sidecar that says so) is not slewing,
    // and costs no ramp search per step.
    let span = |r: &Range<usize>| mid(r.end - 1).saturating_sub(mid(r.start));
    if span(before) < MIN_NEIGHBOUR_NS || span(after) < MIN_NEIGHBOUR_NS {
        return None;
    }
    // At most half of either segment is searched, the rest gives the floor.
    let reach_back = |from: usize, limit: usize, span: u64, most: usize| {
        let edge = mid(from);
        (limit..from)
            .rev()
            .take(most)
            .take_while(|&i| edge.saturating_sub(mid(i)) <= span)
            .last()
            .unwrap_or(from)
    };
    let reach_on = |from: usize, limit: usize, span: u64, most: usize| {
        let edge = mid(from);
        (from + 1..limit)
            .take(most)
            .take_while(|&i| mid(i).saturating_sub(edge) <= span)
            .last()
            .map_or(from + 1, |i| i + 1)
    };
    let (reach, most) = (RAMP_REACH_NS, RAMP_REACH_SAMPLES);
    let near_start = reach_back(before.end - 1, before.start + before.len() / 2, reach, most);
    let near_end = reach_on(after.start, after.end - after.len() / 2, reach, most);
    let floor_start = reach_back(near_start, before.start, FLOOR_NS, usize::MAX);
    let floor_end = reach_on(near_end.saturating_sub(1), after.end, FLOOR_NS, usize::MAX);
    slew(
        &segments[k - 1],
        &segments[k],
        &exchanges[near_start..near_end],
        &exchanges[floor_start..near_start],
        &exchanges[near_end..floor_end],
    )
}

/// How far (relay ns) into each segment the samples of a slew are
/// searched for, and at most how many of them (the search is cubic in
/// its samples: a damaged sidecar's dense samples must not make it
/// slow; the prober's 10 Hz trains and a burst give ~70 in 3 s) ...
const RAMP_REACH_NS: u64 = 3_000_000_000;
const RAMP_REACH_SAMPLES: usize = 96;
/// ... and over how much further out the link's floor is taken.
const FLOOR_NS: u64 = 10_000_000_000;
/// A segment either side of a slew spans at least this (relay ns).
const MIN_NEIGHBOUR_NS: u64 = FLOOR_NS;

/// The ramp between the segments `before` and `after` that fits the
/// samples `near` best (the ones between them and those of each nearest
/// them, in order), and how much less it makes their legs come below
/// the link's floor than the best step among them does; `floor_before`
/// and `floor_after` are samples of each further out, whose fastest legs
/// give that floor. None when either segment maps nothing there.
fn slew(
    before: &Segment,
    after: &Segment,
    near: &[Exchange],
    floor_before: &[Exchange],
    floor_after: &[Exchange],
) -> Option<RampFit> {
    let mapped = map_all(before, after, near)?;
    let (b, a) = (floors(before, floor_before)?, floors(after, floor_after)?);
    let floor = (b.0.min(a.0), b.1.min(a.1));
    let too_fast: Vec<(i128, i128)> = mapped
        .iter()
        .map(|m| (m.too_fast(m.before, floor), m.too_fast(m.after, floor)))
        .collect();
    let step = *cut_totals(&too_fast).iter().min()?;
    let separation = mapped.iter().map(|m| m.cap).max()?;
    let (ramp, ramp_too_fast) = best_ramp(&mapped, floor, separation / RAMP_SOFT)?;
    (ramp.from_relay_ns < ramp.to_relay_ns).then_some(RampFit {
        ramp,
        evidence: step - ramp_too_fast,
        separation,
    })
}

/// The ramp that fits the samples near a gap best, and by how much less
/// (ns, in all) it makes their legs come below the link's floor than
/// the best step does.
struct RampFit {
    ramp: Ramp,
    evidence: i128,
    /// The two segments' largest separation at those samples (ns).
    separation: i128,
}

impl RampFit {
    /// Clearly better than any step: by more than a [`RAMP_EVIDENCE`]th
    /// of the separation between the estimator's two detections of a
    /// step, a [`RAMP_EVIDENCE_UNSURE_STEP`]th elsewhere.
    fn clear(&self, found: StepFound) -> bool {
        let share = match found {
            StepFound::BetweenDetections => RAMP_EVIDENCE,
            StepFound::AtOneSample | StepFound::ByEnvelopes => RAMP_EVIDENCE_UNSURE_STEP,
        };
        self.evidence > self.separation / share
    }
}

/// See [`RampFit::clear`]. Between the estimator's two detections of a
/// step a step's legs favour a ramp by at most 0.39% of the step (the
/// simulator's step rows, 1800 s, seeds 1 and 2).
const RAMP_EVIDENCE: i128 = 40;
/// A step the envelopes found inside a segment, or one both passes
/// confirmed at the same sample, is placed less surely: its legs favour
/// a ramp by up to 3.2% of the step (the simulator's Wi-Fi +200 us
/// rows), a slew's by 11% or more (real sockets; 63% or more in the
/// tests).
const RAMP_EVIDENCE_UNSURE_STEP: i128 = 16;
/// A ramp is placed by the legs within this share of the segments'
/// separation above the link's floor (see [`best_ramp`]).
const RAMP_SOFT: i128 = 16;

/// The ramp between two cuts (each midway between two samples' relay
/// times; the first and last at the first and last sample) under which
/// the legs of `mapped` come least below `floor` + `soft` (the samples
/// before it against the earlier mapping, those after it against the
/// later one, those on it against the blend at their share of it): legs
/// just above the floor say where a ramp fits as the fastest do, and many
/// ramps put none below the floor itself. With how far below `floor`
/// the legs come under it, in all; None for fewer than two samples.
fn best_ramp(mapped: &[Mapped], floor: (i128, i128), soft: i128) -> Option<(Ramp, i128)> {
    let n = mapped.len();
    if n < 2 {
        return None;
    }
    // Cut c lies between sample c - 1 and sample c; a ramp runs from one
    // cut to a later one.
    let relay = |c: usize| mapped[c.min(n - 1)].relay_ns;
    let cut_at = |c: usize| u64::midpoint(relay(c.saturating_sub(1)), relay(c));
    let ramp_between = |i: usize, j: usize| Ramp {
        from_relay_ns: cut_at(i),
        to_relay_ns: cut_at(j),
    };
    let raised = (floor.0 + soft, floor.1 + soft);
    // (below the raised floor, below the floor) of the samples before a
    // cut against the earlier mapping, and after it against the later.
    let weigh = |m: &Mapped, at: [i128; 3]| (m.too_fast(at, raised), m.too_fast(at, floor));
    let add = |a: (i128, i128), b: (i128, i128)| (a.0 + b.0, a.1 + b.1);
    let mut before_sum = vec![(0, 0); n + 1];
    for (c, m) in mapped.iter().enumerate() {
        before_sum[c + 1] = add(before_sum[c], weigh(m, m.before));
    }
    let mut after_sum = vec![(0, 0); n + 1];
    for (c, m) in mapped.iter().enumerate().rev() {
        after_sum[c] = add(after_sum[c + 1], weigh(m, m.after));
    }
    // The ramp between cuts `i` and `j`: (below the raised floor, below
    // the floor) in all.
    let weigh_ramp = |i: usize, j: usize| {
        let ramp = ramp_between(i, j);
        let mut weight = add(before_sum[i], after_sum[j]);
        for m in &mapped[i..j] {
            let blended = m.blended(ramp.share(m.relay_ns).unwrap_or(0.5));
            weight = add(weight, weigh(m, blended));
        }
        weight
    };
    // Every pair of cuts costs a pass over the samples between them:
    // first every `stride`th cut, then every cut near the best pair.
    let stride = n.div_ceil(COARSE_CUTS).max(1);
    let mut best: Option<BestCuts> = None;
    let try_cuts = |best: &mut Option<BestCuts>, i: usize, j: usize| {
        let weight = weigh_ramp(i, j);
        if best.is_none_or(|b| weight.0 < b.weight.0) {
            *best = Some(BestCuts { i, j, weight });
        }
    };
    let coarse: Vec<usize> = (0..n).step_by(stride).chain([n]).collect();
    for (a, &i) in coarse.iter().enumerate() {
        for &j in &coarse[a + 1..] {
            try_cuts(&mut best, i, j);
        }
    }
    let (bi, bj) = best.map(|b| (b.i, b.j))?;
    for i in bi.saturating_sub(stride)..=(bi + stride).min(n - 1) {
        for j in (i + 1).max(bj.saturating_sub(stride))..=(bj + stride).min(n) {
            try_cuts(&mut best, i, j);
        }
    }
    best.map(|b| (ramp_between(b.i, b.j), b.weight.1))
}

/// The best pair of cuts so far in [`best_ramp`], and its weight.
#[derive(Clone, Copy)]
struct BestCuts {
    i: usize,
    j: usize,
    weight: (i128, i128),
}

/// Cuts a ramp's ends are first searched among (see [`best_ramp`]).
const COARSE_CUTS: usize = 32;

#[cfg(test)]
mod tests;
