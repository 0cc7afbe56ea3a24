//! Ordering of resolved packets: one FIFO per stream, heads merged by time.
//!
//! A stream (relay instance, relay sequence) is never reordered: only its
//! head competes with other heads. The heap holds exactly one entry per
//! non-empty stream (its head), so keys never go stale.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::hash::IdMap;
use super::packet::OutPacket;

/// Identifies a stream within the core.
pub type StreamId = u32;

/// Which relay batch a packet came in, so emitting it can count towards
/// that batch's acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRef {
    pub relay_instance: u64,
    pub batch: u64,
}

/// A resolved packet waiting for the watermark.
#[derive(Debug)]
pub struct Queued {
    pub packet: OutPacket,
    /// The packet's time on its relay's BOOTTIME (for sync points).
    pub relay_boottime: Option<i64>,
    pub batch: Option<BatchRef>,
}

/// Memory a queued packet takes besides its bytes (its entry in the stream
/// queue): counted in [`Order::bytes`], so the queue's bound holds for
/// small packets too.
pub const ENTRY_OVERHEAD: usize = std::mem::size_of::<(u64, Queued)>();

/// Capacity an emptied stream queue keeps.
const KEEP_CAPACITY: usize = 4_096;

#[derive(Debug, Default)]
pub struct Order {
    /// Each packet with its arrival number.
    streams: IdMap<StreamId, VecDeque<(u64, Queued)>>,
    /// (head ts, arrival of the head, stream): arrival breaks ties so equal
    /// times come out in the order they came in.
    heap: BinaryHeap<Reverse<(i64, u64, StreamId)>>,
    next_arrival: u64,
    bytes: usize,
    len: usize,
}

impl Order {
    pub fn push(&mut self, stream: StreamId, item: Queued) {
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.bytes += item.packet.bytes.len() + ENTRY_OVERHEAD;
        self.len += 1;
        let queue = self.streams.entry(stream).or_default();
        if queue.is_empty() {
            self.heap.push(Reverse((item.packet.ts, arrival, stream)));
        }
        queue.push_back((arrival, item));
    }

    /// Time of the earliest head, if any.
    pub fn peek_ts(&self) -> Option<i64> {
        self.heap.peek().map(|Reverse((ts, _, _))| *ts)
    }

    /// Removes the earliest head if its time is <= `limit`.
    pub fn pop_through(&mut self, limit: i64) -> Option<Queued> {
        if self.peek_ts()? > limit {
            return None;
        }
        self.pop()
    }

    /// Removes the earliest head.
    pub fn pop(&mut self) -> Option<Queued> {
        let Reverse((_, _, stream)) = self.heap.pop()?;
        let queue = self.streams.get_mut(&stream)?;
        let (_, item) = queue.pop_front()?;
        match queue.front() {
            Some((arrival, next)) => self.heap.push(Reverse((next.packet.ts, *arrival, stream))),
            // An emptied queue keeps a modest buffer for the stream's next
            // packets (regrowing it every batch costs copies), not a burst's.
            None => queue.shrink_to(KEEP_CAPACITY),
        }
        self.bytes -= item.packet.bytes.len() + ENTRY_OVERHEAD;
        self.len -= 1;
        Some(item)
    }

    /// Packet bytes plus [`ENTRY_OVERHEAD`] per packet.
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

    /// Packets queued on one stream.
    pub fn stream_len(&self, stream: StreamId) -> usize {
        self.streams.get(&stream).map_or(0, VecDeque::len)
    }
}
