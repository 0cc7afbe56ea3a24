//! `tracesyncd`, the host daemon: the IO shells around the sans-IO logic of
//! `tracesync_core` (docs/architecture.md names every thread, task,
//! channel and lock).
//!
//! - [`server`]: the tokio side: accept loop, relay sessions, the ingest
//!   thread that drives `tracesync_core::live::LiveCore`, acks, shutdown.
//! - [`rolling`]: the rolling writer of the live merged trace.
//! - [`control`]: the control socket (`tracesync status`, `tracesync tail`).
//! - [`sync`]: the prober thread that drives `tracesync_core::sync::ProberCore`
//!   on the sync sockets, and the session registry.
//! - [`tls`]: the acceptor and the certificate identity rule.
//! - [`metrics`]: the Prometheus names and publishers.
//! - [`config`]: `tracesyncd`'s configuration (file + flags).
//! - [`reload`]: what SIGHUP applies, and what needs a restart.
//! - [`snapshot`]: the flight recorder's windows staged and snapshots written.

// The function budget is for the product's code; a test reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod config;
pub mod control;
// The one place the `metrics` macros are allowed (daemon/clippy.toml).
#[allow(
    clippy::disallowed_macros,
    reason = "the metrics module owns every series"
)]
pub mod metrics;
mod ranged_keys;
pub mod reload;
pub mod rolling;
pub mod server;
pub mod snapshot;
pub mod sync;
pub mod tls;
pub mod waiting_room;
