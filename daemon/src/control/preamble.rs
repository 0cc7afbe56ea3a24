//! The packets a new perfetto tail opens with, so that its stream loads in
//! Perfetto like a rolling file does (DESIGN.md §4): the latest SystemInfo
//! and sync point per machine, the latest ClockSnapshot per (machine,
//! sequence), and per sequence the last incremental-state clear plus the
//! interned-data/defaults packets after it.
//!
//! Sans-IO and bounded: at most [`MAX_SEQUENCES`] sequences (the least
//! recently updated is forgotten) and [`MAX_SEQUENCE_BYTES`] of incremental
//! state per sequence (beyond it the sequence's state is forgotten until its
//! next clear; counted). A tail started then may miss interned names on that
//! sequence until the producer clears its state again.

use std::collections::HashMap;
use std::sync::Arc;

use crate::live::{OutPacket, Role};

/// Sequences (and snapshot keys) remembered.
pub const MAX_SEQUENCES: usize = 4096;
/// Incremental state remembered per sequence.
pub const MAX_SEQUENCE_BYTES: usize = 4 << 20;
/// Machines remembered (SystemInfo and sync points).
pub const MAX_MACHINES: usize = 4096;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreambleStats {
    /// Sequences whose incremental state outgrew the limit and was forgotten.
    pub sequences_overflowed: u64,
    /// Entries forgotten to stay within the key limits.
    pub evicted: u64,
}

#[derive(Debug)]
struct Entry<T> {
    value: T,
    /// Update counter when last written, for least-recently-updated eviction.
    touched: u64,
}

#[derive(Debug, Default)]
struct SequenceState {
    packets: Vec<Arc<OutPacket>>,
    bytes: usize,
    /// Over the limit since the last clear: nothing is kept.
    overflowed: bool,
}

#[derive(Debug, Default)]
pub struct PreambleCache {
    system_info: HashMap<u32, Entry<Arc<OutPacket>>>,
    sync_points: HashMap<u32, Entry<Arc<OutPacket>>>,
    snapshots: HashMap<(u32, u32), Entry<Arc<OutPacket>>>,
    sequences: HashMap<(u32, u32), Entry<SequenceState>>,
    clock: u64,
    stats: PreambleStats,
}

impl PreambleCache {
    /// Records `packet` if its role belongs in a preamble.
    pub fn observe(&mut self, packet: &Arc<OutPacket>) {
        self.clock += 1;
        let touched = self.clock;
        let machine = packet.machine_raw_id;
        let key = (machine, packet.seq);
        let value = Arc::clone(packet);
        match packet.role {
            Role::Data => {}
            Role::SystemInfo => put(
                &mut self.system_info,
                machine,
                value,
                touched,
                MAX_MACHINES,
                &mut self.stats,
            ),
            Role::SyncPoint => put(
                &mut self.sync_points,
                machine,
                value,
                touched,
                MAX_MACHINES,
                &mut self.stats,
            ),
            Role::ClockSnapshot => put(
                &mut self.snapshots,
                key,
                value,
                touched,
                MAX_SEQUENCES,
                &mut self.stats,
            ),
            Role::IncrementalStateCleared => {
                let state = SequenceState {
                    bytes: packet.bytes.len(),
                    packets: vec![value],
                    overflowed: false,
                };
                put(
                    &mut self.sequences,
                    key,
                    state,
                    touched,
                    MAX_SEQUENCES,
                    &mut self.stats,
                );
                self.check_size(key);
            }
            Role::IncrementalState => {
                // State with no clear seen is incomplete: a tail could not
                // use it, so it is not kept.
                if let Some(entry) = self.sequences.get_mut(&key)
                    && !entry.value.overflowed
                {
                    entry.touched = touched;
                    entry.value.bytes += packet.bytes.len();
                    entry.value.packets.push(value);
                    self.check_size(key);
                }
            }
        }
    }

    fn check_size(&mut self, key: (u32, u32)) {
        if let Some(entry) = self.sequences.get_mut(&key)
            && entry.value.bytes > MAX_SEQUENCE_BYTES
        {
            entry.value = SequenceState {
                overflowed: true,
                ..SequenceState::default()
            };
            self.stats.sequences_overflowed += 1;
        }
    }

    /// The preamble, in the order a trace needs it: SystemInfo (the host
    /// first), clock snapshots, sync points, then each sequence's state.
    pub fn packets(&self) -> Vec<Arc<OutPacket>> {
        let mut out = Vec::new();
        out.extend(sorted(&self.system_info));
        out.extend(sorted(&self.snapshots));
        out.extend(sorted(&self.sync_points));
        let mut sequences: Vec<_> = self.sequences.iter().collect();
        sequences.sort_by_key(|(key, _)| **key);
        for (_, entry) in sequences {
            out.extend(entry.value.packets.iter().cloned());
        }
        out
    }

    pub fn stats(&self) -> PreambleStats {
        self.stats
    }
}

fn sorted<K: Ord + Copy>(map: &HashMap<K, Entry<Arc<OutPacket>>>) -> Vec<Arc<OutPacket>> {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by_key(|(key, _)| **key);
    entries
        .into_iter()
        .map(|(_, e)| Arc::clone(&e.value))
        .collect()
}

/// Inserts, evicting the least recently updated entry beyond `limit`.
fn put<K: std::hash::Hash + Eq + Copy, T>(
    map: &mut HashMap<K, Entry<T>>,
    key: K,
    value: T,
    touched: u64,
    limit: usize,
    stats: &mut PreambleStats,
) {
    map.insert(key, Entry { value, touched });
    if map.len() > limit
        && let Some(oldest) = map.iter().min_by_key(|(_, e)| e.touched).map(|(k, _)| *k)
    {
        map.remove(&oldest);
        stats.evicted += 1;
    }
}
