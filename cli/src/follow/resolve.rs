//! Trace time of packets read back from the rolling files: core's
//! [`tracesync_core::readback`], shared with the daemon's snapshots.

pub use tracesync_core::readback::{FileResolver, MAX_SEEN, SeenPackets};
