//! Epochs of the estimator: a relay clock that jumps (suspend, restart,
//! step) starts a new fit, with the frequency knowledge that carries over.

use super::fit::{FreqPrior, wander_rate};
use super::{Estimator, Sample};

impl Estimator {
    pub(super) fn track_epoch(&mut self, suspend_offset: i64, sample: Sample) {
        match self.epoch_suspend_offset {
            None => self.epoch_suspend_offset = Some(suspend_offset),
            Some(previous) => {
                let jump = (suspend_offset as i128 - previous as i128).unsigned_abs();
                // A relay clock running backwards (by more than reordered
                // replies can explain) is a restart or a step too.
                let backwards = self.window.back().is_some_and(|last| {
                    sample.relay_mid_ns.saturating_add(self.config.max_delay_ns) < last.relay_mid_ns
                });
                if jump > self.config.epoch_jump_ns as u128 || backwards {
                    // Never fit across a suspend: the relay clock stepped.
                    let gap_ns = self.window.back().map_or(0, |last| {
                        sample.relay_mid_ns.saturating_sub(last.relay_mid_ns)
                    });
                    let carried = self.carried_prior(!backwards, gap_ns);
                    self.new_epoch(suspend_offset, carried);
                }
            }
        }
    }

    /// The frequency knowledge a new epoch starts from. Across a suspend the
    /// oscillator is the same (its hard interval widens by the slack);
    /// after a detected step it may not be (only the point value carries).
    pub(super) fn carried_prior(&self, same_oscillator: bool, gap_ns: u64) -> FreqPrior {
        let uninformed = FreqPrior::uninformed(&self.config);
        let Some(e) = self.current else {
            return uninformed;
        };
        let slack = self.config.resume_freq_slack_ppm.abs() * 1e-6;
        let mean = e.freq_ppm * 1e-6;
        let var = (e.freq_sigma_ppm * 1e-6).powi(2) + slack * slack;
        if !same_oscillator {
            return FreqPrior {
                mean,
                var: var.max((10e-6f64).powi(2)),
                ..uninformed
            };
        }
        let wander = wander_rate(&self.config) * (gap_ns as f64 * 1e-9).sqrt();
        let dev = e.freq_bound_ppm * 1e-6 + slack + wander;
        FreqPrior {
            mean,
            var,
            lo: (mean - dev).max(uninformed.lo),
            hi: (mean + dev).min(uninformed.hi),
        }
    }

    pub(super) fn new_epoch(&mut self, suspend_offset: i64, prior: FreqPrior) {
        self.tested = None;
        if let Some(last) = self.current.take() {
            self.history.push_back(last);
            while self.history.len() > self.config.epoch_history {
                self.history.pop_front();
            }
        }
        self.window.clear();
        self.suspect = None;
        self.innovation_held = None;
        self.suspicion = None;
        self.epoch += 1;
        self.epoch_first_relay_ns = None;
        self.epoch_suspend_offset = Some(suspend_offset);
        self.prior = prior;
    }
}
