//! Across a gap in the samples (a partition): the mapping between the
//! last grid line before it and the first after it.
//!
//! A clock whose frequency wanders as a random walk (a crystal's) bends
//! away from the straight join of the two edge points by more than the
//! points' own error over a long gap (the simulator's 60 s partition on
//! LAN: 1-3 µs in the gap's worst third). With the frequency known at
//! both edges as well, the expected path is the cubic through both
//! points with those slopes. The edge lines' own slopes are no use for
//! it (fitted with their window half in the gap, they are noisier than
//! the bend), so each side's slope is fitted anew over a whole window of
//! legs on that side only. A line's slope is the clock's mean frequency
//! over its legs, so it holds at their middle, not at the edge: the
//! cubic takes each slope where it holds (exact for a steadily changing
//! frequency; see docs/clock-sync-refine.md "Across a partition").
//!
//! Invariants: one entry per gap (bounded by the legs, not the span);
//! without a fitted slope on both sides the join stays straight; the
//! points of the edge lines are kept (the bend is 0 at both).

use super::{Leg, Line, windows_with_enough};

/// A slope fitted on one side of a gap, and the relay time it holds at.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Slope {
    at_ns: u64,
    slope: f64,
}

/// The slopes either side of one gap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct EdgeSlopes {
    /// Grid index of the first line after the gap.
    pub(super) after: u64,
    before: Slope,
    after_gap: Slope,
}

/// For each gap between consecutive `lines` (grid points `first + k *
/// grid`), the slopes fitted over the legs within `reach` before the gap
/// and within `reach` after it, by `fit` (the segment's line or parabola
/// at a point). Gaps where either side has too few legs are left out.
pub(super) fn edge_slopes(
    lines: &[(u64, Line)],
    (lower, upper): (&[Leg], &[Leg]),
    (first, grid, reach): (u64, u64, u64),
    fit: impl Fn(&[Leg], &[Leg], u64) -> Option<Line>,
) -> Vec<EdgeSlopes> {
    let slope = |from: u64, to: u64, at: u64| {
        let (lo, up) = windows_with_enough(lower, upper, from, to)?;
        let line = fit(lo, up, at)?;
        // A line's slope is the mean over its legs: the clock's at
        // their middle. A parabola's is its own at the point.
        let at_ns = if line.curve == 0.0 {
            let ends = |legs: &[Leg]| (legs[0].relay_ns, legs[legs.len() - 1].relay_ns);
            let ((lo_first, lo_last), (up_first, up_last)) = (ends(lo), ends(up));
            let (from, to) = (lo_first.min(up_first), lo_last.max(up_last));
            from + (to - from) / 2
        } else {
            at
        };
        Some(Slope {
            at_ns,
            slope: line.slope,
        })
    };
    lines
        .windows(2)
        .filter(|pair| pair[1].0 > pair[0].0 + 1)
        .filter_map(|pair| {
            let (before, after) = (pair[0].0, pair[1].0);
            let (at_before, at_after) = (first + before * grid, first + after * grid);
            // The legs of each side: up to the middle of the gap (in
            // it are none or too few for a line of their own).
            let middle = at_before + (at_after - at_before) / 2;
            Some(EdgeSlopes {
                after,
                before: slope(at_before.saturating_sub(reach), middle, at_before)?,
                after_gap: slope(middle, at_after.saturating_add(reach), at_after)?,
            })
        })
        .collect()
}

/// `h` at `relay_ns` between `a`'s point and `b`'s: the straight join,
/// bent into the cubic through both points whose slope is each side's
/// where it was fitted (see the module doc), when both are known.
pub(super) fn across(a: &Line, b: &Line, slopes: Option<&EdgeSlopes>, relay_ns: u64) -> f64 {
    let span = (b.relay_ns - a.relay_ns) as f64;
    let at = |t: u64| (t as i128 - a.relay_ns as i128) as f64 / span;
    let s = at(relay_ns);
    let join = (1.0 - s) * a.h_ns + s * b.h_ns;
    let Some(edges) = slopes else {
        return join;
    };
    // The bend `c(s) = s (s - 1) (p + q s)` is 0 at both points; its
    // slope `c'(s) = p (2s - 1) + q (3s^2 - 2s)` (per unit of s) at each
    // side's point is that side's departure from the join's slope.
    let join_slope = (b.h_ns - a.h_ns) / span;
    let row = |x: f64| (2.0 * x - 1.0, 3.0 * x * x - 2.0 * x);
    let (b0, b1) = (at(edges.before.at_ns), at(edges.after_gap.at_ns));
    let ((m00, m01), (m10, m11)) = (row(b0), row(b1));
    let (r0, r1) = (
        span * (edges.before.slope - join_slope),
        span * (edges.after_gap.slope - join_slope),
    );
    let det = m00 * m11 - m01 * m10;
    // Both slopes at one place (never for points either side of a gap).
    if det.abs() < 1e-9 {
        return join;
    }
    let p = (r0 * m11 - m01 * r1) / det;
    let q = (m00 * r1 - r0 * m10) / det;
    join + s * (s - 1.0) * (p + q * s)
}
