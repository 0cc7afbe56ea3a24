//! One probed session of the prober (`super::prober`): its estimator, its
//! cadence state (bursts, trains, the adaptive interval) and how a new
//! sample is judged against the estimate before it.

use tracesync_protocol::probe::ReplayWindow;

use crate::sync::config::{ProberConfig, Route};
use crate::sync::sessions::{SessionCounters, SyncState};
use crate::sync::{Estimator, Registration, SyncEstimate};

/// One session the prober is probing: its estimator and its cadence.
#[derive(Debug)]
pub(super) struct ActiveSession {
    pub(super) registration: Registration,
    /// Where the relay's last accepted ProbeRegister came from (None: its
    /// TCP probe connection closed).
    pub(super) route: Option<Route>,
    pub(super) estimator: Estimator,
    pub(super) burst_left: u32,
    pub(super) next_probe_ns: u64,
    /// Current steady spacing (adaptive).
    pub(super) interval_ns: u64,
    /// Host BOOTTIME until which steady probes go at the fastest spacing
    /// (the warm-up after a burst).
    pub(super) warm_until_ns: u64,
    /// Samples in a row that agreed with the estimate.
    pub(super) agreeing: u32,
    /// Follow-ups still to send in the current train.
    pub(super) follow_ups_left: u32,
    /// The last reply of the train arrived: send the next probe now.
    pub(super) follow_up_due: bool,
    /// Nonce of the latest probe (per session: 1, 2, 3, ...).
    pub(super) last_nonce: u64,
    /// Nonces already answered (replay detection).
    pub(super) answered: ReplayWindow,
    /// Highest register nonce accepted.
    pub(super) register_nonce: u64,
    /// Host BOOTTIME of the last accepted sample (t4).
    pub(super) last_sample_ns: Option<u64>,
    pub(super) counters: SessionCounters,
}

impl ActiveSession {
    /// Re-acquires: a burst, then the warm-up, then the adaptive spacing
    /// from `steady_interval_ns`.
    pub(super) fn start_burst(&mut self, config: &ProberConfig, now_ns: u64) {
        self.burst_left = config.burst_probes;
        self.interval_ns = config.steady_interval_ns;
        self.warm_up(config, now_ns);
        self.next_probe_ns = now_ns;
        self.follow_ups_left = 0;
        self.follow_up_due = false;
        self.agreeing = 0;
    }

    /// Probes at the fastest spacing for the next `warmup_ns`.
    pub(super) fn warm_up(&mut self, config: &ProberConfig, now_ns: u64) {
        self.warm_until_ns = now_ns.saturating_add(config.warmup_ns);
    }

    /// The steady spacing at `now_ns`: the fastest during the warm-up,
    /// when the estimate's history is short and every sample counts most.
    pub(super) fn steady_spacing(&self, config: &ProberConfig, now_ns: u64) -> u64 {
        if now_ns < self.warm_until_ns {
            config.min_interval_ns
        } else {
            self.interval_ns
        }
    }

    pub(super) fn in_burst(&self) -> bool {
        self.burst_left > 0
    }

    /// Keeps the adaptive state inside a new schedule.
    pub(super) fn adopt(&mut self, config: &ProberConfig) {
        self.interval_ns = self.interval_ns.clamp(
            config.min_interval_ns,
            config.max_interval_ns.max(config.min_interval_ns),
        );
        self.burst_left = self.burst_left.min(config.burst_probes);
        self.follow_ups_left = self
            .follow_ups_left
            .min(config.train_length.saturating_sub(1));
    }

    pub(super) fn state(&self) -> SyncState {
        if self.estimator.estimate().is_none() {
            SyncState::Unsynced
        } else if self.in_burst() {
            SyncState::Bursting
        } else {
            SyncState::Steady
        }
    }

    /// Probes per second now: a burst's, or the steady rate with follow-ups.
    pub(super) fn probe_rate_hz(&self, config: &ProberConfig, now_ns: u64) -> f64 {
        if self.route.is_none() {
            return 0.0;
        }
        if self.in_burst() {
            1e9 / config.burst_interval_ns.max(1) as f64
        } else {
            let spacing = self.steady_spacing(config, now_ns);
            f64::from(config.train_length.max(1)) * 1e9 / spacing.max(1) as f64
        }
    }
}

/// How a new sample relates to the estimate before it: the caller adapts
/// the probe rate (or restarts the burst on a step).
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The sample's interval meets the estimate's.
    Agree,
    Disagree,
    /// A low-delay sample far outside the estimate: the clock may have stepped.
    Step,
}

/// Judges a sample against the estimate before it.
pub(super) fn judge(
    config: &ProberConfig,
    before: &SyncEstimate,
    t1: u64,
    t2: u64,
    t3: u64,
    t4: u64,
) -> Verdict {
    let (t1, t2, t3, t4) = (t1 as i128, t2 as i128, t3 as i128, t4 as i128);
    let offset = ((t2 - t1) + (t3 - t4)) / 2;
    let delay = ((t4 - t1) - (t3 - t2)).max(0);
    let predicted = before.offset_at(t2 as u64) as i128;
    let residual = (offset - predicted).unsigned_abs();
    let elapsed = (t2 - before.ref_relay_ns as i128).unsigned_abs() as f64;
    let growth = (elapsed * config.bound_growth_ppm * 1e-6) as u128;
    let tolerance = u128::from(before.error_bound_ns) + growth + (delay as u128).div_ceil(2);
    if residual <= tolerance {
        return Verdict::Agree;
    }
    let low_delay = delay as u128
        <= u128::from(before.rtt_ns.max(1)) * u128::from(config.step_max_delay_factor.max(1));
    let far = residual > tolerance * u128::from(config.step_factor.max(1))
        && residual > u128::from(config.step_min_ns);
    if low_delay && far {
        Verdict::Step
    } else {
        Verdict::Disagree
    }
}
