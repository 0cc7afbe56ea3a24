//! The reordering window of a converted file: timed packets wait here and
//! leave in the order the trace processor's sorter gives JSON events: by
//! time, then at one time ends (`E`, and the end of an `X`) first, complete
//! events longest first, everything else in the order it was made.
//!
//! Invariants: at most `keep` bytes stay held after [`Window::release`];
//! what leaves late (its time before one already released) is counted in
//! `json_events_out_of_window`; complete events are placed on their
//! thread's track or a spill track ([`super::spill`]) as they leave, in
//! time order, as the trace processor places them.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use prost::Message;
use tracesync_protocol::perfetto::TracePacket;
use tracesync_protocol::perfetto::trace_packet::Data;

use super::JsonStats;
use super::framing::framed;
use super::spill::Spill;

/// Sort key of an end at a time: before anything else at that time.
pub const KEY_END: i64 = i64::MIN;
/// Sort key of events with no rule of their own.
pub const KEY_OTHER: i64 = i64::MAX;

/// The sort key of a complete event's begin: the longest first.
pub fn key_complete(dur: i64) -> i64 {
    i64::MAX - dur
}

/// What a held packet is, for the placement of complete events.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Plain,
    /// The begin of a complete event on `thread`, `dur` long.
    CompleteBegin {
        thread: u64,
        dur: i64,
    },
    /// The end of the complete event whose begin was held as `begin`.
    CompleteEnd {
        begin: u64,
    },
}

/// A timed packet waiting for its turn.
struct Pending {
    ts: i64,
    key: i64,
    seq: u64,
    bytes: Vec<u8>,
    mark: Mark,
}

impl Pending {
    fn order(&self) -> (i64, i64, u64) {
        (self.ts, self.key, self.seq)
    }
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        self.order() == o.order()
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> Ordering {
        self.order().cmp(&o.order())
    }
}

/// Timed packets held back to put a file's events in order.
pub struct Window {
    heap: BinaryHeap<Reverse<Pending>>,
    held_bytes: usize,
    made: u64,
    released: i64,
    spill: Spill,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            held_bytes: 0,
            made: 0,
            released: i64::MIN,
            spill: Spill::default(),
        }
    }
}

impl Window {
    /// Holds a framed packet; returns its number (for a [`Mark::CompleteEnd`]).
    pub fn hold(&mut self, ts: i64, key: i64, bytes: Vec<u8>, mark: Mark) -> u64 {
        self.held_bytes += bytes.len();
        self.made += 1;
        self.heap.push(Reverse(Pending {
            ts,
            key,
            seq: self.made,
            bytes,
            mark,
        }));
        self.made
    }

    /// Releases held packets until at most `keep` bytes are held.
    pub fn release(&mut self, keep: usize, out: &mut Vec<u8>, stats: &mut JsonStats) {
        while self.held_bytes > keep {
            let Some(Reverse(p)) = self.heap.pop() else {
                break;
            };
            self.held_bytes -= p.bytes.len();
            if p.ts < self.released {
                stats.json_events_out_of_window += 1;
            }
            self.released = self.released.max(p.ts);
            let track = match p.mark {
                Mark::Plain => None,
                Mark::CompleteBegin { thread, dur } => {
                    self.spill.place_begin(thread, p.seq, p.ts, dur, out, stats)
                }
                Mark::CompleteEnd { begin } => self.spill.place_end(begin),
            };
            match track {
                Some(uuid) => out.extend(on_track(&p.bytes, uuid)),
                None => out.extend(p.bytes),
            }
        }
    }
}

/// A framed TrackEvent packet moved to the track `uuid` (the packet is
/// kept as it was if it cannot be read back, which cannot happen for the
/// packets this module is given).
fn on_track(bytes: &[u8], uuid: u64) -> Vec<u8> {
    let Some(body) = bytes.get(1..) else {
        return bytes.to_vec();
    };
    match TracePacket::decode_length_delimited(body) {
        Ok(mut p) => {
            if let Some(Data::TrackEvent(e)) = &mut p.data {
                e.track_uuid = Some(uuid);
            }
            framed(&p)
        }
        Err(_) => bytes.to_vec(),
    }
}
