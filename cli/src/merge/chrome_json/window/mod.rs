//! The reordering window of a converted file: timed packets are held, in
//! one byte arena, until the window is full; then the earliest leave in
//! the order the trace processor's sorter gives JSON events: by time, then
//! at one time ends (`E`, and the end of an `X`) first, complete events
//! longest first, everything else in the order it was made.
//!
//! Invariants:
//! - At most `limit` bytes of packets are held (plus those of the event
//!   that tipped it over); a release lets the earliest go until half is
//!   left, so memory is the arena (`limit` and one small record header per
//!   packet), one 24-byte entry per packet and one scratch, reused: the
//!   radix sort's (new entries are sorted in pieces of at most an eighth
//!   of the entries) and a merge's (the sorted entries that interleave
//!   with a piece). No allocation per packet: a packet is
//!   encoded straight into the arena.
//! - The arena holds its records in the order they were made (appended;
//!   a release moves the kept ones down in place, in their order), so a
//!   record's offset is its place in that order: the tie-break of the sort,
//!   which a stable sort of the new entries (held in that order) keeps.
//! - The first `sorted` entries are in release order (time, key, offset):
//!   the kept ones of the last release, whose offsets a move down keeps in
//!   their order. A release sorts only the entries held since and merges
//!   the two runs (on equal time and key the kept one, made earlier, first).
//! - A record's header has room for its entry's index, written only while
//!   the kept records are moved down (`compact`): the move walks, in
//!   order, the records between the first kept and the last released one
//!   and finds each one's length and entry by it, with no sort; the kept
//!   records after them move in one copy.
//! - A release hands its packets out in pieces of at most `out_chunk`
//!   bytes (and one packet): the caller's output buffer never holds half a
//!   window. While a release is under way nothing new should be held (it
//!   would still be ordered correctly, only held longer).
//! - What leaves late (its time before one already released) is counted
//!   in `json_events_out_of_window` and written at once.
//! - Complete events are placed on their thread's track or a spill track
//!   ([`super::spill`]) as they leave, in time order, as the trace
//!   processor places them.

use prost::Message;
use tracesync_protocol::perfetto::TracePacket;
use tracesync_protocol::perfetto::trace_packet::Data;

use super::JsonStats;
use super::framing::frame_into;
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

/// One held packet: its order and where its record is in the arena. The
/// record is a kind byte, the entry's index (4 bytes, see the module's
/// invariants), for the complete events' kinds a link (the thread of a
/// begin, the begin's number of an end, 8 bytes) and the begin's own
/// number (4 bytes), then the packet's `len` bytes. A
/// [`Mark::CompleteBegin`]'s `dur` is read back from its key.
#[derive(Clone, Copy)]
struct Held {
    ts: i64,
    key: i64,
    off: u32,
    len: u32,
}

const KIND_PLAIN: u8 = 0;
const KIND_BEGIN: u8 = 1;
const KIND_END: u8 = 2;
/// The record header of a plain packet: its kind and entry index.
const PLAIN_HEADER: usize = 1 + 4;
/// The record header of a complete event's begin or end.
const LINKED_HEADER: usize = PLAIN_HEADER + 8 + 4;

// The entry's size is what the window's memory figure counts on.
const _: () = assert!(std::mem::size_of::<Held>() == 24);

/// Timed packets held back to put a file's events in order.
pub struct Window {
    limit: usize,
    /// Bytes a release hands out per call (see the module's invariants).
    out_chunk: usize,
    /// Held packets: first those of the release under way (`next..cut`
    /// still to go, sorted), then the others, kept ones first.
    entries: Vec<Held>,
    /// How many entries from the first (of those after a release under
    /// way) are in release order.
    sorted: usize,
    /// The room of the new entries' sort, then the kept run's entries
    /// while they are merged with the new ones.
    scratch: Vec<Held>,
    next: usize,
    cut: usize,
    /// Bytes of packets of the release under way still to go.
    releasing_bytes: usize,
    arena: Vec<u8>,
    /// Bytes of packets held (the arena without the record headers).
    held: usize,
    /// The file has ended: the arena is freed once everything has left.
    ended: bool,
    /// Numbers wrap at 2^32: far more than a window holds at once.
    made: u32,
    /// The latest timestamp released so far.
    released: i64,
    spill: Spill,
}

impl Window {
    /// A window of `limit` bytes (at most 1 GiB: offsets are 32-bit) that
    /// releases everything due at once.
    pub fn new(limit: usize) -> Self {
        Self {
            limit: limit.min(1 << 30),
            out_chunk: usize::MAX,
            entries: Vec::new(),
            sorted: 0,
            scratch: Vec::new(),
            next: 0,
            cut: 0,
            releasing_bytes: 0,
            arena: Vec::new(),
            held: 0,
            ended: false,
            made: 0,
            released: i64::MIN,
            spill: Spill::default(),
        }
    }

    /// Releases hand out at most about `bytes` per call.
    pub fn set_out_chunk(&mut self, bytes: usize) {
        self.out_chunk = bytes.max(1);
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
        self.made = self.made.wrapping_add(1);
        // A complete event's begin keeps its `dur` in its key.
        let key = match mark {
            Mark::Plain => {
                self.arena.extend_from_slice(&[KIND_PLAIN, 0, 0, 0, 0]);
                key
            }
            Mark::CompleteBegin { thread, dur } => {
                self.push_linked(KIND_BEGIN, thread);
                key_complete(dur)
            }
            Mark::CompleteEnd { begin } => {
                self.push_linked(KIND_END, begin);
                key
            }
        };
        let start = self.arena.len();
        encode(&mut self.arena);
        let len = self.arena.len() - start;
        self.held += len;
        self.entries.push(Held {
            ts,
            key,
            off: off as u32,
            len: len as u32,
        });
        u64::from(self.made)
    }

    fn push_linked(&mut self, kind: u8, link: u64) {
        self.arena.extend_from_slice(&[kind, 0, 0, 0, 0]);
        self.arena.extend_from_slice(&link.to_le_bytes());
        self.arena.extend_from_slice(&self.made.to_le_bytes());
    }

    /// Whether a release is under way: [`Window::drain`] has more to give.
    pub fn releasing(&self) -> bool {
        self.next < self.cut
    }

    /// Whether what is held besides the release under way is more than
    /// the limit: the next release starts as soon as this one is done.
    pub fn full_after_release(&self) -> bool {
        self.held.saturating_sub(self.releasing_bytes) > self.limit
    }

    /// Starts releasing the earlier half if the window is full, and hands
    /// out the first piece of it into `out`.
    pub fn release_if_full(&mut self, out: &mut Vec<u8>, stats: &mut JsonStats) {
        if !self.releasing() && self.held > self.limit {
            self.start_release(self.limit / 2);
        }
        self.drain(out, stats);
    }

    /// Everything still held, in order: the file has ended. Hands out the
    /// first piece; [`Window::drain`] the rest while [`Window::releasing`].
    pub fn finish(&mut self, out: &mut Vec<u8>, stats: &mut JsonStats) {
        self.ended = true;
        if !self.releasing() {
            self.start_release(0);
        }
        self.drain(out, stats);
    }

    /// Sorts what is held and marks the earliest for release until at most
    /// `keep` bytes are left.
    fn start_release(&mut self, keep: usize) {
        // Offsets are in the order made: the order is the stable one by
        // (time, key). Kept packets are one sorted run, the newer ones
        // nearly sorted.
        self.sort_entries();
        let mut held = self.held;
        let mut cut = 0;
        for h in &self.entries {
            if held <= keep && keep > 0 {
                break;
            }
            held -= h.len as usize;
            cut += 1;
        }
        self.next = 0;
        self.cut = cut;
        self.releasing_bytes = self.held - held;
        if cut == 0 {
            self.compact();
        }
    }

    /// Sorts the entries held since the last release and merges them with
    /// the kept run before them.
    fn sort_entries(&mut self) {
        let len = self.entries.len();
        let mut at = self.sorted.min(len);
        self.sorted = len;
        // In pieces of at most an eighth of what is held, each merged into
        // the run before it: the radix sort's scratch stays that small.
        let piece = (len / 8).max(1);
        while at < len {
            let end = (at + piece).min(len);
            self.sort_piece(at, end);
            at = end;
        }
    }

    /// Sorts the entries `k..end` and merges them with the sorted run
    /// before them.
    fn sort_piece(&mut self, k: usize, end: usize) {
        let Some((kept, new)) = self
            .entries
            .get_mut(..end)
            .and_then(|e| e.split_at_mut_checked(k))
        else {
            return;
        };
        radix::sort(new, &mut self.scratch);
        let Some(first) = new.first() else {
            return;
        };
        // Kept entries at or before the first new one stay where they are
        // (kept ones were made earlier: first on equal time and key).
        let from = kept.partition_point(|h| (h.ts, h.key) <= (first.ts, first.key));
        if from == k {
            return;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.entries[from..k]);
        let (mut i, mut j, mut w) = (0, k, from);
        while let (Some(a), Some(b)) =
            (self.scratch.get(i), self.entries.get(j).filter(|_| j < end))
        {
            let take = if (a.ts, a.key) <= (b.ts, b.key) {
                i += 1;
                *a
            } else {
                j += 1;
                *b
            };
            // `w < j` always: the kept ones left are still in the scratch.
            if let Some(slot) = self.entries.get_mut(w) {
                *slot = take;
            }
            w += 1;
        }
        // What is left of the new run is already in place.
        for &a in self.scratch.get(i..).unwrap_or_default() {
            if let Some(slot) = self.entries.get_mut(w) {
                *slot = a;
            }
            w += 1;
        }
    }

    /// Hands the packets of the release under way to `out` until it holds
    /// the window's out chunk; moves the kept packets down once the
    /// release is done (and, at the file's end, starts the last one).
    pub fn drain(&mut self, out: &mut Vec<u8>, stats: &mut JsonStats) {
        while self.next < self.cut && out.len() < self.out_chunk {
            let Some(&h) = self.entries.get(self.next) else {
                // Cannot happen (`cut` is within the entries); never loop.
                self.next = self.cut;
                break;
            };
            self.next += 1;
            self.release_one(h, out, stats);
        }
        if self.cut > 0 && self.next == self.cut {
            self.compact();
            if self.ended && !self.entries.is_empty() {
                self.start_release(0);
            }
        }
    }

    fn release_one(&mut self, h: Held, out: &mut Vec<u8>, stats: &mut JsonStats) {
        let off = h.off as usize;
        let Some(&kind) = self.arena.get(off) else {
            return;
        };
        let (link, seq, start) = match self.arena.get(off + PLAIN_HEADER..off + LINKED_HEADER) {
            Some(head) if kind != KIND_PLAIN => {
                let mut link = [0; 8];
                let mut seq = [0; 4];
                link.copy_from_slice(&head[..8]);
                seq.copy_from_slice(&head[8..]);
                (
                    u64::from_le_bytes(link),
                    u32::from_le_bytes(seq),
                    off + LINKED_HEADER,
                )
            }
            _ => (0, 0, off + PLAIN_HEADER),
        };
        let Some(bytes) = self.arena.get(start..start + h.len as usize) else {
            return;
        };
        if h.ts < self.released {
            stats.json_events_out_of_window += 1;
        }
        self.released = self.released.max(h.ts);
        let track = match kind {
            KIND_BEGIN => {
                let dur = i64::MAX - h.key;
                let seq = u64::from(seq);
                self.spill.place_begin(link, seq, h.ts, dur, out, stats)
            }
            KIND_END => self.spill.place_end(link),
            _ => None,
        };
        match track {
            Some(uuid) => on_track(bytes, uuid, out),
            None => out.extend_from_slice(bytes),
        }
        self.held -= bytes.len();
        self.releasing_bytes = self.releasing_bytes.saturating_sub(bytes.len());
    }
}

/// Appends a framed TrackEvent packet moved to the track `uuid`: its uuid
/// rewritten in place ([`retrack`]), else (not expected for the packets
/// this module is given) decoded and encoded again, or kept as it was if
/// it cannot be read back.
fn on_track(bytes: &[u8], uuid: u64, out: &mut Vec<u8>) {
    if retrack::retrack(bytes, uuid, out) {
        return;
    }
    let Some(body) = bytes.get(1..) else {
        out.extend_from_slice(bytes);
        return;
    };
    match TracePacket::decode_length_delimited(body) {
        Ok(mut p) => {
            if let Some(Data::TrackEvent(e)) = &mut p.data {
                e.track_uuid = Some(uuid);
            }
            frame_into(&p, out);
        }
        Err(_) => out.extend_from_slice(bytes),
    }
}

mod compact;
mod radix;
mod retrack;

#[cfg(test)]
mod tests;
