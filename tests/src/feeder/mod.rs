//! `tracesync-feeder`: a relay for measuring the daemon. It speaks the
//! real protocol over the relay's own connection code (mutual TLS, Hello,
//! batches in a window of unacked ones, heartbeats, acks, the probe
//! responder, the relay's ClockSnapshot and SystemInfo packets), but its
//! batches come from a pre-encoded template ([`batch`]) instead of sources
//! and a spool, so its CPU per packet is a small fraction of the daemon's
//! and a benchmark measures the daemon, not the relays' generators.
//!
//! Invariants:
//! - batch numbers run 1, 2, 3, ... and packet indices are contiguous
//!   across batches, as a relay's; each run is a new relay instance;
//! - every TrackEvent carries a fresh `tracesync_n` (contiguous from 0 for
//!   the run's source `<name>/1`): the capture checker counts each packet
//!   lost or duplicated ([`check`]);
//! - a batch is kept in memory until the daemon acknowledges it and is
//!   resent unchanged after a reconnect; the session bounds what is kept
//!   (its window), so memory stays bounded;
//! - a batch is made when the session may send it, so its timestamps are
//!   the host's BOOTTIME at that moment (the feeder runs on the host: each
//!   packet's truth is its timestamp).

pub mod batch;
pub mod check;
mod drive;

pub use drive::{FeederConfig, Summary, run};
