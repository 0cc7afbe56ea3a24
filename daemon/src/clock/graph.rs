//! The clock graph: ClockSnapshot edges and nearest-snapshot conversion.
//!
//! (API fixed here; implementation in progress on a helper branch.)

use super::ClockNode;

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

/// The global clock graph.
#[derive(Debug, Default)]
pub struct ClockGraph {}
