//! Prometheus metrics of `tracesyncd`: the names ([`names`], specified in
//! docs/operations.md `## Metrics`), the `[metrics]` config section, the
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

pub mod names;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use metrics::{
    Counter, Gauge, counter, describe_counter, describe_gauge, describe_histogram, gauge,
};

use tracesync_core::status::{MachineStatus, StatusReport};
use tracesync_core::sync::sessions::{MachineSync, SessionCounters};

pub use tracesync_common::metrics::MetricsConfig;

/// Installs the global recorder and serves it over HTTP on `addr` (on the
/// current tokio runtime). The listener is bound when this returns.
pub fn install(addr: SocketAddr) -> Result<(), String> {
    tracesync_common::metrics::install(
        addr,
        &[(names::SYNC_PROBE_RTT, &names::SYNC_PROBE_RTT_BUCKETS)],
    )?;
    describe();
    register_fixed();
    Ok(())
}

/// Help texts (the `# HELP` lines).
fn describe() {
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
fn register_fixed() {
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
    gauge!(names::OUTPUT_CURRENT_FILE_BYTES).set(current_file_bytes as f64);
    gauge!(names::OUTPUT_CURRENT_FILE_SEQUENCE).set(current_file_seq as f64);
}

/// The `machine` label of folded machines (past the label limit).
pub const OTHER_MACHINE: &str = "other";

/// Handles of one machine's series (registered once, then only set).
struct MachineSeries {
    packets: Counter,
    bytes: Counter,
    dropped: Vec<Counter>,
    dropped_other: Counter,
    late: Counter,
    unprobed: Counter,
    remapped: Counter,
    lost_batches: Counter,
    invalid_snapshots: Counter,
    pending: Gauge,
    connected: Gauge,
    offset: Gauge,
    drift: Gauge,
    error_bound: Gauge,
    rtt: Gauge,
    max_error: Gauge,
    /// Registered with the machine's first probe session (never for the host).
    sync: Option<SyncSeries>,
    label: Arc<str>,
}

/// A machine's probe-session series. Counters are per machine across
/// sessions: each tick adds what the current session counted since the
/// last tick (a new session counts from zero).
struct SyncSeries {
    state: [Gauge; 3],
    route: [Gauge; 2],
    epoch: Gauge,
    freq_bound: Gauge,
    sigma: Gauge,
    bound_now: Gauge,
    samples: Gauge,
    last_sample_age: Gauge,
    probe_rate: Gauge,
    probes_sent: Counter,
    replies: Counter,
    timeouts: Counter,
    rejected: [Counter; 4],
    bursts: Counter,
    /// The session and its counters at the last tick.
    last: Option<(u64, SessionCounters)>,
}

impl SyncSeries {
    fn new(machine: &Arc<str>) -> Self {
        use names::*;
        let m = || ("machine", machine.to_string());
        let with = |key: &'static str, value: &str| [m(), (key, value.to_owned())];
        let series = Self {
            state: SYNC_STATES.map(|s| gauge!(SYNC_STATE, &with("state", s))),
            route: SYNC_ROUTES.map(|r| gauge!(SYNC_ROUTE, &with("route", r))),
            epoch: gauge!(SYNC_EPOCH, &[m()]),
            freq_bound: gauge!(SYNC_FREQUENCY_BOUND, &[m()]),
            sigma: gauge!(SYNC_SIGMA, &[m()]),
            bound_now: gauge!(SYNC_ERROR_BOUND_NOW, &[m()]),
            samples: gauge!(SYNC_SAMPLES, &[m()]),
            last_sample_age: gauge!(SYNC_LAST_SAMPLE_AGE, &[m()]),
            probe_rate: gauge!(SYNC_PROBE_RATE, &[m()]),
            probes_sent: counter!(SYNC_PROBES_SENT, &[m()]),
            replies: counter!(SYNC_REPLIES, &[m()]),
            timeouts: counter!(SYNC_PROBE_TIMEOUTS, &[m()]),
            rejected: SYNC_REJECT_REASONS
                .map(|r| counter!(SYNC_REPLIES_REJECTED, &with("reason", r))),
            bursts: counter!(SYNC_BURSTS, &[m()]),
            last: None,
        };
        for c in series.rejected.iter().chain([
            &series.probes_sent,
            &series.replies,
            &series.timeouts,
            &series.bursts,
        ]) {
            c.increment(0);
        }
        series
    }

    fn set(&mut self, sync: &MachineSync) {
        for (gauge, state) in self
            .state
            .iter()
            .zip(tracesync_core::sync::sessions::SyncState::ALL)
        {
            gauge.set(f64::from(u8::from(sync.state == state)));
        }
        for (gauge, route) in self
            .route
            .iter()
            .zip(tracesync_core::sync::sessions::RouteKind::ALL)
        {
            gauge.set(f64::from(u8::from(sync.route == Some(route))));
        }
        if let Some(v) = sync.epoch {
            self.epoch.set(v as f64);
        }
        if let Some(v) = sync.freq_bound_ppm {
            self.freq_bound.set(v);
        }
        if let Some(v) = sync.sigma_ns {
            self.sigma.set(secs(v as f64));
        }
        if let Some(v) = sync.bound_now_ns {
            self.bound_now.set(secs(v as f64));
        }
        if let Some(v) = sync.samples {
            self.samples.set(f64::from(v));
        }
        if let Some(v) = sync.last_sample_age_ns {
            self.last_sample_age.set(secs(v as f64));
        }
        self.probe_rate.set(sync.probe_rate_hz);
        let now = sync.probes;
        let before = match self.last {
            Some((session, before)) if session == sync.session_id => before,
            _ => SessionCounters::default(),
        };
        let add = |c: &Counter, now: u64, before: u64| c.increment(now.saturating_sub(before));
        add(&self.probes_sent, now.probes_sent, before.probes_sent);
        add(&self.replies, now.replies, before.replies);
        add(&self.timeouts, now.timeouts, before.timeouts);
        add(&self.bursts, now.bursts, before.bursts);
        let reasons = [
            (now.bad_mac, before.bad_mac),
            (now.replayed, before.replayed),
            (now.nonce_mismatch, before.nonce_mismatch),
            (now.replies_rejected, before.replies_rejected),
        ];
        for (c, (now, before)) in self.rejected.iter().zip(reasons) {
            add(c, now, before);
        }
        self.last = Some((sync.session_id, now));
    }

    /// The machine has no probe session now (its relay disconnected).
    fn unsynced(&mut self) {
        for (gauge, state) in self.state.iter().zip(names::SYNC_STATES) {
            gauge.set(f64::from(u8::from(state == "unsynced")));
        }
        for gauge in &self.route {
            gauge.set(0.0);
        }
        self.probe_rate.set(0.0);
        self.last = None;
    }
}

impl MachineSeries {
    fn new(machine: &Arc<str>) -> Self {
        use names::*;
        let m = || ("machine", machine.to_string());
        let dropped = DROP_REASONS
            .iter()
            .map(|(reason, _)| {
                counter!(
                    INGEST_DROPPED_PACKETS,
                    &[m(), ("reason", (*reason).to_owned())]
                )
            })
            .collect();
        let series = Self {
            packets: counter!(INGEST_PACKETS, &[m()]),
            bytes: counter!(INGEST_BYTES, &[m()]),
            dropped,
            dropped_other: counter!(
                INGEST_DROPPED_PACKETS,
                &[m(), ("reason", DROP_REASON_OTHER.to_owned())]
            ),
            late: counter!(INGEST_LATE_PACKETS, &[m()]),
            unprobed: counter!(INGEST_UNPROBED_PACKETS, &[m()]),
            remapped: counter!(INGEST_REMAPPED_PACKETS, &[m()]),
            lost_batches: counter!(INGEST_LOST_BATCHES, &[m()]),
            invalid_snapshots: counter!(INGEST_INVALID_CLOCK_SNAPSHOTS, &[m()]),
            pending: gauge!(INGEST_PENDING_PACKETS, &[m()]),
            connected: gauge!(MACHINE_CONNECTED, &[m()]),
            offset: gauge!(SYNC_OFFSET, &[m()]),
            drift: gauge!(SYNC_DRIFT, &[m()]),
            error_bound: gauge!(SYNC_ERROR_BOUND, &[m()]),
            rtt: gauge!(SYNC_RTT, &[m()]),
            max_error: gauge!(OUTPUT_MAX_ERROR, &[m()]),
            sync: None,
            label: machine.clone(),
        };
        // Every drop reason shows from the start, at zero.
        for c in &series.dropped {
            c.absolute(0);
        }
        series.dropped_other.absolute(0);
        series
    }
}

/// Sums of a machine's (or the folded machines') counters.
#[derive(Default)]
struct Totals {
    packets: u64,
    bytes: u64,
    dropped: [u64; names::DROP_REASONS.len()],
    dropped_other: u64,
    late: u64,
    unprobed: u64,
    remapped: u64,
    lost_batches: u64,
    invalid_snapshots: u64,
    pending: u64,
    connected: u64,
}

impl Totals {
    fn add(&mut self, m: &MachineStatus) {
        self.packets += m.packets;
        self.bytes += m.bytes;
        self.late += m.late_packets;
        self.unprobed += m.unprobed_packets;
        self.remapped += m.remapped_packets;
        self.pending += m.pending;
        self.connected += u64::from(m.connected);
        for (key, &n) in &m.drops {
            match key.as_str() {
                tracesync_core::live::reason::BATCHES_LOST => self.lost_batches += n,
                tracesync_core::live::reason::INVALID_SNAPSHOT => self.invalid_snapshots += n,
                key => match names::DROP_REASONS.iter().position(|(_, k)| *k == key) {
                    Some(i) => self.dropped[i] += n,
                    None => self.dropped_other += n,
                },
            }
        }
    }

    fn set(&self, s: &MachineSeries) {
        s.packets.absolute(self.packets);
        s.bytes.absolute(self.bytes);
        for (c, &n) in s.dropped.iter().zip(&self.dropped) {
            c.absolute(n);
        }
        s.dropped_other.absolute(self.dropped_other);
        s.late.absolute(self.late);
        s.unprobed.absolute(self.unprobed);
        s.remapped.absolute(self.remapped);
        s.lost_batches.absolute(self.lost_batches);
        s.invalid_snapshots.absolute(self.invalid_snapshots);
        s.pending.set(self.pending as f64);
        s.connected.set(self.connected as f64);
    }
}

/// What the ingest loop publishes once per status tick: per-machine series
/// from the status report, relays and tail subscribers connected.
pub struct IngestMetrics {
    /// Distinct machine labels allowed; later machines fold into `other`.
    max_machines: usize,
    /// Raw id -> its series (None: folded into `other`).
    machines: HashMap<u32, Option<MachineSeries>>,
    named: usize,
    /// Labels in use (two machines may share a name).
    labels: std::collections::HashSet<Arc<str>>,
    other: Option<MachineSeries>,
    relays_connected: Gauge,
    tail_subscribers: Gauge,
}

impl IngestMetrics {
    /// `max_machines`: the host plus `limits.max-relays`.
    pub fn new(max_machines: usize) -> Self {
        Self {
            max_machines: max_machines.max(1),
            machines: HashMap::new(),
            named: 0,
            labels: std::collections::HashSet::new(),
            other: None,
            relays_connected: gauge!(names::RELAYS_CONNECTED),
            tail_subscribers: gauge!(names::TAIL_SUBSCRIBERS),
        }
    }

    pub fn publish(&mut self, report: &StatusReport, relays: usize, subscribers: usize) {
        self.relays_connected.set(relays as f64);
        self.tail_subscribers.set(subscribers as f64);
        let mut folded: Option<Totals> = None;
        for m in &report.machines {
            if !self.machines.contains_key(&m.raw_id) {
                let series = (self.named < self.max_machines).then(|| {
                    self.named += 1;
                    let mut label = machine_label(m);
                    if self.labels.contains(&label) {
                        label = Arc::from(format!("{label}-id{}", m.raw_id));
                    }
                    self.labels.insert(label.clone());
                    MachineSeries::new(&label)
                });
                self.machines.insert(m.raw_id, series);
            }
            match self.machines.get_mut(&m.raw_id) {
                Some(Some(series)) => {
                    let mut t = Totals::default();
                    t.add(m);
                    t.set(series);
                    set_sync(series, m);
                    set_session(series, m);
                }
                _ => folded.get_or_insert_with(Totals::default).add(m),
            }
        }
        if let Some(t) = folded {
            let other = self
                .other
                .get_or_insert_with(|| MachineSeries::new(&Arc::from(OTHER_MACHINE)));
            t.set(other);
        }
    }
}

fn set_sync(s: &MachineSeries, m: &MachineStatus) {
    // The host (raw id 0) has no estimate: its offset is 0 by definition.
    let host = m.raw_id == 0;
    let offset = m.offset_ns.map(|v| v as f64).or(host.then_some(0.0));
    if let Some(v) = offset {
        s.offset.set(secs(v));
    }
    if let Some(v) = m.drift_ppm.or(host.then_some(0.0)) {
        s.drift.set(v);
    }
    if let Some(v) = m.error_bound_ns.or(host.then_some(0)) {
        s.error_bound.set(secs(v as f64));
    }
    if let Some(v) = m.rtt_ns.or(host.then_some(0)) {
        s.rtt.set(secs(v as f64));
    }
    s.max_error.set(secs(m.max_err_ns as f64));
}

/// The machine's probe session, if it has or had one.
fn set_session(s: &mut MachineSeries, m: &MachineStatus) {
    match (&m.sync, &mut s.sync) {
        (Some(sync), Some(series)) => series.set(sync),
        (Some(sync), None) => {
            let mut series = SyncSeries::new(&s.label);
            series.set(sync);
            s.sync = Some(series);
        }
        (None, Some(series)) => series.unsynced(),
        (None, None) => {}
    }
}

/// A machine's `machine` label: its name, else `id-N`.
fn machine_label(m: &MachineStatus) -> Arc<str> {
    match m
        .name
        .as_deref()
        .filter(|n| !n.is_empty() && *n != OTHER_MACHINE)
    {
        Some(name) => Arc::from(name),
        None => Arc::from(format!("id-{}", m.raw_id)),
    }
}

#[cfg(test)]
mod tests;
