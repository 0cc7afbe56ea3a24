//! The output side: the ordering queue of resolved packets, the latest time
//! written (what is late), the host's own packets' schedule, and the
//! counters of what came in and was written.

use super::order::Order;
use super::queued::Queued;
use super::types::LiveStats;
use super::types::StreamId;

#[derive(Debug, Default)]
pub(super) struct Output {
    order: Order,
    /// Latest time written.
    last_emitted: Option<i64>,
    host_info_sent: bool,
    /// Host BOOTTIME of the last host ClockSnapshot.
    host_last_snapshot: Option<u64>,
    stats: LiveStats,
}

impl Output {
    pub fn stats(&self) -> LiveStats {
        self.stats
    }

    /// `n` relayed packets came in (a batch).
    pub fn packets_in(&mut self, n: u64) {
        self.stats.packets_in += n;
    }

    /// Queues a resolved packet on its stream.
    #[inline(always)]
    pub fn push(&mut self, item: Queued) {
        self.order.push(item);
    }

    /// The earliest queued packet if its time is <= `limit`.
    #[inline(always)]
    pub fn pop_through(&mut self, limit: i64) -> Option<Queued> {
        self.order.pop_through(limit)
    }

    /// The earliest queued packet.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<Queued> {
        self.order.pop()
    }

    /// The earliest queued packet while the queue holds more than
    /// `max_bytes`, counted as forced out by the queue's bound.
    pub fn pop_over(&mut self, max_bytes: usize) -> Option<Queued> {
        if self.order.bytes() <= max_bytes {
            return None;
        }
        let q = self.order.pop()?;
        self.stats.forced_by_queue_limit += 1;
        Some(q)
    }

    /// Bytes queued (see [`Order::bytes`]).
    pub fn queued_bytes(&self) -> usize {
        self.order.bytes()
    }

    /// Packets queued.
    pub fn queued(&self) -> usize {
        self.order.len()
    }

    /// Forgets the queue of `stream` if it is empty: whether it was.
    pub fn forget_stream_if_empty(&mut self, stream: StreamId) -> bool {
        if self.order.stream_len(stream) != 0 {
            return false;
        }
        self.order.remove_stream(stream);
        true
    }

    /// Packet bytes written so far.
    pub fn bytes_out(&self) -> u64 {
        self.stats.bytes_out
    }

    /// A packet at `ts` of `len` bytes is written: whether it is late
    /// (older than one written before). A packet `ahead` of the horizon is
    /// never late and does not count as written for the others: one packet
    /// dated an hour ahead would make every packet after it late.
    #[must_use]
    pub fn written(&mut self, ts: i64, len: usize, ahead: bool) -> bool {
        let late = !ahead && self.last_emitted.is_some_and(|last| ts < last);
        if !ahead {
            self.last_emitted = Some(self.last_emitted.map_or(ts, |l| l.max(ts)));
        }
        if late {
            self.stats.late_packets += 1;
        }
        self.stats.packets_out += 1;
        self.stats.bytes_out += len as u64;
        late
    }

    /// A sync point was written.
    pub fn sync_point_written(&mut self) {
        self.stats.sync_points_written += 1;
    }

    /// Whether the host's SystemInfo is still to be written (once).
    #[must_use]
    pub fn take_host_info(&mut self) -> bool {
        !std::mem::replace(&mut self.host_info_sent, true)
    }

    /// Whether a host ClockSnapshot is due at host BOOTTIME `now` (one
    /// every `interval_ns`); if so, it is taken as written now.
    #[must_use]
    pub fn take_host_snapshot(&mut self, now: u64, interval_ns: u64) -> bool {
        let due = self
            .host_last_snapshot
            .is_none_or(|last| now >= last.saturating_add(interval_ns));
        if due {
            self.host_last_snapshot = Some(now);
        }
        due
    }
}
