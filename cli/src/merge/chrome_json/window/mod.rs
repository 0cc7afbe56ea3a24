//! The reordering window of a converted file: timed packets are held, in
//! one byte arena, until the window is full; then the earliest leave in
//! the order the trace processor's sorter gives JSON events: by time, then
//! at one time ends (`E`, and the end of an `X`) first, complete events
//! longest first, everything else in the order it was made.
//!
//! Invariants:
//! - At most `limit` bytes of packets are held (plus those of the event
//!   that tipped it over); a release keeps the latest half, so memory is
//!   the arena (`limit`), its spare (`limit / 2`) and one 40-byte entry
//!   per packet. No allocation per packet: a packet is encoded straight into
//!   the arena.
//! - What leaves late (its time before one already released) is counted
//!   in `json_events_out_of_window` and written at once.
//! - Complete events are placed on their thread's track or a spill track
//!   ([`super::spill`]) as they leave, in time order, as the trace
//!   processor places them.

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

/// One held packet: its order, where its bytes are in the arena, and its
/// mark packed in 40 bytes (a [`Mark::CompleteBegin`]'s `dur` is read
/// back from its key).
#[derive(Clone, Copy)]
struct Held {
    ts: i64,
    key: i64,
    /// The thread of a complete event's begin, the begin's number of its
    /// end.
    link: u64,
    off: u32,
    len: u32,
    /// Numbers wrap at 2^32: far more than a window holds at once.
    seq: u32,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    Plain,
    CompleteBegin,
    CompleteEnd,
}

impl Held {
    fn mark(&self) -> Mark {
        match self.kind {
            Kind::Plain => Mark::Plain,
            Kind::CompleteBegin => Mark::CompleteBegin {
                thread: self.link,
                dur: i64::MAX - self.key,
            },
            Kind::CompleteEnd => Mark::CompleteEnd { begin: self.link },
        }
    }
}

// The entry's size is what the window's memory figure counts on.
const _: () = assert!(std::mem::size_of::<Held>() == 40);

/// Timed packets held back to put a file's events in order.
pub struct Window {
    limit: usize,
    /// Held packets: those kept by the last release first, in order, then
    /// the ones made since, in the order they were made.
    entries: Vec<Held>,
    arena: Vec<u8>,
    spare: Vec<u8>,
    made: u32,
    /// The latest timestamp released so far.
    released: i64,
    spill: Spill,
}

impl Window {
    /// A window of `limit` bytes (at most 2 GiB: offsets are 32-bit).
    pub fn new(limit: usize) -> Self {
        Self {
            limit: limit.min(u32::MAX as usize / 2),
            entries: Vec::new(),
            arena: Vec::new(),
            spare: Vec::new(),
            made: 0,
            released: i64::MIN,
            spill: Spill::default(),
        }
    }

    /// Holds the packet at `ts` (sort key `key`) that `encode` appends to
    /// the buffer it is given; returns its number (for a
    /// [`Mark::CompleteEnd`]).
    pub fn hold_with(
        &mut self,
        ts: i64,
        key: i64,
        mark: Mark,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> u64 {
        let off = self.arena.len();
        encode(&mut self.arena);
        let len = self.arena.len() - off;
        self.made = self.made.wrapping_add(1);
        let (kind, link) = match mark {
            Mark::Plain => (Kind::Plain, 0),
            Mark::CompleteBegin { thread, .. } => (Kind::CompleteBegin, thread),
            Mark::CompleteEnd { begin } => (Kind::CompleteEnd, begin),
        };
        // A complete event's begin keeps its `dur` in its key.
        let key = match mark {
            Mark::CompleteBegin { dur, .. } => key_complete(dur),
            _ => key,
        };
        self.entries.push(Held {
            ts,
            key,
            link,
            off: off as u32,
            len: len as u32,
            seq: self.made,
            kind,
        });
        u64::from(self.made)
    }

    /// Releases the earlier half into `out` if the window is full.
    pub fn release_if_full(&mut self, out: &mut Vec<u8>, stats: &mut JsonStats) {
        if self.arena.len() > self.limit {
            self.release(self.limit / 2, out, stats);
        }
    }

    /// Everything still held, in order: the file has ended.
    pub fn finish(&mut self, out: &mut Vec<u8>, stats: &mut JsonStats) {
        self.release(0, out, stats);
        // The arenas of a finished file are not needed again.
        self.arena = Vec::new();
        self.spare = Vec::new();
        self.entries = Vec::new();
    }

    /// Releases the earliest packets until at most `keep` bytes are held.
    fn release(&mut self, keep: usize, out: &mut Vec<u8>, stats: &mut JsonStats) {
        // Stable: ties stay in the order they were made (the kept ones
        // were made before the newer ones that follow them). The kept
        // part is one sorted run, the newer part nearly sorted: the sort
        // merges runs.
        self.entries.sort_by_key(|h| (h.ts, h.key));
        let mut held = self.arena.len();
        let mut cut = 0;
        for h in &self.entries {
            if held <= keep {
                break;
            }
            let bytes = &self.arena[h.off as usize..(h.off + h.len) as usize];
            if h.ts < self.released {
                stats.json_events_out_of_window += 1;
            }
            self.released = self.released.max(h.ts);
            let track = match h.mark() {
                Mark::Plain => None,
                Mark::CompleteBegin { thread, dur } => {
                    let seq = u64::from(h.seq);
                    self.spill.place_begin(thread, seq, h.ts, dur, out, stats)
                }
                Mark::CompleteEnd { begin } => self.spill.place_end(begin),
            };
            match track {
                Some(uuid) => out.extend(on_track(bytes, uuid)),
                None => out.extend_from_slice(bytes),
            }
            held -= bytes.len();
            cut += 1;
        }
        self.entries.drain(..cut);
        // The kept packets move to the spare arena, in order.
        self.spare.clear();
        for h in &mut self.entries {
            let at = self.spare.len();
            self.spare
                .extend_from_slice(&self.arena[h.off as usize..(h.off + h.len) as usize]);
            h.off = at as u32;
        }
        std::mem::swap(&mut self.arena, &mut self.spare);
        self.spare.clear();
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

#[cfg(test)]
mod tests;
