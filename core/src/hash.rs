//! A fast hasher for the core's small integer keys (stream, relay, slot;
//! the preamble's output sequences and machines): SipHash's DoS resistance
//! buys nothing here (keys are ids the core and relays allocate, and a
//! relay can only slow its own lookups) and costs a measurable share of
//! the per-packet time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits weak; hashbrown uses the top 7
        // bits and the low ones, so fold the high half down.
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(K);
    }
}

pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
