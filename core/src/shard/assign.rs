//! Which shard owns a machine, and how many shards to run.

use crate::live::Recovered;

/// Shards at most: more would only add threads and channels the writer
/// merges per packet.
pub const MAX_SHARDS: usize = 64;

/// Cores the writer keeps for itself when the count is automatic.
const WRITER_CORES: usize = 1;

/// The shard of machine `raw_id` among `shards` (0 when `shards` <= 1).
/// Stable across runs: a pure function of its arguments. The id is mixed
/// first so machines numbered in sequence spread over the shards.
#[inline]
pub fn shard_of(raw_id: u32, shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    // Fibonacci hashing: the high bits of the product are well mixed.
    let mixed = u64::from(raw_id).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (mixed % shards as u64) as usize
}

/// The shard count to run: `configured` if it is not 0, else the host's
/// `cores` minus the writer's; at least 1, at most [`MAX_SHARDS`].
pub fn resolve_shards(configured: usize, cores: usize) -> usize {
    let n = if configured == 0 {
        cores.saturating_sub(WRITER_CORES)
    } else {
        configured
    };
    n.clamp(1, MAX_SHARDS)
}

/// Splits what the writer recovered into the part each shard owns, by the
/// machine of each stream ([`shard_of`]). Output sequences go with the
/// stream that uses them; sync floors and names with their machine. Every
/// shard allocates new ids from the same `next_out_seq` (in its own residue
/// class, [`super::ShardIds`]).
pub fn split_recovered(recovered: Recovered, shards: usize) -> Vec<Recovered> {
    let shards = shards.max(1);
    let mut parts: Vec<Recovered> = (0..shards)
        .map(|_| Recovered {
            next_out_seq: recovered.next_out_seq,
            ..Recovered::default()
        })
        .collect();
    let mut owner_of_seq = std::collections::HashMap::new();
    for stream in recovered.streams {
        let k = shard_of(stream.machine_raw_id, shards);
        owner_of_seq.insert(stream.out_seq, k);
        parts[k].streams.push(stream);
    }
    for sequence in recovered.sequences {
        // A sequence no stream uses any more is nobody's: dropped.
        if let Some(&k) = owner_of_seq.get(&sequence.out_seq) {
            parts[k].sequences.push(sequence);
        }
    }
    for (raw_id, floor) in recovered.sync_floors {
        parts[shard_of(raw_id, shards)]
            .sync_floors
            .push((raw_id, floor));
    }
    for (raw_id, name) in recovered.names {
        parts[shard_of(raw_id, shards)].names.push((raw_id, name));
    }
    parts
}
