//! Relay clock model, relative to the host clock (host time is the truth):
//! relay BOOTTIME(h) = h + theta(h), where theta has an initial offset, a
//! constant frequency, a random-walk frequency (wander), relay NTP slew
//! episodes, and suspends (the relay sleeps; on resume BOOTTIME is injected
//! with an error, so theta steps by it, and BOOTTIME-MONOTONIC jumps).

use super::rng::Rng;

const NS: f64 = 1e9;

/// A relay NTP slew: the relay clock runs `ppm` faster for a while.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slew {
    pub at_s: f64,
    pub secs: f64,
    pub ppm: f64,
}

/// An unannounced relay clock step: from `at_s` (host time) on, the relay
/// clock reads `ns` more (BOOTTIME-MONOTONIC does not change).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub at_s: f64,
    pub ns: f64,
}

/// A relay suspend: asleep for `secs` from `at_s` (host time).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Suspend {
    pub at_s: f64,
    pub secs: f64,
    /// Largest |error| of the injected sleep time (s); drawn uniformly.
    pub inject_error_s: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ClockModel {
    pub offset_s: f64,
    pub ppm: f64,
    /// Frequency random-walk intensity A (s^-1): variance A per second.
    pub wander: f64,
    pub slews: Vec<Slew>,
    pub suspends: Vec<Suspend>,
    pub steps: Vec<Step>,
    /// Sinusoidal frequency wander (temperature): amplitude (ppm) and
    /// period (s); 0 ppm for none.
    pub sine_ppm: f64,
    pub sine_period_s: f64,
    /// Timestamp read error, uniform in +-this (ns).
    pub read_noise_ns: f64,
}

impl Default for ClockModel {
    fn default() -> Self {
        Self {
            offset_s: 0.25,
            ppm: 0.0,
            wander: 1e-16,
            slews: Vec::new(),
            suspends: Vec::new(),
            steps: Vec::new(),
            sine_ppm: 0.0,
            sine_period_s: 60.0,
            read_noise_ns: 100.0,
        }
    }
}

/// One realisation of a [`ClockModel`] over [0, secs] of host time.
#[derive(Clone, Debug)]
pub struct RelayClock {
    model: ClockModel,
    /// theta at each whole second (ns), frequency constant in between.
    grid: Vec<f64>,
    /// (resume host time s, injected error ns, BOOTTIME-MONOTONIC after).
    resumes: Vec<(f64, f64, i64)>,
}

/// BOOTTIME-MONOTONIC of the relay before any suspend (ns).
const BOOT_SUSPENDED_NS: i64 = 3_000_000_000;

impl RelayClock {
    pub fn new(model: &ClockModel, secs: f64, rng: &mut Rng) -> Self {
        let n = secs.ceil() as usize + 2;
        let mut grid = Vec::with_capacity(n);
        let mut theta = model.offset_s * NS;
        let mut wander = 0.0;
        for i in 0..n {
            grid.push(theta);
            let t = i as f64;
            let slew: f64 = model
                .slews
                .iter()
                .map(|s| overlap(t, t + 1.0, s.at_s, s.at_s + s.secs) * s.ppm)
                .sum();
            theta += (model.ppm * 1e-6 + wander) * NS + slew * 1e-6 * NS;
            wander += rng.normal() * model.wander.max(0.0).sqrt();
        }
        let mut bmm = BOOT_SUSPENDED_NS;
        let mut resumes = Vec::new();
        let mut steps = 0.0;
        for s in &model.suspends {
            let error = rng.uniform(-s.inject_error_s, s.inject_error_s) * NS;
            steps += error;
            bmm += ((s.secs * NS) + error) as i64;
            resumes.push((s.at_s + s.secs, steps, bmm));
        }
        Self {
            model: model.clone(),
            grid,
            resumes,
        }
    }

    /// Relay minus host at host time `h_s` (ns).
    pub fn theta(&self, h_s: f64) -> f64 {
        let i = (h_s.max(0.0).floor() as usize).min(self.grid.len() - 2);
        let frac = h_s - i as f64;
        let base = self.grid[i] + (self.grid[i + 1] - self.grid[i]) * frac;
        let step = self
            .resumes
            .iter()
            .rev()
            .find(|r| h_s >= r.0)
            .map_or(0.0, |r| r.1);
        let unannounced: f64 = self
            .model
            .steps
            .iter()
            .filter(|s| h_s >= s.at_s)
            .map(|s| s.ns)
            .sum();
        base + step + unannounced + self.sine(h_s)
    }

    /// Offset from the sinusoidal wander (ns): the integral of
    /// `sine_ppm * sin(2 pi h / period)`.
    fn sine(&self, h_s: f64) -> f64 {
        if self.model.sine_ppm == 0.0 {
            return 0.0;
        }
        let period = self.model.sine_period_s.max(1e-3);
        let w = std::f64::consts::TAU / period;
        self.model.sine_ppm * 1e-6 * (1.0 - (w * h_s).cos()) / w * NS
    }

    /// Host times (s) at which the relay clock changes without announcing
    /// it (steps and the start of slews).
    pub fn unannounced_changes(&self) -> impl Iterator<Item = f64> + '_ {
        let steps = self.model.steps.iter().map(|s| s.at_s);
        steps.chain(self.model.slews.iter().map(|s| s.at_s))
    }

    /// Relay BOOTTIME-MONOTONIC at host time `h_s` (ns).
    pub fn boottime_minus_monotonic(&self, h_s: f64) -> i64 {
        self.resumes
            .iter()
            .rev()
            .find(|r| h_s >= r.0)
            .map_or(BOOT_SUSPENDED_NS, |r| r.2)
    }

    /// True while the relay sleeps.
    pub fn asleep(&self, h_s: f64) -> bool {
        self.model
            .suspends
            .iter()
            .any(|s| h_s >= s.at_s && h_s < s.at_s + s.secs)
    }

    /// Resume times (host s).
    pub fn resumes(&self) -> impl Iterator<Item = f64> + '_ {
        self.resumes.iter().map(|r| r.0)
    }

    /// Relay BOOTTIME at host time `h_s`, exact (ns).
    pub fn exact(&self, h_s: f64) -> f64 {
        host_ns(h_s) + self.theta(h_s)
    }

    /// Relay BOOTTIME read at host time `h_s`, with read noise (ns).
    pub fn read(&self, h_s: f64, rng: &mut Rng) -> u64 {
        let noise = self.model.read_noise_ns;
        (self.exact(h_s) + rng.uniform(-noise, noise)).round() as u64
    }

    /// Host BOOTTIME read at host time `h_s`, with read noise (ns).
    pub fn read_host(&self, h_s: f64, rng: &mut Rng) -> u64 {
        let noise = self.model.read_noise_ns;
        (host_ns(h_s) + rng.uniform(-noise, noise)).round() as u64
    }

    /// Frequency (relay minus host rate) at host time `h_s`, from the grid.
    pub fn freq(&self, h_s: f64) -> f64 {
        let i = (h_s.max(0.0).floor() as usize).min(self.grid.len() - 2);
        let period = self.model.sine_period_s.max(1e-3);
        let sine = self.model.sine_ppm * 1e-6 * (std::f64::consts::TAU * h_s / period).sin();
        (self.grid[i + 1] - self.grid[i]) / NS + sine
    }
}

/// Host BOOTTIME at simulation start (ns): far from 0 like a real uptime.
pub const HOST_START_NS: f64 = 1_000.0 * NS;

/// Host BOOTTIME at host time `h_s` (s since simulation start), exact (ns).
pub fn host_ns(h_s: f64) -> f64 {
    HOST_START_NS + h_s * NS
}

fn overlap(a0: f64, a1: f64, b0: f64, b1: f64) -> f64 {
    (a1.min(b1) - a0.max(b0)).max(0.0)
}
