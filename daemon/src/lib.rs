//! tracesync host side.
//!
//! - [`clock`]: the clock engine (sans-IO): a global graph of clocks
//!   qualified by machine, source and sequence; nearest-snapshot conversion;
//!   trace-time selection and placement of clocks with no path.
//! - [`merge`]: `tracesync merge`, the offline merger of recorded traces.
//! - [`live`]: the live-capture core (sans-IO): relay batches in, ordered
//!   resolved packets out.
//! - [`rolling`]: the rolling writer of the live merged trace.
//! - [`server`]: the daemon's tokio side: relay sessions, the ingest
//!   loop, acks, shutdown.
//! - [`sync`]: clock-sync probes and estimator, host side.
//! - [`status`]: the daemon's status report.
//! - [`config`]: `tracesyncd`'s configuration (file + flags).
//! - [`reload`]: what SIGHUP applies, and what needs a restart.

pub mod config;
pub mod control;
pub mod metrics;
pub mod reload;
pub mod rolling;
pub mod server;
pub mod sync;
pub mod tls;
