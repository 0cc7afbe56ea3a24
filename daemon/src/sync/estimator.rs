//! Estimator, first version (sans-IO): a sliding window of probe samples,
//! a delay gate, and a delay-weighted least-squares line through the kept
//! samples. Issue 4 replaces the inside (Kalman filter, hull bounds); the
//! interface (`add_sample`, `estimate`) stays.
//!
//! Per sample (t1/t4 host, t2/t3 relay): offset = ((t2 - t1) + (t3 - t4)) / 2
//! (relay minus host), delay = (t4 - t1) - (t3 - t2). Each one-way delay is
//! non-negative, so a sample's offset is within delay/2 of the truth.

use std::collections::VecDeque;

use super::SyncEstimate;

/// Tuning of the first-version estimator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EstimatorConfig {
    /// Most samples kept in the window.
    pub window_samples: usize,
    /// Oldest sample kept, by host send time relative to the newest (ns).
    pub window_ns: u64,
    /// Samples with delay above this quantile of the window's delays are
    /// left out of the fit (queueing only ever adds delay).
    pub gate_quantile: f64,
    /// Frequency is fitted only once the kept samples span this much relay
    /// time (ns); before that it is 0.
    pub min_freq_span_ns: u64,
    /// A change of the relay's BOOTTIME-MONOTONIC by more than this (ns)
    /// means a suspend: new epoch, empty window.
    pub epoch_jump_ns: u64,
    /// Samples with a larger delay are rejected as garbage (ns).
    pub max_delay_ns: u64,
    /// Fitted frequencies are clamped to +-this (ppm).
    pub max_abs_freq_ppm: f64,
    /// Drift assumed for the error bound while no frequency is fitted (ppm).
    pub unfitted_drift_ppm: f64,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        Self {
            window_samples: 64,
            window_ns: 30_000_000_000,
            gate_quantile: 0.25,
            min_freq_span_ns: 2_000_000_000,
            epoch_jump_ns: 1_000_000,
            max_delay_ns: 10_000_000_000,
            max_abs_freq_ppm: 1000.0,
            unfitted_drift_ppm: 100.0,
        }
    }
}

/// A relay clock whose reads differ by this little from "no time passed"
/// (negative delay) is rounding, not garbage.
const NEGATIVE_DELAY_TOLERANCE_NS: i128 = 1_000;

/// Timestamp granularity and processing slack added to every bound.
const BOUND_FLOOR_NS: f64 = 1_000.0;

/// Standard errors of the slope added to the bound's frequency term.
const SLOPE_ERROR_SIGMAS: f64 = 3.0;

#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Host BOOTTIME at send: ages the window.
    host_send_ns: u64,
    /// Relay BOOTTIME midway between receive and reply.
    relay_mid_ns: u64,
    offset_ns: i64,
    delay_ns: u64,
}

/// The first-version estimator for one relay session.
#[derive(Debug)]
pub struct Estimator {
    config: EstimatorConfig,
    window: VecDeque<Sample>,
    epoch: u64,
    /// BOOTTIME-MONOTONIC of the current epoch (None before any sample).
    epoch_suspend_offset: Option<i64>,
    current: Option<SyncEstimate>,
    rejected: u64,
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
            config,
            epoch: 0,
            epoch_suspend_offset: None,
            current: None,
            rejected: 0,
        }
    }

    /// Adds one exchange; returns the new estimate, or None when the sample
    /// is rejected (reversed or absurd timestamps).
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
        self.track_epoch(boottime_minus_monotonic_ns);
        self.window.push_back(sample);
        let newest = sample.host_send_ns;
        let max_age = self.config.window_ns;
        self.window
            .retain(|s| s.host_send_ns.abs_diff(newest) <= max_age);
        while self.window.len() > self.config.window_samples.max(1) {
            self.window.pop_front();
        }
        self.current = self.fit();
        self.current
    }

    /// Latest estimate (None before the first accepted sample of an epoch).
    pub fn estimate(&self) -> Option<SyncEstimate> {
        self.current
    }

    /// Current clock epoch (0 = the first).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Samples rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected
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

    fn track_epoch(&mut self, suspend_offset: i64) {
        match self.epoch_suspend_offset {
            None => self.epoch_suspend_offset = Some(suspend_offset),
            Some(previous) => {
                let jump = (suspend_offset as i128 - previous as i128).unsigned_abs();
                if jump > self.config.epoch_jump_ns as u128 {
                    // Never fit across a suspend: the relay clock stepped.
                    self.window.clear();
                    self.current = None;
                    self.epoch += 1;
                    self.epoch_suspend_offset = Some(suspend_offset);
                }
            }
        }
    }

    fn fit(&self) -> Option<SyncEstimate> {
        let mut delays: Vec<u64> = self.window.iter().map(|s| s.delay_ns).collect();
        delays.sort_unstable();
        let floor = *delays.first()?;
        let quantile = self.config.gate_quantile.clamp(0.0, 1.0);
        let gate_index = ((delays.len() - 1) as f64 * quantile).floor() as usize;
        let gate = delays[gate_index.min(delays.len() - 1)];
        let kept: Vec<Sample> = self
            .window
            .iter()
            .copied()
            .filter(|s| s.delay_ns <= gate)
            .collect();
        // The floor sample always passes the gate, so `kept` is not empty.
        let best = *kept.iter().min_by_key(|s| s.delay_ns)?;
        let newest_relay = self.window.iter().map(|s| s.relay_mid_ns).max()?;

        // Relative coordinates keep f64 exact enough: x in ns from the best
        // sample (window <= tens of seconds), y in ns from its offset.
        let scale = ((gate - floor) as f64).max(BOUND_FLOOR_NS);
        let points: Vec<(f64, f64, f64)> = kept
            .iter()
            .map(|s| {
                let x = (s.relay_mid_ns as i128 - best.relay_mid_ns as i128) as f64;
                let y = (s.offset_ns as i128 - best.offset_ns as i128) as f64;
                let excess = (s.delay_ns - floor) as f64 / scale;
                let weight = 1.0 / ((1.0 + excess) * (1.0 + excess));
                (x, y, weight)
            })
            .collect();
        let n = points.len() as f64;
        let weight_sum: f64 = points.iter().map(|p| p.2).sum();
        let mean_x = points.iter().map(|p| p.0 * p.2).sum::<f64>() / weight_sum;
        let mean_y = points.iter().map(|p| p.1 * p.2).sum::<f64>() / weight_sum;
        let span = kept.iter().map(|s| s.relay_mid_ns).max()?
            - kept.iter().map(|s| s.relay_mid_ns).min()?;

        let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - mean_x).powi(2)).sum();
        let fit_frequency = span >= self.config.min_freq_span_ns && kept.len() >= 3 && sxx > 0.0;
        let max_slope = self.config.max_abs_freq_ppm.abs() * 1e-6;
        let slope = if fit_frequency {
            let sxy: f64 = points
                .iter()
                .map(|p| p.2 * (p.0 - mean_x) * (p.1 - mean_y))
                .sum();
            let slope = sxy / sxx;
            if slope.is_finite() {
                slope.clamp(-max_slope, max_slope)
            } else {
                0.0
            }
        } else {
            0.0
        };
        let line = |x: f64| mean_y + slope * (x - mean_x);
        let weighted_sq_residuals: f64 =
            points.iter().map(|p| p.2 * (p.1 - line(p.0)).powi(2)).sum();
        let dof_used = if fit_frequency { 2.0 } else { 1.0 };
        let sigma = if n > dof_used {
            (weighted_sq_residuals / weight_sum * n / (n - dof_used)).sqrt()
        } else {
            0.0
        };
        let slope_error = if fit_frequency {
            SLOPE_ERROR_SIGMAS * (weighted_sq_residuals / (n - 2.0) / sxx).sqrt()
        } else {
            self.config.unfitted_drift_ppm.abs() * 1e-6
        };

        // Bound at the reference: the best sample is within delay/2 of the
        // truth; the line is |residual| away from it there; the slope error
        // carries that to the reference.
        let ref_x = (newest_relay as i128 - best.relay_mid_ns as i128) as f64;
        let best_residual = line(0.0).abs();
        let bound = best.delay_ns as f64 / 2.0
            + best_residual
            + slope_error.min(max_slope) * ref_x.abs()
            + BOUND_FLOOR_NS;
        let offset = best.offset_ns as i128 + line(ref_x).round() as i128;

        Some(SyncEstimate {
            epoch: self.epoch,
            ref_relay_ns: newest_relay,
            offset_ns: offset.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
            freq_ppm: slope * 1e6,
            error_bound_ns: finite_ns(bound),
            sigma_ns: finite_ns(sigma),
            rtt_ns: floor,
            samples: kept.len() as u32,
        })
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
#[path = "estimator_tests.rs"]
mod tests;
