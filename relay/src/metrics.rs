//! Prometheus metrics of `tracesync-relay`: names (specified in
//! docs/operations-metrics.md `## Metrics`), the `[metrics]` config section, the
//! exporter, and the publishers.
//!
//! The spool, session and sources keep plain counters; they are copied into
//! the recorder once a second ([`UplinkMetrics::tick`] in the uplink loop,
//! [`publish_sources`] from a timer task). Only a sent batch and an ack are
//! counted where they happen (once per batch, never per packet). Without
//! `[metrics] listen` no recorder is installed and every call is a no-op.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::{counter, gauge};
use tracesync_common::metrics::Spec;

use crate::session::Session;
use crate::source::SourceStats;
use crate::spool::Spool;

pub const BUILD_INFO: &str = "tracesync_relay_build_info";
pub const SOURCE_PACKETS: &str = "tracesync_relay_source_packets_total";
pub const SOURCE_BYTES: &str = "tracesync_relay_source_bytes_total";
pub const SOURCE_DROPPED_PACKETS: &str = "tracesync_relay_source_dropped_packets_total";
pub const SOURCE_REPLAY_FAILURES: &str = "tracesync_relay_source_replay_failures_total";
pub const SPOOLED_PACKETS: &str = "tracesync_relay_spooled_packets_total";
pub const SPOOLED_BYTES: &str = "tracesync_relay_spooled_bytes_total";
pub const SPOOL_BYTES: &str = "tracesync_relay_spool_bytes";
pub const UNACKED_BATCHES: &str = "tracesync_relay_unacked_batches";
pub const BATCHES_SENT: &str = "tracesync_relay_batches_sent_total";
pub const SENT_BYTES: &str = "tracesync_relay_sent_bytes_total";
pub const BATCHES_ACKED: &str = "tracesync_relay_batches_acked_total";
pub const SPOOL_DROPPED_BATCHES: &str = "tracesync_relay_spool_dropped_batches_total";
pub const SPOOL_DROPPED_PACKETS: &str = "tracesync_relay_spool_dropped_packets_total";
pub const RECONNECTS: &str = "tracesync_relay_reconnects_total";
pub const INVALID_ACKS: &str = "tracesync_relay_invalid_acks_total";
pub const CONNECTED: &str = "tracesync_relay_connected";

/// Every relay metric: name, kind, help.
pub const SPECS: &[Spec] = &[
    Spec::gauge(BUILD_INFO, "Always 1; the version label names the build"),
    Spec::counter(SOURCE_PACKETS, "Packets the sources handed to the spool"),
    Spec::counter(
        SOURCE_BYTES,
        "Bytes of the packets the sources handed to the spool",
    ),
    Spec::counter(
        SOURCE_DROPPED_PACKETS,
        "Packets the sources dropped, by reason",
    ),
    Spec::counter(
        SOURCE_REPLAY_FAILURES,
        "Source resumes whose producers' incremental state could not be replayed whole",
    ),
    Spec::counter(SPOOLED_PACKETS, "Packets written to the spool"),
    Spec::counter(SPOOLED_BYTES, "Bytes of the packets written to the spool"),
    Spec::gauge(SPOOL_BYTES, "Spool size now, by tier"),
    Spec::gauge(UNACKED_BATCHES, "Batches spooled and not yet acknowledged"),
    Spec::counter(BATCHES_SENT, "Batches sent to the daemon, resends included"),
    Spec::counter(SENT_BYTES, "Packet bytes of the batches sent"),
    Spec::counter(BATCHES_ACKED, "Batches the daemon acknowledged"),
    Spec::counter(
        SPOOL_DROPPED_BATCHES,
        "Batches dropped oldest-first, spool full",
    ),
    Spec::counter(
        SPOOL_DROPPED_PACKETS,
        "Packets dropped by the spool, by reason",
    ),
    Spec::counter(
        RECONNECTS,
        "Connections to the daemon lost and planned again",
    ),
    Spec::counter(
        INVALID_ACKS,
        "Welcomes and Acks that acknowledged batches this relay never sent (connection closed, spool kept), by frame",
    ),
    Spec::gauge(CONNECTED, "1 while a session with the daemon is streaming"),
];

/// How often the counters are copied into the recorder.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);

pub use tracesync_common::metrics::MetricsConfig;

/// Installs the global recorder and serves it on `addr` (on the current
/// tokio runtime). The listener is bound when this returns; its address
/// is returned (the port chosen for port 0).
pub fn install(addr: SocketAddr) -> Result<SocketAddr, String> {
    let bound = tracesync_common::metrics::install(addr, &[])?;
    tracesync_common::metrics::describe(SPECS);
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for name in [
        BATCHES_SENT,
        SENT_BYTES,
        BATCHES_ACKED,
        SOURCE_REPLAY_FAILURES,
    ] {
        counter!(name).absolute(0);
    }
    for reason in ["malformed", "oversized", "sequence_overflow"] {
        counter!(SOURCE_DROPPED_PACKETS, "reason" => reason).absolute(0);
    }
    for frame in ["welcome", "ack"] {
        counter!(INVALID_ACKS, "frame" => frame).absolute(0);
    }
    Ok(bound)
}

/// A batch went out (at the call site: once per batch).
pub fn batch_sent(bytes: usize) {
    counter!(BATCHES_SENT).increment(1);
    counter!(SENT_BYTES).increment(bytes as u64);
}

/// The daemon acknowledged `n` more batches.
pub fn batches_acked(n: u64) {
    counter!(BATCHES_ACKED).increment(n);
}

/// Copies the spool's and session's counters, at most once per
/// [`PUBLISH_EVERY`].
#[derive(Debug, Default)]
pub struct UplinkMetrics {
    last: Option<Instant>,
}

impl UplinkMetrics {
    pub fn tick(&mut self, now: Instant, spool: &Spool, session: &Session) {
        if self.last.is_some_and(|last| now < last + PUBLISH_EVERY) {
            return;
        }
        self.last = Some(now);
        let stats = spool.stats();
        counter!(SPOOLED_PACKETS).absolute(stats.packets_written);
        counter!(SPOOLED_BYTES).absolute(stats.bytes_written);
        counter!(SPOOL_DROPPED_BATCHES).absolute(stats.batches_dropped);
        counter!(SPOOL_DROPPED_PACKETS, "reason" => "full").absolute(stats.packets_dropped);
        counter!(SPOOL_DROPPED_PACKETS, "reason" => "oversize")
            .absolute(stats.oversize_packets_dropped);
        gauge!(SPOOL_BYTES, "tier" => "memory").set(spool.memory_bytes() as f64);
        gauge!(SPOOL_BYTES, "tier" => "disk").set(spool.disk_bytes() as f64);
        let unacked = spool.last_seq().saturating_sub(session.acked_through());
        gauge!(UNACKED_BATCHES).set(unacked as f64);
        counter!(RECONNECTS).absolute(session.reconnects());
        counter!(INVALID_ACKS, "frame" => "welcome").absolute(session.invalid_welcomes());
        counter!(INVALID_ACKS, "frame" => "ack").absolute(session.invalid_acks());
        gauge!(CONNECTED).set(if session.is_streaming() { 1.0 } else { 0.0 });
    }
}

/// Sums every source's counters into the recorder (call once a second).
pub fn publish_sources(sources: &[Arc<SourceStats>]) {
    let (mut packets, mut bytes, mut malformed, mut oversized, mut overflow) = (0, 0, 0, 0, 0);
    let mut replay_failures = 0;
    for s in sources {
        let s = s.snapshot();
        packets += s.packets;
        bytes += s.bytes;
        malformed += s.malformed_packets;
        oversized += s.oversized_packets;
        overflow += s.sequence_overflow;
        replay_failures += s.replay_failures;
    }
    counter!(SOURCE_PACKETS).absolute(packets);
    counter!(SOURCE_BYTES).absolute(bytes);
    counter!(SOURCE_DROPPED_PACKETS, "reason" => "malformed").absolute(malformed);
    counter!(SOURCE_DROPPED_PACKETS, "reason" => "oversized").absolute(oversized);
    counter!(SOURCE_DROPPED_PACKETS, "reason" => "sequence_overflow").absolute(overflow);
    counter!(SOURCE_REPLAY_FAILURES).absolute(replay_failures);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions_and_are_documented() {
        let doc = include_str!("../../docs/operations-metrics.md");
        for Spec { name, kind, .. } in SPECS {
            assert!(name.starts_with("tracesync_relay_"), "{name}");
            // Prometheus conventions: counters end in _total, nothing else does.
            assert_eq!(
                name.ends_with("_total"),
                *kind == tracesync_common::metrics::Kind::Counter,
                "{name}"
            );
            assert!(
                doc.contains(&format!("`{name}`")),
                "{name} is not in the spec"
            );
        }
    }

    #[test]
    fn sources_are_summed() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let a = Arc::new(SourceStats::default());
        let b = Arc::new(SourceStats::default());
        a.packets.store(3, std::sync::atomic::Ordering::Relaxed);
        b.packets.store(4, std::sync::atomic::Ordering::Relaxed);
        b.replay_failures
            .store(2, std::sync::atomic::Ordering::Relaxed);
        metrics::with_local_recorder(&recorder, || publish_sources(&[a, b]));
        let text = handle.render();
        assert!(
            text.contains("tracesync_relay_source_packets_total 7"),
            "{text}"
        );
        assert!(
            text.contains("tracesync_relay_source_replay_failures_total 2"),
            "{text}"
        );
    }
}
