//! tracesync relay agent: follows a machine's Perfetto trace sources and
//! streams their packets to the host daemon.
//!
//! - [`agent`]: the process: config, tasks, signals, exit code.
//! - [`clocks`]: the relay's clocks behind a trait (system, simulated skew),
//!   and the ground truth of a time namespace.
//! - [`identity`]: the relay's boot id, machine name and raw machine id.
//! - [`own_packets`]: the relay's SystemInfo and ClockSnapshot packets.
//! - [`probe`]: the clock-sync probe responder.
//! - [`ring`]: the flight recorder (`--mode ring`): what the ring keeps and
//!   which trigger windows it owes, sans-IO.
//! - [`sequences`]: relay sequence ids.
//! - [`source`]: trace sources (file, unix socket, stdin, synthetic).
//! - [`config`]: the TOML file and flags.
//! - [`control`]: the control socket (`tracesync-relay trigger NAME`).
//! - [`spool`]: bounded memory plus checksummed disk segments; batch
//!   numbering; resume cursors.
//! - [`session`]: the sans-IO connection state machine (hello, window,
//!   heartbeats, backoff).
//! - [`uplink`]: the TCP edge that runs the session against the spool.
//! - [`metrics`]: the relay's Prometheus endpoint and metric names.

pub mod agent;
pub mod clocks;
pub mod config;
pub mod control;
pub mod identity;
// The one place the `metrics` macros are allowed (relay/clippy.toml).
#[allow(
    clippy::disallowed_macros,
    reason = "the metrics module owns every series"
)]
pub mod metrics;
pub mod own_packets;
pub mod probe;
pub mod ring;
pub mod sequences;
pub mod session;
pub mod source;
pub mod spool;
pub mod tls;
pub mod uplink;
