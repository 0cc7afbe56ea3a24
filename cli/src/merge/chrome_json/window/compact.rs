//! The window's compaction: once a release is done, the released entries
//! go and the kept records move down to the arena's start, in the order
//! they were made.
//!
//! A file is nearly in time order, so a release takes nearly a prefix of
//! the arena: the records before the first kept one are all released, the
//! ones after the last released one are all kept. Only the records
//! between (the mixed region, a few percent of the arena for a file out of
//! order by milliseconds) are walked one by one; the kept tail moves in
//! one copy and its entries' offsets shift by one amount. A file out of
//! order throughout makes the mixed region the whole arena: the walk the
//! compaction always did.
//!
//! Invariants: the kept records keep their order (offsets ascending in
//! the order made, the sort's tie-break); every kept entry's `off` is its
//! record's new place; the arena ends with the last kept record.

use super::{Held, KIND_PLAIN, LINKED_HEADER, PLAIN_HEADER, Window};

impl Window {
    /// Drops the released entries and moves the kept records down.
    pub(super) fn compact(&mut self) {
        let cut = self.cut;
        self.next = 0;
        self.cut = 0;
        self.releasing_bytes = 0;
        if self.ended && self.entries.len() == cut {
            // The arena of a finished file is not needed again.
            self.arena = Vec::new();
            self.entries = Vec::new();
            self.scratch = Vec::new();
            self.sorted = 0;
            return;
        }
        if cut == 0 {
            return;
        }
        let (released, kept) = self.entries.split_at(cut);
        let first_kept = kept.iter().map(|h| h.off as usize).min();
        let last_released = released.iter().max_by_key(|h| h.off).copied();
        let to = match (first_kept, last_released) {
            (Some(first_kept), Some(last_released)) => {
                let mixed_end = self.record_end(last_released).max(first_kept);
                let to = self.walk_mixed(first_kept, mixed_end, cut);
                self.move_tail(mixed_end, to, cut);
                to + (self.arena.len() - mixed_end)
            }
            // Nothing kept.
            _ => 0,
        };
        self.arena.truncate(to);
        self.entries.drain(..cut);
        self.sorted = self.sorted.saturating_sub(cut);
    }

    /// Where the record of `h` ends in the arena.
    fn record_end(&self, h: Held) -> usize {
        let off = h.off as usize;
        let header = match self.arena.get(off) {
            Some(&KIND_PLAIN) => PLAIN_HEADER,
            _ => LINKED_HEADER,
        };
        (off + header + h.len as usize).min(self.arena.len())
    }

    /// Moves the kept records of `first_kept..mixed_end` down to the
    /// arena's start (everything before `first_kept` was released); returns
    /// where the moved ones end. Each record of the region finds its entry
    /// by the index written in its header here.
    fn walk_mixed(&mut self, first_kept: usize, mixed_end: usize, cut: usize) -> usize {
        let region = first_kept..mixed_end;
        if region.is_empty() {
            return 0;
        }
        for (i, h) in self.entries.iter().enumerate() {
            let off = h.off as usize;
            if region.contains(&off)
                && let Some(slot) = self.arena.get_mut(off + 1..off + PLAIN_HEADER)
            {
                slot.copy_from_slice(&(i as u32).to_le_bytes());
            }
        }
        let (mut from, mut to) = (first_kept, 0);
        while from < mixed_end {
            let Some(head) = self.arena.get(from..from + PLAIN_HEADER) else {
                break;
            };
            let header = match head[0] {
                KIND_PLAIN => PLAIN_HEADER,
                _ => LINKED_HEADER,
            };
            let mut index = [0; 4];
            index.copy_from_slice(&head[1..]);
            let index = u32::from_le_bytes(index) as usize;
            let Some(h) = self.entries.get_mut(index) else {
                // Cannot happen (every record has its entry); keep what
                // was moved.
                break;
            };
            let end = (from + header + h.len as usize).min(self.arena.len());
            if index >= cut {
                self.arena.copy_within(from..end, to);
                h.off = to as u32;
                to += end - from;
            }
            from = end;
        }
        to
    }

    /// Moves the records from `mixed_end` on (all kept) down to `to` in one
    /// copy and shifts their entries' offsets by the same amount.
    fn move_tail(&mut self, mixed_end: usize, to: usize, cut: usize) {
        let shift = mixed_end - to;
        if shift == 0 {
            return;
        }
        self.arena.copy_within(mixed_end.., to);
        // Entries moved by the walk now lie before `mixed_end`.
        for h in self.entries.iter_mut().skip(cut) {
            if h.off as usize >= mixed_end {
                h.off -= shift as u32;
            }
        }
    }
}
