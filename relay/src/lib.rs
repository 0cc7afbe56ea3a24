//! tracesync relay agent: follows a machine's Perfetto trace sources and
//! streams their packets to the host daemon.
//!
//! - [`clocks`]: the relay's clocks behind a trait (system, simulated skew),
//!   and the ground truth of a time namespace.
//! - [`source`]: trace sources (file, unix socket, stdin, synthetic).

pub mod clocks;
pub mod probe;
pub mod source;
