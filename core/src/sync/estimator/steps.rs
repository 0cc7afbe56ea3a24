//! The estimator's two step tests: the hard one (a sample's interval
//! misses the bound) and the statistical one (a far-out innovation, three
//! of one sign in a row). Both judge samples by the regression's line
//! (`tested`), to whose residuals they are tuned.

use super::{Estimator, EstimatorConfig, Sample};

/// Verdict of the statistical step test on one sample.
#[must_use]
pub(super) enum Innovation {
    Normal,
    FarOut,
    /// Confirmed: carries the first far-out sample.
    Step(Sample),
}

/// Far-out innovations of one sign in a row that make a statistical step
/// (a 5 sigma test: two in a row happened on noisy links every ~30 min).
const STEP_CONFIRMATIONS: u32 = 3;

/// Window samples before the statistical step test judges new samples.
const MIN_SAMPLES_FOR_STEP_TEST: usize = 8;

impl Estimator {
    /// Statistical step test: a far-out innovation is held; the third one
    /// of the same sign in a row is a step.
    pub(super) fn innovation_test(&mut self, sample: &Sample) -> Innovation {
        let Some(e) = self.tested else {
            return Innovation::Normal;
        };
        // A few samples say little about their own queueing error (the
        // sigma of a handful is no measure): wait for a burst's worth.
        if self.window.len() < MIN_SAMPLES_FOR_STEP_TEST {
            return Innovation::Normal;
        }
        let predicted = e.offset_at(sample.relay_mid_ns) as i128;
        let innovation = (sample.offset_ns as i128 - predicted) as f64;
        // After a gap the clock's own wander is part of the prediction's
        // error: without it, 60 s without samples made an ordinary wander
        // of ~15 us a step and ended the smoother's segment at the gap.
        let wander = wander_sigma_ns(&self.config, e.ref_relay_ns, sample.relay_mid_ns);
        let sigma = (e.sigma_at(sample.relay_mid_ns) as f64)
            .hypot(self.sample_sigma_ns)
            .hypot(wander);
        // Queueing moves a sample's offset by at most half its delay
        // excess over the floor (the legs' extra delays differ by at most
        // their sum), so a sample of any delay can be judged; near the
        // floor this is the gated samples' test.
        let excess = sample.delay_ns.saturating_sub(e.rtt_ns) as f64;
        let limit =
            self.config.step_sigmas * sigma + self.config.timestamp_slack_ns as f64 + excess / 2.0;
        let sign: i8 = if innovation > limit {
            1
        } else if innovation < -limit {
            -1
        } else {
            0
        };
        let held = self.innovation_held.take();
        match (sign, held) {
            (0, None) => Innovation::Normal,
            (0, Some(_)) => {
                self.outliers += 1;
                Innovation::Normal
            }
            (sign, Some((first, first_sign, count))) if sign == first_sign => {
                if count + 1 >= STEP_CONFIRMATIONS {
                    Innovation::Step(first)
                } else {
                    self.innovation_held = Some((first, first_sign, count + 1));
                    Innovation::FarOut
                }
            }
            (sign, previous) => {
                if previous.is_some() {
                    self.outliers += 1;
                }
                self.innovation_held = Some((*sample, sign, 1));
                Innovation::FarOut
            }
        }
    }

    /// False when the sample's hard interval misses the current bound.
    pub(super) fn consistent(&self, sample: &Sample) -> bool {
        let Some(e) = self.tested else {
            return true;
        };
        let predicted = e.offset_at(sample.relay_mid_ns) as i128;
        let reach = e.bound_at(sample.relay_mid_ns) as i128
            + (sample.delay_ns / 2 + self.config.timestamp_slack_ns) as i128;
        (sample.offset_ns as i128 - predicted).abs() <= reach
    }
}

/// One sigma of the phase a frequency random walk of `max_wander` (its
/// variance per second) adds between relay times `from` and `to` (ns):
/// sqrt(max_wander) * t^1.5 / sqrt(3). A few ns a probe apart; tens of us
/// after a minute without samples.
pub(super) fn wander_sigma_ns(config: &EstimatorConfig, from: u64, to: u64) -> f64 {
    let seconds = from.abs_diff(to) as f64 * 1e-9;
    config.max_wander.max(0.0).sqrt() * seconds * seconds.sqrt() / 3f64.sqrt() * 1e9
}
