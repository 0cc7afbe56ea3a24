//! The reordering window of a converted file: timed packets are held, in
//! one byte arena, until the window is full, then the earliest are
//! released in timestamp order (ties in the order they were made).
//!
//! Invariants:
//! - At most `limit` bytes of packets are held (plus those of the event
//!   that tipped it over); a release keeps the latest half, so memory is the arena
//!   (`limit`), its spare (`limit / 2`) and one 16-byte entry per packet.
//! - Packets leave in timestamp order unless the file's disorder exceeds
//!   what is held: a packet earlier than one already released is counted
//!   (`json_events_out_of_window`) and written at once.
//! - No allocation per packet: a packet is encoded straight into the arena.

use super::JsonStats;

/// One held packet: its time and where its bytes are in the arena.
#[derive(Clone, Copy)]
struct Held {
    ts: i64,
    off: u32,
    len: u32,
}

/// Packets waiting for their turn.
pub struct Reorder {
    limit: usize,
    /// Held packets: those kept by the last release first, in time order,
    /// then the ones made since, in the order they were made.
    entries: Vec<Held>,
    arena: Vec<u8>,
    spare: Vec<u8>,
    /// The latest timestamp released so far.
    released: i64,
}

impl Reorder {
    /// A window of `limit` bytes (at most 2 GiB: offsets are 32-bit).
    pub fn new(limit: usize) -> Self {
        Self {
            limit: limit.min(u32::MAX as usize / 2),
            entries: Vec::new(),
            arena: Vec::new(),
            spare: Vec::new(),
            released: i64::MIN,
        }
    }

    /// Holds the packet at `ts` that `encode` appends to the buffer it is
    /// given.
    pub fn hold_with(&mut self, ts: i64, encode: impl FnOnce(&mut Vec<u8>)) {
        let off = self.arena.len();
        encode(&mut self.arena);
        let len = self.arena.len() - off;
        self.entries.push(Held {
            ts,
            off: off as u32,
            len: len as u32,
        });
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
        self.entries.sort_by_key(|h| h.ts);
        let mut held = self.arena.len();
        let mut cut = 0;
        for h in &self.entries {
            if held <= keep {
                break;
            }
            let (off, len) = (h.off as usize, h.len as usize);
            if h.ts < self.released {
                stats.json_events_out_of_window += 1;
            }
            self.released = self.released.max(h.ts);
            out.extend_from_slice(&self.arena[off..off + len]);
            held -= len;
            cut += 1;
        }
        self.entries.drain(..cut);
        // The kept packets move to the spare arena, in time order.
        self.spare.clear();
        for h in &mut self.entries {
            let (off, len) = (h.off as usize, h.len as usize);
            let at = self.spare.len();
            self.spare.extend_from_slice(&self.arena[off..off + len]);
            h.off = at as u32;
        }
        std::mem::swap(&mut self.arena, &mut self.spare);
        self.spare.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(r: &mut Reorder, ts: i64, out: &mut Vec<u8>, stats: &mut JsonStats) {
        r.hold_with(ts, |b| b.push(ts as u8));
        r.release_if_full(out, stats);
    }

    #[test]
    fn releases_in_time_order_ties_in_order_made() {
        let mut r = Reorder::new(4);
        let (mut out, mut stats) = (Vec::new(), JsonStats::default());
        for ts in [5, 3, 4, 3, 9, 8, 7, 10, 11] {
            push(&mut r, ts, &mut out, &mut stats);
        }
        r.finish(&mut out, &mut stats);
        assert_eq!(out, vec![3, 3, 4, 5, 7, 8, 9, 10, 11]);
        assert_eq!(stats.json_events_out_of_window, 0);
    }

    #[test]
    fn too_late_packets_are_counted_and_written() {
        let mut r = Reorder::new(2);
        let (mut out, mut stats) = (Vec::new(), JsonStats::default());
        for ts in [10, 11, 12, 13, 1] {
            push(&mut r, ts, &mut out, &mut stats);
        }
        r.finish(&mut out, &mut stats);
        assert_eq!(out.len(), 5);
        assert_eq!(stats.json_events_out_of_window, 1);
    }

    #[test]
    fn holds_at_most_its_limit() {
        let mut r = Reorder::new(1000);
        let (mut out, mut stats) = (Vec::new(), JsonStats::default());
        for i in 0..100_000_i64 {
            // Out of order by up to 50 packets.
            let ts = i + (i * 7919) % 50;
            push(&mut r, ts, &mut out, &mut stats);
            assert!(r.arena.len() <= 1001);
        }
        r.finish(&mut out, &mut stats);
        assert_eq!(out.len(), 100_000);
        assert_eq!(stats.json_events_out_of_window, 0);
    }
}
