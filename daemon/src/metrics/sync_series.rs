//! A machine's probe-session series: sync state and route, the estimate's
//! quality, and the session's probe counters carried across sessions.

use std::sync::Arc;

use metrics::{Counter, Gauge, counter, gauge};
use tracesync_core::sync::sessions::{MachineSync, SessionCounters};

use super::{names, secs};

/// A machine's probe-session series. Counters are per machine across
/// sessions: each tick adds what the current session counted since the
/// last tick (a new session counts from zero).
pub(super) struct SyncSeries {
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
    pub(super) fn new(machine: &Arc<str>) -> Self {
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

    pub(super) fn set(&mut self, sync: &MachineSync) {
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
    pub(super) fn unsynced(&mut self) {
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
