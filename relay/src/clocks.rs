//! The relay's clocks. Every clock read goes through [`Clock`] so tests
//! and the demo can inject a skewed clock; probes, snapshots and synthetic
//! packets all read the same one.

use std::sync::Arc;

pub use tracesync_common::clock::{Clock, ClockReading, SystemClock};

pub type SharedClock = Arc<dyn Clock>;

/// A test/demo clock: every clock reads `raw + offset + (raw - origin) * ppm`,
/// so a relay on the host can pose as a machine with its own offset and
/// drift while the truth stays exact.
#[derive(Clone, Copy, Debug)]
pub struct SimulatedClock {
    pub inner: SystemClock,
    pub offset_ns: i64,
    pub drift_ppm: f64,
    /// Raw BOOTTIME at which the drift term is zero.
    pub origin_ns: u64,
}

impl SimulatedClock {
    pub fn new(offset_ns: i64, drift_ppm: f64) -> Self {
        let inner = SystemClock::new();
        Self {
            inner,
            offset_ns,
            drift_ppm,
            origin_ns: inner.boottime(),
        }
    }

    fn skew(&self, raw_boottime: u64) -> i64 {
        let elapsed = raw_boottime as i64 - self.origin_ns as i64;
        self.offset_ns + (elapsed as f64 * self.drift_ppm * 1e-6) as i64
    }

    fn apply(value: u64, skew: i64) -> u64 {
        (value as i64).saturating_add(skew).max(0) as u64
    }
}

impl Clock for SimulatedClock {
    fn now(&self) -> ClockReading {
        let raw = self.inner.now();
        let skew = self.skew(raw.boottime);
        ClockReading {
            boottime: Self::apply(raw.boottime, skew),
            monotonic: Self::apply(raw.monotonic, skew),
            realtime: Self::apply(raw.realtime, skew),
            monotonic_raw: Self::apply(raw.monotonic_raw, skew),
        }
    }

    fn boottime(&self) -> u64 {
        let raw = self.inner.boottime();
        Self::apply(raw, self.skew(raw))
    }

    fn truth_host_boottime(&self, boottime: u64) -> u64 {
        // Invert skew(): reported = raw + o + (raw - origin) * k.
        let k = self.drift_ppm * 1e-6;
        let raw = (boottime as f64 - self.offset_ns as f64 + self.origin_ns as f64 * k) / (1.0 + k);
        self.inner.truth_host_boottime(raw.round() as u64)
    }
}

/// Test-only: how a [`ScheduledClock`] departs from a constant rate, as a
/// function of relay time since start (docs/clock-sync-accuracy.md:
/// `reported = raw·(1+ρ) + θ0 + Σsteps + wander(t)`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClockSchedule {
    /// Sinusoidal frequency wander: amplitude (ppm) and period (s).
    pub wander: Option<(f64, f64)>,
    /// Steps: at this many seconds after start, every clock jumps by this
    /// many ns (negative: back).
    pub steps: Vec<(f64, i64)>,
    /// Slews, as an NTP daemon makes them: from this many seconds after
    /// start, for this many seconds, every clock runs this many ppm fast
    /// (negative: slow).
    pub slews: Vec<(f64, f64, f64)>,
}

impl ClockSchedule {
    pub fn is_empty(&self) -> bool {
        self.wander.is_none() && self.steps.is_empty() && self.slews.is_empty()
    }

    /// The schedule's phase (ns) `elapsed_ns` after start.
    pub fn phase_ns(&self, elapsed_ns: i64) -> f64 {
        let mut phase = self.smooth_phase_ns(elapsed_ns);
        for &(at_s, ns) in &self.steps {
            if elapsed_ns as f64 >= at_s * 1e9 {
                phase += ns as f64;
            }
        }
        phase
    }

    /// The continuous part of [`Self::phase_ns`]: wander and slews.
    fn smooth_phase_ns(&self, elapsed_ns: i64) -> f64 {
        let mut phase = 0.0;
        if let Some((ppm, period_s)) = self.wander
            && period_s > 0.0
        {
            // Frequency ppm·sin(2πt/P) integrates to ppm·P/2π·(1 - cos(2πt/P)).
            let period_ns = period_s * 1e9;
            let w = std::f64::consts::TAU / period_ns;
            phase += ppm * 1e-6 / w * (1.0 - (w * elapsed_ns as f64).cos());
        }
        for &(at_s, secs, ppm) in &self.slews {
            let slewed_ns = (elapsed_ns as f64 - at_s * 1e9).clamp(0.0, secs * 1e9);
            phase += ppm * 1e-6 * slewed_ns;
        }
        phase
    }

    /// Parses `PPM:PERIOD_S` (the `--clock-wander` flag).
    pub fn parse_wander(text: &str) -> Result<(f64, f64), String> {
        let (a, p) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: give PPM:PERIOD_S, e.g. 2:60"))?;
        let a: f64 = a.parse().map_err(|e| format!("{a:?}: {e}"))?;
        let p: f64 = p.parse().map_err(|e| format!("{p:?}: {e}"))?;
        if !(a.is_finite() && a.abs() <= 10_000.0 && p.is_finite() && p > 0.0) {
            return Err(format!("{text:?}: want |PPM| <= 10000 and PERIOD_S > 0"));
        }
        Ok((a, p))
    }

    /// Parses `AT_S:SECS:PPM` (the `--clock-slew` flag).
    pub fn parse_slew(text: &str) -> Result<(f64, f64, f64), String> {
        let bad = || format!("{text:?}: give AT_S:SECS:PPM, e.g. 20:2:500");
        let mut parts = text.split(':');
        let (Some(at), Some(secs), Some(ppm), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{v:?}: {e}"));
        let (at, secs, ppm) = (number(at)?, number(secs)?, number(ppm)?);
        let valid = at.is_finite()
            && at >= 0.0
            && secs.is_finite()
            && secs > 0.0
            && ppm.is_finite()
            && ppm.abs() <= 100_000.0;
        if !valid {
            return Err(format!(
                "{text:?}: want AT_S >= 0, SECS > 0 and |PPM| <= 100000"
            ));
        }
        Ok((at, secs, ppm))
    }

    /// Parses `AT_S:NS` (the `--clock-step` flag).
    pub fn parse_step(text: &str) -> Result<(f64, i64), String> {
        let (at, ns) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: give AT_S:NS, e.g. 20:500000"))?;
        let at: f64 = at.parse().map_err(|e| format!("{at:?}: {e}"))?;
        let ns: i64 = ns.parse().map_err(|e| format!("{ns:?}: {e}"))?;
        if !(at.is_finite() && at >= 0.0) {
            return Err(format!("{text:?}: want AT_S >= 0"));
        }
        Ok((at, ns))
    }
}

/// Test-only: a [`SimulatedClock`] (offset, constant drift) plus a
/// [`ClockSchedule`] of wander and steps, applied to every clock alike (so
/// BOOTTIME - MONOTONIC does not move: a step is a clock step, not a
/// suspend). The truth stays exact: it inverts the whole skew.
#[derive(Clone, Debug)]
pub struct ScheduledClock {
    pub base: SimulatedClock,
    pub schedule: ClockSchedule,
}

impl ScheduledClock {
    pub fn new(offset_ns: i64, drift_ppm: f64, schedule: ClockSchedule) -> Self {
        Self {
            base: SimulatedClock::new(offset_ns, drift_ppm),
            schedule,
        }
    }

    fn skew(&self, raw_boottime: u64) -> i64 {
        let elapsed = raw_boottime as i64 - self.base.origin_ns as i64;
        self.base.skew(raw_boottime) + self.schedule.phase_ns(elapsed).round() as i64
    }
}

impl Clock for ScheduledClock {
    fn now(&self) -> ClockReading {
        let raw = self.base.inner.now();
        let skew = self.skew(raw.boottime);
        ClockReading {
            boottime: SimulatedClock::apply(raw.boottime, skew),
            monotonic: SimulatedClock::apply(raw.monotonic, skew),
            realtime: SimulatedClock::apply(raw.realtime, skew),
            monotonic_raw: SimulatedClock::apply(raw.monotonic_raw, skew),
        }
    }

    fn boottime(&self) -> u64 {
        let raw = self.base.inner.boottime();
        SimulatedClock::apply(raw, self.skew(raw))
    }

    fn truth_host_boottime(&self, boottime: u64) -> u64 {
        // reported = raw + smooth(raw) + steps(raw). Between two steps the
        // skew changes slowly (ppm), so fixed-point rounds find raw there;
        // each stretch is solved and the solution inside its own stretch is
        // taken (within |step| after a step back two are: the later wins).
        let origin = self.base.origin_ns as i64;
        let smooth = |raw: i64| {
            self.base.skew(raw.max(0) as u64) as f64 + self.schedule.smooth_phase_ns(raw - origin)
        };
        let mut steps = self.schedule.steps.clone();
        steps.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut found = None;
        // A value inside the gap a forward step jumps over was never read:
        // the clock passed it at the step's instant, which is its truth.
        let mut jumped_over = None;
        let mut previous_beyond_its_end = false;
        let mut sum = 0i64;
        for k in 0..=steps.len() {
            if k > 0 {
                sum += steps[k - 1].1;
            }
            let from = if k == 0 {
                i64::MIN
            } else {
                origin + (steps[k - 1].0 * 1e9).ceil() as i64
            };
            let to = steps
                .get(k)
                .map_or(i64::MAX, |s| origin + (s.0 * 1e9).ceil() as i64);
            let mut raw = boottime as i64 - self.base.offset_ns - sum;
            for _ in 0..6 {
                raw = boottime as i64 - (smooth(raw) + sum as f64).round() as i64;
            }
            if (from..to).contains(&raw) {
                found = Some(raw);
            }
            if k > 0 && previous_beyond_its_end && raw < from {
                jumped_over = Some(from);
            }
            previous_beyond_its_end = raw >= to;
        }
        let raw = found.or(jumped_over).unwrap_or_else(|| {
            boottime as i64 - self.skew((boottime as i64 - self.base.offset_ns).max(0) as u64)
        });
        self.base.inner.truth_host_boottime(raw.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_truth_inverts_wander_steps_and_slews() {
        let clock = ScheduledClock {
            base: SimulatedClock {
                inner: SystemClock::default(),
                offset_ns: 3_700_000_000,
                drift_ppm: 50.0,
                origin_ns: 1_000_000_000,
            },
            schedule: ClockSchedule {
                wander: Some((5.0, 60.0)),
                steps: vec![(20.0, 500_000), (40.0, -200_000)],
                slews: vec![(60.0, 2.0, 500.0), (80.0, 4.0, -500.0)],
            },
        };
        let mut last = 0;
        for s in 0..120u64 {
            for frac in [0u64, 1_000, 250_000_000, 999_999_999] {
                let raw = 1_000_000_000 + s * 1_000_000_000 + frac;
                let reported = SimulatedClock::apply(raw, clock.skew(raw));
                let truth = clock.truth_host_boottime(reported);
                // Within 200 us of the step back a reading is ambiguous.
                let ambiguous = (s == 40 && frac < 300_000) || (s == 39 && frac > 999_700_000);
                if !ambiguous {
                    assert!((truth as i64 - raw as i64).abs() <= 1, "{raw} -> {truth}");
                }
                last = last.max(truth);
            }
        }
        // Values the step forward jumped over map to the step's instant.
        let step_raw = 1_000_000_000 + 20_000_000_000u64;
        let just_before = SimulatedClock::apply(step_raw - 1, clock.skew(step_raw - 1));
        for into_gap in [1_000u64, 250_000, 499_000] {
            let truth = clock.truth_host_boottime(just_before + into_gap);
            assert!(
                (truth as i64 - step_raw as i64).abs() <= 1,
                "{into_gap} ns into the gap -> {truth}"
            );
        }
        // The step forward shows at 20 s, the wander is bounded.
        let at = |s: f64| clock.schedule.phase_ns((s * 1e9) as i64);
        assert!((at(20.0) - at(19.999_999) - 500_000.0).abs() < 10.0);
        let wander_max = 5e-6 * 60e9 / std::f64::consts::PI;
        assert!(
            (at(30.0) - 500_000.0 - wander_max).abs() < 1.0,
            "{}",
            at(30.0)
        );
        assert!(last > 0);
    }

    #[test]
    fn a_slew_moves_the_phase_at_its_rate_for_its_length() {
        let schedule = ClockSchedule {
            slews: vec![(60.0, 2.0, 500.0), (80.0, 4.0, -500.0)],
            ..ClockSchedule::default()
        };
        let at = |s: f64| schedule.phase_ns((s * 1e9) as i64);
        for (s, want) in [
            (59.0, 0.0),
            (61.0, 500_000.0),
            (62.0, 1_000_000.0),
            (79.0, 1_000_000.0),
            (82.0, 0.0),
            (90.0, -1_000_000.0),
        ] {
            assert!((at(s) - want).abs() < 1e-3, "{s} s: {}", at(s));
        }
    }

    #[test]
    fn schedule_flags_parse() {
        assert_eq!(ClockSchedule::parse_wander("2:60"), Ok((2.0, 60.0)));
        assert!(ClockSchedule::parse_wander("2").is_err());
        assert!(ClockSchedule::parse_wander("2:0").is_err());
        assert_eq!(ClockSchedule::parse_step("20:-500"), Ok((20.0, -500)));
        assert_eq!(
            ClockSchedule::parse_slew("20:2:-500"),
            Ok((20.0, 2.0, -500.0))
        );
        assert!(ClockSchedule::parse_slew("20:0:500").is_err());
        assert!(ClockSchedule::parse_slew("20:2").is_err());
        assert!(ClockSchedule::parse_slew("20:2:500:1").is_err());
        assert!(ClockSchedule::parse_step("-1:5").is_err());
        assert!(ClockSchedule::default().is_empty());
    }

    #[test]
    fn realtime_pair_reads_the_kernel_realtime_and_the_simulated_boottime() {
        let clock = SimulatedClock {
            inner: SystemClock::default(),
            offset_ns: 3_700_000_000_000,
            drift_ppm: 50.0,
            origin_ns: 0,
        };
        let before = tracesync_common::clock::realtime_ns();
        let pair = clock.realtime_pair();
        let after = tracesync_common::clock::realtime_ns();
        assert!((before..=after).contains(&pair.realtime_ns));
        // The stamping clock is the simulated one (3700 s ahead), not raw.
        let raw = tracesync_common::clock::boottime_ns();
        assert!(pair.clock_ns > raw + 3_600_000_000_000);
    }

    #[test]
    fn simulated_truth_inverts_the_skew() {
        let clock = SimulatedClock {
            inner: SystemClock::default(),
            offset_ns: 3_700_000_000,
            drift_ppm: 50.0,
            origin_ns: 1_000_000_000,
        };
        for raw in [1_000_000_000u64, 61_000_000_000, 3_601_000_000_000] {
            let reported = SimulatedClock::apply(raw, clock.skew(raw));
            let truth = clock.truth_host_boottime(reported);
            assert!((truth as i64 - raw as i64).abs() <= 1, "{raw} -> {truth}");
        }
    }
}
