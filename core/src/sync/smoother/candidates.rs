//! The segments' mappings that may hold one timestamp (either side of a
//! step), folded as they are found: [`super::Smoother::map`] runs per
//! packet and allocates nothing.

use super::{Sides, Smoothed, interval, spanning};

/// The mappings that may hold one timestamp, folded as they are found
/// (per packet: no allocation).
pub(super) struct Candidates {
    count: usize,
    first: Option<Smoothed>,
    /// The hull of all their intervals.
    lo: i128,
    hi: i128,
    /// The tightest one's point (the first of equals).
    tightest: Option<(i64, u64)>,
    /// The point of the ones on their segment's likely side, and how many.
    likely: Option<i64>,
    likely_count: usize,
}

impl Default for Candidates {
    fn default() -> Self {
        Self {
            count: 0,
            first: None,
            lo: i128::MAX,
            hi: i128::MIN,
            tightest: None,
            likely: None,
            likely_count: 0,
        }
    }
}

impl Candidates {
    pub(super) fn add(&mut self, m: Smoothed, likely: bool) {
        self.count += 1;
        self.first.get_or_insert(m);
        let (lo, hi) = interval(m.host_ns, m.bound_ns);
        (self.lo, self.hi) = (self.lo.min(lo), self.hi.max(hi));
        if self.tightest.is_none_or(|(_, b)| m.bound_ns < b) {
            self.tightest = Some((m.host_ns, m.bound_ns));
        }
        if likely {
            self.likely_count += 1;
            self.likely = Some(m.host_ns);
        }
    }

    /// Widens the hull to `m`'s interval (a mapping that may hold the
    /// timestamp whatever its host time).
    pub(super) fn cover(&mut self, m: Smoothed) {
        let (lo, hi) = interval(m.host_ns, m.bound_ns);
        (self.lo, self.hi) = (self.lo.min(lo), self.hi.max(hi));
    }

    /// The hull of all, at `point` (inside it).
    pub(super) fn result_at(self, point: i64) -> Option<Smoothed> {
        (self.lo <= self.hi).then(|| spanning(self.lo, self.hi, Some(point), Sides::Straddling))
    }

    /// One: its own mapping. Several (either side of a step): the hull of
    /// all, at the point of the one on its likely side when exactly one
    /// is, else the tightest one's.
    pub(super) fn result(self) -> Option<Smoothed> {
        if self.count <= 1 {
            return self.first;
        }
        let point = match self.likely_count {
            1 => self.likely,
            _ => self.tightest.map(|(h, _)| h),
        };
        Some(spanning(self.lo, self.hi, point, Sides::Straddling))
    }
}
