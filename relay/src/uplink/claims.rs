//! The relay clocks a frame carries: the relay's progress as the daemon's
//! watermark reads it, "no packet taken before these clocks follows on this
//! connection".
//!
//! - A batch carries the clocks of when it was cut in the spool: every
//!   packet of the batches after it was taken later. (The clocks at send
//!   would claim, while a backlog drains, that packets still in the spool
//!   are seconds newer than they are, and the daemon would write them late.)
//! - A heartbeat with every cut batch sent carries the clocks now (an idle
//!   relay never holds the merge back); with batches still unsent, those of
//!   when the last batch sent was cut.
//! - Stalls: the daemon acks a batch only once all its packets are written,
//!   and writes a packet only once every relay's clocks are a merge window
//!   past it. If the packets in flight cannot pass the relay's own clocks
//!   (they span less than the merge window, or the daemon mapped them with
//!   an estimate it has corrected since, after a clock step), no ack comes,
//!   nothing more is sent, and clocks held at the last batch sent would
//!   stall the merge of every relay for good. So once unsent batches have
//!   waited over [`STALL_GRACE`] for an ack, the relay's clocks run ahead
//!   of its batches by as long as that wait went beyond the grace (never
//!   past now), and stay that far ahead until its backlog is sent or the
//!   connection ends: the daemon moves on, at the risk of writing some
//!   packets late.

use std::collections::VecDeque;
use std::time::Duration;

use tracesync_protocol::relay::v1::RelayClocks;

/// How long unsent batches may wait for an ack before heartbeats advance
/// the relay's clocks past the last batch sent.
pub const STALL_GRACE: Duration = Duration::from_secs(3);

/// Runs of cut batches remembered (beyond: the two oldest merge, keeping
/// the older clocks, which claims less and is safe).
const MAX_RUNS: usize = 16_384;

/// The clocks when each batch not yet acked was cut, as runs of batches cut
/// together: `(first seq, clocks)`, oldest first, contiguous.
#[derive(Debug)]
pub struct CutClocks {
    runs: VecDeque<(u64, RelayClocks)>,
    /// The newest seq noted.
    noted_through: Option<u64>,
    /// The clocks when the uplink started: what it claims before its first
    /// batch.
    start: RelayClocks,
}

impl CutClocks {
    pub fn new(start: RelayClocks) -> Self {
        Self {
            runs: VecDeque::new(),
            noted_through: None,
            start,
        }
    }

    /// Batches up to `last` are cut; those not noted yet were cut by the
    /// time `clocks` were read (`first` is the oldest batch the spool
    /// holds: on a restart, the unacked batches it recovered are noted
    /// with the clocks of the first call).
    pub fn note(&mut self, first: u64, last: u64, clocks: impl FnOnce() -> RelayClocks) {
        let from = self.noted_through.map_or(first, |n| n + 1).max(first);
        if from > last || last == 0 {
            return;
        }
        if self.runs.len() >= MAX_RUNS {
            // The oldest run takes over the second's batches.
            self.runs.remove(1);
        }
        self.runs.push_back((from, clocks()));
        self.noted_through = Some(last);
    }

    /// Forgets the batches before `seq` (acked), keeping what covers
    /// `seq - 1` (a resend after a reconnect starts from there).
    pub fn forget_before(&mut self, seq: u64) {
        while self.runs.get(1).is_some_and(|(first, _)| *first < seq) {
            self.runs.pop_front();
        }
    }

    /// The clocks when batch `seq` was cut, if known.
    pub fn of(&self, seq: u64) -> Option<RelayClocks> {
        let i = self.runs.partition_point(|(first, _)| *first <= seq);
        let (_, clocks) = self.runs.get(i.checked_sub(1)?)?;
        (self.noted_through >= Some(seq)).then_some(*clocks)
    }

    /// What a frame claims when the next batch to send is `next` and the
    /// newest cut is `last`: now if every cut batch is sent, else the
    /// clocks of when batch `next - 1` was cut, or, not known (the first
    /// batch, or batches recovered on a restart), when the uplink started.
    pub fn claim(&self, next: u64, last: u64, now: RelayClocks) -> RelayClocks {
        if next > last {
            return now;
        }
        let cut = next.checked_sub(1).and_then(|prev| self.of(prev));
        earliest(cut.unwrap_or(self.start), now)
    }
}

/// `claim` advanced by `by`, at most to `now`.
pub fn advance(claim: RelayClocks, by: Duration, now: RelayClocks) -> RelayClocks {
    if by.is_zero() {
        return claim;
    }
    let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
    if claim.boottime_ns.saturating_add(by) >= now.boottime_ns {
        return now;
    }
    RelayClocks {
        boottime_ns: claim.boottime_ns + by,
        monotonic_ns: claim.monotonic_ns.saturating_add(by),
        realtime_ns: claim.realtime_ns.saturating_add(by),
        monotonic_raw_ns: claim.monotonic_raw_ns.saturating_add(by),
    }
}

/// Of two readings, the one with the earlier BOOTTIME (a claim never runs
/// ahead of now, even if the clock stepped back since).
fn earliest(a: RelayClocks, b: RelayClocks) -> RelayClocks {
    if a.boottime_ns <= b.boottime_ns { a } else { b }
}

#[cfg(test)]
#[path = "claims_tests.rs"]
mod tests;
