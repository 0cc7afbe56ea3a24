//! The conversion cache: a few recent translations, scanned linearly.
//!
//! A fixed array beats a hash map here: the hit path is a handful of
//! compares, and hot conversions are few (one per source clock, roughly).

use crate::clock::ClockNode;

const SLOTS: usize = 8;

/// One cached translation, valid for src ns in `[min, max)`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CacheEntry {
    /// `generation << 1 | restricted`; generation 0 is never current, so a
    /// default entry never matches.
    pub tag: u64,
    pub src: u128,
    pub dst: u128,
    pub src_idx: u32,
    pub incremental: bool,
    pub unit: i64,
    pub min: i64,
    pub max: i64,
    pub translation: i64,
}

#[derive(Debug)]
pub(super) struct ConversionCache {
    pub entries: [CacheEntry; SLOTS],
    generation: u64,
    next_slot: usize,
}

impl Default for ConversionCache {
    fn default() -> Self {
        Self {
            entries: [CacheEntry::default(); SLOTS],
            generation: 1,
            next_slot: 0,
        }
    }
}

/// Packs a clock into one integer so a key compare is a single instruction
/// pair instead of four field compares.
pub(super) fn pack(node: ClockNode) -> u128 {
    (u128::from(node.machine) << 96)
        | (u128::from(node.scope) << 64)
        | (u128::from(node.seq) << 32)
        | u128::from(node.clock)
}

impl ConversionCache {
    /// Makes every entry stale at once (cheaper than clearing the array).
    pub fn invalidate(&mut self) {
        self.generation += 1;
    }

    pub fn tag(&self, restricted: bool) -> u64 {
        (self.generation << 1) | u64::from(restricted)
    }

    /// Stores an entry (round-robin eviction: hot conversions are re-added
    /// on their next miss, so recency tracking is not worth its cost).
    pub fn insert(&mut self, entry: CacheEntry) {
        self.entries[self.next_slot] = entry;
        self.next_slot = (self.next_slot + 1) % SLOTS;
    }
}
