//! Clocks behind a trait, and the kernel's clocks read through it.
//!
//! Every clock read of the binaries' edges goes through [`Clock`] so tests
//! and the demo can inject a skewed clock (the relay's simulated clocks);
//! the daemon reads the host's clocks with [`SystemClock`] or the free
//! readers. Cores never read a clock: they take times as arguments.

use nix::time::{ClockId, clock_gettime};
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, MONOTONIC_RAW, REALTIME};

/// The four clocks a machine snapshots, read together (ns).
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

    /// (Perfetto builtin clock id, value) of each clock, for a
    /// ClockSnapshot packet.
    pub fn snapshot(&self) -> [(u32, u64); 4] {
        [
            (BOOTTIME, self.boottime),
            (MONOTONIC, self.monotonic),
            (REALTIME, self.realtime),
            (MONOTONIC_RAW, self.monotonic_raw),
        ]
    }
}

/// A read of the kernel's CLOCK_REALTIME and of the clock a side stamps
/// with (host BOOTTIME, a relay's BOOTTIME, or its simulated clock), taken
/// together: REALTIME is read before and after the stamping clock and
/// `realtime_ns` is the midpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockPair {
    pub realtime_ns: u64,
    pub clock_ns: u64,
}

impl ClockPair {
    /// `clock_ns - realtime_ns`: constant while neither clock steps.
    pub fn gap(&self) -> i128 {
        self.clock_ns as i128 - self.realtime_ns as i128
    }
}

/// A machine's clocks as one side of the sync protocol sees them.
pub trait Clock: Send + Sync + 'static {
    /// All four clocks, read back to back.
    fn now(&self) -> ClockReading;

    /// BOOTTIME alone (the probe path: one read, no more).
    fn boottime(&self) -> u64 {
        self.now().boottime
    }

    /// Ground-truth host BOOTTIME for a `boottime` value this clock
    /// returned: what the host's BOOTTIME read at the same instant (tests
    /// and the demo check alignment against it).
    fn truth_host_boottime(&self, boottime: u64) -> u64;

    /// The kernel's CLOCK_REALTIME (never shifted or simulated: the clock of
    /// kernel receive timestamps) read before and after [`Self::boottime`];
    /// `realtime_ns` is the midpoint. Maps kernel timestamps onto this
    /// clock ([`crate::rx_stamp::RxStampMapper`]). The tightest of up to 3
    /// tries (a preemption between the reads would skew the pair).
    fn realtime_pair(&self) -> ClockPair {
        let mut best: Option<(u64, ClockPair)> = None;
        for _ in 0..3 {
            let before = realtime_ns();
            let clock_ns = self.boottime();
            let after = realtime_ns();
            let width = after.saturating_sub(before);
            let pair = ClockPair {
                realtime_ns: before + width / 2,
                clock_ns,
            };
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((width, pair));
            }
            if width <= PAIR_READ_GOOD_NS {
                break;
            }
        }
        best.map(|(_, pair)| pair).unwrap_or_default()
    }
}

/// A paired read this tight is taken at once.
const PAIR_READ_GOOD_NS: u64 = 2_000;

fn read(id: ClockId) -> u64 {
    // clock_gettime cannot fail for these ids on Linux; 0 keeps it total.
    clock_gettime(id).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// This machine's BOOTTIME (ns): on the host, the merged trace's time.
pub fn boottime_ns() -> u64 {
    read(ClockId::CLOCK_BOOTTIME)
}

/// This machine's REALTIME (ns).
pub fn realtime_ns() -> u64 {
    read(ClockId::CLOCK_REALTIME)
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

impl Clock for SystemClock {
    fn now(&self) -> ClockReading {
        ClockReading {
            boottime: read(ClockId::CLOCK_BOOTTIME),
            monotonic: read(ClockId::CLOCK_MONOTONIC),
            realtime: read(ClockId::CLOCK_REALTIME),
            monotonic_raw: read(ClockId::CLOCK_MONOTONIC_RAW),
        }
    }

    fn boottime(&self) -> u64 {
        boottime_ns()
    }

    fn truth_host_boottime(&self, boottime: u64) -> u64 {
        (boottime as i64 - self.timens_boottime_offset) as u64
    }
}

/// Parses one line of /proc/PID/timens_offsets (`"boottime <secs> <nanos>"`).
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
    fn realtime_pair_brackets_boottime() {
        let clock = SystemClock::default();
        let before = realtime_ns();
        let pair = clock.realtime_pair();
        let after = realtime_ns();
        assert!((before..=after).contains(&pair.realtime_ns));
        assert!(pair.clock_ns > 0 && pair.clock_ns <= boottime_ns());
    }
}
