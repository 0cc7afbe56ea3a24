//! Error statistics and the markdown table.

use std::fmt::Write as _;

/// p50 / p99 / max of |error| (ns) over a set of events.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ErrorStats {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// Median signed error (ns): the bias.
    pub median_signed: f64,
    /// p99 of |error - median signed error| (ns).
    pub spread_p99: f64,
}

/// Value at quantile `q` of sorted values (linear interpolation).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = (sorted.len() - 1) as f64 * q;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl ErrorStats {
    pub fn of(signed: &[f64]) -> Self {
        if signed.is_empty() {
            return Self {
                p50: f64::NAN,
                p99: f64::NAN,
                max: f64::NAN,
                median_signed: f64::NAN,
                spread_p99: f64::NAN,
                ..Self::default()
            };
        }
        let mut sorted = signed.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median_signed = percentile(&sorted, 0.5);
        let mut abs: Vec<f64> = signed.iter().map(|e| e.abs()).collect();
        abs.sort_by(f64::total_cmp);
        let mut spread: Vec<f64> = signed.iter().map(|e| (e - median_signed).abs()).collect();
        spread.sort_by(f64::total_cmp);
        Self {
            count: signed.len(),
            p50: percentile(&abs, 0.5),
            p99: percentile(&abs, 0.99),
            max: abs[abs.len() - 1],
            median_signed,
            spread_p99: percentile(&spread, 0.99),
        }
    }
}

/// Everything one run of one scenario measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub secs: f64,
    /// Live (causal) mapping by our estimator, events after the warm-up.
    pub ours: ErrorStats,
    /// Naive: the last completed sample's offset.
    pub naive: ErrorStats,
    /// Perfetto-style: one constant, the mean of the last 5 offsets.
    pub perfetto: ErrorStats,
    /// Final: the closed run re-estimated from the samples on both sides
    /// of every event (`tracesync_core::sync::smoother`).
    pub refined: ErrorStats,
    /// Events the final mapping placed; of them inside its hard bound;
    /// of them between two segments (either side of a step).
    pub refined_mapped: usize,
    pub refined_covered: usize,
    pub refined_straddling: usize,
    /// Median and p99 of the final hard bound (ns).
    pub refined_bound_p50: f64,
    pub refined_bound_p99: f64,
    /// Events generated; mapped by us; mapped late (their epoch had no
    /// estimate yet); never mapped.
    pub events: usize,
    pub mapped: usize,
    pub deferred: usize,
    pub unmapped: usize,
    /// Events mapped with an estimate of another relay epoch.
    pub wrong_epoch: usize,
    /// Events (all, warm-up included) inside the hard bound.
    pub covered: usize,
    /// Events written before any sample taken after them (in their epoch)
    /// existed: an unannounced clock step just before one cannot be known
    /// yet. How many, and how many of those lie outside the bound.
    pub unprobed: usize,
    pub unprobed_outside: usize,
    /// Events whose arrival mapping a later sample showed wrong beyond the
    /// covering estimate's bound, written with that estimate's mapping.
    pub remapped: usize,
    /// Events within 3 sigma.
    pub within_3sigma: usize,
    /// Median hard bound (ns) and median |error| / bound.
    pub bound_p50: f64,
    /// Largest |error| / bound seen.
    pub worst_bound_ratio: f64,
    /// Seconds after start until |error| stays <= 2x the steady p99.
    pub convergence_s: f64,
    /// p99 of |error| 1-60 s after each resume (ns), if any.
    pub after_resume_p99: Option<f64>,
    /// Median and largest |frequency error| at samples from 60 s on (ppm).
    pub freq_err_ppm: (f64, f64),
    pub samples: usize,
    pub lost: usize,
    /// The prober's own estimator ended with the same estimate as the
    /// simulator's (both fed the same samples).
    pub prober_agrees: bool,
    /// The prober's bursts and suspected steps.
    pub bursts: u64,
    pub suspected_steps: u64,
    pub popped: u64,
    pub steps: u64,
    pub trimmed: u64,
    pub epochs: u64,
}

impl Report {
    pub fn coverage_pct(&self) -> f64 {
        if self.mapped == 0 {
            return f64::NAN;
        }
        100.0 * self.covered as f64 / self.mapped as f64
    }

    /// Share of the finally mapped events inside their final bound (%).
    pub fn refined_coverage_pct(&self) -> f64 {
        if self.refined_mapped == 0 {
            return f64::NAN;
        }
        100.0 * self.refined_covered as f64 / self.refined_mapped as f64
    }

    /// Coverage of the events a sample taken after them had checked by
    /// the time they were written (all but the unprobed ones).
    pub fn coverage_known_pct(&self) -> f64 {
        let known = self.mapped - self.unprobed;
        if known == 0 {
            return f64::NAN;
        }
        100.0 * (self.covered + self.unprobed_outside - self.unprobed) as f64 / known as f64
    }
}

fn us(ns: f64) -> String {
    let v = ns / 1_000.0;
    if v.is_nan() {
        "-".into()
    } else if v >= 1_000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn triple(s: &ErrorStats) -> String {
    format!("{} / {} / {}", us(s.p50), us(s.p99), us(s.max))
}

/// Markdown table, one row per report; errors in µs.
pub fn table(reports: &[Report]) -> String {
    let mut out = String::new();
    out.push_str(
        "| scenario | seed | naive last-sample | perfetto-style constant | ours live p50 / p99 / max \
         | final (two-sided) p50 / p99 / max | bias (median) | hard-bound coverage live / final \
         | bound p50 live / final | conv. | events (late, unmapped) | notes |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in reports {
        let mut notes = format!(
            "{} samples, lost {}, bursts {}, popped {}, steps {}, trimmed {}, epochs {}",
            r.samples, r.lost, r.bursts, r.popped, r.steps, r.trimmed, r.epochs
        );
        if r.unprobed > 0 {
            let _ = write!(
                notes,
                ", unprobed {} ({} outside; probed-event coverage {:.3}%)",
                r.unprobed,
                r.unprobed_outside,
                r.coverage_known_pct()
            );
        }
        if r.refined_straddling > 0 {
            let _ = write!(
                notes,
                ", straddling a step (final) {}",
                r.refined_straddling
            );
        }
        if r.refined_mapped != r.mapped {
            let _ = write!(notes, ", FINAL MAPPED {} of {}", r.refined_mapped, r.mapped);
        }
        if r.remapped > 0 {
            let _ = write!(notes, ", remapped {}", r.remapped);
        }
        if !r.prober_agrees {
            let _ = write!(notes, ", PROBER ESTIMATE DIFFERS");
        }
        if let Some(p99) = r.after_resume_p99 {
            let _ = write!(notes, ", 1-60 s after resume p99 {} µs", us(p99));
        }
        if r.wrong_epoch > 0 {
            let _ = write!(notes, ", WRONG EPOCH {}", r.wrong_epoch);
        }
        let _ = write!(
            notes,
            ", freq err p50 {:.3} max {:.3} ppm",
            r.freq_err_ppm.0, r.freq_err_ppm.1
        );
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.3}% / {:.3}% | {} / {} | {:.1} s | {} ({}, {}) | {} |",
            r.scenario,
            r.seed,
            triple(&r.naive),
            triple(&r.perfetto),
            triple(&r.ours),
            triple(&r.refined),
            us(r.ours.median_signed),
            r.coverage_pct(),
            r.refined_coverage_pct(),
            us(r.bound_p50),
            us(r.refined_bound_p50),
            r.convergence_s,
            r.events,
            r.deferred,
            r.unmapped,
            notes,
        );
    }
    out
}
