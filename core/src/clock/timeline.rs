//! Trace time and placement of clocks that have no path to it.
//!
//! One clock becomes the timeline of the merged trace: the first claimant
//! wins (a manifest's `trace_time` claims before any trace is read). A clock
//! with no snapshot path to trace time is placed in the merging seed's order:
//!
//! 1. REALTIME rendezvous: if the clock's machine and the trace-time machine
//!    both relate to REALTIME, their REALTIMEs are equated at zero offset;
//! 2. same domain: the same clock domain of another machine or file (two
//!    BOOTTIMEs), or a private per-file clock, is tied at zero offset;
//! 3. otherwise nothing is assumed: the clock stays unrelated, its packets are
//!    dropped and counted.
//!
//! Real relationships always win: placement is only tried when no path
//! exists, and every assumption is an ordinary, listed edge of the graph.

use std::collections::BTreeSet;

use tracesync_protocol::clock_ids::{BOOTTIME, REALTIME, TRACE_FILE, is_sequence_clock};

use super::ClockNode;
use super::graph::{ClockGraph, ConvertError, EdgeOrigin, SnapshotClock};

/// Who claimed the trace-time clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimant {
    /// `trace_time` of a manifest.
    Manifest,
    /// A trace's ClockSnapshot (primary_trace_clock, or BOOTTIME inferred).
    Trace { source: String },
    /// Nobody claimed: the host's BOOTTIME.
    Default,
}

/// How a clock got related to trace time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A path already existed (snapshots, sync, manifest or earlier placement).
    Related,
    /// REALTIME of the two machines equated at zero.
    Rendezvous,
    /// Tied to the same domain (or a private file clock) at zero.
    SameDomain,
    /// Different real domains: never equated; its packets are dropped.
    Unrelatable,
}

/// Why a timestamp has no place on the merged timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unplaced {
    #[error("clock {0} appears in no clock snapshot")]
    UnknownSourceClock(ClockNode),
    #[error("no path from clock {0} to trace time")]
    NoPath(ClockNode),
    #[error("timestamp converts to before the start of trace time")]
    BeforeTraceStart,
    #[error("timestamp overflows 64-bit nanoseconds")]
    Overflow,
}

/// Counters, named as Perfetto's stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineStats {
    pub clock_sync_failure_unknown_source_clock: u64,
    pub clock_sync_failure_no_path: u64,
    pub clock_sync_unrelatable_clock_domains: u64,
    pub trace_sorter_negative_timestamp_dropped: u64,
}

/// The graph plus trace-time state: converts any clock to trace time.
#[derive(Debug)]
pub struct Timeline {
    graph: ClockGraph,
    trace_clock: ClockNode,
    claimant: Claimant,
    /// Clocks for which placement was already decided.
    placed: BTreeSet<ClockNode>,
    /// (machine, scope) pairs already counted as unrelatable: Perfetto
    /// bridges (and logs) once per machine and file, whatever the clocks.
    unrelatable: BTreeSet<(u32, u32)>,
    stats: TimelineStats,
}

impl Timeline {
    /// Trace time starts as the host's BOOTTIME until someone claims it.
    pub fn new() -> Self {
        let trace_clock = ClockNode::new(0, 0, 0, BOOTTIME);
        let mut graph = ClockGraph::new();
        graph.set_trace_time_clock(trace_clock);
        Self {
            graph,
            trace_clock,
            claimant: Claimant::Default,
            placed: BTreeSet::new(),
            unrelatable: BTreeSet::new(),
            stats: TimelineStats::default(),
        }
    }

    /// Claims trace time for `clock`; the first claim wins. Returns whether
    /// this claim took effect.
    pub fn claim_trace_time(&mut self, clock: ClockNode, claimant: Claimant) -> bool {
        if self.claimant != Claimant::Default {
            return false;
        }
        self.trace_clock = clock;
        self.claimant = claimant;
        self.graph.set_trace_time_clock(clock);
        true
    }

    pub fn trace_clock(&self) -> ClockNode {
        self.trace_clock
    }

    pub fn graph(&self) -> &ClockGraph {
        &self.graph
    }

    pub fn graph_mut(&mut self) -> &mut ClockGraph {
        &mut self.graph
    }

    pub fn stats(&self) -> TimelineStats {
        self.stats
    }

    /// Relates `clock` to trace time if no path exists yet, in the merging
    /// seed's order. Decided once per clock.
    ///
    /// A file-scoped clock (scope != 0) is first tied to its machine's
    /// canonical clock of the same domain: files of one machine are assumed
    /// to come from one boot unless something better is known. A file's
    /// private clock (TRACE_FILE) is its own: never another file's.
    pub fn place(&mut self, clock: ClockNode) -> Placement {
        let target = self.trace_clock;
        if clock == target || self.graph.has_path(clock, target) {
            return Placement::Related;
        }
        if !self.placed.insert(clock) {
            // Already tried: whatever was decided then still holds.
            return Placement::Unrelatable;
        }
        if clock.scope != 0 && !is_sequence_clock(clock.clock) && clock.clock != TRACE_FILE {
            let canonical = ClockNode { scope: 0, ..clock };
            if canonical != clock && self.graph.is_known(canonical) {
                // Only "if they are not already connected" (Perfetto's
                // identity case): a manifest edge may relate them already
                // (sync_to a file's private timeline), and a second, zero
                // edge would contradict it, making the clock non-monotonic
                // and every packet on it unplaceable.
                if !self.graph.has_path(clock, canonical) {
                    self.add_zero_edge(clock, canonical, EdgeOrigin::SameDomain);
                }
                // Perfetto bridges the machine-canonical clock only: when
                // that fails the file's clock is unrelatable too (counted
                // once, for the canonical clock).
                return self.place(canonical);
            }
        }
        if self.try_rendezvous(clock, target) {
            return Placement::Rendezvous;
        }
        let same_domain = clock.clock == target.clock && !is_sequence_clock(clock.clock);
        if same_domain || clock.clock == TRACE_FILE || target.clock == TRACE_FILE {
            self.add_zero_edge(clock, target, EdgeOrigin::SameDomain);
            return Placement::SameDomain;
        }
        // A clock in no snapshot is an unknown clock, counted per packet by
        // the conversion; only a known clock of another domain is unrelatable.
        if self.graph.is_known(clock) && self.unrelatable.insert((clock.machine, clock.scope)) {
            self.stats.clock_sync_unrelatable_clock_domains += 1;
        }
        Placement::Unrelatable
    }

    /// REALTIME of `clock`'s machine and of trace time's machine, equated at
    /// zero when both sides reach their REALTIME.
    fn try_rendezvous(&mut self, clock: ClockNode, target: ClockNode) -> bool {
        let local = ClockNode::new(clock.machine, clock.scope, 0, REALTIME);
        let remote = ClockNode::new(target.machine, target.scope, 0, REALTIME);
        // Trace time may be REALTIME itself (a manifest's `trace_time`): it
        // is then the rendezvous even when no snapshot of its machine has it
        // (every file on named machines, the host holding nothing).
        let remote_usable = remote == target || self.graph.is_known(remote);
        if local == remote || !self.graph.is_known(local) || !remote_usable {
            return false;
        }
        let reaches_local = clock == local || self.graph.has_path_within_machine(clock, local);
        let remote_reaches = remote == target || self.graph.has_path_within_machine(remote, target);
        if !(reaches_local && remote_reaches) {
            return false;
        }
        if !self.graph.has_path(local, remote) {
            self.add_zero_edge(local, remote, EdgeOrigin::Rendezvous);
        }
        self.graph.has_path(clock, target)
    }

    fn add_zero_edge(&mut self, a: ClockNode, b: ClockNode, origin: EdgeOrigin) {
        // Both clocks exist with unit 1 ns and are not incremental here
        // (placement only ties builtin/global/file clocks).
        let clocks = [SnapshotClock::ns(a, 0), SnapshotClock::ns(b, 0)];
        // An error here means a unit/incremental clash: the clock then stays
        // unrelated and the failure is counted by the graph.
        let _ = self.graph.add_snapshot(&clocks, origin);
    }

    /// Checks a trace-time value converted elsewhere against the start of
    /// trace time, counting what is dropped.
    pub fn check_start(&mut self, ts: i64) -> Result<i64, Unplaced> {
        if ts < 0 {
            self.stats.trace_sorter_negative_timestamp_dropped += 1;
            return Err(Unplaced::BeforeTraceStart);
        }
        Ok(ts)
    }

    /// Converts `value` of `clock` to trace time, placing the clock first if
    /// needed. Counts every failure under Perfetto's stat names.
    pub fn to_trace_time(&mut self, clock: ClockNode, value: u64) -> Result<i64, Unplaced> {
        let target = self.trace_clock;
        let mut result = self.graph.convert(clock, value, target);
        if matches!(
            result,
            Err(ConvertError::NoPath { .. }
                | ConvertError::UnknownSourceClock(_)
                | ConvertError::UnknownTargetClock(_))
        ) && self.place(clock) != Placement::Unrelatable
        {
            result = self.graph.convert(clock, value, target);
        }
        match result {
            Ok(ts) => self.check_start(ts),
            Err(ConvertError::UnknownSourceClock(_)) => {
                self.stats.clock_sync_failure_unknown_source_clock += 1;
                Err(Unplaced::UnknownSourceClock(clock))
            }
            Err(ConvertError::NoPath { .. } | ConvertError::UnknownTargetClock(_)) => {
                self.stats.clock_sync_failure_no_path += 1;
                Err(Unplaced::NoPath(clock))
            }
            Err(ConvertError::Overflow) => Err(Unplaced::Overflow),
        }
    }
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}
