//! Output sequence ids of one ingest shard: its residue class (see
//! [`crate::shard`]); an unsharded core owns them all.

use super::stamp::OWN_SEQUENCE_ID;
use crate::sync_quality::{QUALITY_SEQ_BASE, QUALITY_SEQ_COUNT, is_quality_seq};

/// Shard `shard` of `shards` owns the ids congruent to `shard` mod
/// `shards`, except the daemon's own id and the sync-quality range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardIds {
    shard: u32,
    shards: u32,
}

impl ShardIds {
    /// `shards` is at least 1; `shard` is taken mod `shards`.
    pub fn new(shard: usize, shards: usize) -> Self {
        let shards = u32::try_from(shards.max(1)).unwrap_or(u32::MAX);
        let shard = u32::try_from(shard).unwrap_or(0) % shards;
        Self { shard, shards }
    }

    /// The one shard of an unsharded daemon: every id.
    pub fn all() -> Self {
        Self::new(0, 1)
    }

    /// The `n`th sync-quality sequence id of this shard: the shard's class
    /// within the reserved range (wrapping inside it).
    pub fn quality_seq(&self, n: u32) -> u32 {
        let k = u64::from(self.shard) + u64::from(self.shards) * u64::from(n);
        QUALITY_SEQ_BASE + (k % u64::from(QUALITY_SEQ_COUNT)) as u32
    }

    /// Whether this shard may allocate `id`.
    pub fn owns(&self, id: u32) -> bool {
        id % self.shards == self.shard && id > OWN_SEQUENCE_ID && !is_quality_seq(id)
    }

    /// The first id >= `from` this shard owns (wrapping past `u32::MAX` to
    /// the lowest one).
    pub fn first_from(&self, from: u32) -> u32 {
        let mut id = u64::from(from.max(OWN_SEQUENCE_ID + 1));
        // At most three rounds: into the class, past the quality range,
        // past the end (then from the start).
        for _ in 0..3 {
            let rem = (id % u64::from(self.shards)) as u32;
            let up = (self.shard + self.shards - rem) % self.shards;
            id += u64::from(up);
            match u32::try_from(id) {
                Ok(candidate) if is_quality_seq(candidate) => {
                    id = u64::from(QUALITY_SEQ_BASE + QUALITY_SEQ_COUNT);
                }
                Ok(candidate) if candidate > OWN_SEQUENCE_ID => return candidate,
                _ => id = u64::from(OWN_SEQUENCE_ID + 1),
            }
        }
        // Unreachable for shards <= 2^31; any owned id will do.
        self.shard.max(OWN_SEQUENCE_ID + 1)
    }

    /// The id this shard allocates after `id`.
    pub fn next_after(&self, id: u32) -> u32 {
        match id.checked_add(1) {
            Some(next) => self.first_from(next),
            None => self.first_from(0),
        }
    }
}

impl Default for ShardIds {
    fn default() -> Self {
        Self::all()
    }
}
