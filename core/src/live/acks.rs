//! Which of a relay's batches may be acknowledged.
//!
//! A batch is done when each of its packets was emitted, dropped or found
//! to be a duplicate; batches the relay lost (a gap in seq) are done by
//! definition. Acknowledged = done through N, as of the last commit.

use std::collections::VecDeque;

/// Most commit points remembered per relay; past it the newest is replaced,
/// which only makes an ack later, never wrong.
const MAX_POINTS: usize = 64;

#[derive(Debug, Default)]
pub struct BatchTracker {
    /// Durable through this batch (what the relay was or will be told).
    acked: u64,
    /// Highest batch seq accepted.
    last_accepted: u64,
    /// Batches with packets still outstanding, (seq, count) by seq. Taken
    /// packets belong to the newest batch and written ones to the oldest
    /// nearly always, so both ends are found without a search (a map
    /// searched on every packet cost ~110 instructions per packet).
    outstanding: VecDeque<(u64, u32)>,
    /// (commit point, done-through then).
    points: VecDeque<(u64, u64)>,
    /// The last ack handed out by `take_ack`.
    reported: u64,
}

/// How a batch seq relates to what was accepted before: the caller counts
/// the batches the relay lost.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchSeq {
    /// Already seen (a resend): its packets are checked one by one.
    Resent,
    /// The next one, or after `lost` batches the relay dropped.
    New { lost: u64 },
}

impl BatchTracker {
    /// Starts where the relay says its spool begins (nothing known before).
    pub fn starting_at(acked: u64) -> Self {
        Self {
            acked,
            last_accepted: acked,
            reported: acked,
            ..Self::default()
        }
    }

    pub fn acked(&self) -> u64 {
        self.acked
    }

    #[cfg(test)]
    pub fn last_accepted(&self) -> u64 {
        self.last_accepted
    }

    pub fn unacked(&self) -> usize {
        self.outstanding.len()
    }

    /// A relay (re)connected saying its spool starts at `oldest`: batches
    /// between what was accepted and `oldest` are lost. Returns how many.
    pub fn resume(&mut self, oldest: u64) -> u64 {
        let lost = oldest.saturating_sub(self.last_accepted.saturating_add(1));
        self.last_accepted += lost;
        lost
    }

    /// Classifies a batch by its seq and records it as accepted.
    pub fn accept(&mut self, seq: u64) -> BatchSeq {
        if seq <= self.last_accepted {
            return BatchSeq::Resent;
        }
        let lost = seq - self.last_accepted - 1;
        self.last_accepted = seq;
        BatchSeq::New { lost }
    }

    /// `n` more packets of `seq` must be emitted before it is done (a
    /// batch's packets are added at once; those not taken after all are
    /// done at once too).
    pub fn add_outstanding(&mut self, seq: u64, n: u32) {
        if n == 0 {
            return;
        }
        match self.outstanding.back_mut() {
            Some((last, count)) if *last == seq => *count = count.saturating_add(n),
            Some((last, _)) if *last > seq => {
                // A resent batch older than the newest.
                match self.outstanding.binary_search_by_key(&seq, |&(s, _)| s) {
                    Ok(i) => {
                        let count = &mut self.outstanding[i].1;
                        *count = count.saturating_add(n);
                    }
                    Err(i) => self.outstanding.insert(i, (seq, n)),
                }
            }
            _ => self.outstanding.push_back((seq, n)),
        }
    }

    /// A packet of `seq` was emitted or dropped (once per packet: inlined).
    #[inline]
    pub fn packet_done(&mut self, seq: u64) {
        let i = match self.outstanding.front() {
            Some(&(first, _)) if first == seq => 0,
            _ => match self.outstanding.binary_search_by_key(&seq, |&(s, _)| s) {
                Ok(i) => i,
                Err(_) => return,
            },
        };
        let n = &mut self.outstanding[i].1;
        *n -= 1;
        if *n == 0 {
            self.outstanding.remove(i);
        }
    }

    /// Every batch <= this is done now.
    pub fn done_through(&self) -> u64 {
        match self.outstanding.front() {
            // A seq 0 (invalid, seen as a resend) must not wrap around.
            Some(&(first, _)) => first.saturating_sub(1),
            None => self.last_accepted,
        }
    }

    /// Remembers what is done at commit point `point`.
    pub fn mark(&mut self, point: u64) {
        let done = self.done_through();
        if self.points.back().is_some_and(|&(_, d)| d == done) {
            return;
        }
        if self.points.len() >= MAX_POINTS {
            self.points.pop_back();
        }
        self.points.push_back((point, done));
    }

    /// Everything drained up to commit point `point` is durable.
    pub fn committed_through(&mut self, point: u64) {
        while let Some(&(p, done)) = self.points.front() {
            if p > point {
                break;
            }
            self.acked = self.acked.max(done);
            self.points.pop_front();
        }
    }

    /// Everything drained so far is durable.
    pub fn committed_now(&mut self) {
        self.acked = self.acked.max(self.done_through());
        self.points.clear();
    }

    /// The ack to send, if it moved since the last one handed out.
    pub fn take_ack(&mut self) -> Option<u64> {
        (self.acked > self.reported).then(|| {
            self.reported = self.acked;
            self.acked
        })
    }

    /// The relay was told `acked` again (Welcome): nothing newer to report.
    pub fn reported_now(&mut self) {
        self.reported = self.acked;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_batches_hold_the_ack() {
        let mut t = BatchTracker::starting_at(0);
        assert_eq!(t.accept(1), BatchSeq::New { lost: 0 });
        t.add_outstanding(1, 1);
        t.add_outstanding(1, 1);
        assert_eq!(t.accept(2), BatchSeq::New { lost: 0 });
        t.add_outstanding(2, 1);
        assert_eq!(t.done_through(), 0);
        // Batch 2's packet is out first: nothing is done through 2 yet.
        t.packet_done(2);
        t.packet_done(1);
        assert_eq!(t.done_through(), 0);
        t.packet_done(1);
        assert_eq!(t.done_through(), 2);
        assert_eq!(t.accept(2), BatchSeq::Resent);
        assert_eq!(t.accept(5), BatchSeq::New { lost: 2 });
        assert_eq!(t.done_through(), 5);
    }

    #[test]
    fn commit_points_ack_only_what_was_drained_before() {
        let mut t = BatchTracker::starting_at(10);
        let _ = t.accept(11);
        t.add_outstanding(11, 1);
        let _ = t.accept(12);
        t.add_outstanding(12, 1);
        t.packet_done(11);
        t.mark(1);
        t.packet_done(12);
        t.mark(2);
        t.committed_through(1);
        assert_eq!(t.take_ack(), Some(11));
        assert_eq!(t.take_ack(), None);
        t.committed_through(2);
        assert_eq!(t.take_ack(), Some(12));
        assert_eq!(t.resume(20), 7);
        assert_eq!(t.last_accepted(), 19);
    }

    proptest::proptest! {
        /// The ends-first bookkeeping counts as a map of seq -> count
        /// would, for any order of taken (several at once, or none) and
        /// written packets (resent batches older than the newest included).
        #[test]
        fn outstanding_counts_as_a_map_would(
            ops in proptest::collection::vec((proptest::bool::ANY, 1u64..12, 0u32..4), 0..200)
        ) {
            let mut t = BatchTracker::starting_at(0);
            let mut model = std::collections::BTreeMap::<u64, u32>::new();
            for (take, seq, n) in ops {
                if take {
                    t.add_outstanding(seq, n);
                    if n > 0 {
                        *model.entry(seq).or_default() += n;
                    }
                } else {
                    t.packet_done(seq);
                    if let Some(n) = model.get_mut(&seq) {
                        *n -= 1;
                        if *n == 0 {
                            model.remove(&seq);
                        }
                    }
                }
                proptest::prop_assert_eq!(t.unacked(), model.len());
                let first = model.keys().next().map(|f| f - 1);
                proptest::prop_assert_eq!(t.done_through(), first.unwrap_or(t.last_accepted));
            }
        }
    }
}
