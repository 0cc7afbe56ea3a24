//! One relay's clock graph, fed by its ClockSnapshot packets in stream order
//! and kept bounded.
//!
//! A live graph would grow by one snapshot per second forever, so the last
//! [`KEEP_PER_SERIES`] snapshots of each clock set are kept aside and the
//! graph is rebuilt from them once it holds twice as many. Keeping per clock
//! set (not just the latest N overall) keeps a snapshot a data source wrote
//! once, such as the one defining a sequence-scoped clock, next to the
//! relay's once-a-second ones. Conversions of times older than the kept
//! snapshots extrapolate from the oldest kept one, as Perfetto does before
//! the first snapshot.

use std::collections::{HashMap, VecDeque};

use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, is_sequence_clock};
use tracesync_protocol::perfetto::ClockSnapshot;

use super::epochs::EpochBoundaries;
use crate::clock::{ClockGraph, ClockNode, ConvertError, EdgeOrigin, SnapshotClock};

/// Snapshots kept per distinct clock set.
const KEEP_PER_SERIES: usize = 64;
/// Distinct clock sets kept; past it the least recently fed is dropped.
const MAX_SERIES: usize = 64;

/// The node of a relay clock: sequence-scoped ids are qualified by the
/// relay sequence that defined them.
pub fn node(relay_sequence: u32, clock: u32) -> ClockNode {
    let seq = if is_sequence_clock(clock) {
        relay_sequence
    } else {
        0
    };
    ClockNode::new(0, 0, seq, clock)
}

/// The relay's BOOTTIME: where every packet clock is converted to before
/// the sync estimate maps it onto the host.
pub fn boottime() -> ClockNode {
    ClockNode::new(0, 0, 0, BOOTTIME)
}

#[derive(Debug, Default)]
pub struct RelayClocks {
    graph: ClockGraph,
    kept: HashMap<Vec<ClockNode>, VecDeque<(u64, Vec<SnapshotClock>)>>,
    kept_count: usize,
    /// Snapshots in the graph since it was (re)built.
    in_graph: usize,
    /// Arrival counter: rebuilds replay snapshots in their original order.
    fed: u64,
    pub invalid_clock_snapshots: u64,
    /// Where the relay's clock epochs (suspends) begin.
    epochs: EpochBoundaries,
}

impl RelayClocks {
    /// Adds a ClockSnapshot payload (field 6's bytes) seen on
    /// `relay_sequence`. Returns whether the graph changed.
    pub fn add_snapshot(&mut self, payload: &[u8], relay_sequence: u32) -> bool {
        let Ok(snapshot) = ClockSnapshot::decode(payload) else {
            self.invalid_clock_snapshots += 1;
            return false;
        };
        let clocks: Vec<SnapshotClock> = snapshot
            .clocks
            .iter()
            .map(|c| SnapshotClock {
                node: node(relay_sequence, c.clock_id.unwrap_or(0)),
                value: c.timestamp.unwrap_or(0),
                unit_multiplier_ns: c.unit_multiplier_ns.filter(|&u| u != 0).unwrap_or(1),
                is_incremental: c.is_incremental.unwrap_or(false),
            })
            .collect();
        let read = |id: u32| {
            snapshot
                .clocks
                .iter()
                .find(|c| c.clock_id == Some(id) && !c.is_incremental.unwrap_or(false))
                .and_then(|c| i64::try_from(c.timestamp?).ok())
        };
        if let (Some(boottime), Some(monotonic)) = (read(BOOTTIME), read(MONOTONIC)) {
            self.epochs.observe(boottime, monotonic);
        }
        if clocks.len() < 2 {
            // One clock relates nothing; Perfetto accepts it, but it adds no edge.
            return false;
        }
        if self
            .graph
            .add_snapshot(&clocks, EdgeOrigin::Snapshot)
            .is_err()
        {
            self.invalid_clock_snapshots += 1;
            return false;
        }
        self.keep(clocks);
        self.in_graph += 1;
        if self.in_graph > 2 * self.kept_count.max(KEEP_PER_SERIES) {
            self.rebuild();
        }
        true
    }

    fn keep(&mut self, clocks: Vec<SnapshotClock>) {
        let mut key: Vec<ClockNode> = clocks.iter().map(|c| c.node).collect();
        key.sort_unstable();
        self.fed += 1;
        if !self.kept.contains_key(&key) && self.kept.len() >= MAX_SERIES {
            // Forget the clock set fed longest ago.
            let oldest = self
                .kept
                .iter()
                .min_by_key(|(_, v)| v.back().map_or(0, |(n, _)| *n))
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest
                && let Some(v) = self.kept.remove(&k)
            {
                self.kept_count -= v.len();
            }
        }
        let series = self.kept.entry(key).or_default();
        series.push_back((self.fed, clocks));
        self.kept_count += 1;
        if series.len() > KEEP_PER_SERIES {
            series.pop_front();
            self.kept_count -= 1;
        }
    }

    fn rebuild(&mut self) {
        let mut all: Vec<&(u64, Vec<SnapshotClock>)> = self.kept.values().flatten().collect();
        all.sort_unstable_by_key(|(n, _)| *n);
        let mut graph = ClockGraph::new();
        for (_, clocks) in all {
            // These were accepted once; a rejection now only loses an edge.
            let _ = graph.add_snapshot(clocks, EdgeOrigin::Snapshot);
        }
        self.graph = graph;
        self.in_graph = self.kept_count;
    }

    /// Converts a packet time on `clock` (of `relay_sequence`) to relay
    /// BOOTTIME ns.
    pub fn boottime_of(
        &mut self,
        relay_sequence: u32,
        clock: u32,
        raw: u64,
    ) -> Result<i64, ConvertError> {
        self.graph
            .convert_within_machine(node(relay_sequence, clock), raw, boottime())
    }

    /// The relay's BOOTTIME-MONOTONIC at relay BOOTTIME `boottime` (its
    /// clock epoch), from its snapshots; None before the first one.
    pub fn epoch_at(&self, boottime: i64) -> Option<i64> {
        self.epochs.at(boottime)
    }

    /// Snapshots currently in the graph (for tests of the bound).
    #[cfg(test)]
    pub fn snapshots_in_graph(&self) -> usize {
        self.in_graph
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_protocol::perfetto::clock_snapshot::Clock;

    fn snapshot(clocks: &[(u32, u64)]) -> Vec<u8> {
        ClockSnapshot {
            clocks: clocks
                .iter()
                .map(|&(id, ts)| Clock {
                    clock_id: Some(id),
                    timestamp: Some(ts),
                    ..Default::default()
                })
                .collect(),
            primary_trace_clock: None,
        }
        .encode_to_vec()
    }

    #[test]
    fn converts_through_snapshots_and_stays_bounded() {
        let mut c = RelayClocks::default();
        // A sequence clock defined once, then many BOOTTIME/MONOTONIC ones.
        assert!(c.add_snapshot(&snapshot(&[(64, 100), (MONOTONIC, 1_000)]), 5));
        for i in 0..1_000u64 {
            let t = i * 1_000_000;
            assert!(c.add_snapshot(&snapshot(&[(BOOTTIME, t + 500), (MONOTONIC, t)]), 1));
        }
        assert!(c.snapshots_in_graph() <= 2 * 65 + 1);
        // 64@150 -> MONOTONIC 1050 -> BOOTTIME 1550.
        assert_eq!(c.boottime_of(5, 64, 150), Ok(1_550));
        // Clock 64 of another sequence is another clock.
        assert!(c.boottime_of(6, 64, 150).is_err());
        assert_eq!(c.boottime_of(9, MONOTONIC, 999_000_000), Ok(999_000_500));
        assert_eq!(c.boottime_of(9, BOOTTIME, 7), Ok(7));
        assert!(!c.add_snapshot(&[0xff], 1));
        assert_eq!(c.invalid_clock_snapshots, 1);
    }
}
