//! A cheap hasher for the conversion's per-event maps (pids, tids, track
//! uuids, window numbers): std's SipHash cost more than the lookups it
//! served.
//!
//! Invariants: the maps keyed with it are only looked up, never iterated,
//! so the hash never shows in the output; keys a file could choose to
//! collide cost time only (the maps are bounded as before).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate over whole words (FxHash's scheme).
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(K);
    }
}

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        // The table takes its bucket from the low bits: bring the
        // product's well-mixed high bits down.
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        self.add(bytes.len() as u64);
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<WordHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_keys_spread_over_buckets() {
        let mut low = FastSet::default();
        for pid in 0..1024_u32 {
            let mut h = WordHasher::default();
            h.write_u32(pid);
            low.insert(h.finish() & 1023);
        }
        assert!(low.len() > 600, "{} distinct buckets", low.len());
    }

    #[test]
    fn maps_work_as_maps() {
        let mut m: FastMap<(u32, u32), u8> = FastMap::default();
        m.insert((1, 2), 3);
        m.insert((2, 1), 4);
        assert_eq!(m.get(&(1, 2)), Some(&3));
        assert_eq!(m.get(&(2, 1)), Some(&4));
        assert_eq!(m.get(&(1, 1)), None);
    }
}
