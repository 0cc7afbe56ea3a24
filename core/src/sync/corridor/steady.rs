//! The live envelope's slope, chosen by the tightest few legs of each side
//! instead of the single tightest.
//!
//! [`super::midline`]'s slope is where the corridor is widest, which two or
//! three legs decide. Where those legs lie a few seconds apart the width
//! barely changes with the slope (it moves by the slope change times the
//! distance between the binding legs), so one leg a few µs faster than the
//! rest tilts the line by tenths of a ppm, and half a second ahead the
//! mapping moves by µs. Over real sockets the fastest legs are not a sharp
//! floor (scheduling on both ends), and that tilt was most of the live
//! error of a relay whose clock had no drift at all.
//!
//! Where the floor is soft (judged per window by [`steady_count`]), the
//! slope maximises the mean of the `k` lowest ceilings minus the mean of
//! the `k` highest floors instead: the sum of the `k` smallest of lines is
//! concave and of the `k` largest convex, so the objective stays concave
//! and the same golden-section search finds its top, now held by `2k` legs
//! spread over the window. The value is still the middle of the single
//! tightest legs at that slope, so the line keeps the envelope's point
//! (its offset rests on the fastest leg of each side, as before). Where
//! the floor is sharp (exponential queueing: the simulator's Wi-Fi, the
//! proxy's), the single fastest leg is the better estimate (the mean of
//! the `k` fastest is noisier by about sqrt(k / 3)) and nothing changes.
//!
//! Invariants: a sharp floor gives [`super::midline`]'s line exactly; same
//! legs in, same line out (a fixed number of steps); the search works on
//! copies of the legs pruned to those that can still be among the `k` as
//! the bracket narrows, so a 512-leg window costs a few times the hull
//! search, and only where the floor is soft.

use super::geometry::{SEARCH_STEPS, golden_bracket};
use super::{middle_at, midline};

/// The legs per side that choose the slope where the floor is soft, as a
/// share of the window's legs (the real-socket captures of
/// docs/clock-sync-live.md: the offset relay's live error fell most
/// at about 4% of a 512-leg window).
const STEADY_SHARE: f64 = 0.04;

/// Time slices the floor's sharpness is judged over.
const SLICES: usize = 8;

/// How many times later than an exponential floor's the slices' fastest
/// legs must be for the floor to count as soft in the live line: an
/// exponential floor gives about 1 (the slices' fastest are exponential
/// of that mean), the real-socket LAN proxy 1-6.
pub(crate) const SOFT: f64 = 2.0;

/// The same for the final mapping's lines (`super::Corridor`), which are
/// read at their window's middle, where the slope moves the value only
/// through the binding legs' distance from it: there a floor only a
/// little blurred (the simulator's LAN legs, exponential queueing plus a
/// uniform +-2 µs: 1-3 in 32 s windows) is better served by the single
/// fastest legs (with [`SOFT`] the 1800 s `suspend-30s` final p99 went
/// 0.78 / 0.99 -> 0.90 / 1.32 µs, VM/pareto 1.23 / 1.16 -> 1.36 / 1.47),
/// while the real LAN proxy's legs give mostly 3-7 (12 kept captures).
pub(crate) const SOFT_FINAL: f64 = 4.0;

/// How many legs per side choose the slope: [`STEADY_SHARE`] of them where
/// the floor is soft (the slices' fastest legs `soft` times later than an
/// exponential floor's or more), else 1. Judged against the single-leg line
/// (`midline`'s value, slope and width): each leg's lateness is its
/// distance past that line's edge on its own side; with exponential
/// queueing of median lateness `m`, the fastest of a slice's `n` legs is
/// `m / ln 2 / n` late on average, and a floor blurred by scheduling on
/// both hosts puts the slices' fastest legs [`SOFT`] times that late or
/// more.
fn steady_count(
    lower: &[(f64, f64)],
    upper: &[(f64, f64)],
    (value, slope, width): (f64, f64, f64),
    soft: f64,
) -> usize {
    let n = lower.len().min(upper.len());
    let most = ((n as f64 * STEADY_SHARE).round() as usize).max(1);
    if most == 1 || !width.is_finite() {
        return 1;
    }
    let (floor, ceiling) = (value - width / 2.0, value + width / 2.0);
    let (from, to) = lower
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
    let span = (to - from).max(f64::MIN_POSITIVE);
    let slice = |x: f64| (((x - from) / span * SLICES as f64) as usize).min(SLICES - 1);
    let mut fastest = [[f64::INFINITY; SLICES]; 2];
    let mut lateness: Vec<f64> = Vec::with_capacity(lower.len() + upper.len());
    for (side, points, sign, edge) in [(0, lower, -1.0, floor), (1, upper, 1.0, ceiling)] {
        for &(x, y) in points {
            let late = sign * (y - slope * x - edge);
            lateness.push(late);
            let best = &mut fastest[side][slice(x)];
            *best = best.min(late);
        }
    }
    let mid = lateness.len() / 2;
    let (_, &mut median, _) = lateness.select_nth_unstable_by(mid, f64::total_cmp);
    let (sum, seen) = fastest
        .iter()
        .flatten()
        .filter(|v| v.is_finite())
        .fold((0.0, 0usize), |(sum, n), v| (sum + v, n + 1));
    if seen == 0 || median <= 0.0 {
        return 1;
    }
    let mean_fastest = sum / seen as f64;
    let per_slice = (lateness.len() as f64 / (2 * SLICES) as f64).max(1.0);
    let exponential = median / std::f64::consts::LN_2 / per_slice;
    if mean_fastest >= soft * exponential {
        most
    } else {
        1
    }
}

/// The line `y = value + slope * x` midway between the highest of `lower`
/// and the lowest of `upper`: at [`steady_slope`] where the floor is soft
/// (threshold `soft`), else [`midline`]'s. Its value at x = 0, its slope
/// and the single-leg width there; None when either set is empty.
pub(crate) fn steady_midline(
    lower: &[(f64, f64)],
    upper: &[(f64, f64)],
    slopes: (f64, f64),
    soft: f64,
) -> Option<(f64, f64, f64)> {
    let sharp = midline(lower, upper, slopes)?;
    match steady_slope(lower, upper, slopes, sharp, soft) {
        Some(slope) => middle_at(lower, upper, slope),
        None => Some(sharp),
    }
}

/// The slope in `slopes` where the mean of the `k` lowest upper
/// intercepts minus the mean of the `k` highest lower ones is largest,
/// `k` from [`steady_count`] against `sharp` ([`midline`]'s line) with the
/// threshold `soft`; None where the floor is sharp (`k` = 1: `sharp`'s
/// own slope is the one).
pub(crate) fn steady_slope(
    lower: &[(f64, f64)],
    upper: &[(f64, f64)],
    slopes: (f64, f64),
    sharp: (f64, f64, f64),
    soft: f64,
) -> Option<f64> {
    let k = steady_count(lower, upper, sharp, soft);
    if k == 1 {
        return None;
    }
    // Ceilings as they are, floors negated: both sides then want their k
    // smallest intercepts.
    let mut ceilings: Vec<(f64, f64)> = upper.to_vec();
    let mut floors: Vec<(f64, f64)> = lower.iter().map(|&(x, y)| (-x, -y)).collect();
    let mut scratch = Vec::with_capacity(ceilings.len().max(floors.len()));
    let mut range = slopes;
    for _ in 0..SEARCH_STEPS.div_ceil(ROUND_STEPS) {
        keep_candidates(&mut ceilings, range, k, &mut scratch);
        keep_candidates(&mut floors, range, k, &mut scratch);
        let width = |slope: f64| {
            mean_of_smallest(&ceilings, slope, k, &mut scratch)
                + mean_of_smallest(&floors, slope, k, &mut scratch)
        };
        range = golden_bracket(width, range, ROUND_STEPS);
    }
    Some((range.0 + range.1) / 2.0)
}

/// Search steps between two prunings of the candidate legs.
const ROUND_STEPS: usize = 10;

/// Mean of the `k` smallest intercepts `y - slope * x` of `points`.
fn mean_of_smallest(points: &[(f64, f64)], slope: f64, k: usize, scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend(points.iter().map(|&(x, y)| y - slope * x));
    if k < scratch.len() {
        scratch.select_nth_unstable_by(k - 1, f64::total_cmp);
    }
    scratch[..k].iter().sum::<f64>() / k as f64
}

/// Drops the points that are among the `k` smallest intercepts at no
/// slope in `(a, b)`. An intercept is linear in the slope, so over the
/// range it is lowest at an end; the `k` smallest at the middle stay at or
/// below their own highest end value `limit` everywhere in the range, so
/// the k-th smallest never exceeds it, and a point above `limit` at both
/// ends is never among the k.
fn keep_candidates(
    points: &mut Vec<(f64, f64)>,
    (a, b): (f64, f64),
    k: usize,
    scratch: &mut Vec<f64>,
) {
    if points.len() <= k {
        return;
    }
    let middle = (a + b) / 2.0;
    scratch.clear();
    scratch.extend(points.iter().map(|&(x, y)| y - middle * x));
    let (_, &mut kth, _) = scratch.select_nth_unstable_by(k - 1, f64::total_cmp);
    let highest_end = |&(x, y): &(f64, f64)| (y - a * x).max(y - b * x);
    let lowest_end = |&(x, y): &(f64, f64)| (y - a * x).min(y - b * x);
    let limit = points
        .iter()
        .filter(|p| p.1 - middle * p.0 <= kth)
        .map(highest_end)
        .fold(f64::NEG_INFINITY, f64::max);
    points.retain(|p| lowest_end(p) <= limit);
}
