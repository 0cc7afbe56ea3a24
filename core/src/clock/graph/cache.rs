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
    /// The last clock converted to itself: (generation, packed clock, its
    /// index if known). Most packets of a trace are on trace time's clock;
    /// this spares them the clock index's hash lookup (SipHash: 11% of a
    /// small-packet merge's instructions).
    pub identity: (u64, u128, Option<u32>),
    /// The last source clock found unknown: (generation, packed clock). A
    /// merge asks the live graph about a file's private clock for every
    /// packet before it has (or ever gets) a snapshot; this spares each ask
    /// the clock index's hash lookup.
    pub unknown_source: (u64, u128),
    generation: u64,
    next_slot: usize,
}

impl Default for ConversionCache {
    fn default() -> Self {
        Self {
            entries: [CacheEntry::default(); SLOTS],
            identity: (0, 0, None),
            unknown_source: (0, 0),
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

    /// Changes whenever the graph does (snapshots added, cache cleared).
    pub fn generation(&self) -> u64 {
        self.generation
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
