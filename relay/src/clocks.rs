//! The relay's clocks. Every clock read goes through [`RelayClock`] so tests
//! and the demo can inject a skewed clock; probes, snapshots and synthetic
//! packets all read the same one.

use std::sync::Arc;

use nix::time::{ClockId, clock_gettime};

/// The four clocks a relay snapshots, read together (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockReading {
    pub boottime: u64,
    pub monotonic: u64,
    pub realtime: u64,
    pub monotonic_raw: u64,
}

impl ClockReading {
    /// BOOTTIME minus MONOTONIC: grows by the length of every suspend.
    pub fn suspend_offset(&self) -> i64 {
        self.boottime as i64 - self.monotonic as i64
    }
}

pub trait RelayClock: Send + Sync + 'static {
    /// All four clocks, read back to back.
    fn now(&self) -> ClockReading;

    /// BOOTTIME alone (the probe path: one read, no more).
    fn boottime(&self) -> u64 {
        self.now().boottime
    }

    /// Ground-truth host BOOTTIME for a `boottime` value this clock
    /// returned: what the daemon's BOOTTIME read at the same instant.
    fn truth_host_boottime(&self, boottime: u64) -> u64;
}

pub type SharedClock = Arc<dyn RelayClock>;

fn read(id: ClockId) -> u64 {
    // clock_gettime cannot fail for these ids on Linux; 0 keeps it total.
    clock_gettime(id).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// The kernel's clocks. In a time namespace BOOTTIME and MONOTONIC are
/// shifted by the namespace offsets; the truth subtracts them.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock {
    /// This process's time-namespace BOOTTIME offset (ns), from
    /// /proc/self/timens_offsets (0 outside a time namespace).
    pub timens_boottime_offset: i64,
}

impl SystemClock {
    pub fn new() -> Self {
        let offsets = std::fs::read_to_string("/proc/self/timens_offsets").unwrap_or_default();
        Self {
            timens_boottime_offset: parse_timens_offset(&offsets, "boottime").unwrap_or(0),
        }
    }
}

/// Parses one line of /proc/PID/timens_offsets ("boottime <secs> <nanos>").
pub fn parse_timens_offset(text: &str, clock: &str) -> Option<i64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let name = words.next()?;
        // The kernel prints names, older kernels the numeric clock id.
        let matches = name == clock
            || (clock == "boottime" && name == "7")
            || (clock == "monotonic" && name == "1");
        if !matches {
            return None;
        }
        let secs: i64 = words.next()?.parse().ok()?;
        let nanos: i64 = words.next()?.parse().ok()?;
        Some(secs * 1_000_000_000 + nanos)
    })
}

impl RelayClock for SystemClock {
    fn now(&self) -> ClockReading {
        ClockReading {
            boottime: read(ClockId::CLOCK_BOOTTIME),
            monotonic: read(ClockId::CLOCK_MONOTONIC),
            realtime: read(ClockId::CLOCK_REALTIME),
            monotonic_raw: read(ClockId::CLOCK_MONOTONIC_RAW),
        }
    }

    fn boottime(&self) -> u64 {
        read(ClockId::CLOCK_BOOTTIME)
    }

    fn truth_host_boottime(&self, boottime: u64) -> u64 {
        (boottime as i64 - self.timens_boottime_offset) as u64
    }
}

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

impl RelayClock for SimulatedClock {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_timens_offsets() {
        let text = "monotonic           5         0\nboottime         1000       250\n";
        assert_eq!(
            parse_timens_offset(text, "boottime"),
            Some(1_000_000_000_250)
        );
        assert_eq!(parse_timens_offset(text, "monotonic"), Some(5_000_000_000));
        assert_eq!(parse_timens_offset("", "boottime"), None);
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
