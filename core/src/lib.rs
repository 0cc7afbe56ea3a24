//! tracesync's host logic, sans-IO: nothing here reads a clock, touches a
//! file or a socket, or runs a task. Times come in as arguments (host
//! BOOTTIME ns), bytes come in and decisions go out; the daemon
//! (`tracesyncd`) and the offline merger drive it.
//!
//! - [`clock`]: the clock engine: a graph of clocks qualified by machine,
//!   source and sequence; nearest-snapshot conversion; trace-time selection
//!   and placement of clocks with no path.
//! - [`live`]: the live capture core: relay batches in, ordered, resolved,
//!   stamped packets out; acknowledgements.
//! - [`sync`]: clock sync: the probe scheduler and reply matcher, the
//!   per-relay estimator, the write-time check of a packet's mapping.
//! - [`preamble`]: what a trace needs before a packet in the middle of the
//!   stream (a rolled file's start, a perfetto tail's first packets).
//! - [`sync_point`]: the RemoteClockSync packets that carry our alignment
//!   into Perfetto.
//! - [`sync_quality`]: the sync-quality counter tracks of every remote
//!   machine in the rolled files (offset, frequency error, error bound,
//!   round trip, epochs).
//! - [`refine`]: what a refined capture writes before a remote machine's
//!   packet (`tracesync refine`).
//! - [`trigger`]: the flight recorder's triggers: the limit per name, ids,
//!   triggers remembered for relays that connect later, a trigger's window
//!   on a relay's clock.
//! - [`readback`]: trace times of packets read back from the rolled files
//!   (a rolled file's replayed preamble told by content).
//! - [`jsonl`]: the jsonl record of a resolved packet.
//! - [`status`]: the daemon's status report.
//! - [`control`]: the control socket's requests, and how a tail shows a
//!   packet (text or jsonl), live or read back from the files.

pub mod clock;
pub mod control;
mod hash;
pub mod jsonl;
pub mod live;
pub mod preamble;
pub mod readback;
pub mod refine;
pub mod shard;
pub mod status;
pub mod sync;
pub mod sync_point;
pub mod sync_quality;
pub mod trigger;
