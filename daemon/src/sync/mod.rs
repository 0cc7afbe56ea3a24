//! Clock sync, the daemon's IO side. The probe scheduler, reply matcher and
//! estimator are sans-IO in `tracesync_core::sync`; here are what drives
//! them and what the rest of the daemon reaches them through.
//!
//! - [`prober`]: the thread around the sync sockets that drives
//!   [`tracesync_core::sync::ProberCore`] ([`spawn_prober`]).
//! - [`registry`]: the sessions the server registers for probing
//!   ([`ProbeSessions`]), and what the prober publishes back.
//! - [`config`]: the `[sync]` section of the daemon config.
//! - [`sockets`]: the sync port's UDP socket and TCP fallback listener,
//!   bound together before the daemon reports it is listening.

pub mod config;
pub mod prober;
pub mod registry;
pub mod sockets;

pub use prober::spawn_prober;
pub use registry::ProbeSessions;
pub use sockets::SyncSockets;
