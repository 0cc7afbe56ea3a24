//! Clock epochs of one relay, for mapping each packet with the estimate of
//! its own epoch.
//!
//! A suspend makes the relay's BOOTTIME-MONOTONIC jump; the prober's
//! estimator then starts a new epoch and never fits across it. Packets of
//! the old epoch can still be on their way (spooled, pending, resent), so
//! the core keeps the last estimate of each earlier epoch and picks, per
//! packet, the one whose BOOTTIME-MONOTONIC matches the relay's at the
//! packet's time (read from the relay's own ClockSnapshots).

use std::collections::VecDeque;

use super::estimate::SyncEstimate;
use crate::sync::covering::{CoveringEstimates, Mapping, Refinement, refine};

/// A BOOTTIME-MONOTONIC change larger than this is a new epoch (the
/// estimator's own threshold).
pub const EPOCH_JUMP_NS: i64 = 1_000_000;
/// Earlier epochs remembered (estimates and snapshot boundaries).
const KEPT: usize = 8;

fn same_epoch(a: i64, b: i64) -> bool {
    a.abs_diff(b) <= EPOCH_JUMP_NS.unsigned_abs()
}

/// Where the relay's epochs begin, from its ClockSnapshots:
/// (relay BOOTTIME, BOOTTIME-MONOTONIC) at each change.
#[derive(Debug, Default)]
pub struct EpochBoundaries {
    starts: VecDeque<(i64, i64)>,
}

impl EpochBoundaries {
    /// Notes a snapshot that read BOOTTIME and MONOTONIC together.
    pub fn observe(&mut self, boottime: i64, monotonic: i64) {
        let bmm = boottime.saturating_sub(monotonic);
        if self
            .starts
            .back()
            .is_some_and(|&(_, last)| same_epoch(last, bmm))
        {
            return;
        }
        self.starts.push_back((boottime, bmm));
        if self.starts.len() > KEPT {
            self.starts.pop_front();
        }
    }

    /// BOOTTIME-MONOTONIC in force at relay BOOTTIME `boottime`; None
    /// before the first snapshot seen.
    pub fn at(&self, boottime: i64) -> Option<i64> {
        self.starts
            .iter()
            .rev()
            .find(|&&(start, _)| start <= boottime)
            .map(|&(_, bmm)| bmm)
    }
}

/// The latest estimate of each epoch recently seen, newest first.
#[derive(Debug, Default)]
pub struct EarlierEstimates {
    estimates: VecDeque<SyncEstimate>,
}

impl EarlierEstimates {
    /// Keeps `previous` if `next` belongs to another epoch.
    pub fn replaced(&mut self, previous: Option<SyncEstimate>, next: &SyncEstimate) {
        let Some(previous) = previous else {
            return;
        };
        if same_epoch(
            previous.boottime_minus_monotonic_ns,
            next.boottime_minus_monotonic_ns,
        ) {
            return;
        }
        self.estimates.retain(|e| {
            !same_epoch(
                e.boottime_minus_monotonic_ns,
                previous.boottime_minus_monotonic_ns,
            )
        });
        self.estimates.push_front(previous);
        self.estimates.truncate(KEPT);
    }

    /// The estimate to map a packet of epoch `bmm` with: `latest` when it
    /// is of that epoch (or the epoch is unknown), else the kept one of that
    /// epoch, else `latest`.
    pub fn pick<'a>(
        &'a self,
        latest: Option<&'a SyncEstimate>,
        bmm: Option<i64>,
    ) -> Option<&'a SyncEstimate> {
        let latest = latest?;
        let Some(bmm) = bmm else {
            return Some(latest);
        };
        if same_epoch(latest.boottime_minus_monotonic_ns, bmm) {
            return Some(latest);
        }
        self.estimates
            .iter()
            .find(|e| same_epoch(e.boottime_minus_monotonic_ns, bmm))
            .or(Some(latest))
    }
}

/// Checks a packet's mapping, made on arrival, against the probe samples
/// taken after it (`crate::sync::covering`) in the packet's epoch `bmm`
/// (BOOTTIME-MONOTONIC at the packet; None when unknown). `relay_ns` is the
/// packet's relay BOOTTIME.
pub fn check_mapping(
    covering: &mut CoveringEstimates,
    bmm: Option<i64>,
    relay_ns: u64,
    provisional: Mapping,
) -> (Mapping, Refinement) {
    let later = covering
        .from(relay_ns)
        .map(|c| c.estimate)
        .take_while(|e| bmm.is_none_or(|b| same_epoch(e.boottime_minus_monotonic_ns, b)));
    refine(provisional, relay_ns, later)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(offset_ns: i64, bmm: i64) -> SyncEstimate {
        SyncEstimate {
            offset_ns,
            boottime_minus_monotonic_ns: bmm,
            ..SyncEstimate::default()
        }
    }

    #[test]
    fn packets_take_the_estimate_of_their_own_epoch() {
        let mut bounds = EpochBoundaries::default();
        bounds.observe(1_000, 0); // bmm 1_000
        bounds.observe(2_000, 1_000); // same epoch
        bounds.observe(60_000_000_000, 20_000_000_000); // suspend: bmm 40 s
        assert_eq!(bounds.at(500), None);
        assert_eq!(bounds.at(1_500), Some(1_000));
        assert_eq!(bounds.at(59_999_999_999), Some(1_000));
        assert_eq!(bounds.at(60_000_000_000), Some(40_000_000_000));

        let old = estimate(5_000, 1_000);
        let new = estimate(9_000, 40_000_000_000);
        let mut earlier = EarlierEstimates::default();
        earlier.replaced(None, &old);
        earlier.replaced(Some(old), &new);
        let pick = |c: i64| earlier.pick(Some(&new), bounds.at(c)).unwrap().offset_ns;
        assert_eq!(pick(30_000_000_000), 5_000, "before the suspend");
        assert_eq!(pick(61_000_000_000), 9_000, "after it");
        assert_eq!(pick(0), 9_000, "unknown epoch: the latest");
        // A re-estimate within the same epoch replaces nothing.
        earlier.replaced(Some(new), &estimate(9_100, 40_000_000_500));
        assert_eq!(earlier.estimates.len(), 1);
        assert_eq!(earlier.pick(None, Some(1_000)), None);
    }

    #[test]
    fn boundaries_and_estimates_stay_bounded() {
        let mut bounds = EpochBoundaries::default();
        let mut earlier = EarlierEstimates::default();
        let mut previous = None;
        for i in 0..100i64 {
            let bmm = i * 10_000_000_000;
            bounds.observe(bmm + i, i);
            let e = estimate(i, bmm);
            earlier.replaced(previous, &e);
            previous = Some(e);
        }
        assert_eq!(bounds.starts.len(), KEPT);
        assert_eq!(earlier.estimates.len(), KEPT);
    }
}
