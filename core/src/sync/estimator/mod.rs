//! Estimator (sans-IO, pure functions of timestamps): probe samples in, a
//! relay -> host mapping with a sigma and a hard bound out.
//!
//! Per sample (t1/t4 host, t2/t3 relay): offset = ((t2 - t1) + (t3 - t4)) / 2
//! (relay minus host), delay = (t4 - t1) - (t3 - t2), both in i128 ns. Each
//! one-way delay is non-negative, so the true offset at the sample lies
//! within delay/2 of the sample's offset: that is the root of the hard bound.
//!
//! Pipeline, per relay session:
//! 1. **Epochs.** A change of the relay's BOOTTIME-MONOTONIC (suspend) opens
//!    a new epoch; so does a detected step (2). Nothing is fitted across an
//!    epoch; the last estimate of each recent epoch stays queryable
//!    ([`Estimator::estimate_for`]) so events map in their own epoch. The
//!    frequency (not the offset) carries over as a prior.
//! 2. **Pop filter and step detection.** A sample whose delay is far above
//!    the recent ones is dropped unless the previous one was dropped too
//!    (ntpd-rs). A sample whose hard interval [offset +- delay/2] misses the
//!    current hard bound proves the model wrong; two such in a row mean a
//!    step: new epoch, counted in [`Estimator::steps`]. Steps below that
//!    reach are found statistically: a sample whose innovation is beyond 5
//!    sigma plus half its delay excess (queueing moves an offset by at
//!    most that) is held out; a third one of the same sign in a row is a
//!    step.
//!    While such a sample awaits the next one, the reported bound covers
//!    it from the newest fitted sample on ([`SyncEstimate::suspect_extra_ns`]),
//!    so a step is inside the bound from its first sample.
//! 3. **Gate.** The delay floor is a low quantile (p5) of the epoch's delays
//!    over a sliding window (120 s), not the raw minimum; samples above a
//!    gate (p10, at least floor + 2 resolutions) are left out.
//! 4. **Fit.** Delay-weighted linear regression of offset on relay time over
//!    the gated samples, chrony-style weights `(1 + excess/sd)^-2`, with the
//!    slope blended with a prior by inverse variance. Why regression rather
//!    than ntpd-rs's Kalman filter: with gating the kept samples are few and
//!    irregular, a regression over them has no process-noise parameter to
//!    tune (the window length plays that role), its uncertainty comes from
//!    the residuals themselves, and the simulator
//!    (docs/clock-sync-accuracy.md) meets the live targets with it. The
//!    cost, O(window) per sample, is small at 4 Hz. The regression's line
//!    and sigma judge the samples (gate, step tests: they are tuned to its
//!    residuals); the *reported* line is the one-way envelope's over the
//!    same window (`crate::sync::corridor`'s midline between the fastest
//!    request legs and the fastest reply legs), which needs each leg to be
//!    fast once among many instead of both legs of one exchange at once
//!    (on Wi-Fi-like queueing 3-5x smaller errors); where the legs'
//!    floor is soft its slope is chosen by the fastest few legs of each
//!    side (`steady_midline`: one fast leg no longer tilts it).
//! 5. **Hard bound.** The frequency lies in an interval computed from pairs
//!    of low-delay samples (a coarse convex hull), widened by a wander
//!    allowance; the bound at the reference is the smallest, over the
//!    window's samples, of |line - sample| + delay/2 + slack + frequency
//!    deviation * distance. [`SyncEstimate::bound_at`] carries it to any
//!    relay time, computed the same way for the reported (envelope) line
//!    with its own distance to the frequency interval. It is hard under
//!    the stated model: one-way delays >= 0,
//!    timestamp error <= `timestamp_slack_ns`, frequency random walk within
//!    `wander_sigmas` sigmas of `max_wander`, no unannounced step between
//!    samples (steps are detected at the next two samples).

use std::collections::VecDeque;

use super::{CheckedSample, SyncEstimate};

mod epochs;
mod fit;
mod steps;

use fit::{FreqPrior, fit, wander_rate};
use steps::Innovation;

/// Tuning of the estimator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EstimatorConfig {
    /// Most samples kept in the window.
    pub window_samples: usize,
    /// Oldest sample kept, by host send time relative to the newest (ns).
    pub window_ns: u64,
    /// Samples with delay above this quantile of the window's delays are
    /// left out of the fit (queueing only ever adds delay).
    pub gate_quantile: f64,
    /// The delay floor used for weights: this low quantile of the window.
    pub floor_quantile: f64,
    /// Kept for configuration compatibility: the slope prior now decides
    /// how much a short span counts (ns).
    pub min_freq_span_ns: u64,
    /// A change of the relay's BOOTTIME-MONOTONIC by more than this (ns)
    /// means a suspend: new epoch, empty window.
    pub epoch_jump_ns: u64,
    /// Samples with a larger delay are rejected as garbage (ns).
    pub max_delay_ns: u64,
    /// Crystal tolerance: fitted frequencies are clamped to +-this, and the
    /// hard frequency interval starts as +-this (ppm).
    pub max_abs_freq_ppm: f64,
    /// Kept for configuration compatibility (the prior replaces it) (ppm).
    pub unfitted_drift_ppm: f64,
    /// Largest frequency random-walk intensity the hard bound allows for
    /// (s^-1; 1e-16 is a quiet crystal, 1e-14 a warm laptop).
    pub max_wander: f64,
    /// Sigmas of that random walk the bound covers.
    pub wander_sigmas: f64,
    /// Timestamp read error and processing slack per sample (ns).
    pub timestamp_slack_ns: u64,
    /// Pop filter: a delay above median + this many MADs (of the last
    /// `pop_history` delays) is dropped once.
    pub pop_mads: f64,
    pub pop_history: usize,
    /// Step test: a sample whose innovation exceeds this many sigmas (of
    /// the prediction and of one gated sample) plus half its delay excess
    /// over the floor, three times in a row with the same sign, is a step smaller
    /// than the hard test can see.
    pub step_sigmas: f64,
    /// Previous epochs whose last estimate stays queryable.
    pub epoch_history: usize,
    /// Frequency slack assumed across a suspend (ppm): temperature.
    pub resume_freq_slack_ppm: f64,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        Self {
            window_samples: 512,
            window_ns: 120_000_000_000,
            gate_quantile: 0.10,
            floor_quantile: 0.05,
            min_freq_span_ns: 2_000_000_000,
            epoch_jump_ns: 1_000_000,
            max_delay_ns: 10_000_000_000,
            max_abs_freq_ppm: 500.0,
            unfitted_drift_ppm: 100.0,
            max_wander: 1e-14,
            wander_sigmas: 5.0,
            timestamp_slack_ns: 1_000,
            pop_mads: 8.0,
            pop_history: 8,
            step_sigmas: 5.0,
            epoch_history: 8,
            resume_freq_slack_ppm: 1.0,
        }
    }
}

/// A relay clock whose reads differ by this little from "no time passed"
/// (negative delay) is rounding, not garbage.
const NEGATIVE_DELAY_TOLERANCE_NS: i128 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sample {
    /// Host BOOTTIME at send: ages the window.
    host_send_ns: u64,
    /// Relay BOOTTIME midway between receive and reply.
    relay_mid_ns: u64,
    offset_ns: i64,
    delay_ns: u64,
}

/// The estimator for one relay session.
#[derive(Debug)]
pub struct Estimator {
    config: EstimatorConfig,
    window: VecDeque<Sample>,
    epoch: u64,
    /// BOOTTIME-MONOTONIC of the current epoch (None before any sample).
    epoch_suspend_offset: Option<i64>,
    prior: FreqPrior,
    /// The reported estimate: the envelope's line (see `fit`).
    current: Option<SyncEstimate>,
    /// The regression's estimate: what the step tests judge samples by.
    tested: Option<SyncEstimate>,
    /// Last estimates of previous epochs, newest last.
    history: VecDeque<SyncEstimate>,
    /// Recent delays for the pop filter (admitted or not).
    recent_delays: VecDeque<u64>,
    popped_last: bool,
    /// A sample that contradicted the bound, waiting for a second one.
    suspect: Option<Sample>,
    /// Gate and one-sample noise of the last fit (ns).
    gate_ns: u64,
    sample_sigma_ns: f64,
    /// The first sample of a run of far-out innovations, their sign and
    /// how many in a row.
    innovation_held: Option<(Sample, i8, u32)>,
    /// Pending widening of the reported bound: (relay time from which it
    /// applies, extra ns), while a contradicting sample awaits a decision.
    suspicion: Option<(u64, u64)>,
    /// Newest relay time of a sample past the pop filter
    /// ([`SyncEstimate::covered_through_relay_ns`]).
    checked_through: u64,
    checked: Option<CheckedSample>,
    /// Relay time (receive/reply midpoint) of the first sample fitted in
    /// the current epoch: where a step or suspend is known, in hindsight,
    /// to lie before (None until that sample).
    epoch_first_relay_ns: Option<u64>,
    rejected: u64,
    popped: u64,
    outliers: u64,
    steps: u64,
    trimmed: u64,
}

impl Default for Estimator {
    fn default() -> Self {
        Self::new(EstimatorConfig::default())
    }
}

impl Estimator {
    pub fn new(config: EstimatorConfig) -> Self {
        Self {
            window: VecDeque::with_capacity(config.window_samples.min(1024)),
            prior: FreqPrior::uninformed(&config),
            config,
            epoch: 0,
            epoch_suspend_offset: None,
            current: None,
            tested: None,
            history: VecDeque::new(),
            recent_delays: VecDeque::new(),
            popped_last: false,
            suspect: None,
            gate_ns: 0,
            sample_sigma_ns: 0.0,
            innovation_held: None,
            suspicion: None,
            checked_through: 0,
            checked: None,
            epoch_first_relay_ns: None,
            rejected: 0,
            popped: 0,
            outliers: 0,
            steps: 0,
            trimmed: 0,
        }
    }

    /// Adds one exchange. Returns the current estimate (unchanged when the
    /// sample was filtered out), or None when the sample is rejected
    /// (reversed or absurd timestamps) or no estimate exists yet.
    pub fn add_sample(
        &mut self,
        t1: u64,
        t2: u64,
        t3: u64,
        t4: u64,
        boottime_minus_monotonic_ns: i64,
    ) -> Option<SyncEstimate> {
        let Some(sample) = self.validate(t1, t2, t3, t4) else {
            self.rejected += 1;
            return None;
        };
        self.track_epoch(boottime_minus_monotonic_ns, sample);
        if self.pop(sample.delay_ns) {
            return self.reported();
        }
        self.restart_after_gap(&sample);
        // Every path below decides about this sample (fit, outlier, step).
        self.checked_through = self.checked_through.max(sample.relay_mid_ns);
        self.checked = Some(CheckedSample {
            relay_ns: sample.relay_mid_ns,
            offset_ns: sample.offset_ns,
            half_width_ns: (sample.delay_ns / 2 + 1).saturating_add(self.config.timestamp_slack_ns),
        });
        if !self.consistent(&sample) {
            match self.suspect.take() {
                None => {
                    // Until the next sample decides, the bound also covers
                    // this sample's interval (the clock may have stepped).
                    self.suspect = Some(sample);
                    self.suspect_widening(&sample);
                    return self.reported();
                }
                Some(first) => {
                    // Two contradictions in a row: the clock stepped.
                    self.steps += 1;
                    let carried = self.carried_prior(false, 0);
                    self.new_epoch(boottime_minus_monotonic_ns, carried);
                    self.window.push_back(first);
                }
            }
        } else {
            if self.suspect.take().is_some() {
                self.outliers += 1;
                self.suspicion = None;
            }
            match self.innovation_test(&sample) {
                Innovation::Normal => {}
                // Held out of the fit (one outlier would inflate the spread
                // and hide the second) until the next sample decides; the
                // bound covers it meanwhile.
                Innovation::FarOut => {
                    self.suspect_widening(&sample);
                    return self.reported();
                }
                Innovation::Step(first) => {
                    // A step below the hard test's reach: start over here.
                    self.steps += 1;
                    let carried = self.carried_prior(false, 0);
                    self.new_epoch(boottime_minus_monotonic_ns, carried);
                    self.window.push_back(first);
                }
            }
        }
        self.window.push_back(sample);
        if self.epoch_first_relay_ns.is_none() {
            self.epoch_first_relay_ns = self.window.front().map(|s| s.relay_mid_ns);
        }
        let newest = sample.host_send_ns;
        let max_age = self.config.window_ns;
        while self
            .window
            .front()
            .is_some_and(|s| s.host_send_ns.abs_diff(newest) > max_age)
        {
            self.window.pop_front();
        }
        while self.window.len() > self.config.window_samples.max(1) {
            self.window.pop_front();
        }
        self.refit();
        self.reported()
    }

    /// After a gap long enough that the clock's own wander (one sigma)
    /// exceeds the samples' noise, no line through the window also fits
    /// the samples after it: the window starts over in the same epoch,
    /// with the frequency carried as a prior. Without it the first samples
    /// after a 60 s partition pivoted the regression and the next ones
    /// looked like a step, which ended the epoch (and the final smoother's
    /// segment) at the gap.
    fn restart_after_gap(&mut self, sample: &Sample) {
        let Some(newest) = self.window.back() else {
            return;
        };
        let wander = steps::wander_sigma_ns(&self.config, newest.relay_mid_ns, sample.relay_mid_ns);
        let noise = self
            .sample_sigma_ns
            .max(self.config.timestamp_slack_ns as f64);
        if wander <= noise {
            return;
        }
        let gap_ns = sample.relay_mid_ns.saturating_sub(newest.relay_mid_ns);
        self.prior = self.carried_prior(true, gap_ns);
        self.trimmed += self.window.len() as u64;
        self.window.clear();
        self.tested = None;
        self.suspect = None;
        self.innovation_held = None;
    }

    /// Latest estimate of the current epoch (None before its first sample).
    /// While a sample that contradicts it awaits confirmation, its bound
    /// beyond the newest fitted sample covers that sample too
    /// ([`SyncEstimate::suspect_extra_ns`]).
    pub fn estimate(&self) -> Option<SyncEstimate> {
        self.reported()
    }

    /// The fitted estimate with the pending suspicion's widening.
    fn reported(&self) -> Option<SyncEstimate> {
        let mut e = self.current?;
        e.covered_through_relay_ns = self.checked_through;
        e.checked = self.checked;
        if let Some((from, extra)) = self.suspicion {
            e.suspect_from_relay_ns = from;
            e.suspect_extra_ns = extra;
        }
        Some(e)
    }

    /// A sample contradicts the estimate (a step is possible): until it is
    /// confirmed or rejected, mappings after the newest fitted sample get a
    /// bound wide enough to hold the truth if the clock did step. The
    /// sample's hard interval holds the truth at its time, so the estimate
    /// is at most |innovation| + delay/2 + slack off there; the bound's
    /// frequency term carries that to later times.
    fn suspect_widening(&mut self, sample: &Sample) {
        let Some(e) = self.current else {
            return;
        };
        let predicted = e.offset_at(sample.relay_mid_ns) as i128;
        let innovation = (sample.offset_ns as i128 - predicted).unsigned_abs();
        let extra = innovation
            .saturating_add(u128::from(sample.delay_ns / 2 + 1))
            .saturating_add(u128::from(self.config.timestamp_slack_ns));
        let extra = u64::try_from(extra).unwrap_or(u64::MAX);
        let from = e.ref_relay_ns.min(sample.relay_mid_ns);
        self.suspicion = Some(match self.suspicion {
            Some((f, x)) => (f.min(from), x.max(extra)),
            None => (from, extra),
        });
    }

    /// Latest estimate of the newest epoch whose BOOTTIME-MONOTONIC matches
    /// `boottime_minus_monotonic_ns`: the mapping for a relay timestamp taken
    /// in that epoch. None when that epoch has no estimate (yet).
    pub fn estimate_for(&self, boottime_minus_monotonic_ns: i64) -> Option<SyncEstimate> {
        let matches = |e: &SyncEstimate| {
            (e.boottime_minus_monotonic_ns as i128 - boottime_minus_monotonic_ns as i128)
                .unsigned_abs()
                <= self.config.epoch_jump_ns as u128
        };
        match self.reported() {
            Some(current) if matches(&current) => return Some(current),
            // The current epoch is that one but has no estimate yet.
            None if self.epoch_suspend_offset.is_some_and(|b| {
                (b as i128 - boottime_minus_monotonic_ns as i128).unsigned_abs()
                    <= self.config.epoch_jump_ns as u128
            }) =>
            {
                return None;
            }
            _ => {}
        }
        self.history.iter().rev().find(|e| matches(e)).copied()
    }

    /// Current clock epoch (0 = the first).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Relay time (receive/reply midpoint) of the first sample fitted in
    /// the current epoch. After a detected step that is the first sample
    /// that contradicted the old epoch, not the one that confirmed it: the
    /// step lies between it and the sample before.
    pub fn epoch_first_relay_ns(&self) -> Option<u64> {
        self.epoch_first_relay_ns
    }

    /// Samples rejected so far (invalid timestamps).
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Samples dropped by the pop filter (single delay outliers).
    pub fn popped(&self) -> u64 {
        self.popped
    }

    /// Single samples that contradicted the hard bound and were dropped.
    pub fn outliers(&self) -> u64 {
        self.outliers
    }

    /// Clock steps detected from the samples (not announced by the relay).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Samples dropped from the window because no line fitted them all.
    pub fn trimmed(&self) -> u64 {
        self.trimmed
    }

    fn validate(&self, t1: u64, t2: u64, t3: u64, t4: u64) -> Option<Sample> {
        if t4 < t1 || t3 < t2 {
            return None;
        }
        let round_trip = (t4 - t1) as i128;
        let hold = (t3 - t2) as i128;
        let delay = round_trip - hold;
        if delay < -NEGATIVE_DELAY_TOLERANCE_NS || delay > self.config.max_delay_ns as i128 {
            return None;
        }
        let offset = ((t2 as i128 - t1 as i128) + (t3 as i128 - t4 as i128)) / 2;
        Some(Sample {
            host_send_ns: t1,
            relay_mid_ns: t2 + (t3 - t2) / 2,
            offset_ns: i64::try_from(offset).ok()?,
            delay_ns: delay.max(0) as u64,
        })
    }

    /// Pop filter: true when the sample is dropped.
    fn pop(&mut self, delay: u64) -> bool {
        let history = self.config.pop_history.max(3);
        let mut drop = false;
        if self.recent_delays.len() >= history {
            let mut sorted: Vec<u64> = self.recent_delays.iter().copied().collect();
            sorted.sort_unstable();
            let median = sorted[sorted.len() / 2];
            let mut deviations: Vec<u64> = sorted.iter().map(|d| d.abs_diff(median)).collect();
            deviations.sort_unstable();
            let mad = (deviations[deviations.len() / 2] as f64)
                .max(self.config.timestamp_slack_ns as f64);
            let limit = median as f64 + self.config.pop_mads * 1.4826 * mad;
            drop = delay as f64 > limit && !self.popped_last;
        }
        self.recent_delays.push_back(delay);
        while self.recent_delays.len() > history {
            self.recent_delays.pop_front();
        }
        self.popped_last = drop;
        if drop {
            self.popped += 1;
        }
        drop
    }

    fn refit(&mut self) {
        // A refit follows a decision on every pending contradiction.
        if self.suspect.is_none() && self.innovation_held.is_none() {
            self.suspicion = None;
        }
        let Some(mut f) = fit(self.window.make_contiguous(), self.prior, &self.config) else {
            self.current = None;
            self.tested = None;
            return;
        };
        // Pairs of samples that no line fits (the hull test fails): the
        // clock changed inside the window. Keep its newer half until the
        // rest agrees, as chrony's runs test shrinks its window.
        while f.contradiction && self.window.len() >= 8 {
            let drop = self.window.len() / 2;
            self.window.drain(..drop);
            self.trimmed += drop as u64;
            match fit(self.window.make_contiguous(), self.prior, &self.config) {
                Some(next) => f = next,
                None => break,
            }
        }
        self.gate_ns = f.gate_ns;
        self.sample_sigma_ns = f.sample_sigma_ns;
        let tested = SyncEstimate {
            epoch: self.epoch,
            ref_relay_ns: f.ref_relay_ns,
            offset_ns: f.offset_ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
            freq_ppm: f.freq * 1e6,
            error_bound_ns: finite_ns(f.bound_ns.ceil()),
            sigma_ns: finite_ns(f.spread_ns),
            rtt_ns: f.floor_delay_ns,
            samples: f.kept,
            freq_bound_ppm: f.freq_dev * 1e6,
            wander_ppm_per_sqrt_s: wander_rate(&self.config) * 1e6,
            map_sigma_ns: finite_ns(f.offset_sigma_ns),
            freq_sigma_ppm: f.freq_sigma * 1e6,
            boottime_minus_monotonic_ns: self.epoch_suspend_offset.unwrap_or(0),
            suspect_extra_ns: 0,
            suspect_from_relay_ns: 0,
            covered_through_relay_ns: 0,
            checked: None,
        };
        self.tested = Some(tested);
        self.current = Some(match f.envelope {
            Some(env) => SyncEstimate {
                offset_ns: env.offset_ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
                freq_ppm: env.freq * 1e6,
                error_bound_ns: finite_ns(env.bound_ns.ceil()),
                freq_bound_ppm: env.freq_dev * 1e6,
                ..tested
            },
            None => tested,
        });
    }
}

/// Non-negative f64 ns to u64. NaN means "unknown", so it becomes the
/// widest value rather than a claim of zero error; `as` saturates the rest.
fn finite_ns(value: f64) -> u64 {
    if value.is_nan() {
        u64::MAX
    } else {
        value.round().max(0.0) as u64
    }
}

#[cfg(test)]
mod test_model;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod young_tests;
