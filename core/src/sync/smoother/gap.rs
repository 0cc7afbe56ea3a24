//! What the samples between two segments say about the change between
//! them (sans-IO): where a step lies among them and the span either side
//! may hold ([`between`], [`place`]; where the two lines cross, a change
//! of rate, at the crossing), and how each sample weighs against either
//! segment's mapping or a blend of the two (for [`super::slew`]).
//!
//! A sample weighs against a mapping by the distance of its midpoint from
//! it, and by how far the mapping would make either leg take negative
//! time (a step larger than a leg's delay can do that on the wrong side,
//! whatever queueing delayed the other leg); each term is capped at the
//! two segments' separation at the sample, so a spiked sample counts for
//! no more than a plain one.
//!
//! Invariants:
//! - **The point only.** A cut moves the point of a timestamp among these
//!   samples and narrows the span where either segment may hold it only
//!   as far as no other cut is nearly as likely; the bound there stays
//!   the hull of both segments' mappings.

use std::ops::Range;

use super::{Exchange, Segment};
/// Settles the step between segment `k - 1` and segment `k` (index
/// ranges `ranges` of `exchanges`; `found_step`: its relay time if
/// [`super::hidden_steps`] found it): its likely place, and the span either
/// side may hold.
pub(super) fn between(
    segments: &mut [Segment],
    k: usize,
    exchanges: &[Exchange],
    ranges: &[Range<usize>],
    found_step: Option<u64>,
) {
    let gap = ranges[k - 1].end..ranges[k].start;
    // Samples by cut: the last one taken before a cut of `n` (n = 0:
    // the earlier segment's last) and the first one after it
    // (n = gap.len(): the later segment's first).
    let last_before = |n: usize| &exchanges[gap.start + n - 1];
    let first_after = |n: usize| &exchanges[gap.start + n];
    let cut = match (gap.is_empty(), found_step) {
        (true, _) => None,
        // A step found by its envelopes: anywhere in the gap, most
        // likely at its middle.
        (false, Some(at)) => Some(Cut {
            best: exchanges[gap.clone()]
                .iter()
                .filter(|x| x.relay_mid_ns() < at)
                .count(),
            earliest: 0,
            latest: gap.len(),
        }),
        (false, None) => place(&segments[k - 1], &segments[k], &exchanges[gap.clone()]),
    };
    // The step most likely lies midway between the samples either
    // side of the best cut. With none (no sample between the two
    // segments, or none telling a side) it lies anywhere between
    // their edge samples: the midway point is then wrong for at
    // most half that span, wherever the step was.
    let (after_best, before_best) = match &cut {
        Some(c) => (last_before(c.best), first_after(c.best)),
        None => (last_before(0), first_after(gap.len())),
    };
    let midway = (after_best.t[3] as i128 + before_best.t[0] as i128) / 2;
    // Where the two segments' lines cross between their edge samples the
    // clock changed its rate there, not its phase (a slew's start or
    // end): each side holds up to the crossing, where they agree.
    let edges = (
        last_before(0).relay_mid_ns(),
        first_after(gap.len()).relay_mid_ns(),
    );
    let step = match found_step {
        None => crossing(&segments[k - 1], &segments[k], edges).unwrap_or(midway),
        Some(_) => midway,
    };
    segments[k - 1].likely_to_ns = step;
    segments[k].likely_from_ns = step;
    // Only the cuts the samples cannot tell apart from the best
    // narrow the span where either side may hold a timestamp.
    if let Some(c) = cut {
        segments[k - 1].last_send_ns = last_before(c.earliest).t[0];
        segments[k].first_receive_ns = first_after(c.latest).t[3];
    }
}

/// Host time where the lines of `before` and `after` cross between relay
/// times `edges` (their edge samples'), if they do.
fn crossing(before: &Segment, after: &Segment, (from, to): (u64, u64)) -> Option<i128> {
    let apart = |relay_ns: u64| -> Option<i128> {
        Some(before.map(relay_ns)?.host_ns as i128 - after.map(relay_ns)?.host_ns as i128)
    };
    let first = apart(from)?;
    if from >= to || first.signum() * apart(to)?.signum() >= 0 {
        return None;
    }
    // Bisection to within a microsecond of relay time.
    let (mut lo, mut hi) = (from, to);
    while hi - lo > 1_000 {
        let mid = lo + (hi - lo) / 2;
        if apart(mid)?.signum() == first.signum() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(before.map(lo)?.host_ns.into())
}

/// Where a step lies among the samples between two segments: the number
/// of them taken before it, and the range of such numbers the samples
/// cannot tell apart from it.
struct Cut {
    best: usize,
    earliest: usize,
    latest: usize,
}

/// How many samples' full weight a cut's cost may exceed the best's and
/// still be taken as possible (each sample weighs at most the step).
const PLAUSIBLE_SAMPLES: i128 = 2;

/// One sample of the gap, mapped by both segments: host times (ns) of its
/// relay midpoint, its relay receive and its relay reply.
#[derive(Clone, Copy)]
pub(super) struct Mapped {
    pub(super) relay_ns: u64,
    /// The sample's host midpoint.
    host: i128,
    t1: i128,
    t4: i128,
    pub(super) before: [i128; 3],
    pub(super) after: [i128; 3],
    /// The two mappings' separation at the sample: no term weighs more.
    pub(super) cap: i128,
}

impl Mapped {
    fn of(before: &Segment, after: &Segment, x: &Exchange) -> Option<Self> {
        let on = |seg: &Segment| -> Option<[i128; 3]> {
            Some([
                seg.map(x.relay_mid_ns())?.host_ns as i128,
                seg.map(x.t[1])?.host_ns as i128,
                seg.map(x.t[2])?.host_ns as i128,
            ])
        };
        let (before, after) = (on(before)?, on(after)?);
        Some(Mapped {
            relay_ns: x.relay_mid_ns(),
            host: (x.t[0] as i128 + x.t[3] as i128) / 2,
            t1: x.t[0] as i128,
            t4: x.t[3] as i128,
            before,
            after,
            cap: (before[0] - after[0]).abs(),
        })
    }

    /// The sample's weight against the mapping `m` (midpoint, receive,
    /// reply host times).
    fn cost(&self, [mid, received, replied]: [i128; 3]) -> i128 {
        let negative = (self.t1 - received).max(0) + (replied - self.t4).max(0);
        (mid - self.host).abs().min(self.cap) + negative.min(self.cap)
    }

    /// How much faster than the link's `floor` (request, reply) the
    /// mapping `m` makes the sample's legs, capped like [`Self::cost`].
    pub(super) fn too_fast(&self, [_, received, replied]: [i128; 3], floor: (i128, i128)) -> i128 {
        let request = (floor.0 - (received - self.t1)).max(0);
        let reply = (floor.1 - (self.t4 - replied)).max(0);
        (request + reply).min(self.cap)
    }

    /// The mapping `share` of the way from the earlier segment's to the
    /// later one's.
    pub(super) fn blended(&self, share: f64) -> [i128; 3] {
        let mut out = [0; 3];
        for (o, (&a, &b)) in out.iter_mut().zip(self.before.iter().zip(&self.after)) {
            *o = a + ((b - a) as f64 * share).round() as i128;
        }
        out
    }
}

/// How many of the samples `gap`, between the segments `before` and
/// `after` (a step lies among them), were taken before the step: the cut
/// that makes each side's samples most likely under its own segment's
/// mapping. None when either segment maps nothing there or no sample
/// tells them apart.
fn place(before: &Segment, after: &Segment, gap: &[Exchange]) -> Option<Cut> {
    let mapped = map_all(before, after, gap)?;
    let costs: Vec<(i128, i128)> = mapped
        .iter()
        .map(|m| (m.cost(m.before), m.cost(m.after)))
        .collect();
    if costs.iter().all(|&(a, b)| a == b) {
        return None;
    }
    let totals = cut_totals(&costs);
    let (best, &least) = totals.iter().enumerate().min_by_key(|&(_, t)| *t)?;
    // A cut within two samples' full weight of the best is as likely.
    let margin = PLAUSIBLE_SAMPLES * costs.iter().map(|c| c.0.max(c.1)).max().unwrap_or(0);
    let plausible = |t: &i128| *t <= least + margin;
    let earliest = totals.iter().position(plausible).unwrap_or(best);
    let latest = totals.iter().rposition(plausible).unwrap_or(best);
    Some(Cut {
        best,
        earliest,
        latest,
    })
}

/// The weight of each cut of samples costing `costs` (against the
/// earlier mapping, against the later one): the "before" costs of the
/// samples before it plus the "after" costs of those after it.
pub(super) fn cut_totals(costs: &[(i128, i128)]) -> Vec<i128> {
    let mut totals = Vec::with_capacity(costs.len() + 1);
    let mut total: i128 = costs.iter().map(|c| c.1).sum();
    totals.push(total);
    for &(a, b) in costs {
        total += a - b;
        totals.push(total);
    }
    totals
}

pub(super) fn map_all(before: &Segment, after: &Segment, xs: &[Exchange]) -> Option<Vec<Mapped>> {
    xs.iter().map(|x| Mapped::of(before, after, x)).collect()
}

/// The link's fastest delays (ns: request, reply) over `xs`, each leg
/// mapped by `seg`: the floor a leg faster than is impossible under a
/// mapping. None without samples.
pub(super) fn floors(seg: &Segment, xs: &[Exchange]) -> Option<(i128, i128)> {
    xs.iter()
        .filter_map(|x| {
            let received = seg.map(x.t[1])?.host_ns as i128;
            let replied = seg.map(x.t[2])?.host_ns as i128;
            Some((received - x.t[0] as i128, x.t[3] as i128 - replied))
        })
        .reduce(|a, b| (a.0.min(b.0), a.1.min(b.1)))
}
