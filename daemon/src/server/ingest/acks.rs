//! Which commit points the ingest loop may acknowledge (sans-IO).
//!
//! A commit point is taken once everything drained was written; the writer
//! then hands out the number of the commit that will cover it (committed
//! on another thread). The point is acknowledged only once the writer
//! reports that commit durable: never before, whatever order requests,
//! completions and failures come in.

use std::collections::VecDeque;

/// Points waiting for their commit, oldest first. Bounded: past the bound
/// the newest entry takes the newer point and number (its acks wait
/// longer, never less).
#[derive(Debug)]
pub(super) struct AckGate<P> {
    waiting: VecDeque<(u64, P)>,
}

/// Waiting points kept at most (one commit runs, one is merged; more only
/// while commits fail and are retried).
const MAX_WAITING: usize = 8;

impl<P: Copy> AckGate<P> {
    pub(super) fn new() -> Self {
        Self {
            waiting: VecDeque::new(),
        }
    }

    /// A commit was requested after `point` was taken: `Some(n)`, durable
    /// with commit `n`; `None`, durable now. Returns the point to
    /// acknowledge now, if any.
    pub(super) fn requested(&mut self, commit: Option<u64>, point: P) -> Option<P> {
        let Some(n) = commit else {
            // Everything written is durable: the older points too.
            self.waiting.clear();
            return Some(point);
        };
        let full = self.waiting.len() >= MAX_WAITING;
        match self.waiting.back_mut() {
            // A later point of the same commit covers more.
            Some(back) if back.0 >= n || full => *back = (back.0.max(n), point),
            _ => self.waiting.push_back((n, point)),
        }
        None
    }

    /// Nothing was written since the last request: `point` is covered by
    /// the newest waiting commit, or durable now if none waits.
    pub(super) fn unchanged(&mut self, point: P) -> Option<P> {
        match self.waiting.back_mut() {
            Some(back) => {
                back.1 = point;
                None
            }
            None => Some(point),
        }
    }

    /// Every commit through `through` is durable: the newest point that
    /// covers, if any.
    pub(super) fn durable(&mut self, through: u64) -> Option<P> {
        let mut newest = None;
        while let Some(&(n, point)) = self.waiting.front() {
            if n > through {
                break;
            }
            newest = Some(point);
            self.waiting.pop_front();
        }
        newest
    }

    /// No point waits for a commit.
    pub(super) fn idle(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_acked_only_once_their_commit_is_durable() {
        let mut gate = AckGate::new();
        assert_eq!(gate.requested(Some(1), 10), None);
        // Requested while 1 runs: merged into 2.
        assert_eq!(gate.requested(Some(2), 11), None);
        assert_eq!(gate.requested(Some(2), 12), None);
        // Nothing new written: waits for 2 as well.
        assert_eq!(gate.unchanged(13), None);
        assert_eq!(gate.durable(0), None);
        assert_eq!(gate.durable(1), Some(10));
        assert_eq!(gate.durable(1), None);
        assert!(!gate.idle());
        assert_eq!(gate.durable(2), Some(13));
        assert!(gate.idle());
        // Idle and nothing new: durable now.
        assert_eq!(gate.unchanged(14), Some(14));
    }

    #[test]
    fn a_failed_commit_is_covered_by_a_later_success() {
        let mut gate = AckGate::new();
        gate.requested(Some(1), 10);
        // Commit 1 failed (nothing reported); the retry is commit 2.
        gate.requested(Some(2), 11);
        // Only a report reaching 2 acks, and then both points.
        assert_eq!(gate.durable(2), Some(11));
        assert!(gate.idle());
    }

    #[test]
    fn a_commit_in_place_acks_everything() {
        let mut gate = AckGate::new();
        gate.requested(Some(4), 10);
        assert_eq!(gate.requested(None, 11), Some(11));
        assert!(gate.idle());
        // A late report of 4 acks nothing more.
        assert_eq!(gate.durable(4), None);
    }

    #[test]
    fn retries_stay_bounded_and_never_ack_early() {
        let mut gate = AckGate::new();
        for n in 1..100 {
            gate.requested(Some(n), n * 10);
        }
        assert!(gate.waiting.len() <= MAX_WAITING);
        // The newest point waits for the newest commit.
        assert_eq!(gate.durable(98), Some(MAX_WAITING as u64 * 10 - 10));
        assert_eq!(gate.durable(99), Some(990));
    }
}
