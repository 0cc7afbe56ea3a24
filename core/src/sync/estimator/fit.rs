//! The estimator's math, pure functions of one epoch's window of samples:
//! delay-floor gate, delay-weighted regression with a frequency prior, the
//! hard frequency interval from sample pairs, and the hard bound.

use super::{EstimatorConfig, Sample};
use crate::sync::corridor::{SOFT, steady_midline};

/// What the estimator knows about the frequency before this window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct FreqPrior {
    /// Point value (relay minus host rate, dimensionless: 1e-6 = 1 ppm).
    pub mean: f64,
    /// Its variance (dimensionless squared).
    pub var: f64,
    /// Hard interval the frequency lies in (dimensionless).
    pub lo: f64,
    pub hi: f64,
}

impl FreqPrior {
    /// Nothing known: crystal tolerance.
    pub fn uninformed(config: &EstimatorConfig) -> Self {
        let max = config.max_abs_freq_ppm.abs() * 1e-6;
        Self {
            mean: 0.0,
            var: (max / 3.0).powi(2),
            lo: -max,
            hi: max,
        }
    }
}

/// One fit of a window: the line, its uncertainty and its hard bound, all
/// at `ref_relay_ns` (the newest sample).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Fit {
    pub ref_relay_ns: u64,
    pub offset_ns: i128,
    /// Dimensionless slope (relay minus host rate).
    pub freq: f64,
    pub freq_sigma: f64,
    pub offset_sigma_ns: f64,
    /// Weighted residual spread of the kept samples (ns).
    pub spread_ns: f64,
    /// Hard bound on |offset error| at the reference (ns).
    pub bound_ns: f64,
    /// Hard bound on |true - fitted frequency| inside the window.
    pub freq_dev: f64,
    pub floor_delay_ns: u64,
    /// Delay gate: samples at or below it were fitted (ns).
    pub gate_ns: u64,
    /// Noise of one gated sample around the line (ns).
    pub sample_sigma_ns: f64,
    pub kept: u32,
    /// The one-way envelope's line over the same window, with its own hard
    /// bound (the reported mapping; the regression's line drives the step
    /// tests, which are tuned to its residuals).
    pub envelope: Option<EnvelopeLine>,
    /// The window's samples admit no single line (plus wander): the clock
    /// left the model inside the window (an unannounced slew or step).
    pub contradiction: bool,
}

/// The line midway between the window's fastest request legs and fastest
/// reply legs (`crate::sync::corridor`), at the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct EnvelopeLine {
    pub offset_ns: i128,
    pub freq: f64,
    pub bound_ns: f64,
    pub freq_dev: f64,
}

/// Value at quantile `q` of sorted values (nearest rank, lower).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    let index = ((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).floor() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Wander allowance (dimensionless per sqrt(s)) of the config.
pub(super) fn wander_rate(config: &EstimatorConfig) -> f64 {
    config.wander_sigmas * config.max_wander.max(0.0).sqrt()
}

/// Fits `window` (one epoch, oldest first, not empty).
pub(super) fn fit(window: &[Sample], prior: FreqPrior, config: &EstimatorConfig) -> Option<Fit> {
    let newest = window.last()?;
    let frame = Frame {
        window,
        ref_relay_ns: window.iter().map(|s| s.relay_mid_ns).max()?,
        base: newest.offset_ns as i128,
        slack: config.timestamp_slack_ns as f64,
    };
    let gate = DelayGate::of(window, config);
    let points = frame.gated_points(&gate);
    let line = Regression::of(&points);
    // Residual spread per unit weight, floored by the gate's own width so a
    // handful of lucky samples do not claim sub-resolution precision.
    let resolution = config.timestamp_slack_ns;
    let sigma0 = line
        .spread
        .max(gate.scale / 4.0)
        .max(resolution as f64 / 2.0);

    let max = config.max_abs_freq_ppm.abs() * 1e-6;
    let (freq, freq_var) = blended_freq(&line, sigma0, prior, max);
    let offset_rel = line.mean_y - freq * line.mean_x;
    let offset_sigma =
        (sigma0 * sigma0 / line.weight_sum + freq_var * line.mean_x * line.mean_x).sqrt();

    // Hard frequency interval, then the hard bound at the reference.
    let (freq_lo, freq_hi, contradiction) =
        freq_interval(window, frame.ref_relay_ns, prior, config);
    let freq_dev = (freq - freq_lo).max(freq_hi - freq).max(0.0);
    let bound = frame.hard_bound(offset_rel, freq, freq_dev);
    let envelope = frame.envelope((freq_lo, freq_hi), max);

    Some(Fit {
        ref_relay_ns: frame.ref_relay_ns,
        offset_ns: frame.base + offset_rel.round() as i128,
        freq,
        freq_sigma: freq_var.sqrt(),
        offset_sigma_ns: offset_sigma,
        spread_ns: line.spread,
        bound_ns: bound,
        freq_dev,
        floor_delay_ns: gate.floor,
        gate_ns: gate.threshold,
        sample_sigma_ns: sigma0,
        kept: points.len() as u32,
        envelope,
        contradiction,
    })
}

/// The delay gate of a window: samples at or below `threshold` are fitted,
/// weighted down by their delay's excess over `floor` in units of `scale`.
struct DelayGate {
    floor: u64,
    threshold: u64,
    scale: f64,
}

impl DelayGate {
    /// The delay floor is a low quantile, not the minimum (a single
    /// too-small delay is an outlier too); samples near the floor are kept.
    #[inline]
    fn of(window: &[Sample], config: &EstimatorConfig) -> Self {
        let mut delays: Vec<u64> = window.iter().map(|s| s.delay_ns).collect();
        delays.sort_unstable();
        let floor = quantile(&delays, config.floor_quantile);
        let resolution = config.timestamp_slack_ns;
        let mut threshold = quantile(&delays, config.gate_quantile).max(floor + 2 * resolution);
        threshold = threshold.max(delays[delays.len().min(3) - 1]);
        let scale = (threshold.saturating_sub(floor) as f64).max(resolution as f64);
        Self {
            floor,
            threshold,
            scale,
        }
    }

    /// A kept sample's regression weight.
    #[inline]
    fn weight(&self, delay_ns: u64) -> f64 {
        let excess = delay_ns.saturating_sub(self.floor) as f64 / self.scale;
        1.0 / ((1.0 + excess) * (1.0 + excess))
    }
}

/// The window's coordinates: x relative to the reference (the newest relay
/// time), y relative to the newest offset. Both keep f64 exact (a window
/// spans minutes: < 2^53 ns).
struct Frame<'a> {
    window: &'a [Sample],
    ref_relay_ns: u64,
    base: i128,
    slack: f64,
}

impl Frame<'_> {
    #[inline]
    fn x(&self, s: &Sample) -> f64 {
        (s.relay_mid_ns as i128 - self.ref_relay_ns as i128) as f64
    }

    #[inline]
    fn y(&self, s: &Sample) -> f64 {
        (s.offset_ns as i128 - self.base) as f64
    }

    /// The samples the gate keeps, as (x, y, weight).
    #[inline]
    fn gated_points(&self, gate: &DelayGate) -> Vec<(f64, f64, f64)> {
        self.window
            .iter()
            .filter(|s| s.delay_ns <= gate.threshold)
            .map(|s| (self.x(s), self.y(s), gate.weight(s.delay_ns)))
            .collect()
    }

    /// Hard bound at the reference for the line through (0, `offset_rel`)
    /// with slope `freq`, if `freq` is within `dev` of the truth.
    #[inline]
    fn hard_bound(&self, offset_rel: f64, freq: f64, dev: f64) -> f64 {
        self.window
            .iter()
            .map(|s| {
                let x = self.x(s);
                let y = self.y(s);
                // The sample's line carried to the reference with the slope.
                let centre = y - freq * x;
                (offset_rel - centre).abs() + s.delay_ns as f64 / 2.0 + self.slack + dev * x.abs()
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Each sample bounds the offset from one side per leg: the relay
    /// read t2 after the host's t1 (offset <= y + delay/2, `sign` 1) and t3
    /// before the host's t4 (offset >= y - delay/2, `sign` -1).
    #[inline]
    fn legs(&self, sign: f64) -> Vec<(f64, f64)> {
        self.window
            .iter()
            .map(|s| (self.x(s), self.y(s) + sign * s.delay_ns as f64 / 2.0))
            .collect()
    }

    /// The one-way envelope's line, its slope searched within the hard
    /// frequency interval `(lo, hi)` (inside the crystal tolerance `max`):
    /// early in a window (a few samples) the legs alone leave it loose,
    /// and a slope off by tens of ppm moves the mapping 0.5 s ahead by
    /// tens of µs.
    #[inline]
    fn envelope(&self, (freq_lo, freq_hi): (f64, f64), max: f64) -> Option<EnvelopeLine> {
        let slopes = match (freq_lo.max(-max), freq_hi.min(max)) {
            (lo, hi) if lo.is_finite() && hi.is_finite() && lo <= hi => (lo, hi),
            _ => (-max, max),
        };
        let (value, slope, _) = steady_midline(&self.legs(-1.0), &self.legs(1.0), slopes, SOFT)?;
        let slope = slope.clamp(slopes.0, slopes.1);
        let dev = (slope - freq_lo).max(freq_hi - slope).max(0.0);
        Some(EnvelopeLine {
            offset_ns: self.base + value.round() as i128,
            freq: slope,
            bound_ns: self.hard_bound(value, slope, dev),
            freq_dev: dev,
        })
    }
}

/// Weighted least squares over the gated points (x, y, weight).
struct Regression {
    weight_sum: f64,
    mean_x: f64,
    mean_y: f64,
    sxx: f64,
    /// Enough points over a span to fit a slope.
    fitted: bool,
    /// The fitted slope (0 when not `fitted`).
    slope: f64,
    /// Weighted residual spread (ns).
    spread: f64,
}

impl Regression {
    #[inline]
    fn of(points: &[(f64, f64, f64)]) -> Self {
        let n = points.len() as f64;
        let weight_sum: f64 = points.iter().map(|p| p.2).sum();
        let mean_x = points.iter().map(|p| p.0 * p.2).sum::<f64>() / weight_sum;
        let mean_y = points.iter().map(|p| p.1 * p.2).sum::<f64>() / weight_sum;
        let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - mean_x).powi(2)).sum();
        let sxy: f64 = points
            .iter()
            .map(|p| p.2 * (p.0 - mean_x) * (p.1 - mean_y))
            .sum();
        let fitted = points.len() >= 3 && sxx > 0.0;
        let slope = if fitted { sxy / sxx } else { 0.0 };
        let residuals: f64 = points
            .iter()
            .map(|p| p.2 * (p.1 - mean_y - slope * (p.0 - mean_x)).powi(2))
            .sum();
        let spread = if points.len() > 2 {
            (residuals / (n - 2.0)).sqrt()
        } else {
            0.0
        };
        Self {
            weight_sum,
            mean_x,
            mean_y,
            sxx,
            fitted,
            slope,
            spread,
        }
    }
}

/// Slope and its variance: the regression's, blended with the prior by
/// inverse variance (a short span gives a wide regression slope, so the
/// prior dominates); the slope clamped to the crystal tolerance `max`.
#[inline]
fn blended_freq(line: &Regression, sigma0: f64, prior: FreqPrior, max: f64) -> (f64, f64) {
    let (freq, freq_var) = if line.fitted {
        let fit_var = sigma0 * sigma0 / line.sxx;
        let precision = 1.0 / fit_var + 1.0 / prior.var;
        (
            (line.slope / fit_var + prior.mean / prior.var) / precision,
            1.0 / precision,
        )
    } else {
        (prior.mean, prior.var)
    };
    let freq = if freq.is_finite() {
        freq.clamp(-max, max)
    } else {
        0.0
    };
    (freq, freq_var)
}

/// Pieces of the window the hard frequency interval is built from.
const HULL_SLICES: usize = 8;

/// Hard interval of the relay's frequency over the window. The offset at a
/// sample lies in [offset - delay/2 - slack, offset + delay/2 + slack], so
/// the mean frequency between two samples lies in a computable interval;
/// frequency wander moves the instantaneous value from any such mean by at
/// most `wander_rate * sqrt(span)`. Uses the lowest-delay sample of each of
/// a few time slices (the tight pairs are far apart and low-delay).
/// Returns the interval and whether the pairs contradicted each other.
fn freq_interval(
    window: &[Sample],
    ref_relay_ns: u64,
    prior: FreqPrior,
    config: &EstimatorConfig,
) -> (f64, f64, bool) {
    let oldest = window.iter().map(|s| s.relay_mid_ns).min().unwrap_or(0);
    let span = ref_relay_ns.saturating_sub(oldest);
    let slice = (span / HULL_SLICES as u64).max(1);
    let mut best: [Option<Sample>; HULL_SLICES + 1] = [None; HULL_SLICES + 1];
    for s in window {
        let index = (((s.relay_mid_ns - oldest) / slice) as usize).min(HULL_SLICES);
        if best[index].is_none_or(|b| s.delay_ns < b.delay_ns) {
            best[index] = Some(*s);
        }
    }
    let picks: Vec<Sample> = best.iter().flatten().copied().collect();
    let slack = config.timestamp_slack_ns as f64;
    let mut lo = f64::NEG_INFINITY;
    let mut hi = f64::INFINITY;
    for (i, a) in picks.iter().enumerate() {
        for b in &picks[i + 1..] {
            let dx = (b.relay_mid_ns as i128 - a.relay_mid_ns as i128) as f64;
            if dx <= 0.0 {
                continue;
            }
            let dy = (b.offset_ns as i128 - a.offset_ns as i128) as f64;
            let width = (a.delay_ns + b.delay_ns) as f64 / 2.0 + 2.0 * slack;
            lo = lo.max((dy - width) / dx);
            hi = hi.min((dy + width) / dx);
        }
    }
    let wander = wander_rate(config) * (span as f64 * 1e-9).sqrt();
    let contradiction = lo - wander > hi + wander;
    let (lo, hi) = if contradiction {
        // The clock left the model (e.g. a slew); stay wide.
        (hi, lo)
    } else {
        (lo, hi)
    };
    let lo = (lo - wander).max(prior.lo);
    let hi = (hi + wander).min(prior.hi);
    if lo > hi {
        // The window disagrees with the prior: trust neither alone.
        (lo.min(prior.lo), hi.max(prior.hi), true)
    } else {
        (lo, hi, contradiction)
    }
}
