//! Relay sequence ids. Every packet the relay sends carries one in
//! `trusted_packet_sequence_id`: 1 is the relay's own sequence, sources take
//! fresh ids from a shared [`SequenceAllocator`].

use std::sync::atomic::{AtomicU32, Ordering};

/// The relay's own sequence (its ClockSnapshot and SystemInfo packets).
pub const RELAY_SEQUENCE_ID: u32 = 1;

/// The first id handed to sources.
pub const FIRST_SOURCE_SEQUENCE_ID: u32 = 2;

/// Hands out relay sequence ids, unique within one relay run.
#[derive(Debug)]
pub struct SequenceAllocator {
    next: AtomicU32,
}

impl Default for SequenceAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl SequenceAllocator {
    pub fn new() -> Self {
        Self {
            next: AtomicU32::new(FIRST_SOURCE_SEQUENCE_ID),
        }
    }

    /// A fresh id (never 0 or 1). After 2^32 - 2 ids it wraps to 2: by then
    /// the sequences that held the low ids are long gone.
    pub fn allocate(&self) -> u32 {
        loop {
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            if id >= FIRST_SOURCE_SEQUENCE_ID {
                return id;
            }
            // Wrapped past u32::MAX: skip 0 and 1. Racing wrappers each retry.
            let _ = self.next.compare_exchange(
                id.wrapping_add(1),
                FIRST_SOURCE_SEQUENCE_ID,
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
        let a = SequenceAllocator {
            next: AtomicU32::new(u32::MAX),
        };
        assert_eq!(a.allocate(), u32::MAX);
        assert_eq!(a.allocate(), 2);
        assert_eq!(a.allocate(), 3);
    }
}
