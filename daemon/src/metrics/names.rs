//! Every metric name `tracesyncd` exports, in one place. The spec with
//! types, units, labels and meanings is docs/operations-metrics.md
//! `## Metrics`;
//! a name added here is added there.
//!
//! Conventions: `tracesync_` prefix, counters end in `_total`, units in the
//! name in base units (`_bytes`, `_seconds`), bounded labels only:
//! `machine` (at most `limits.max-relays` + 1 values, the rest is folded
//! into `other`) and `reason` (a fixed list per metric: below, or the
//! enums of [`super::connections`]).

use tracesync_common::metrics::Spec;

// Build.
pub const BUILD_INFO: &str = "tracesync_build_info";

// Relay connections (accept loop and sessions).
pub const CONNECTIONS_ACCEPTED: &str = "tracesync_connections_accepted_total";
pub const SESSIONS_WELCOMED: &str = "tracesync_sessions_welcomed_total";
pub const CONNECTIONS_REFUSED: &str = "tracesync_connections_refused_total";
pub const CONNECTIONS_FAILED: &str = "tracesync_connections_failed_total";
pub const ACCEPT_ERRORS: &str = "tracesync_accept_errors_total";
pub const RELAYS_CONNECTED: &str = "tracesync_relays_connected";
/// Identity bindings (docs/reliability.md "The identity rule").
pub const IDENTITY_BINDINGS_IGNORED_LINES: &str = "tracesync_identity_bindings_ignored_lines";
pub const IDENTITY_BINDINGS_SAVE_ERRORS: &str = "tracesync_identity_bindings_save_errors_total";
// The `reason` values of CONNECTIONS_REFUSED and CONNECTIONS_FAILED are
// super::connections::{Refused, Failed}.

// Ingest, per machine.
pub const INGEST_PACKETS: &str = "tracesync_ingest_packets_total";
pub const INGEST_BYTES: &str = "tracesync_ingest_bytes_total";
pub const INGEST_DROPPED_PACKETS: &str = "tracesync_ingest_dropped_packets_total";
pub const INGEST_LATE_PACKETS: &str = "tracesync_ingest_late_packets_total";
pub const INGEST_UNPROBED_PACKETS: &str = "tracesync_ingest_unprobed_packets_total";
pub const INGEST_REMAPPED_PACKETS: &str = "tracesync_ingest_remapped_packets_total";
pub const INGEST_LOST_BATCHES: &str = "tracesync_ingest_lost_batches_total";
pub const INGEST_INVALID_CLOCK_SNAPSHOTS: &str = "tracesync_ingest_invalid_clock_snapshots_total";
pub const INGEST_CLOCK_STALLS: &str = "tracesync_ingest_clock_stalls_total";
pub const INGEST_CLOCKS_REFUSED: &str = "tracesync_ingest_clocks_refused_total";
pub const INGEST_FUTURE_PACKETS: &str = "tracesync_ingest_future_packets_total";
pub const INGEST_PENDING_PACKETS: &str = "tracesync_ingest_pending_packets";
pub const MACHINE_CONNECTED: &str = "tracesync_machine_connected";

/// `reason` values of [`INGEST_DROPPED_PACKETS`], each with the live
/// core's counter name (Perfetto's stat name where one exists) it reads.
pub const DROP_REASONS: [(&str, &str); 6] = [
    ("duplicate", tracesync_core::live::reason::DUPLICATE),
    ("no_clock_path", tracesync_core::live::reason::NO_PATH),
    ("clock_conversion", tracesync_core::live::reason::CONVERSION),
    ("negative_timestamp", tracesync_core::live::reason::NEGATIVE),
    ("malformed", tracesync_core::live::reason::MALFORMED),
    (
        "remote_clock_sync_replaced",
        tracesync_core::live::reason::REMOTE_SYNC_REPLACED,
    ),
];
/// `reason` of a live-core counter this list does not know (a newer core).
pub const DROP_REASON_OTHER: &str = "other";

// Ingest, whole daemon.
pub const INGEST_RECEIVED_PACKETS: &str = "tracesync_ingest_received_packets_total";
pub const INGEST_QUEUED_PACKETS: &str = "tracesync_ingest_queued_packets";
pub const INGEST_FORCED_PACKETS: &str = "tracesync_ingest_forced_packets_total";
pub const SYNC_POINTS_WRITTEN: &str = "tracesync_sync_points_written_total";

// Clock sync, per machine.
pub const SYNC_OFFSET: &str = "tracesync_sync_offset_seconds";
pub const SYNC_DRIFT: &str = "tracesync_sync_drift_ppm";
pub const SYNC_ERROR_BOUND: &str = "tracesync_sync_error_bound_seconds";
pub const SYNC_RTT: &str = "tracesync_sync_rtt_seconds";
pub const OUTPUT_MAX_ERROR: &str = "tracesync_output_max_error_seconds";
/// Histogram of every accepted probe's round trip (no labels).
pub const SYNC_PROBE_RTT: &str = "tracesync_sync_probe_rtt_seconds";
/// Buckets of [`SYNC_PROBE_RTT`]: 50 us (loopback) to 1 s (a phone on a bad link).
pub const SYNC_PROBE_RTT_BUCKETS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

// Clock sync, per machine with a probe session (the status' `sync`
// object; published from the prober's registry on the 250 ms tick).
pub const SYNC_STATE: &str = "tracesync_sync_state";
/// `state` values of [`SYNC_STATE`] (1 for the current one, 0 for the rest).
pub const SYNC_STATES: [&str; 3] = ["unsynced", "bursting", "steady"];
pub const SYNC_ROUTE: &str = "tracesync_sync_route";
/// `route` values of [`SYNC_ROUTE`] (both 0 while the relay has no route).
pub const SYNC_ROUTES: [&str; 2] = ["udp", "tcp"];
pub const SYNC_EPOCH: &str = "tracesync_sync_epoch";
pub const SYNC_FREQUENCY_BOUND: &str = "tracesync_sync_frequency_bound_ppm";
pub const SYNC_SIGMA: &str = "tracesync_sync_sigma_seconds";
pub const SYNC_ERROR_BOUND_NOW: &str = "tracesync_sync_error_bound_now_seconds";
pub const SYNC_SAMPLES: &str = "tracesync_sync_samples";
pub const SYNC_LAST_SAMPLE_AGE: &str = "tracesync_sync_last_sample_age_seconds";
pub const SYNC_PROBE_RATE: &str = "tracesync_sync_probe_rate_hz";
pub const SYNC_PROBES_SENT: &str = "tracesync_sync_probes_sent_total";
pub const SYNC_REPLIES: &str = "tracesync_sync_replies_total";
pub const SYNC_PROBE_TIMEOUTS: &str = "tracesync_sync_probe_timeouts_total";
pub const SYNC_REPLIES_REJECTED: &str = "tracesync_sync_replies_rejected_total";
/// `reason` values of [`SYNC_REPLIES_REJECTED`].
pub const SYNC_REJECT_REASONS: [&str; 4] = ["bad_mac", "replayed", "nonce_mismatch", "timestamps"];
pub const SYNC_BURSTS: &str = "tracesync_sync_bursts_total";

// Output (rolling writer).
pub const OUTPUT_BYTES: &str = "tracesync_output_bytes_total";
pub const OUTPUT_PACKETS: &str = "tracesync_output_packets_total";
pub const OUTPUT_FILES: &str = "tracesync_output_files_total";
pub const OUTPUT_FILES_DELETED: &str = "tracesync_output_files_deleted_total";
pub const OUTPUT_COMMITS: &str = "tracesync_output_commits_total";
pub const OUTPUT_ERRORS: &str = "tracesync_output_errors_total";
pub const OUTPUT_VANISHED: &str = "tracesync_output_vanished_total";
pub const OUTPUT_SYMLINKS_REFUSED: &str = "tracesync_output_symlinks_refused_total";
pub const OUTPUT_CURRENT_FILE_BYTES: &str = "tracesync_output_current_file_bytes";
pub const OUTPUT_CURRENT_FILE_SEQUENCE: &str = "tracesync_output_current_file_sequence";

// Tail subscribers and the control socket.
pub const TAIL_SUBSCRIBERS: &str = "tracesync_tail_subscribers";
pub const TAIL_LAGGED_PACKETS: &str = "tracesync_tail_lagged_packets_total";
pub const TAIL_LAG_NOTICES: &str = "tracesync_tail_lag_notices_total";
pub const CONTROL_REFUSED: &str = "tracesync_control_refused_total";
pub const CONTROL_IDLE_CLOSED: &str = "tracesync_control_idle_closed_total";
pub const CONTROL_BAD_REQUESTS: &str = "tracesync_control_bad_requests_total";
pub const CONTROL_ACCEPT_ERRORS: &str = "tracesync_control_accept_errors_total";

// The flight recorder.
pub const TRIGGERS_FIRED: &str = "tracesync_triggers_fired_total";
pub const TRIGGERS_REFUSED: &str = "tracesync_triggers_refused_total";
pub const SNAPSHOTS_WRITTEN: &str = "tracesync_snapshots_written_total";
pub const SNAPSHOTS_FAILED: &str = "tracesync_snapshots_failed_total";
/// Per ring relay's machine, from its Heartbeat.
pub const RING_BYTES_HELD: &str = "tracesync_ring_bytes_held";
pub const RING_PACKETS_HELD: &str = "tracesync_ring_packets_held";
pub const RING_FILL_RATIO: &str = "tracesync_ring_fill_ratio";
pub const RING_OLDEST_AGE: &str = "tracesync_ring_oldest_age_seconds";

/// Every daemon metric: name, kind, help (the `# HELP` line). The
/// exporter describes them from here; tests check the endpoint and the
/// spec in docs/operations-metrics.md against it.
pub const SPECS: &[Spec] = &[
    Spec::gauge(BUILD_INFO, "Always 1; the version label names the build"),
    Spec::counter(CONNECTIONS_ACCEPTED, "Relay TCP connections accepted"),
    Spec::counter(
        SESSIONS_WELCOMED,
        "Relay sessions welcomed (Hello accepted)",
    ),
    Spec::counter(CONNECTIONS_REFUSED, "Relay connections refused, by reason"),
    Spec::counter(
        CONNECTIONS_FAILED,
        "Relay connections closed for a protocol fault, by reason",
    ),
    Spec::counter(ACCEPT_ERRORS, "accept() failures on the data listener"),
    Spec::gauge(RELAYS_CONNECTED, "Relay sessions connected now"),
    Spec::gauge(
        IDENTITY_BINDINGS_IGNORED_LINES,
        "Lines of the identity bindings file ignored at start as not valid",
    ),
    Spec::counter(
        IDENTITY_BINDINGS_SAVE_ERRORS,
        "Failed writes of the identity bindings file",
    ),
    Spec::counter(
        INGEST_PACKETS,
        "Packets of the machine written to the merged output",
    ),
    Spec::counter(
        INGEST_BYTES,
        "Packet bytes of the machine written to the merged output",
    ),
    Spec::counter(
        INGEST_DROPPED_PACKETS,
        "Packets of the machine dropped, by reason",
    ),
    Spec::counter(
        INGEST_LATE_PACKETS,
        "Packets written after later ones had gone out (not dropped)",
    ),
    Spec::counter(
        INGEST_UNPROBED_PACKETS,
        "Packets written before a probe sample taken after them was checked (not dropped)",
    ),
    Spec::counter(
        INGEST_REMAPPED_PACKETS,
        "Packets whose mapping a later probe sample corrected (not dropped)",
    ),
    Spec::counter(
        INGEST_LOST_BATCHES,
        "Batches the relay reported lost (its spool dropped them)",
    ),
    Spec::counter(
        INGEST_INVALID_CLOCK_SNAPSHOTS,
        "Clock snapshots of the machine ignored as invalid",
    ),
    Spec::counter(
        INGEST_CLOCK_STALLS,
        "Times the machine's relay stopped holding the merge watermark: its clock stood still",
    ),
    Spec::counter(
        INGEST_CLOCKS_REFUSED,
        "Relay clocks refused for the merge watermark: backwards, or implausible against the sync estimate",
    ),
    Spec::gauge(
        INGEST_PENDING_PACKETS,
        "Packets of the machine waiting for a resolvable clock",
    ),
    Spec::gauge(
        MACHINE_CONNECTED,
        "1 while a relay of the machine is connected (the host: always 1)",
    ),
    Spec::counter(
        INGEST_RECEIVED_PACKETS,
        "Packets received from relays and the host",
    ),
    Spec::gauge(
        INGEST_QUEUED_PACKETS,
        "Packets in the merge window waiting for the watermark",
    ),
    Spec::counter(
        INGEST_FORCED_PACKETS,
        "Packets written early because the ordering queue was full",
    ),
    Spec::counter(
        SYNC_POINTS_WRITTEN,
        "RemoteClockSync points written to the output",
    ),
    Spec::gauge(
        SYNC_OFFSET,
        "Relay-minus-host clock offset at the latest estimate",
    ),
    Spec::gauge(SYNC_DRIFT, "Relay clock frequency error against the host"),
    Spec::gauge(
        SYNC_ERROR_BOUND,
        "Error bound of the latest offset estimate",
    ),
    Spec::gauge(
        SYNC_RTT,
        "Round trip of the probe behind the latest estimate",
    ),
    Spec::gauge(
        OUTPUT_MAX_ERROR,
        "Largest error bound of any packet of the machine written",
    ),
    Spec::histogram(
        SYNC_PROBE_RTT,
        "Round trip of each accepted clock-sync probe",
    ),
    Spec::gauge(
        SYNC_STATE,
        "1 for the machine's sync state (unsynced, bursting, steady), 0 for the others",
    ),
    Spec::gauge(
        SYNC_ROUTE,
        "1 for the transport the machine's probes take (udp, tcp); 0 without a route",
    ),
    Spec::gauge(SYNC_EPOCH, "Clock epoch of the machine's estimate"),
    Spec::gauge(
        SYNC_FREQUENCY_BOUND,
        "Hard bound on the estimate's frequency error",
    ),
    Spec::gauge(SYNC_SIGMA, "One standard deviation of the mapping now"),
    Spec::gauge(SYNC_ERROR_BOUND_NOW, "Hard error bound of the mapping now"),
    Spec::gauge(SYNC_SAMPLES, "Samples the estimate's fit used"),
    Spec::gauge(
        SYNC_LAST_SAMPLE_AGE,
        "Time since the machine's last accepted probe sample",
    ),
    Spec::gauge(SYNC_PROBE_RATE, "Probes per second sent to the machine now"),
    Spec::counter(SYNC_PROBES_SENT, "Clock-sync probes sent to the machine"),
    Spec::counter(SYNC_REPLIES, "Probe replies of the machine accepted"),
    Spec::counter(
        SYNC_PROBE_TIMEOUTS,
        "Probes to the machine not answered within [sync] probe-timeout-ms",
    ),
    Spec::counter(
        SYNC_REPLIES_REJECTED,
        "Probe datagrams of the machine's session rejected, by reason",
    ),
    Spec::counter(
        SYNC_BURSTS,
        "Probe bursts started for the machine (connect, new route, new epoch, step)",
    ),
    Spec::counter(
        OUTPUT_BYTES,
        "Bytes written to the rolling output, preambles included",
    ),
    Spec::counter(
        OUTPUT_PACKETS,
        "Packets written to the rolling output, preambles included",
    ),
    Spec::counter(OUTPUT_FILES, "Output files started"),
    Spec::counter(OUTPUT_FILES_DELETED, "Output files deleted by retention"),
    Spec::counter(
        OUTPUT_COMMITS,
        "Output commits (durable points acknowledged to relays)",
    ),
    Spec::counter(
        OUTPUT_ERRORS,
        "Failed output writes or commits (relays wait, unacknowledged)",
    ),
    Spec::counter(
        OUTPUT_VANISHED,
        "Commits that found the output file or journal gone from its path (a new file took the data not yet durable)",
    ),
    Spec::counter(
        OUTPUT_SYMLINKS_REFUSED,
        "Symbolic links met at names the output writer wanted (never followed)",
    ),
    Spec::gauge(
        OUTPUT_CURRENT_FILE_BYTES,
        "Size of the output file being written",
    ),
    Spec::gauge(
        OUTPUT_CURRENT_FILE_SEQUENCE,
        "Sequence number of the output file being written",
    ),
    Spec::gauge(TAIL_SUBSCRIBERS, "Tail subscribers on the control socket"),
    Spec::counter(
        TAIL_LAGGED_PACKETS,
        "Packets tail subscribers skipped because they lagged",
    ),
    Spec::counter(TAIL_LAG_NOTICES, "Lag notices sent to tail subscribers"),
    Spec::counter(CONTROL_REFUSED, "Control clients refused (too many)"),
    Spec::counter(
        CONTROL_IDLE_CLOSED,
        "Control clients closed before their request, for a newer one",
    ),
    Spec::counter(CONTROL_BAD_REQUESTS, "Control requests that did not parse"),
    Spec::counter(
        CONTROL_ACCEPT_ERRORS,
        "accept() failures on the control socket",
    ),
    Spec::counter(TRIGGERS_FIRED, "Flight-recorder triggers fired"),
    Spec::counter(
        TRIGGERS_REFUSED,
        "Flight-recorder triggers refused (over their name's rate limit)",
    ),
    Spec::counter(
        SNAPSHOTS_WRITTEN,
        "Snapshots written (again, for a late window)",
    ),
    Spec::counter(SNAPSHOTS_FAILED, "Snapshots that could not be written"),
    Spec::gauge(RING_BYTES_HELD, "Packet bytes a ring relay holds"),
    Spec::gauge(RING_PACKETS_HELD, "Packets a ring relay holds"),
    Spec::gauge(
        RING_FILL_RATIO,
        "Bytes a ring relay holds over its --ring-bytes (0 to 1)",
    ),
    Spec::gauge(
        RING_OLDEST_AGE,
        "Age of the oldest packet a ring relay holds, on the host's clock",
    ),
];
