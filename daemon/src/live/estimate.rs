//! The relay-to-host clock mapping the live core consumes.
//!
//! Stand-in for the sync module's `SyncEstimate` (same fields and meaning)
//! until both branches meet; the core only needs [`SyncEstimate::to_host`]
//! and the error figures for status and jsonl.

use serde::{Deserialize, Serialize};

/// A relay's BOOTTIME mapped onto host BOOTTIME: `offset_ns` (relay minus
/// host) at relay time `ref_relay_ns`, changing by `freq_ppm` ppm of relay
/// time away from it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyncEstimate {
    /// Changes when the relay's clock restarts (reboot, suspend): estimates
    /// of two epochs are never fitted together.
    pub epoch: u64,
    pub ref_relay_ns: u64,
    /// Relay minus host at `ref_relay_ns`.
    pub offset_ns: i64,
    /// Rate of change of the offset, ppm of relay time.
    pub freq_ppm: f64,
    /// Hard bound of the mapping's error (ns).
    pub error_bound_ns: u64,
    pub sigma_ns: u64,
    /// Round-trip time of the best recent probe.
    pub rtt_ns: u64,
    pub samples: u32,
}

impl SyncEstimate {
    /// Host BOOTTIME (ns) at relay BOOTTIME `relay_boottime_ns`.
    pub fn to_host(&self, relay_boottime_ns: u64) -> i64 {
        let since_ref = i128::from(relay_boottime_ns) - i128::from(self.ref_relay_ns);
        // f64 is exact enough: 1 ppm over a day is 86 ms, far inside 2^53 ns.
        let drift = (since_ref as f64 * self.freq_ppm / 1e6).round() as i128;
        let host = i128::from(relay_boottime_ns) - i128::from(self.offset_ns) - drift;
        host.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Relay minus host (ns) at relay BOOTTIME `relay_boottime_ns`.
    pub fn offset_at(&self, relay_boottime_ns: u64) -> i64 {
        let diff = i128::from(relay_boottime_ns) - i128::from(self.to_host(relay_boottime_ns));
        diff.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(offset_ns: i64, freq_ppm: f64) -> SyncEstimate {
        SyncEstimate {
            epoch: 1,
            ref_relay_ns: 1_000_000_000,
            offset_ns,
            freq_ppm,
            error_bound_ns: 0,
            sigma_ns: 0,
            rtt_ns: 0,
            samples: 1,
        }
    }

    #[test]
    fn offset_and_drift_apply() {
        let e = estimate(5_000, 0.0);
        assert_eq!(e.to_host(1_000_000_000), 999_995_000);
        let e = estimate(5_000, 100.0);
        // 1 s after ref the offset grew by 100 us.
        assert_eq!(e.to_host(2_000_000_000), 2_000_000_000 - 5_000 - 100_000);
        assert_eq!(e.offset_at(2_000_000_000), 105_000);
        assert_eq!(e.offset_at(0), 5_000 - 100_000);
    }
}
