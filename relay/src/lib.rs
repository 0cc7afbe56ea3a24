//! tracesync relay agent: follows a machine's Perfetto trace sources and
//! streams their packets to the host daemon.
//!
//! - [`clocks`]: the relay's clocks behind a trait (system, simulated skew),
//!   and the ground truth of a time namespace.
//! - [`identity`]: the relay's boot id, machine name and raw machine id.
//! - [`own_packets`]: the relay's SystemInfo and ClockSnapshot packets.
//! - [`probe`]: the clock-sync probe responder.
//! - [`sequences`]: relay sequence ids.
//! - [`source`]: trace sources (file, unix socket, stdin, synthetic).

pub mod clocks;
pub mod identity;
pub mod own_packets;
pub mod probe;
pub mod sequences;
pub mod source;
