//! [`IngestMetrics`]: what the ingest loop publishes once per status tick,
//! one set of series per machine (up to a label limit, the rest folded into
//! [`OTHER_MACHINE`]).

use std::collections::HashMap;
use std::sync::Arc;

use metrics::{Counter, Gauge, counter, gauge};
use tracesync_core::status::{MachineStatus, StatusReport};

use super::sync_series::SyncSeries;
use super::{names, secs};

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
    clock_stalls: Counter,
    clocks_refused: Counter,
    future: Counter,
    pending: Gauge,
    connected: Gauge,
    offset: Gauge,
    drift: Gauge,
    error_bound: Gauge,
    rtt: Gauge,
    max_error: Gauge,
    /// Registered with the machine's first probe session (never for the host).
    sync: Option<SyncSeries>,
    /// Registered with the first ring fill its relay reports.
    ring: Option<[Gauge; 4]>,
    label: Arc<str>,
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
            clock_stalls: counter!(INGEST_CLOCK_STALLS, &[m()]),
            clocks_refused: counter!(INGEST_CLOCKS_REFUSED, &[m()]),
            future: counter!(INGEST_FUTURE_PACKETS, &[m()]),
            pending: gauge!(INGEST_PENDING_PACKETS, &[m()]),
            connected: gauge!(MACHINE_CONNECTED, &[m()]),
            offset: gauge!(SYNC_OFFSET, &[m()]),
            drift: gauge!(SYNC_DRIFT, &[m()]),
            error_bound: gauge!(SYNC_ERROR_BOUND, &[m()]),
            rtt: gauge!(SYNC_RTT, &[m()]),
            max_error: gauge!(OUTPUT_MAX_ERROR, &[m()]),
            sync: None,
            ring: None,
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
    clock_stalls: u64,
    clocks_refused: u64,
    future: u64,
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
        self.clock_stalls += m.clock_stalls;
        self.clocks_refused += m.clocks_refused;
        self.future += m.future_packets;
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
        s.clock_stalls.absolute(self.clock_stalls);
        s.clocks_refused.absolute(self.clocks_refused);
        s.future.absolute(self.future);
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
                    set_ring(series, m);
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

/// A ring relay's fill (its gauges stay at their last values when it
/// reports none: a stream relay now, or gone).
fn set_ring(s: &mut MachineSeries, m: &MachineStatus) {
    let Some(fill) = &m.ring else {
        return;
    };
    let label = s.label.to_string();
    let [bytes, packets, ratio, age] = s.ring.get_or_insert_with(|| {
        let m = || [("machine", label.clone())];
        [
            gauge!(names::RING_BYTES_HELD, &m()),
            gauge!(names::RING_PACKETS_HELD, &m()),
            gauge!(names::RING_FILL_RATIO, &m()),
            gauge!(names::RING_OLDEST_AGE, &m()),
        ]
    });
    bytes.set(fill.bytes_held as f64);
    packets.set(fill.packets_held as f64);
    ratio.set(fill.percent() / 100.0);
    if let Some(ns) = fill.oldest_age_ns {
        age.set(secs(ns as f64));
    }
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

/// A machine's `machine` label: its name (control characters escaped, at
/// most 255 bytes as every Hello's), else `id-N`.
fn machine_label(m: &MachineStatus) -> Arc<str> {
    match m
        .name
        .as_deref()
        .filter(|n| !n.is_empty() && *n != OTHER_MACHINE)
    {
        Some(name) => Arc::from(tracesync_protocol::text::escape_control(name)),
        None => Arc::from(format!("id-{}", m.raw_id)),
    }
}
