//! Ordering of resolved packets: one FIFO per stream, heads merged by time.
//!
//! A stream (relay instance, relay sequence) is never reordered: only its
//! head competes with other heads, by its time, or first of all when it is
//! dated beyond the horizon ([`Queued::order_ts`]). The heap holds exactly one entry per
//! non-empty stream (its head), so keys never go stale.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::fifo::Fifo;
use super::queued::Queued;
use super::types::StreamId;
use crate::hash::IdMap;

/// Memory a queued packet takes besides its bytes (its entry in the stream
/// queue): counted in [`Order::bytes`], so the queue's bound holds for
/// small packets too.
pub const ENTRY_OVERHEAD: usize = std::mem::size_of::<(u64, Queued)>();

#[derive(Debug, Default)]
pub struct Order {
    /// Each packet with its arrival number. A [`Fifo`] per stream: the
    /// memory behind [`Order::bytes`] is what it counts plus at most two
    /// partly used chunks per stream.
    streams: IdMap<StreamId, Fifo<(u64, Queued)>>,
    /// (head ts, arrival of the head, stream): arrival breaks ties so equal
    /// times come out in the order they came in.
    heap: BinaryHeap<Reverse<(i64, u64, StreamId)>>,
    next_arrival: u64,
    bytes: usize,
    len: usize,
}

impl Order {
    #[inline(always)]
    pub fn push(&mut self, item: Queued) {
        let stream = item.stream;
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.bytes += item.bytes.len() + ENTRY_OVERHEAD;
        self.len += 1;
        let queue = self.streams.entry(stream).or_default();
        if queue.is_empty() {
            self.heap.push(Reverse((item.order_ts(), arrival, stream)));
        }
        queue.push_back((arrival, item));
    }

    /// Time of the earliest head, if any.
    pub fn peek_ts(&self) -> Option<i64> {
        self.heap.peek().map(|Reverse((ts, _, _))| *ts)
    }

    /// Removes the earliest head if its time is <= `limit`.
    #[inline(always)]
    pub fn pop_through(&mut self, limit: i64) -> Option<Queued> {
        if self.peek_ts()? > limit {
            return None;
        }
        self.pop()
    }

    /// Removes the earliest head.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<Queued> {
        let Reverse((_, _, stream)) = self.heap.pop()?;
        let queue = self.streams.get_mut(&stream)?;
        let (_, item) = queue.pop_front()?;
        if let Some((arrival, next)) = queue.front() {
            self.heap.push(Reverse((next.order_ts(), *arrival, stream)));
            // The stream's next pops come dozens of pops later: start
            // loading what they read now (the queue is far larger than
            // the caches; these loads were the drain's stalls).
            next.warm_bytes();
            if let Some((_, after)) = queue.second() {
                after.warm();
            }
        }
        self.bytes -= item.bytes.len() + ENTRY_OVERHEAD;
        self.len -= 1;
        Some(item)
    }

    /// Packet bytes (stamped length) plus [`ENTRY_OVERHEAD`] per packet.
    /// A data packet may be a slice of its relay's frame: ingest queues
    /// slices only of frames whose packets' stamped lengths cover them, so
    /// this still bounds the memory held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Forgets an empty stream's queue (the core forgot the stream).
    pub fn remove_stream(&mut self, stream: StreamId) {
        if self.stream_len(stream) == 0 {
            self.streams.remove(&stream);
        }
    }

    /// Entries the stream queues have room for (their memory is this times
    /// [`ENTRY_OVERHEAD`]).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.streams.values().map(Fifo::capacity).sum()
    }

    /// Packets queued on one stream.
    pub fn stream_len(&self, stream: StreamId) -> usize {
        self.streams.get(&stream).map_or(0, Fifo::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::fifo::CHUNK;
    use crate::live::packet::Role;
    use crate::live::queued::Parts;

    fn queued(ts: i64, len: usize) -> Queued {
        Queued::pack(Parts {
            stream: 0,
            ts,
            err_ns: 0,
            clock: 0,
            clock_ts: 0,
            machine_raw_id: 1,
            seq: 2,
            data_field: None,
            role: Role::Data,
            bytes: vec![0u8; len].into(),
            relayed: None,
            relay_boottime: None,
        })
    }

    #[test]
    fn bytes_count_each_entry_and_a_burst_gives_its_room_back() {
        let mut order = Order::default();
        let burst = 100_000;
        for ts in 0..burst {
            order.push(queued(ts, 10));
        }
        assert_eq!(order.bytes(), burst as usize * (10 + ENTRY_OVERHEAD));
        assert!(order.capacity() >= burst as usize);
        // While it drains, the room behind the queue stays within a
        // factor of what is still in it (the bound counts entries, so the
        // memory behind the bound stays bounded too).
        let mut expected = 0;
        while order.len() > 10 {
            let q = order.pop().expect("queued");
            assert_eq!(q.ts, expected);
            expected += 1;
            let bound = order.len() + 2 * CHUNK;
            assert!(
                order.capacity() <= bound,
                "capacity {} with {} queued",
                order.capacity(),
                order.len()
            );
        }
        assert_eq!(order.bytes(), 10 * (10 + ENTRY_OVERHEAD));
        assert!(order.capacity() <= 2 * CHUNK);
    }
}
