//! Relay sequence ids. Every packet the relay sends carries one in
//! `trusted_packet_sequence_id`: 1 is the relay's own sequence; each source
//! takes fresh ids from its own block ([`SequenceAllocator::for_source`]).
//!
//! Why blocks: a restarted relay resumes every source where the spool ended
//! and the daemon keeps its streams by (relay, sequence id). Ids drawn from
//! one shared counter would depend on which source started first; a block
//! per source (by its position in the config) gives every source the same
//! ids in the same order of appearance on every run.

use std::sync::atomic::{AtomicU32, Ordering};

/// The relay's own sequence (its ClockSnapshot and SystemInfo packets).
pub const RELAY_SEQUENCE_ID: u32 = 1;

/// The first id handed to sources.
pub const FIRST_SOURCE_SEQUENCE_ID: u32 = 2;

/// Ids in each source's block (about 4 M: a unix source hands one per
/// producer sequence, and wraps inside its block).
pub const SOURCE_ID_BLOCK: u32 = 1 << 22;

/// Hands out relay sequence ids in `[first, end)`, unique within one relay
/// run until the range wraps.
#[derive(Debug)]
pub struct SequenceAllocator {
    first: u32,
    end: u32,
    next: AtomicU32,
}

impl Default for SequenceAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl SequenceAllocator {
    /// Every id but 0 and 1 (tests and single-source tools).
    pub fn new() -> Self {
        Self::range(FIRST_SOURCE_SEQUENCE_ID, u32::MAX)
    }

    /// The block of source `index` (1.., config order). Past the 1023rd
    /// source, blocks are shared again (modulo).
    pub fn for_source(index: u16) -> Self {
        let blocks = (u32::MAX - FIRST_SOURCE_SEQUENCE_ID) / SOURCE_ID_BLOCK;
        let slot = u32::from(index.saturating_sub(1)) % blocks;
        let first = FIRST_SOURCE_SEQUENCE_ID + slot * SOURCE_ID_BLOCK;
        Self::range(first, first + SOURCE_ID_BLOCK)
    }

    fn range(first: u32, end: u32) -> Self {
        Self {
            first,
            end,
            next: AtomicU32::new(first),
        }
    }

    /// A fresh id of the range. After the range is used up it wraps to its
    /// start: by then the sequences that held those ids are long gone.
    pub fn allocate(&self) -> u32 {
        loop {
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            if (self.first..self.end).contains(&id) {
                return id;
            }
            // Past the end (or wrapped past u32::MAX): back to the start.
            // Racing wrappers each retry.
            let _ = self.next.compare_exchange(
                id.wrapping_add(1),
                self.first,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_two_and_counts_up() {
        let a = SequenceAllocator::new();
        assert_eq!(a.allocate(), 2);
        assert_eq!(a.allocate(), 3);
        assert_eq!(a.allocate(), 4);
    }

    #[test]
    fn wraps_past_the_reserved_ids() {
        let a = SequenceAllocator::new();
        a.next.store(u32::MAX - 1, Ordering::Relaxed);
        assert_eq!(a.allocate(), u32::MAX - 1);
        assert_eq!(a.allocate(), 2);
        assert_eq!(a.allocate(), 3);
    }

    #[test]
    fn each_source_has_its_own_block_whatever_the_start_order() {
        let (one, two) = (
            SequenceAllocator::for_source(1),
            SequenceAllocator::for_source(2),
        );
        assert_eq!(two.allocate(), 2 + SOURCE_ID_BLOCK);
        assert_eq!(one.allocate(), 2);
        assert_eq!(one.allocate(), 3);
        assert_eq!(two.allocate(), 3 + SOURCE_ID_BLOCK);
        // A block wraps inside itself.
        one.next.store(1 + SOURCE_ID_BLOCK, Ordering::Relaxed);
        assert_eq!(one.allocate(), 1 + SOURCE_ID_BLOCK);
        assert_eq!(one.allocate(), 2);
        // The last block ends below u32::MAX; later indexes share blocks.
        let last = SequenceAllocator::for_source(u16::MAX);
        assert!(last.first >= 2 && last.end > last.first);
    }
}
