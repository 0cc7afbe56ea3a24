//! One timestamp's two sides (the forward and backward estimates around
//! it) made into one mapping: their hard intervals intersected, the point
//! chosen, and the span of several mappings when a step lies between them.

use super::{Sides, Smoothed, SyncEstimate};

/// One side's mapping: point, hard bound and sigma (ns).
#[derive(Clone, Copy, Debug)]
pub(super) struct Side {
    host: i64,
    bound: u64,
    sigma: u64,
    /// Samples the side's fit rests on.
    samples: u32,
}

impl Side {
    pub(super) fn into_smoothed(self, sides: Sides) -> Smoothed {
        Smoothed {
            host_ns: self.host,
            bound_ns: self.bound,
            sides,
        }
    }
}

pub(super) fn side(host: i64, e: &SyncEstimate, at: u64) -> Side {
    Side {
        host,
        bound: e.bound_at(at),
        sigma: e.sigma_at(at),
        samples: e.samples,
    }
}

/// Both sides: the inverse-variance mean, kept inside the intersection of
/// the two hard intervals. When they do not meet, or their points differ
/// by more than [`DISAGREEMENT_SIGMAS`] of their spread, a step the
/// estimator took for noise lies between them (a step smaller than the
/// bound passes its hard test, and it takes three samples to confirm one
/// statistically): the span of both, as one side is right.
pub(super) fn combine(f: Side, b: Side) -> Smoothed {
    let (flo, fhi) = interval(f.host, f.bound);
    let (blo, bhi) = interval(b.host, b.bound);
    let (lo, hi) = (flo.max(blo), fhi.min(bhi));
    let pair = Pair::of(f, b);
    if lo > hi || !pair.consistent() {
        return spanning_all(&[(f.host, f.bound), (b.host, b.bound)], None, Sides::Both);
    }
    let point = (pair.mean.round() as i128).clamp(lo, hi);
    let bound = (point - lo).max(hi - point);
    Smoothed {
        host_ns: clamp(point),
        bound_ns: u64::try_from(bound).unwrap_or(u64::MAX),
        sides: Sides::Both,
    }
}

/// The envelope fit's point, kept inside the two sides' hard interval:
/// the bound then reaches both ends of that interval from the new point.
pub(super) fn envelope(both: Smoothed, corridor: Option<i64>) -> Smoothed {
    let Some(point) = corridor else {
        return both;
    };
    let (lo, hi) = interval(both.host_ns, both.bound_ns);
    let point = (point as i128).clamp(lo, hi);
    let bound = (point - lo).max(hi - point);
    Smoothed {
        host_ns: clamp(point),
        bound_ns: u64::try_from(bound).unwrap_or(u64::MAX),
        sides: both.sides,
    }
}

/// The point of the side that rests on a full window when the other is
/// still young: at a segment's edge (its first or last second, where the
/// envelope has no line) the side that starts there has seen a handful of
/// samples, and its sigma, taken from those few, is no measure of its
/// error (a 40 s Wi-Fi run: the backward side 30-90 µs off in its last
/// second, the forward side 0.2 µs). None when both or neither are young.
pub(super) fn mature(f: Side, b: Side) -> Option<i64> {
    let young = |s: Side| s.samples < MATURE_SAMPLES;
    match (young(f), young(b)) {
        (false, true) => Some(f.host),
        (true, false) => Some(b.host),
        _ => None,
    }
}

/// The host time halfway between `a` and `b` (no overflow: it lies
/// between them).
pub(super) fn midway(a: i64, b: i64) -> i64 {
    ((i128::from(a) + i128::from(b)) / 2) as i64
}

/// Samples a side's fit must rest on before its sigma is weighed against
/// the other side's (a probe burst and a few seconds of probes).
const MATURE_SAMPLES: u32 = 32;

/// False when the two sides agree with each other (see [`combine`]) but
/// the envelope's point `c` lies more than [`CORRIDOR_SIGMAS`] of their
/// spread (at least [`CORRIDOR_FLOOR_NS`]) from their inverse-variance
/// mean. Two sides that disagree (a step or a long gap between them)
/// leave the envelope to judge.
pub(super) fn agrees(c: i64, f: Side, b: Side) -> bool {
    let pair = Pair::of(f, b);
    !pair.consistent()
        || (c as f64 - pair.mean).abs() <= (CORRIDOR_SIGMAS * pair.spread).max(CORRIDOR_FLOOR_NS)
}

/// The two sides' inverse-variance mean and the spread of their
/// difference (ns), as [`combine`] and [`agrees`] judge them.
struct Pair {
    mean: f64,
    spread: f64,
    apart: f64,
}

impl Pair {
    fn of(f: Side, b: Side) -> Pair {
        let (sf, sb) = (f.sigma.max(1) as f64, b.sigma.max(1) as f64);
        let (wf, wb) = (sf.powi(-2), sb.powi(-2));
        Pair {
            mean: (f.host as f64 * wf + b.host as f64 * wb) / (wf + wb),
            spread: sf.hypot(sb),
            apart: (f.host as i128 - b.host as i128).unsigned_abs() as f64,
        }
    }

    /// Whether the two points are close enough, for their sigmas, not to
    /// straddle an unnoticed step.
    fn consistent(&self) -> bool {
        self.apart <= DISAGREEMENT_SIGMAS * self.spread
    }
}

/// See [`agrees`].
const CORRIDOR_SIGMAS: f64 = 5.0;
const CORRIDOR_FLOOR_NS: f64 = 1_000.0;

/// How far apart (in sigmas of the two) the two sides' points may be
/// before they are taken to straddle an unnoticed step.
const DISAGREEMENT_SIGMAS: f64 = 5.0;

pub(super) fn interval(host: i64, bound: u64) -> (i128, i128) {
    (host as i128 - bound as i128, host as i128 + bound as i128)
}

/// Mappings of which one holds the truth: the point `preferred` (the one
/// on the likely side of a step), else that of the tightest one (its fit
/// rests on the most consistent samples), with a bound reaching every
/// one's interval.
fn spanning_all(mappings: &[(i64, u64)], preferred: Option<i64>, sides: Sides) -> Smoothed {
    let (lo, hi) = mappings
        .iter()
        .fold((i128::MAX, i128::MIN), |(lo, hi), &(h, b)| {
            let (l, u) = interval(h, b);
            (lo.min(l), hi.max(u))
        });
    let tightest = mappings.iter().min_by_key(|&&(_, b)| b).map(|&(h, _)| h);
    spanning(lo, hi, preferred.or(tightest), sides)
}

/// The interval `lo..=hi` from `point` (its middle when None): the bound
/// reaches both ends.
pub(super) fn spanning(lo: i128, hi: i128, point: Option<i64>, sides: Sides) -> Smoothed {
    let point = point.map_or(lo + (hi - lo) / 2, i128::from);
    let bound = (point - lo).max(hi - point);
    Smoothed {
        host_ns: clamp(point),
        bound_ns: u64::try_from(bound).unwrap_or(u64::MAX),
        sides,
    }
}

pub(super) fn clamp(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}
