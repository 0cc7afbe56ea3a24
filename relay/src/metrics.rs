//! Prometheus metrics of `tracesync-relay`: names (specified in
//! docs/operations-metrics.md `## Metrics`), the `[metrics]` config section, the
//! exporter, and the publishers.
//!
//! The spool, session and sources keep plain counters; they are copied into
//! the recorder once a second ([`UplinkMetrics::tick`] in the uplink loop,
//! [`publish_sources`] from a timer task). Only a sent batch and an ack are
//! counted where they happen (once per batch, never per packet). Without
//! `[metrics] listen` no recorder is installed and every call is a no-op.
//!
//! Every series with a fixed label set exists from [`install`] on, at zero:
//! the label values are enums ([`SourceDrop`], [`SpoolDrop`], [`SpoolTier`],
//! [`AckFrame`]) that both the zero registration and the publishers
//! iterate. The `metrics` macros are used here only (relay/clippy.toml).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::{counter, gauge};
use tracesync_common::metrics::Spec;

use crate::ring::Ring;
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
pub const INSTANCE_RENEWALS: &str = "tracesync_relay_instance_renewals_total";
pub const CONNECTED: &str = "tracesync_relay_connected";
pub const RING_BYTES: &str = "tracesync_relay_ring_bytes";
pub const RING_OLDEST_AGE: &str = "tracesync_relay_ring_oldest_age_seconds";
pub const RING_RELEASED_PACKETS: &str = "tracesync_relay_ring_released_packets_total";
pub const RING_TRIGGERS: &str = "tracesync_relay_ring_triggers_total";
pub const RING_WINDOWS_OWED: &str = "tracesync_relay_ring_windows_owed";
pub const TRIGGERS_ASKED: &str = "tracesync_relay_triggers_asked_total";

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
    Spec::counter(
        INSTANCE_RENEWALS,
        "Times the spool became a new relay instance after Welcomes in a row acknowledged batches never sent",
    ),
    Spec::gauge(CONNECTED, "1 while a session with the daemon is streaming"),
    Spec::gauge(RING_BYTES, "Ring mode: packet bytes the ring holds"),
    Spec::gauge(
        RING_OLDEST_AGE,
        "Ring mode: seconds since the oldest batch the ring holds was cut",
    ),
    Spec::counter(
        RING_RELEASED_PACKETS,
        "Ring mode: packets that left the ring oldest-first, past its bounds",
    ),
    Spec::counter(
        RING_TRIGGERS,
        "Ring mode: triggers from the daemon, by outcome",
    ),
    Spec::gauge(
        RING_WINDOWS_OWED,
        "Ring mode: trigger windows waiting for their end or for the daemon's acknowledgement",
    ),
    Spec::counter(
        TRIGGERS_ASKED,
        "Triggers fired on this machine (tracesync-relay trigger, trigger-on), by outcome",
    ),
];

/// Outcomes of a trigger fired on this machine (`outcome` of
/// [`TRIGGERS_ASKED`]): `fired`, or why not (the control socket's
/// `not_fired` words).
pub const TRIGGER_ASK_OUTCOMES: [&str; 7] = [
    "fired",
    "refused",
    "offline",
    "unsupported",
    "no_answer",
    "bad_request",
    "busy",
];

/// A trigger fired on this machine ended with `outcome` (one of
/// [`TRIGGER_ASK_OUTCOMES`]).
pub fn trigger_asked(outcome: &'static str) {
    counter!(TRIGGERS_ASKED, "outcome" => outcome).increment(1);
}

/// What became of a trigger (`outcome` of [`RING_TRIGGERS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerOutcome {
    Taken,
    Refused,
}

impl TriggerOutcome {
    pub const ALL: [TriggerOutcome; 2] = [TriggerOutcome::Taken, TriggerOutcome::Refused];

    pub fn label(self) -> &'static str {
        match self {
            TriggerOutcome::Taken => "taken",
            TriggerOutcome::Refused => "refused",
        }
    }
}

/// Why the sources dropped packets (`reason` of [`SOURCE_DROPPED_PACKETS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceDrop {
    Malformed,
    Oversized,
    SequenceOverflow,
}

impl SourceDrop {
    pub const ALL: [SourceDrop; 3] = [
        SourceDrop::Malformed,
        SourceDrop::Oversized,
        SourceDrop::SequenceOverflow,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SourceDrop::Malformed => "malformed",
            SourceDrop::Oversized => "oversized",
            SourceDrop::SequenceOverflow => "sequence_overflow",
        }
    }
}

/// Why the spool dropped packets (`reason` of [`SPOOL_DROPPED_PACKETS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoolDrop {
    /// In batches dropped oldest-first, the spool full.
    Full,
    /// Too large to spool.
    Oversize,
}

impl SpoolDrop {
    pub const ALL: [SpoolDrop; 2] = [SpoolDrop::Full, SpoolDrop::Oversize];

    pub fn label(self) -> &'static str {
        match self {
            SpoolDrop::Full => "full",
            SpoolDrop::Oversize => "oversize",
        }
    }
}

/// Where spooled bytes are (`tier` of [`SPOOL_BYTES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoolTier {
    Memory,
    Disk,
}

impl SpoolTier {
    pub const ALL: [SpoolTier; 2] = [SpoolTier::Memory, SpoolTier::Disk];

    pub fn label(self) -> &'static str {
        match self {
            SpoolTier::Memory => "memory",
            SpoolTier::Disk => "disk",
        }
    }
}

/// The daemon frame that acknowledged batches never sent (`frame` of
/// [`INVALID_ACKS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckFrame {
    Welcome,
    Ack,
}

impl AckFrame {
    pub const ALL: [AckFrame; 2] = [AckFrame::Welcome, AckFrame::Ack];

    pub fn label(self) -> &'static str {
        match self {
            AckFrame::Welcome => "welcome",
            AckFrame::Ack => "ack",
        }
    }
}

/// How often the counters are copied into the recorder.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);

pub use tracesync_common::metrics::MetricsConfig;

/// Installs the global recorder and serves it on `addr` (on the current
/// tokio runtime). The listener is bound when this returns; its address
/// is returned (the port chosen for port 0).
pub fn install(addr: SocketAddr) -> Result<SocketAddr, tracesync_common::metrics::ExporterError> {
    let bound = tracesync_common::metrics::install(addr, &[])?;
    tracesync_common::metrics::describe(SPECS);
    register_fixed();
    Ok(bound)
}

/// Every series with a fixed label set, at zero: a scrape shows them
/// before the first event (and before the first once-a-second publish).
fn register_fixed() {
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for name in [BATCHES_SENT, SENT_BYTES, BATCHES_ACKED] {
        counter!(name).absolute(0);
    }
    publish_uplink(&Uplink::default());
    publish_ring(&RingValues::default());
    publish_sources(&[]);
    for outcome in TRIGGER_ASK_OUTCOMES {
        counter!(TRIGGERS_ASKED, "outcome" => outcome).absolute(0);
    }
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
    /// `ring`: ring mode's ring and BOOTTIME now.
    pub fn tick(
        &mut self,
        now: Instant,
        spool: &Spool,
        session: &Session,
        ring: Option<(&Ring, u64)>,
    ) {
        if self.last.is_some_and(|last| now < last + PUBLISH_EVERY) {
            return;
        }
        self.last = Some(now);
        if let Some((ring, now_ns)) = ring {
            let stats = ring.stats();
            publish_ring(&RingValues {
                bytes: ring.held_bytes(),
                oldest_age_ns: ring.oldest_cut_ns().map_or(0, |t| now_ns.saturating_sub(t)),
                released_packets: stats.packets_released,
                triggers: [stats.triggers_taken, stats.triggers_refused],
                windows_owed: ring.windows_owed() as u64,
            });
        }
        let stats = spool.stats();
        publish_uplink(&Uplink {
            spooled_packets: stats.packets_written,
            spooled_bytes: stats.bytes_written,
            dropped_batches: stats.batches_dropped,
            dropped: SpoolDrop::ALL.map(|why| match why {
                SpoolDrop::Full => stats.packets_dropped,
                SpoolDrop::Oversize => stats.oversize_packets_dropped,
            }),
            bytes: SpoolTier::ALL.map(|tier| match tier {
                SpoolTier::Memory => spool.memory_bytes() as f64,
                SpoolTier::Disk => spool.disk_bytes() as f64,
            }),
            unacked: spool.last_seq().saturating_sub(session.acked_through()),
            reconnects: session.reconnects(),
            invalid: AckFrame::ALL.map(|frame| match frame {
                AckFrame::Welcome => session.invalid_welcomes(),
                AckFrame::Ack => session.invalid_acks(),
            }),
            connected: session.is_streaming(),
            instance_renewals: session.instance_renewals(),
        });
    }
}

/// The spool's and session's values of one publish.
#[derive(Debug, Default)]
struct Uplink {
    spooled_packets: u64,
    spooled_bytes: u64,
    dropped_batches: u64,
    /// Packets, in the order of [`SpoolDrop::ALL`].
    dropped: [u64; SpoolDrop::ALL.len()],
    /// In the order of [`SpoolTier::ALL`].
    bytes: [f64; SpoolTier::ALL.len()],
    unacked: u64,
    reconnects: u64,
    /// In the order of [`AckFrame::ALL`].
    invalid: [u64; AckFrame::ALL.len()],
    connected: bool,
    instance_renewals: u64,
}

fn publish_uplink(u: &Uplink) {
    counter!(SPOOLED_PACKETS).absolute(u.spooled_packets);
    counter!(SPOOLED_BYTES).absolute(u.spooled_bytes);
    counter!(SPOOL_DROPPED_BATCHES).absolute(u.dropped_batches);
    for (why, n) in SpoolDrop::ALL.into_iter().zip(u.dropped) {
        counter!(SPOOL_DROPPED_PACKETS, "reason" => why.label()).absolute(n);
    }
    for (tier, bytes) in SpoolTier::ALL.into_iter().zip(u.bytes) {
        gauge!(SPOOL_BYTES, "tier" => tier.label()).set(bytes);
    }
    gauge!(UNACKED_BATCHES).set(u.unacked as f64);
    counter!(RECONNECTS).absolute(u.reconnects);
    for (frame, n) in AckFrame::ALL.into_iter().zip(u.invalid) {
        counter!(INVALID_ACKS, "frame" => frame.label()).absolute(n);
    }
    gauge!(CONNECTED).set(if u.connected { 1.0 } else { 0.0 });
    counter!(INSTANCE_RENEWALS).absolute(u.instance_renewals);
}

/// The ring's values of one publish.
#[derive(Debug, Default)]
struct RingValues {
    bytes: u64,
    oldest_age_ns: u64,
    released_packets: u64,
    /// In the order of [`TriggerOutcome::ALL`].
    triggers: [u64; TriggerOutcome::ALL.len()],
    windows_owed: u64,
}

fn publish_ring(r: &RingValues) {
    gauge!(RING_BYTES).set(r.bytes as f64);
    gauge!(RING_OLDEST_AGE).set(r.oldest_age_ns as f64 / 1e9);
    counter!(RING_RELEASED_PACKETS).absolute(r.released_packets);
    for (outcome, n) in TriggerOutcome::ALL.into_iter().zip(r.triggers) {
        counter!(RING_TRIGGERS, "outcome" => outcome.label()).absolute(n);
    }
    gauge!(RING_WINDOWS_OWED).set(r.windows_owed as f64);
}

/// Sums every source's counters into the recorder (call once a second).
pub fn publish_sources(sources: &[Arc<SourceStats>]) {
    let (mut packets, mut bytes, mut replay_failures) = (0, 0, 0);
    let mut dropped = [0; SourceDrop::ALL.len()];
    for s in sources {
        let s = s.snapshot();
        packets += s.packets;
        bytes += s.bytes;
        replay_failures += s.replay_failures;
        for (n, why) in dropped.iter_mut().zip(SourceDrop::ALL) {
            *n += match why {
                SourceDrop::Malformed => s.malformed_packets,
                SourceDrop::Oversized => s.oversized_packets,
                SourceDrop::SequenceOverflow => s.sequence_overflow,
            };
        }
    }
    counter!(SOURCE_PACKETS).absolute(packets);
    counter!(SOURCE_BYTES).absolute(bytes);
    for (why, n) in SourceDrop::ALL.into_iter().zip(dropped) {
        counter!(SOURCE_DROPPED_PACKETS, "reason" => why.label()).absolute(n);
    }
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

    /// The values docs/operations-metrics.md lists for `name`'s `label`.
    fn documented(name: &str, label: &str) -> Vec<String> {
        let doc = include_str!("../../docs/operations-metrics.md");
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("{name} has no row in the spec"));
        let cell = row.split('|').nth(4).expect("a labels cell");
        let values = cell
            .split_once(&format!("`{label}`:"))
            .unwrap_or_else(|| panic!("{name}: no {label} values in {cell:?}"))
            .1;
        values
            .split(',')
            .map(|v| v.trim().trim_matches('`').to_owned())
            .collect()
    }

    #[test]
    fn label_values_are_the_documented_ones_and_start_at_zero() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, register_fixed);
        let text = handle.render();
        let families: [(&str, &str, Vec<&str>); 6] = [
            (TRIGGERS_ASKED, "outcome", TRIGGER_ASK_OUTCOMES.to_vec()),
            (
                RING_TRIGGERS,
                "outcome",
                TriggerOutcome::ALL.map(TriggerOutcome::label).to_vec(),
            ),
            (
                SOURCE_DROPPED_PACKETS,
                "reason",
                SourceDrop::ALL.map(SourceDrop::label).to_vec(),
            ),
            (
                SPOOL_DROPPED_PACKETS,
                "reason",
                SpoolDrop::ALL.map(SpoolDrop::label).to_vec(),
            ),
            (
                SPOOL_BYTES,
                "tier",
                SpoolTier::ALL.map(SpoolTier::label).to_vec(),
            ),
            (
                INVALID_ACKS,
                "frame",
                AckFrame::ALL.map(AckFrame::label).to_vec(),
            ),
        ];
        for (name, label, values) in families {
            assert_eq!(documented(name, label), values, "{name}");
            for value in values {
                let line = format!("{name}{{{label}=\"{value}\"}} 0");
                assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
            }
        }
        for spec in SPECS.iter().filter(|s| s.name != BUILD_INFO) {
            assert!(
                text.lines().any(|l| l.starts_with(spec.name)),
                "{} in\n{text}",
                spec.name
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
