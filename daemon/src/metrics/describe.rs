//! The help texts (`# HELP` lines) of every metric, and the series with
//! fixed label sets registered at zero when the exporter is installed.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge};

use super::names;

/// Help texts (the `# HELP` lines).
pub(super) fn describe() {
    use names::*;
    describe_gauge!(BUILD_INFO, "Always 1; the version label names the build");
    describe_counter!(CONNECTIONS_ACCEPTED, "Relay TCP connections accepted");
    describe_counter!(
        SESSIONS_WELCOMED,
        "Relay sessions welcomed (Hello accepted)"
    );
    describe_counter!(CONNECTIONS_REFUSED, "Relay connections refused, by reason");
    describe_counter!(
        CONNECTIONS_FAILED,
        "Relay connections closed for a protocol fault, by reason"
    );
    describe_counter!(ACCEPT_ERRORS, "accept() failures on the data listener");
    describe_gauge!(RELAYS_CONNECTED, "Relay sessions connected now");
    describe_counter!(
        INGEST_PACKETS,
        "Packets of the machine written to the merged output"
    );
    describe_counter!(
        INGEST_BYTES,
        "Packet bytes of the machine written to the merged output"
    );
    describe_counter!(
        INGEST_DROPPED_PACKETS,
        "Packets of the machine dropped, by reason"
    );
    describe_counter!(
        INGEST_LATE_PACKETS,
        "Packets written after later ones had gone out (not dropped)"
    );
    describe_counter!(
        INGEST_UNPROBED_PACKETS,
        "Packets written before a probe sample taken after them was checked (not dropped)"
    );
    describe_counter!(
        INGEST_REMAPPED_PACKETS,
        "Packets whose mapping a later probe sample corrected (not dropped)"
    );
    describe_counter!(
        INGEST_LOST_BATCHES,
        "Batches the relay reported lost (its spool dropped them)"
    );
    describe_counter!(
        INGEST_INVALID_CLOCK_SNAPSHOTS,
        "Clock snapshots of the machine ignored as invalid"
    );
    describe_gauge!(
        INGEST_PENDING_PACKETS,
        "Packets of the machine waiting for a resolvable clock"
    );
    describe_gauge!(
        MACHINE_CONNECTED,
        "1 while a relay of the machine is connected (the host: always 1)"
    );
    describe_counter!(
        INGEST_RECEIVED_PACKETS,
        "Packets received from relays and the host"
    );
    describe_gauge!(
        INGEST_QUEUED_PACKETS,
        "Packets in the merge window waiting for the watermark"
    );
    describe_counter!(
        INGEST_FORCED_PACKETS,
        "Packets written early because the ordering queue was full"
    );
    describe_counter!(
        SYNC_POINTS_WRITTEN,
        "RemoteClockSync points written to the output"
    );
    describe_gauge!(
        SYNC_OFFSET,
        "Relay-minus-host clock offset at the latest estimate"
    );
    describe_gauge!(SYNC_DRIFT, "Relay clock frequency error against the host");
    describe_gauge!(
        SYNC_ERROR_BOUND,
        "Error bound of the latest offset estimate"
    );
    describe_gauge!(
        SYNC_RTT,
        "Round trip of the probe behind the latest estimate"
    );
    describe_gauge!(
        OUTPUT_MAX_ERROR,
        "Largest error bound of any packet of the machine written"
    );
    describe_gauge!(
        SYNC_STATE,
        "1 for the machine's sync state (unsynced, bursting, steady), 0 for the others"
    );
    describe_gauge!(
        SYNC_ROUTE,
        "1 for the transport the machine's probes take (udp, tcp); 0 without a route"
    );
    describe_gauge!(SYNC_EPOCH, "Clock epoch of the machine's estimate");
    describe_gauge!(
        SYNC_FREQUENCY_BOUND,
        "Hard bound on the estimate's frequency error"
    );
    describe_gauge!(SYNC_SIGMA, "One standard deviation of the mapping now");
    describe_gauge!(SYNC_ERROR_BOUND_NOW, "Hard error bound of the mapping now");
    describe_gauge!(SYNC_SAMPLES, "Samples the estimate's fit used");
    describe_gauge!(
        SYNC_LAST_SAMPLE_AGE,
        "Time since the machine's last accepted probe sample"
    );
    describe_gauge!(SYNC_PROBE_RATE, "Probes per second sent to the machine now");
    describe_counter!(SYNC_PROBES_SENT, "Clock-sync probes sent to the machine");
    describe_counter!(SYNC_REPLIES, "Probe replies of the machine accepted");
    describe_counter!(
        SYNC_PROBE_TIMEOUTS,
        "Probes to the machine not answered within [sync] probe-timeout-ms"
    );
    describe_counter!(
        SYNC_REPLIES_REJECTED,
        "Probe datagrams of the machine's session rejected, by reason"
    );
    describe_counter!(
        SYNC_BURSTS,
        "Probe bursts started for the machine (connect, new route, new epoch, step)"
    );
    describe_histogram!(
        SYNC_PROBE_RTT,
        "Round trip of each accepted clock-sync probe"
    );
    describe_counter!(
        OUTPUT_BYTES,
        "Bytes written to the rolling output, preambles included"
    );
    describe_counter!(
        OUTPUT_PACKETS,
        "Packets written to the rolling output, preambles included"
    );
    describe_counter!(OUTPUT_FILES, "Output files started");
    describe_counter!(OUTPUT_FILES_DELETED, "Output files deleted by retention");
    describe_counter!(
        OUTPUT_COMMITS,
        "Output commits (durable points acknowledged to relays)"
    );
    describe_counter!(
        OUTPUT_ERRORS,
        "Failed output writes or commits (relays wait, unacknowledged)"
    );
    describe_gauge!(
        OUTPUT_CURRENT_FILE_BYTES,
        "Size of the output file being written"
    );
    describe_gauge!(
        OUTPUT_CURRENT_FILE_SEQUENCE,
        "Sequence number of the output file being written"
    );
    describe_gauge!(TAIL_SUBSCRIBERS, "Tail subscribers on the control socket");
    describe_counter!(
        TAIL_LAGGED_PACKETS,
        "Packets tail subscribers skipped because they lagged"
    );
    describe_counter!(TAIL_LAG_NOTICES, "Lag notices sent to tail subscribers");
    describe_counter!(CONTROL_REFUSED, "Control clients refused (too many)");
    describe_counter!(CONTROL_BAD_REQUESTS, "Control requests that did not parse");
    describe_counter!(
        CONTROL_ACCEPT_ERRORS,
        "accept() failures on the control socket"
    );
}

/// Series with fixed label sets start at zero, so a scrape shows them
/// before the first event (and rate() works from the start).
pub(super) fn register_fixed() {
    use names::*;
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for reason in REFUSED_REASONS {
        counter!(CONNECTIONS_REFUSED, "reason" => reason).absolute(0);
    }
    for reason in FAILED_REASONS {
        counter!(CONNECTIONS_FAILED, "reason" => reason).absolute(0);
    }
    for name in [
        CONNECTIONS_ACCEPTED,
        SESSIONS_WELCOMED,
        ACCEPT_ERRORS,
        OUTPUT_ERRORS,
        TAIL_LAGGED_PACKETS,
        TAIL_LAG_NOTICES,
        CONTROL_REFUSED,
        CONTROL_BAD_REQUESTS,
        CONTROL_ACCEPT_ERRORS,
    ] {
        counter!(name).absolute(0);
    }
    gauge!(RELAYS_CONNECTED).set(0.0);
    gauge!(TAIL_SUBSCRIBERS).set(0.0);
}
