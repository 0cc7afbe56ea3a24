//! The clock engine: everything in Perfetto's clock model, sans-IO.
//!
//! - [`graph`]: snapshots, validation, nearest-snapshot conversion over the
//!   shortest path, the conversion cache, incremental and scaled clocks.
//! - [`timeline`]: trace time (first claimant wins) and placement of clocks
//!   with no path (REALTIME rendezvous, same domain at zero, else drop).

pub mod graph;
pub mod timeline;

pub use graph::{ClockGraph, ConvertError, EdgeOrigin, SnapshotClock, SnapshotError};

/// One clock domain in the global graph.
///
/// Clocks are qualified as in Perfetto's merging model: BOOTTIME on two
/// machines are two clocks, and so are the clocks of two files (sources) on
/// one machine until something relates them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClockNode {
    /// Index of the machine in the caller's machine table (0 = host).
    pub machine: u32,
    /// Source within the machine (input file, relay source); 0 = the
    /// machine-canonical clocks.
    pub scope: u32,
    /// Packet sequence for sequence-scoped clocks (64..=127), else 0.
    pub seq: u32,
    /// Perfetto clock id.
    pub clock: u32,
}

impl ClockNode {
    pub const fn new(machine: u32, scope: u32, seq: u32, clock: u32) -> Self {
        Self {
            machine,
            scope,
            seq,
            clock,
        }
    }
}

impl std::fmt::Display for ClockNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match tracesync_protocol::clock_ids::builtin_name(self.clock) {
            Some(name) => write!(f, "{name}")?,
            None => write!(f, "{}", self.clock)?,
        }
        write!(f, "(m={},src={}", self.machine, self.scope)?;
        if self.seq != 0 {
            write!(f, ",seq={}", self.seq)?;
        }
        f.write_str(")")
    }
}
