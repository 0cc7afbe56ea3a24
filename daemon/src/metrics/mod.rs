//! Prometheus metrics of `tracesyncd`: the names ([`names`], specified in
//! docs/operations-metrics.md `## Metrics`), the `[metrics]` config section, the
//! exporter, and the publishers the ingest loop calls.
//!
//! Hot paths stay cheap: per-packet work is never a metric update. The
//! ingest loop already builds a status report every 250 ms and the core and
//! writer keep plain counters; [`IngestMetrics::publish`] copies those into
//! the recorder once per status tick (counters with `absolute`, so a missed
//! tick loses nothing). Rare events (a refused connection, a lagging tail
//! subscriber, an output error) are counted where they happen.
//!
//! Without `[metrics] listen` no recorder is installed and every call here
//! is a no-op of the `metrics` crate.
//!
//! The parts: [`names`] (every metric, with its help text), [`connections`]
//! (the relay-connection counters and their `reason` labels), [`events`]
//! (the other counters counted where they happen), `fixed` (the series
//! that start at zero), `ingest` ([`IngestMetrics`], the per-machine
//! series) and `sync_series` (a machine's probe-session series).
//!
//! The `metrics` crate's macros are used in this module only
//! (daemon/clippy.toml fences them elsewhere): the rest of the daemon
//! counts through the enums and functions here, so every label value is
//! one of a list the exporter starts at zero.

pub mod connections;
pub mod events;
mod fixed;
mod ingest;
pub mod names;
mod sync_series;

use std::net::SocketAddr;

use metrics::{counter, gauge};

pub use connections::{Counter, Failed, Refused};
pub use events::Event;
pub use ingest::{IngestMetrics, OTHER_MACHINE};
pub use tracesync_common::metrics::MetricsConfig;

use fixed::register_fixed;

/// Installs the global recorder and serves it over HTTP on `addr` (on the
/// current tokio runtime). The listener is bound when this returns; its
/// address is returned (the port chosen for port 0).
pub fn install(addr: SocketAddr) -> Result<SocketAddr, tracesync_common::metrics::ExporterError> {
    let bound = tracesync_common::metrics::install(
        addr,
        &[(names::SYNC_PROBE_RTT, &names::SYNC_PROBE_RTT_BUCKETS)],
    )?;
    tracesync_common::metrics::describe(names::SPECS);
    register_fixed();
    Ok(bound)
}

/// Lines of the identity bindings file ignored at start.
pub fn record_identity_bindings_ignored_lines(lines: usize) {
    gauge!(names::IDENTITY_BINDINGS_IGNORED_LINES).set(lines as f64);
}

/// Seconds from nanoseconds (Prometheus base unit).
fn secs(ns: f64) -> f64 {
    ns / 1e9
}

/// One probe's round trip (`(t4 - t1) - (t3 - t2)`, ns) into the histogram.
pub fn record_probe_rtt(rtt_ns: u64) {
    metrics::histogram!(names::SYNC_PROBE_RTT).record(secs(rtt_ns as f64));
}

/// The live core's whole-daemon counters, once per status tick.
pub fn record_live(stats: &tracesync_core::live::LiveStats, queued: usize) {
    counter!(names::INGEST_RECEIVED_PACKETS).absolute(stats.packets_in);
    counter!(names::INGEST_FORCED_PACKETS).absolute(stats.forced_by_queue_limit);
    counter!(names::SYNC_POINTS_WRITTEN).absolute(stats.sync_points_written);
    gauge!(names::INGEST_QUEUED_PACKETS).set(queued as f64);
}

/// The rolling writer's counters, once per status tick.
pub fn record_output(
    stats: &crate::rolling::RollingStats,
    current_file_bytes: u64,
    current_file_seq: u64,
) {
    counter!(names::OUTPUT_BYTES).absolute(stats.bytes_written);
    counter!(names::OUTPUT_PACKETS).absolute(stats.packets_written);
    counter!(names::OUTPUT_FILES).absolute(stats.files_started);
    counter!(names::OUTPUT_FILES_DELETED).absolute(stats.files_deleted);
    counter!(names::OUTPUT_COMMITS).absolute(stats.commits);
    counter!(names::OUTPUT_VANISHED).absolute(stats.vanished);
    counter!(names::OUTPUT_SYMLINKS_REFUSED).absolute(stats.symlinks_refused);
    gauge!(names::OUTPUT_CURRENT_FILE_BYTES).set(current_file_bytes as f64);
    gauge!(names::OUTPUT_CURRENT_FILE_SEQUENCE).set(current_file_seq as f64);
}

#[cfg(test)]
mod tests;
