//! Clock sync, host side, sans-IO: host-initiated four-timestamp probes
//! (sent on the daemon's sync port by `daemon/src/sync/prober/mod.rs`), signed with
//! a per-session key, and the per-relay offset estimator.
//!
//! - [`estimator`]: samples in, a [`SyncEstimate`] (point mapping, sigma
//!   and a hard bound) out.
//! - [`covering`]: a packet's mapping checked against the estimate made
//!   right after the first sample taken after it.
//! - [`prober`]: probe scheduler and reply matcher ([`ProberCore`]).
//! - [`sessions`]: what the prober knows and reports of its sessions.
//! - [`smoother`]: a closed capture re-estimated from the samples on both
//!   sides of every timestamp.
//!
//! Timestamps: t1 = host BOOTTIME at probe send, t2 / t3 = relay BOOTTIME at
//! probe receive / reply send, t4 = host BOOTTIME at reply receive. Offsets
//! are relay minus host.

pub mod config;
pub mod corridor;
pub mod covering;
pub mod estimator;
pub mod prober;
pub mod sessions;
pub mod smoother;

use serde::{Deserialize, Serialize};

pub use config::{ProberConfig, Route};
pub use estimator::{Estimator, EstimatorConfig};
pub use prober::{PreparedProbe, ProbeDue, ProberCore};
pub use sessions::{ProberStats, Registration};

/// A relay BOOTTIME -> host BOOTTIME mapping for one clock epoch of a relay.
///
/// The hard bound at any relay time is [`SyncEstimate::bound_at`]; the
/// statistical one is [`SyncEstimate::sigma_at`]. A hand-built estimate
/// (`Default`) assumes 100 ppm of frequency uncertainty, so its bound still
/// grows with distance from the reference.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncEstimate {
    /// Counts the relay's clock epochs seen by this estimator (0 = first).
    /// A suspend (BOOTTIME-MONOTONIC jump) starts a new epoch.
    pub epoch: u64,
    /// Relay BOOTTIME at which `offset_ns` holds (ns).
    pub ref_relay_ns: u64,
    /// Relay minus host at `ref_relay_ns` (ns).
    pub offset_ns: i64,
    /// Relay clock rate minus host clock rate, in ppm of elapsed relay time.
    pub freq_ppm: f64,
    /// Bound on |estimated offset - true offset| at `ref_relay_ns` (ns),
    /// barring fixed path asymmetry beyond half the round trip.
    pub error_bound_ns: u64,
    /// Spread of the fitted samples around the fit (ns).
    pub sigma_ns: u64,
    /// Smallest round trip (delay) in the window (ns).
    pub rtt_ns: u64,
    /// Samples the fit used.
    pub samples: u32,
    /// Hard bound on |true - estimated frequency| near the reference (ppm):
    /// the bound grows by this much per unit of distance from it.
    pub freq_bound_ppm: f64,
    /// Frequency wander allowance beyond the fit window (ppm per sqrt(s)):
    /// adds (2/3) * w * |dt|^1.5 to the bound.
    pub wander_ppm_per_sqrt_s: f64,
    /// Standard deviation of the mapped offset at `ref_relay_ns` (ns).
    pub map_sigma_ns: u64,
    /// Standard deviation of `freq_ppm` (ppm).
    pub freq_sigma_ppm: f64,
    /// The relay's BOOTTIME minus MONOTONIC in this epoch (ns): a relay
    /// timestamp belongs to this estimate's epoch when its own value matches.
    pub boottime_minus_monotonic_ns: i64,
    /// Extra hard bound (ns) for relay times at or after
    /// `suspect_from_relay_ns`: a sample contradicted the estimate and a
    /// step is not yet confirmed or ruled out (0: none pending).
    pub suspect_extra_ns: u64,
    pub suspect_from_relay_ns: u64,
    /// Newest relay BOOTTIME (a sample's receive/reply midpoint) the
    /// estimator has checked a sample at: fitted, held out as an outlier or
    /// taken as a possible step (0: none). A packet at or before it can be
    /// mapped knowing whether the clock stepped before it
    /// ([`covering`]).
    pub covered_through_relay_ns: u64,
    /// The newest sample checked (None before one): its hard interval holds
    /// the truth at its time, whatever the clock did before it.
    pub checked: Option<CheckedSample>,
}

/// One probe sample's hard interval: at relay BOOTTIME `relay_ns` the
/// relay-minus-host offset lies within `offset_ns ± half_width_ns` (half
/// the delay plus the timestamp slack), barring path asymmetry beyond half
/// the round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckedSample {
    pub relay_ns: u64,
    pub offset_ns: i64,
    pub half_width_ns: u64,
}

impl Default for SyncEstimate {
    fn default() -> Self {
        Self {
            epoch: 0,
            ref_relay_ns: 0,
            offset_ns: 0,
            freq_ppm: 0.0,
            error_bound_ns: 0,
            sigma_ns: 0,
            rtt_ns: 0,
            samples: 0,
            freq_bound_ppm: DEFAULT_FREQ_BOUND_PPM,
            wander_ppm_per_sqrt_s: 0.0,
            map_sigma_ns: 0,
            freq_sigma_ppm: 0.0,
            boottime_minus_monotonic_ns: 0,
            suspect_extra_ns: 0,
            suspect_from_relay_ns: 0,
            covered_through_relay_ns: 0,
            checked: None,
        }
    }
}

/// Frequency uncertainty of an estimate nobody measured (crystal tolerance).
pub const DEFAULT_FREQ_BOUND_PPM: f64 = 100.0;

impl SyncEstimate {
    /// Relay minus host at relay BOOTTIME `relay_boottime_ns` (ns).
    pub fn offset_at(&self, relay_boottime_ns: u64) -> i64 {
        let elapsed = signed_distance(self.ref_relay_ns, relay_boottime_ns);
        // f64 -> i64 `as` saturates; the product is small for sane inputs.
        let drift = round_i64(self.freq_ppm * 1e-6 * elapsed);
        clamp_i64(self.offset_ns as i128 + drift as i128)
    }

    /// Host BOOTTIME for a relay BOOTTIME value (ns): relay - offset(relay).
    pub fn to_host(&self, relay_boottime_ns: u64) -> i64 {
        clamp_i64(self.host_i128(relay_boottime_ns))
    }

    /// [`Self::to_host`], or None where the host time is beyond i64
    /// (where `to_host` would saturate).
    pub fn checked_to_host(&self, relay_boottime_ns: u64) -> Option<i64> {
        i64::try_from(self.host_i128(relay_boottime_ns)).ok()
    }

    fn host_i128(&self, relay_boottime_ns: u64) -> i128 {
        relay_boottime_ns as i128 - self.offset_at(relay_boottime_ns) as i128
    }

    /// Hard bound on |mapped - true host time| at relay BOOTTIME
    /// `relay_boottime_ns` (ns): the bound at the reference, plus the
    /// frequency bound and the wander allowance carried over the distance,
    /// plus `suspect_extra_ns` from `suspect_from_relay_ns` on.
    /// Saturates at `u64::MAX`; NaN or negative inputs count as unbounded.
    pub fn bound_at(&self, relay_boottime_ns: u64) -> u64 {
        let distance_ns = relay_boottime_ns.abs_diff(self.ref_relay_ns) as f64;
        let seconds = distance_ns * 1e-9;
        let freq = self.freq_bound_ppm * 1e-6 * distance_ns;
        let wander = (2.0 / 3.0) * self.wander_ppm_per_sqrt_s * 1e3 * seconds * seconds.sqrt();
        let growth = freq + wander;
        if growth.is_nan() || growth < 0.0 {
            return u64::MAX;
        }
        let suspect = if relay_boottime_ns >= self.suspect_from_relay_ns {
            self.suspect_extra_ns
        } else {
            0
        };
        // `as` saturates; +1 rounds the f64 terms up.
        self.error_bound_ns
            .saturating_add(ceil_u64(growth).saturating_add(1))
            .saturating_add(suspect)
    }

    /// One standard deviation of the mapping at `relay_boottime_ns` (ns).
    pub fn sigma_at(&self, relay_boottime_ns: u64) -> u64 {
        let distance_ns = relay_boottime_ns.abs_diff(self.ref_relay_ns) as f64;
        let freq = self.freq_sigma_ppm * 1e-6 * distance_ns;
        let sigma = (self.map_sigma_ns as f64).hypot(freq);
        if sigma.is_nan() {
            u64::MAX
        } else {
            sigma.ceil() as u64
        }
    }
}

/// `x.round() as i64` without `round`: a software routine on the baseline
/// x86-64 target (no SSE4.1), twice per packet on the live path
/// ([`SyncEstimate::offset_at`]). The fraction `x - trunc(x)` is exact
/// (above 2^52 every f64 is whole); NaN gives 0 and the infinities
/// saturate, as `as` does.
fn round_i64(x: f64) -> i64 {
    let t = x as i64;
    let fraction = x - t as f64;
    if fraction >= 0.5 {
        t.saturating_add(1)
    } else if fraction <= -0.5 {
        t.saturating_sub(1)
    } else {
        t
    }
}

/// `x.ceil() as u64` for `x >= 0` (not NaN), without `ceil`: a software
/// routine on the baseline x86-64 target (no SSE4.1), twice per packet
/// on the live path ([`SyncEstimate::bound_at`]).
fn ceil_u64(x: f64) -> u64 {
    // Below 2^63 through i64: a conversion of one instruction each way,
    // where u64's takes a compare and two (the same values: truncation).
    if (0.0..I64_LIMIT).contains(&x) {
        let t = x as i64;
        return if (t as f64) < x {
            t as u64 + 1
        } else {
            t as u64
        };
    }
    // `as` truncates and saturates; above 2^53 every f64 is whole.
    let t = x as u64;
    if (t as f64) < x {
        t.saturating_add(1)
    } else {
        t
    }
}

/// 2^63: every f64 below it (and at least 0) truncates into an i64.
const I64_LIMIT: f64 = 9_223_372_036_854_775_808.0;

/// `to - from` (ns) as f64, without an i128 -> f64 conversion (a slow
/// software routine on the per-packet path).
pub(crate) fn signed_distance(from: u64, to: u64) -> f64 {
    // Both below 2^63 (relay times are): the difference fits an i64,
    // whose conversion is one instruction and rounds alike.
    if let (Ok(from), Ok(to)) = (i64::try_from(from), i64::try_from(to)) {
        return (to - from) as f64;
    }
    let d = to.abs_diff(from) as f64;
    if to >= from { d } else { -d }
}

fn clamp_i64(value: i128) -> i64 {
    value.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// One raw probe exchange, kept in the `.sync.jsonl` sidecar so a capture
/// can be re-estimated later.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeSample {
    pub machine_raw_id: u32,
    pub session_id: u64,
    /// Host BOOTTIME at probe send (ns).
    pub t1: u64,
    /// Relay BOOTTIME at probe receive (ns).
    pub t2: u64,
    /// Relay BOOTTIME at reply send (ns).
    pub t3: u64,
    /// Host BOOTTIME at reply receive (ns).
    pub t4: u64,
    /// The relay's BOOTTIME minus MONOTONIC at the reply (ns): a change is
    /// a suspend, which a re-estimate must not fit across. 0 in sidecars
    /// written before it was recorded.
    #[serde(default)]
    pub boottime_minus_monotonic_ns: i64,
}

/// What the prober tells the ingest loop after accepted replies.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncUpdate {
    /// The live core's slot of the relay (from `ProbeSessions::register`).
    pub slot: u32,
    pub session_id: u64,
    /// Latest estimate for the relay.
    pub estimate: SyncEstimate,
    /// Raw samples accepted since the previous update of this slot.
    pub samples: Vec<ProbeSample>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_i64_rounds_halves_away_from_zero() {
        for x in [
            0.49999999999999994,
            0.5,
            -0.5,
            2.5,
            -2.5,
            4503599627370497.0,
            -0.0,
        ] {
            assert_eq!(round_i64(x), x.round() as i64, "{x}");
        }
    }

    proptest::proptest! {
        #[test]
        fn round_i64_is_round(x in proptest::prop_oneof![
            -1e3..1e3f64,
            -1e19..1e19f64,
            proptest::strategy::Strategy::prop_map(i64::MIN..i64::MAX, |v| v as f64 + 0.5),
            proptest::num::f64::ANY,
        ]) {
            proptest::prop_assert_eq!(round_i64(x), x.round() as i64);
        }

        #[test]
        fn ceil_u64_is_ceil(x in proptest::prop_oneof![
            0.0..1e3f64,
            0.0..1e19f64,
            proptest::strategy::Strategy::prop_map(0u64..u64::MAX, |v| v as f64),
            proptest::num::f64::POSITIVE | proptest::num::f64::ZERO,
        ]) {
            proptest::prop_assert_eq!(ceil_u64(x), x.ceil() as u64);
        }

        /// The same f64 as the exact difference rounded once, either side
        /// of 2^63 and of each other.
        #[test]
        fn signed_distance_is_the_difference_rounded(
            from in proptest::prop_oneof![0u64..1 << 40, (1u64 << 63) - 8..(1 << 63) + 8, proptest::num::u64::ANY],
            to in proptest::prop_oneof![0u64..1 << 40, (1u64 << 63) - 8..(1 << 63) + 8, proptest::num::u64::ANY],
        ) {
            let exact = i128::from(to) - i128::from(from);
            let rounded = if exact < 0 {
                -(exact.unsigned_abs() as f64)
            } else {
                exact as u128 as f64
            };
            proptest::prop_assert_eq!(signed_distance(from, to), rounded);
        }
    }

    #[test]
    fn to_host_applies_offset_and_frequency() {
        let estimate = SyncEstimate {
            ref_relay_ns: 10_000_000_000,
            offset_ns: 5_000_000_000,
            freq_ppm: 30.0,
            ..SyncEstimate::default()
        };
        assert_eq!(estimate.to_host(10_000_000_000), 5_000_000_000);
        // One second later the relay has gained 30 µs more.
        assert_eq!(estimate.offset_at(11_000_000_000), 5_000_030_000);
        assert_eq!(estimate.to_host(11_000_000_000), 5_999_970_000);
        // Before the reference the drift term runs backwards.
        assert_eq!(estimate.offset_at(9_000_000_000), 4_999_970_000);
    }

    #[test]
    fn to_host_never_panics_at_extremes() {
        let estimate = SyncEstimate {
            ref_relay_ns: 0,
            offset_ns: i64::MIN,
            freq_ppm: f64::MAX,
            ..SyncEstimate::default()
        };
        let _ = estimate.to_host(u64::MAX);
        let nan = SyncEstimate {
            freq_ppm: f64::NAN,
            ..estimate
        };
        let _ = nan.to_host(u64::MAX);
    }

    #[test]
    fn probe_sample_round_trips_through_json() {
        let sample = ProbeSample {
            machine_raw_id: 7,
            session_id: u64::MAX,
            t1: 1,
            t2: 2,
            t3: 3,
            t4: 4,
            boottime_minus_monotonic_ns: -5,
        };
        let text = serde_json::to_string(&sample).unwrap();
        assert_eq!(serde_json::from_str::<ProbeSample>(&text).unwrap(), sample);
        // Sidecars written before the field was recorded still read.
        let old = r#"{"machine_raw_id":7,"session_id":1,"t1":1,"t2":2,"t3":3,"t4":4}"#;
        let old: ProbeSample = serde_json::from_str(old).unwrap();
        assert_eq!(old.boottime_minus_monotonic_ns, 0);
    }
}
