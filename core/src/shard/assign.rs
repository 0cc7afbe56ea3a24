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

/// Relay instances remembered at most by [`InstanceShards`]; past it a new
/// instance goes by its machine alone (only a rename across shards then
/// loses its de-duplication state).
pub const MAX_REMEMBERED_INSTANCES: usize = 1 << 16;

/// Which shard holds each relay instance's state. A relay goes to the
/// shard of its machine ([`shard_of`]) the first time, and stays there:
/// renamed (a new machine raw id), it keeps its shard, so the state that
/// de-duplicates its resent batches (per relay instance and sequence) is
/// where its batches go. Within that shard the core moves its streams to
/// the new machine, as a single core does. Bounded by
/// [`MAX_REMEMBERED_INSTANCES`].
#[derive(Debug, Default)]
pub struct InstanceShards {
    shards: usize,
    of: std::collections::HashMap<u64, usize>,
}

impl InstanceShards {
    /// The instances of `recovered`'s streams on the shards
    /// [`split_recovered`] gives them.
    pub fn new(recovered: &Recovered, shards: usize) -> Self {
        let mut this = Self {
            shards: shards.max(1),
            of: std::collections::HashMap::new(),
        };
        for stream in &recovered.streams {
            this.shard_of_relay(stream.machine_raw_id, stream.relay_instance);
        }
        this
    }

    /// The shard of relay `instance` connecting as machine `raw_id`.
    pub fn shard_of_relay(&mut self, raw_id: u32, instance: u64) -> usize {
        if let Some(&k) = self.of.get(&instance) {
            return k;
        }
        let k = shard_of(raw_id, self.shards);
        if self.of.len() < MAX_REMEMBERED_INSTANCES {
            self.of.insert(instance, k);
        }
        k
    }
}

/// Splits what the writer recovered into the part each shard owns: a
/// stream goes with its relay instance ([`InstanceShards`]: the shard of
/// the machine of the instance's first stream). Output sequences go with
/// the stream that uses them; sync floors and names with their machine.
/// Every shard allocates new ids from the same `next_out_seq` (in its own
/// residue class, [`super::ShardIds`]).
pub fn split_recovered(recovered: Recovered, shards: usize) -> Vec<Recovered> {
    let shards = shards.max(1);
    let mut instances = InstanceShards::new(&recovered, shards);
    let mut parts: Vec<Recovered> = (0..shards)
        .map(|_| Recovered {
            next_out_seq: recovered.next_out_seq,
            ..Recovered::default()
        })
        .collect();
    let mut owner_of_seq = std::collections::HashMap::new();
    for stream in recovered.streams {
        let k = instances.shard_of_relay(stream.machine_raw_id, stream.relay_instance);
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
