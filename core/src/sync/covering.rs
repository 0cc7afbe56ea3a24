//! Checking a packet's mapping against a probe sample taken after it.
//!
//! A packet is mapped when it arrives, with the estimate of that moment. If
//! the relay's clock stepped after the newest probe sample, no estimate can
//! know it yet: the packet's bound is wrong (the "blind window"). The output
//! holds packets for a merge window anyway, and by the time one is written a
//! sample taken after it usually exists. The estimate right after the first
//! such sample has fitted it (no step), widened its bound to cover it (a
//! step is suspected) or refitted after a confirmed step; checking the
//! packet's mapping against that estimate closes the window.
//!
//! [`CoveringEstimates`] keeps the estimates a relay's samples produced, in
//! order, each with the newest relay time any checked sample had reached;
//! [`refine`] is the check. The live core and the simulator use both.

use std::collections::VecDeque;

use super::SyncEstimate;

/// A relay's recent estimates, oldest first, each tagged with the relay time
/// through which samples had been checked when it was made (non-decreasing
/// along the queue).
#[derive(Clone, Debug)]
pub struct CoveringEstimates {
    entries: VecDeque<SyncEstimate>,
    /// Kept while newer than the newest minus this (relay ns).
    retain_ns: u64,
    max_entries: usize,
    /// Entries pushed and kept so far: the sequence number of the next one.
    pushed: u64,
    /// Sequence number of the entry the last [`Self::from`] started at:
    /// packets are checked in time order, so the next one starts there or
    /// just after it, and a search of the whole queue per packet is
    /// rarely needed.
    last_found: u64,
}

/// One estimate of [`CoveringEstimates`] and its sequence number (how many
/// kept entries came before it), so a caller can attach its own data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Covering<'a> {
    pub sequence: u64,
    pub estimate: &'a SyncEstimate,
}

impl CoveringEstimates {
    /// Keeps estimates covering the last `retain_ns` of relay time (at most
    /// `max_entries` of them; a packet older than the oldest kept entry
    /// takes the oldest, which saw a sample after it, only not the first).
    pub fn new(retain_ns: u64, max_entries: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            retain_ns,
            max_entries: max_entries.max(1),
            pushed: 0,
            last_found: 0,
        }
    }

    /// Records a new estimate. Returns false (and keeps nothing) when it
    /// checked no sample newer than the last one kept: the first estimate
    /// after a sample is the one that decided about it.
    pub fn push(&mut self, estimate: &SyncEstimate) -> bool {
        let through = estimate.covered_through_relay_ns;
        if through == 0
            || self
                .entries
                .back()
                .is_some_and(|last| last.covered_through_relay_ns >= through)
        {
            return false;
        }
        self.entries.push_back(*estimate);
        self.pushed += 1;
        while self.entries.len() > self.max_entries
            || self.entries.front().is_some_and(|f| {
                f.covered_through_relay_ns.saturating_add(self.retain_ns) < through
            })
        {
            self.entries.pop_front();
        }
        true
    }

    /// The estimates from the one made right after the first sample at or
    /// after relay time `relay_ns` on, oldest first (empty if no sample
    /// that new was checked yet). Looks first where the last call started
    /// and just after it (hence `&mut`), then searches.
    pub fn from(&mut self, relay_ns: u64) -> impl Iterator<Item = Covering<'_>> {
        let len = self.entries.len();
        let oldest = self.pushed - len as u64;
        let starts_at = |i: usize| {
            (i == 0 || self.entries[i - 1].covered_through_relay_ns < relay_ns)
                && (i == len || self.entries[i].covered_through_relay_ns >= relay_ns)
        };
        let hint = usize::try_from(self.last_found.saturating_sub(oldest))
            .unwrap_or(len)
            .min(len);
        let i = if starts_at(hint) {
            hint
        } else if hint < len && starts_at(hint + 1) {
            hint + 1
        } else {
            self.entries
                .partition_point(|e| e.covered_through_relay_ns < relay_ns)
        };
        self.last_found = oldest + i as u64;
        let first = self.pushed - (len - i) as u64;
        self.entries
            .range(i..)
            .zip(first..)
            .map(|(estimate, sequence)| Covering { sequence, estimate })
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// [`Self::from`]'s first entry found by a search of the whole queue.
    #[cfg(test)]
    fn searched_from(&self, relay_ns: u64) -> Option<u64> {
        let i = self
            .entries
            .partition_point(|e| e.covered_through_relay_ns < relay_ns);
        (i < self.entries.len()).then(|| self.pushed - (self.entries.len() - i) as u64)
    }
}

/// What [`refine`] did to a mapping: the caller counts it (unprobed,
/// remapped).
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refinement {
    /// A later sample agrees: the mapping stays, its bound is the covering
    /// estimate's plus their distance.
    Confirmed,
    /// A later sample shows the mapping was wrong beyond the covering
    /// estimate's bound (the clock stepped): the packet takes that
    /// estimate's mapping.
    Remapped,
    /// No sample after the packet (in its epoch) yet: the mapping stays as
    /// made on arrival.
    Unprobed,
}

/// A packet's host time and hard bound (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub host_ns: i64,
    pub bound_ns: u64,
}

/// Sample intervals used per packet: the first few after it say as much
/// as all of them, and the cost stays flat.
const MAX_INTERVALS: usize = 8;

/// Checks `provisional`, the mapping of relay time `relay_ns` made on
/// arrival, against the samples taken after it: `later` yields, oldest
/// first, the estimate made right after the first such sample and those
/// after it (of the packet's epoch, available by now).
///
/// The first estimate decides the time: if the mapping lies inside that
/// estimate's interval it stays (the bound grows by their distance), else
/// the packet takes that estimate's mapping. The bound then also covers
/// the case of a clock step before the packet that no sample made the
/// estimator notice (a step within the noise of the samples): the offset
/// at the packet would be the one every later sample saw, within each
/// sample's hard interval carried back by the frequency bound, so the
/// bound reaches the nearest of those intervals.
pub fn refine<'a>(
    provisional: Mapping,
    relay_ns: u64,
    later: impl IntoIterator<Item = &'a SyncEstimate>,
) -> (Mapping, Refinement) {
    let mut later = later.into_iter().take(MAX_INTERVALS);
    let Some(first) = later.next() else {
        return (provisional, Refinement::Unprobed);
    };
    let host_ns = first.to_host(relay_ns);
    let bound_ns = first.bound_at(relay_ns);
    let distance = provisional.host_ns.abs_diff(host_ns);
    let (mut mapping, how) = if distance <= bound_ns {
        let bound_ns = bound_ns.saturating_add(distance);
        (
            Mapping {
                host_ns: provisional.host_ns,
                bound_ns,
            },
            Refinement::Confirmed,
        )
    } else {
        (Mapping { host_ns, bound_ns }, Refinement::Remapped)
    };
    // The nearest interval; once one lies within the bound, the bound
    // stands (most packets stop at the first).
    let offset = match (relay_ns as i64).checked_sub(mapping.host_ns) {
        Some(o) if relay_ns <= i64::MAX as u64 => o as f64,
        _ => (relay_ns as i128 - mapping.host_ns as i128) as f64,
    };
    let floor = mapping.bound_ns as f64;
    let mut nearest = f64::INFINITY;
    for e in std::iter::once(first).chain(later) {
        if let Some(reach) = interval_reach(e, relay_ns, offset) {
            nearest = nearest.min(reach);
            if nearest <= floor {
                break;
            }
        }
    }
    if nearest.is_finite() && nearest > floor {
        // `as` truncates and saturates; +1 rounds up.
        mapping.bound_ns = (nearest as u64).saturating_add(1);
    }
    (mapping, how)
}

/// How far `offset` (relay minus host at relay time `relay_ns`) lies from
/// the far side of `e`'s checked sample interval, carried to `relay_ns`
/// with `e`'s frequency and its bound (ns; None without a sample or for
/// NaN inputs).
fn interval_reach(e: &SyncEstimate, relay_ns: u64, offset: f64) -> Option<f64> {
    let s = e.checked?;
    let distance = super::signed_distance(relay_ns, s.relay_ns);
    // The offset at the packet, had it been the sample's all along.
    let carried = s.offset_ns as f64 - e.freq_ppm * 1e-6 * distance;
    let slack = e.freq_bound_ppm * 1e-6 * distance.abs();
    let reach = (offset - carried).abs() + s.half_width_ns as f64 + slack;
    (!reach.is_nan()).then_some(reach)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::CheckedSample;

    fn estimate(offset_ns: i64, through: u64, bound: u64) -> SyncEstimate {
        SyncEstimate {
            offset_ns,
            ref_relay_ns: through,
            error_bound_ns: bound,
            freq_bound_ppm: 0.0,
            covered_through_relay_ns: through,
            ..SyncEstimate::default()
        }
    }

    #[test]
    fn the_first_estimate_after_a_time_covers_it() {
        let mut ring = CoveringEstimates::new(u64::MAX, 16);
        assert!(ring.push(&estimate(0, 100, 5)));
        assert!(ring.push(&estimate(10, 200, 5)));
        // Nothing newer checked: not kept.
        assert!(!ring.push(&estimate(20, 200, 5)));
        assert!(ring.push(&estimate(30, 300, 5)));
        let c = ring.from(150).next().unwrap();
        assert_eq!((c.sequence, c.estimate.offset_ns), (1, 10));
        let offsets: Vec<i64> = ring.from(200).map(|c| c.estimate.offset_ns).collect();
        assert_eq!(offsets, [10, 30]);
        assert_eq!(ring.from(0).next().unwrap().sequence, 0);
        assert!(ring.from(301).next().is_none());
        assert!(!ring.push(&SyncEstimate::default()), "no sample: not kept");
    }

    #[test]
    fn old_entries_go_by_age_and_count() {
        let mut ring = CoveringEstimates::new(1_000, 3);
        for t in 1..=5u64 {
            ring.push(&estimate(t as i64, t * 100, 5));
        }
        // Count bound: 300, 400, 500 stay; sequence numbers still count all.
        let c = ring.from(0).next().unwrap();
        assert_eq!((c.sequence, c.estimate.offset_ns), (2, 3));
        ring.push(&estimate(9, 1_450, 5));
        // Age: 300 and 400 are older than 1450 - 1000.
        assert_eq!(ring.from(0).next().unwrap().estimate.offset_ns, 5);
    }

    proptest::proptest! {
        /// The search that starts where the last one did finds what a
        /// search of the whole queue finds, whatever the order of the
        /// queries and however the queue moved in between.
        #[test]
        fn from_starts_where_a_whole_search_would(
            steps in proptest::collection::vec((0u64..300, proptest::bool::ANY, 0u64..4_000), 1..200),
            retain in 100u64..2_000,
            max_entries in 1usize..20,
        ) {
            let mut ring = CoveringEstimates::new(retain, max_entries);
            let mut through = 0;
            for (advance, push, v) in steps {
                through += advance;
                // Mostly near the newest, as packets come; some anywhere.
                let query = if v % 4 == 0 { v } else { through.saturating_sub(v % 600) };
                if push {
                    let _ = ring.push(&estimate(0, through, 1));
                }
                let want = ring.searched_from(query);
                let got: Vec<u64> = ring.from(query).map(|c| c.sequence).collect();
                proptest::prop_assert_eq!(got.first().copied(), want);
                proptest::prop_assert_eq!(
                    got.len() as u64,
                    want.map_or(0, |w| ring.pushed - w)
                );
            }
        }
    }

    #[test]
    fn an_agreeing_sample_keeps_the_mapping_and_a_step_remaps_it() {
        let relay = 1_000_000;
        let provisional = Mapping {
            host_ns: relay - 100,
            bound_ns: 10,
        };
        // The covering estimate agrees within its bound: same time, bound
        // grows by the distance.
        let near = estimate(103, relay as u64, 20);
        let (m, how) = refine(provisional, relay as u64, [&near]);
        assert_eq!(how, Refinement::Confirmed);
        assert_eq!(m.host_ns, provisional.host_ns);
        assert!(m.bound_ns >= 23, "{m:?}");
        // It stepped 1 ms: the mapping moves to the covering estimate's.
        let stepped = estimate(1_100, relay as u64, 20);
        let (m, how) = refine(provisional, relay as u64, [&stepped]);
        assert_eq!(how, Refinement::Remapped);
        assert_eq!(m.host_ns, relay - 1_100);
        assert!(m.bound_ns >= 20);
        let (m, how) = refine(provisional, relay as u64, []);
        assert_eq!((m, how), (provisional, Refinement::Unprobed));
    }

    #[test]
    fn the_bound_reaches_the_nearest_later_sample_interval() {
        let relay: u64 = 1_000_000;
        let provisional = Mapping {
            host_ns: relay as i64 - 100,
            bound_ns: 10,
        };
        // The estimate agrees (a step within the noise went unnoticed), but
        // its sample saw offset 400 +- 250: had the clock stepped before
        // the packet, the truth is there.
        let sampled = |offset_ns: i64, half_width_ns: u64| SyncEstimate {
            checked: Some(CheckedSample {
                relay_ns: relay,
                offset_ns,
                half_width_ns,
            }),
            ..estimate(100, relay, 20)
        };
        let wide = sampled(400, 250);
        let (m, how) = refine(provisional, relay, [&wide]);
        assert_eq!(how, Refinement::Confirmed);
        assert_eq!(m.bound_ns, 300 + 250 + 1);
        // A second, narrower sample agrees: the nearest interval counts.
        let narrow = sampled(103, 5);
        let (m, _) = refine(provisional, relay, [&wide, &narrow]);
        assert_eq!(m.bound_ns, wide.bound_at(relay), "the estimate's own");
    }
}
