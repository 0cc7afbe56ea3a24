//! The clock graph: ClockSnapshot edges and nearest-snapshot conversion.
//!
//! Follows Perfetto's clock tracker (AddSnapshot, Convert, FindPath), with
//! these deliberate differences:
//!
//! 1. A snapshot *series* is keyed by the sorted set of its clocks, not by an
//!    order-dependent hash, so the same clocks listed in another order share
//!    a series (Perfetto's own header says order should not matter).
//! 2. Path search is a BFS with a visited set (terminates without a length
//!    cap) and still refuses paths longer than [`MAX_PATH_HOPS`] hops
//!    (Perfetto: 4). Same result as Perfetto's BFS for paths it can find.
//! 3. The conversion cache is invalidated by a generation counter bumped by
//!    every `add_snapshot` instead of being cleared; same effect, cheaper.
//!    Entries are keyed by (src, dst, restricted-to-one-machine).
//! 4. Arithmetic is checked: a snapshot value whose ns does not fit i64 is
//!    rejected (`Overflow`), and a conversion that overflows fails instead
//!    of wrapping.
//! 5. A unit multiplier of 0 (the proto default when unset) means 1 ns.
//! 6. If the nearest source snapshot of a hop has no counterpart in the
//!    target (possible only after a partially applied, failed snapshot),
//!    the nearest earlier (else later) snapshot shared by both is used and
//!    the result is not cached; Perfetto only DCHECKs this.

use std::collections::{BTreeSet, HashMap};

use super::ClockNode;

mod cache;
mod convert;
#[cfg(test)]
mod tests;

use cache::ConversionCache;

/// Longest path (in edges) a conversion may take.
pub const MAX_PATH_HOPS: usize = 8;

/// One clock of a snapshot, in the clock's own units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotClock {
    pub node: ClockNode,
    /// Absolute value in units of `unit_multiplier_ns`.
    pub value: u64,
    /// Nanoseconds per unit (>= 1).
    pub unit_multiplier_ns: u64,
    /// Packet timestamps on this clock are deltas from the previous one.
    pub is_incremental: bool,
}

impl SnapshotClock {
    pub const fn ns(node: ClockNode, value: u64) -> Self {
        Self {
            node,
            value,
            unit_multiplier_ns: 1,
            is_incremental: false,
        }
    }
}

/// Where an edge of the graph came from (shown by `tracesync clocks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeOrigin {
    /// A ClockSnapshot packet in a trace.
    Snapshot,
    /// Recording-time clock sync (RemoteClockSync, live probes).
    Sync,
    /// A `clocks` entry of a perfetto_manifest.
    Manifest,
    /// REALTIME of two machines equated at zero offset.
    Rendezvous,
    /// The same clock domain of two machines or files equated at zero offset.
    SameDomain,
}

impl EdgeOrigin {
    /// Every origin, in the order `tracesync clocks` documents them.
    pub const ALL: [EdgeOrigin; 5] = [
        EdgeOrigin::Snapshot,
        EdgeOrigin::Sync,
        EdgeOrigin::Manifest,
        EdgeOrigin::Rendezvous,
        EdgeOrigin::SameDomain,
    ];

    /// The name `tracesync clocks` prints (and its docs spell).
    pub fn name(self) -> &'static str {
        match self {
            EdgeOrigin::Snapshot => "snapshot",
            EdgeOrigin::Sync => "sync",
            EdgeOrigin::Manifest => "manifest",
            EdgeOrigin::Rendezvous => "rendezvous",
            EdgeOrigin::SameDomain => "same-domain",
        }
    }
}

pub type SnapshotId = u32;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("duplicate clock domain {0} in one snapshot")]
    DuplicateClock(ClockNode),
    #[error("clock {0} was previously registered with different properties (unit or incremental)")]
    ChangedProperties(ClockNode),
    #[error("global clock {0} cannot use incremental encoding")]
    IncrementalGlobalClock(ClockNode),
    #[error("trace clock {0} is not monotonic")]
    TraceClockNotMonotonic(ClockNode),
    #[error("trace clock {0} must always use nanoseconds")]
    TraceClockUnit(ClockNode),
    #[error("clock {0} value overflows 64-bit nanoseconds")]
    Overflow(ClockNode),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("source clock {0} is in no snapshot")]
    UnknownSourceClock(ClockNode),
    #[error("target clock {0} is in no snapshot")]
    UnknownTargetClock(ClockNode),
    #[error("no path from {src} to {dst}")]
    NoPath { src: ClockNode, dst: ClockNode },
    #[error("conversion overflows 64-bit nanoseconds")]
    Overflow,
}

/// Counters named as Perfetto's stats where one exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    pub invalid_clock_snapshots: u64,
    pub clock_sync_cache_miss: u64,
    pub clock_sync_cache_hit: u64,
}

/// One snapshot as added, for listing the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeRecord {
    pub snapshot_id: SnapshotId,
    pub origin: EdgeOrigin,
    /// Each clock with its value in ns.
    pub clocks: Vec<(ClockNode, i64)>,
}

/// Index of a clock in [`ClockGraph::domains`].
type NodeIdx = u32;
/// Interned sorted clock set of a snapshot.
type SeriesId = u32;

/// One clock's values within one series, in snapshot order.
#[derive(Debug, Default)]
struct ClockSeries {
    ids: Vec<SnapshotId>,
    ts: Vec<i64>,
}

/// Everything known about one clock.
#[derive(Debug)]
struct Domain {
    node: ClockNode,
    unit: i64,
    incremental: bool,
    /// At least one value was appended (properties are locked from then on).
    known: bool,
    monotonic: bool,
    /// Incremental accumulator in ns (Perfetto's `last_timestamp_ns`).
    last_ns: i64,
    series: HashMap<SeriesId, ClockSeries>,
    /// Outgoing edges, ordered by target clock then series: this order is the
    /// BFS tie-break, so paths are deterministic.
    edges: BTreeSet<(ClockNode, SeriesId, NodeIdx)>,
}

/// The global clock graph.
#[derive(Debug, Default)]
pub struct ClockGraph {
    index: HashMap<ClockNode, NodeIdx>,
    domains: Vec<Domain>,
    series_index: HashMap<Vec<ClockNode>, SeriesId>,
    next_snapshot_id: SnapshotId,
    trace_time_clock: Option<ClockNode>,
    cache: ConversionCache,
    stats: GraphStats,
    records: Vec<EdgeRecord>,
}

impl ClockGraph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the trace-time clock: from now on snapshots must keep it
    /// monotonic and in 1 ns units.
    pub fn set_trace_time_clock(&mut self, node: ClockNode) {
        self.trace_time_clock = Some(node);
    }

    /// Adds one snapshot (Perfetto AddSnapshot). On error the clocks before
    /// the failing one stay appended, without edges, as in Perfetto.
    pub fn add_snapshot(
        &mut self,
        clocks: &[SnapshotClock],
        origin: EdgeOrigin,
    ) -> Result<SnapshotId, SnapshotError> {
        let snapshot_id = self.next_snapshot_id;
        self.next_snapshot_id = snapshot_id.wrapping_add(1);
        // Even a failed snapshot may append values or drop edges.
        self.cache.invalidate();

        let mut key: Vec<ClockNode> = clocks.iter().map(|c| c.node).collect();
        key.sort_unstable();
        let next_series = SeriesId::try_from(self.series_index.len()).unwrap_or(SeriesId::MAX);
        let series = *self.series_index.entry(key).or_insert(next_series);

        let mut appended = Vec::with_capacity(clocks.len());
        for clock in clocks {
            match self.append_clock(clock, snapshot_id, series) {
                Ok(entry) => appended.push(entry),
                Err(err) => {
                    self.stats.invalid_clock_snapshots += 1;
                    return Err(err);
                }
            }
        }

        for &(from, _) in &appended {
            if !self.domains[from as usize].monotonic {
                continue;
            }
            for &(to, _) in &appended {
                if to != from {
                    let to_node = self.domains[to as usize].node;
                    self.domains[from as usize]
                        .edges
                        .insert((to_node, series, to));
                }
            }
        }
        self.records.push(EdgeRecord {
            snapshot_id,
            origin,
            clocks: appended
                .iter()
                .map(|&(idx, ns)| (self.domains[idx as usize].node, ns))
                .collect(),
        });
        Ok(snapshot_id)
    }

    /// Steps of Perfetto's AddSnapshot for one clock, in Perfetto's order.
    fn append_clock(
        &mut self,
        clock: &SnapshotClock,
        snapshot_id: SnapshotId,
        series: SeriesId,
    ) -> Result<(NodeIdx, i64), SnapshotError> {
        let node = clock.node;
        let unit = i64::try_from(clock.unit_multiplier_ns.max(1))
            .map_err(|_| SnapshotError::Overflow(node))?;
        let is_trace_clock = self.trace_time_clock == Some(node);
        let idx = self.intern(node);
        let domain = &mut self.domains[idx as usize];

        if !domain.known {
            if clock.is_incremental && !tracesync_protocol::clock_ids::is_sequence_clock(node.clock)
            {
                return Err(SnapshotError::IncrementalGlobalClock(node));
            }
            domain.unit = unit;
            domain.incremental = clock.is_incremental;
        } else if domain.unit != unit || domain.incremental != clock.is_incremental {
            return Err(SnapshotError::ChangedProperties(node));
        }
        if is_trace_clock && unit != 1 {
            return Err(SnapshotError::TraceClockUnit(node));
        }
        let ns = i64::try_from(clock.value)
            .ok()
            .and_then(|v| v.checked_mul(unit))
            .ok_or(SnapshotError::Overflow(node))?;
        // A snapshot re-anchors an incremental clock.
        domain.last_ns = ns;

        let values = domain.series.entry(series).or_default();
        if values.ids.last() == Some(&snapshot_id) {
            return Err(SnapshotError::DuplicateClock(node));
        }
        // Monotonicity is judged within the series only, as in Perfetto.
        if values.ts.last().is_some_and(|&prev| ns < prev) {
            if is_trace_clock {
                return Err(SnapshotError::TraceClockNotMonotonic(node));
            }
            domain.monotonic = false;
            domain.edges.clear();
        }
        values.ids.push(snapshot_id);
        values.ts.push(ns);
        domain.known = true;
        Ok((idx, ns))
    }

    fn intern(&mut self, node: ClockNode) -> NodeIdx {
        if let Some(&idx) = self.index.get(&node) {
            return idx;
        }
        let idx = NodeIdx::try_from(self.domains.len()).expect("more than 2^32 clocks");
        self.domains.push(Domain {
            node,
            unit: 1,
            incremental: false,
            known: false,
            monotonic: true,
            last_ns: 0,
            series: HashMap::new(),
            edges: BTreeSet::new(),
        });
        self.index.insert(node, idx);
        idx
    }

    /// The clock's index if it has been in a snapshot.
    fn known_idx(&self, node: ClockNode) -> Option<NodeIdx> {
        self.index
            .get(&node)
            .copied()
            .filter(|&idx| self.domains[idx as usize].known)
    }

    /// Converts `value` (src units; a delta if src is incremental) to ns of
    /// `dst` over the shortest snapshot path.
    #[inline]
    pub fn convert(
        &mut self,
        src: ClockNode,
        value: u64,
        dst: ClockNode,
    ) -> Result<i64, ConvertError> {
        self.convert_impl(src, value, dst, false)
    }

    /// Like [`Self::convert`], but the path may only use clocks of
    /// `src.machine`.
    #[inline]
    pub fn convert_within_machine(
        &mut self,
        src: ClockNode,
        value: u64,
        dst: ClockNode,
    ) -> Result<i64, ConvertError> {
        self.convert_impl(src, value, dst, true)
    }

    /// Whether `convert` could find a path (no side effects).
    pub fn has_path(&self, src: ClockNode, dst: ClockNode) -> bool {
        self.path_exists(src, dst, false)
    }

    pub fn has_path_within_machine(&self, src: ClockNode, dst: ClockNode) -> bool {
        self.path_exists(src, dst, true)
    }

    fn path_exists(&self, src: ClockNode, dst: ClockNode, restricted: bool) -> bool {
        if src == dst {
            return true;
        }
        match (self.known_idx(src), self.known_idx(dst)) {
            (Some(s), Some(d)) => self.find_path(s, d, restricted).is_some(),
            _ => false,
        }
    }

    pub fn is_known(&self, node: ClockNode) -> bool {
        self.known_idx(node).is_some()
    }

    pub fn is_monotonic(&self, node: ClockNode) -> bool {
        self.index
            .get(&node)
            .is_none_or(|&idx| self.domains[idx as usize].monotonic)
    }

    pub fn is_incremental(&self, node: ClockNode) -> bool {
        self.known_idx(node)
            .is_some_and(|idx| self.domains[idx as usize].incremental)
    }

    /// The ns one raw unit of `node` counts (1 for a clock not known).
    pub fn unit_ns(&self, node: ClockNode) -> i64 {
        self.known_idx(node)
            .map_or(1, |idx| self.domains[idx as usize].unit)
    }

    /// Re-anchors an incremental clock's accumulator at an absolute raw
    /// value (a two-pass merge replays snapshot positions). No-op for other
    /// clocks; saturates on overflow.
    pub fn reset_incremental(&mut self, node: ClockNode, raw_value: u64) {
        if let Some(idx) = self.known_idx(node) {
            let domain = &mut self.domains[idx as usize];
            if domain.incremental {
                let raw = i64::try_from(raw_value).unwrap_or(i64::MAX);
                domain.last_ns = raw.saturating_mul(domain.unit);
            }
        }
    }

    pub fn stats(&self) -> GraphStats {
        self.stats
    }

    /// Every successfully added snapshot, in order, with values in ns.
    pub fn edges(&self) -> &[EdgeRecord] {
        &self.records
    }

    /// Drops every cached conversion.
    pub fn clear_cache(&mut self) {
        self.cache.invalidate();
    }
}
