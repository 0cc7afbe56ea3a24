//! Every metric name `tracesyncd` exports, in one place. The spec with
//! types, units, labels and meanings is docs/operations.md `## Metrics`;
//! a name added here is added there.
//!
//! Conventions: `tracesync_` prefix, counters end in `_total`, units in the
//! name in base units (`_bytes`, `_seconds`), bounded labels only:
//! `machine` (at most `limits.max-relays` + 1 values, the rest is folded
//! into `other`) and `reason` (a fixed list per metric, below).

// Build.
pub const BUILD_INFO: &str = "tracesync_build_info";

// Relay connections (accept loop and sessions).
pub const CONNECTIONS_ACCEPTED: &str = "tracesync_connections_accepted_total";
pub const SESSIONS_WELCOMED: &str = "tracesync_sessions_welcomed_total";
pub const CONNECTIONS_REFUSED: &str = "tracesync_connections_refused_total";
pub const CONNECTIONS_FAILED: &str = "tracesync_connections_failed_total";
pub const ACCEPT_ERRORS: &str = "tracesync_accept_errors_total";
pub const RELAYS_CONNECTED: &str = "tracesync_relays_connected";

/// `reason` values of [`CONNECTIONS_REFUSED`].
pub const REFUSED_REASONS: [&str; 4] = ["max_relays", "version", "token", "core"];
/// `reason` values of [`CONNECTIONS_FAILED`].
pub const FAILED_REASONS: [&str; 2] = ["hello_timeout", "malformed_frame"];

// Ingest, per machine.
pub const INGEST_PACKETS: &str = "tracesync_ingest_packets_total";
pub const INGEST_BYTES: &str = "tracesync_ingest_bytes_total";
pub const INGEST_DROPPED_PACKETS: &str = "tracesync_ingest_dropped_packets_total";
pub const INGEST_LATE_PACKETS: &str = "tracesync_ingest_late_packets_total";
pub const INGEST_UNPROBED_PACKETS: &str = "tracesync_ingest_unprobed_packets_total";
pub const INGEST_REMAPPED_PACKETS: &str = "tracesync_ingest_remapped_packets_total";
pub const INGEST_LOST_BATCHES: &str = "tracesync_ingest_lost_batches_total";
pub const INGEST_INVALID_CLOCK_SNAPSHOTS: &str = "tracesync_ingest_invalid_clock_snapshots_total";
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
pub const OUTPUT_CURRENT_FILE_BYTES: &str = "tracesync_output_current_file_bytes";
pub const OUTPUT_CURRENT_FILE_SEQUENCE: &str = "tracesync_output_current_file_sequence";

// Tail subscribers and the control socket.
pub const TAIL_SUBSCRIBERS: &str = "tracesync_tail_subscribers";
pub const TAIL_LAGGED_PACKETS: &str = "tracesync_tail_lagged_packets_total";
pub const TAIL_LAG_NOTICES: &str = "tracesync_tail_lag_notices_total";
pub const CONTROL_REFUSED: &str = "tracesync_control_refused_total";
pub const CONTROL_BAD_REQUESTS: &str = "tracesync_control_bad_requests_total";
pub const CONTROL_ACCEPT_ERRORS: &str = "tracesync_control_accept_errors_total";

/// Every daemon metric name, for the endpoint test and the docs check.
pub const ALL: &[&str] = &[
    BUILD_INFO,
    CONNECTIONS_ACCEPTED,
    SESSIONS_WELCOMED,
    CONNECTIONS_REFUSED,
    CONNECTIONS_FAILED,
    ACCEPT_ERRORS,
    RELAYS_CONNECTED,
    INGEST_PACKETS,
    INGEST_BYTES,
    INGEST_DROPPED_PACKETS,
    INGEST_LATE_PACKETS,
    INGEST_UNPROBED_PACKETS,
    INGEST_REMAPPED_PACKETS,
    INGEST_LOST_BATCHES,
    INGEST_INVALID_CLOCK_SNAPSHOTS,
    INGEST_PENDING_PACKETS,
    MACHINE_CONNECTED,
    INGEST_RECEIVED_PACKETS,
    INGEST_QUEUED_PACKETS,
    INGEST_FORCED_PACKETS,
    SYNC_POINTS_WRITTEN,
    SYNC_OFFSET,
    SYNC_DRIFT,
    SYNC_ERROR_BOUND,
    SYNC_RTT,
    OUTPUT_MAX_ERROR,
    SYNC_PROBE_RTT,
    SYNC_STATE,
    SYNC_ROUTE,
    SYNC_EPOCH,
    SYNC_FREQUENCY_BOUND,
    SYNC_SIGMA,
    SYNC_ERROR_BOUND_NOW,
    SYNC_SAMPLES,
    SYNC_LAST_SAMPLE_AGE,
    SYNC_PROBE_RATE,
    SYNC_PROBES_SENT,
    SYNC_REPLIES,
    SYNC_PROBE_TIMEOUTS,
    SYNC_REPLIES_REJECTED,
    SYNC_BURSTS,
    OUTPUT_BYTES,
    OUTPUT_PACKETS,
    OUTPUT_FILES,
    OUTPUT_FILES_DELETED,
    OUTPUT_COMMITS,
    OUTPUT_ERRORS,
    OUTPUT_CURRENT_FILE_BYTES,
    OUTPUT_CURRENT_FILE_SEQUENCE,
    TAIL_SUBSCRIBERS,
    TAIL_LAGGED_PACKETS,
    TAIL_LAG_NOTICES,
    CONTROL_REFUSED,
    CONTROL_BAD_REQUESTS,
    CONTROL_ACCEPT_ERRORS,
];
