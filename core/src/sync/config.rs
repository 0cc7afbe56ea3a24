//! The prober's schedule and limits ([`ProberConfig`], the daemon's
//! `[sync]` section fills it) and how a relay is reached ([`Route`]).

use std::net::SocketAddr;

use crate::sync::EstimatorConfig;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProberConfig {
    /// Probes in a burst.
    pub burst_probes: u32,
    /// Spacing of a burst's probes (ns).
    pub burst_interval_ns: u64,
    /// Spacing of steady probes at start (ns).
    pub steady_interval_ns: u64,
    /// Fastest steady spacing (ns).
    pub min_interval_ns: u64,
    /// Slowest steady spacing (ns).
    pub max_interval_ns: u64,
    /// For this long after every burst, steady probes go out at the
    /// fastest spacing, `min_interval_ns` (ns; 0: never).
    pub warmup_ns: u64,
    /// Agreeing samples in a row before the steady spacing grows by 1/4.
    pub slow_after_agreeing: u32,
    /// A sample with delay at most this many times the estimate's smallest
    /// round trip counts as low delay for step detection.
    pub step_max_delay_factor: u64,
    /// A low-delay sample this many times farther from the estimate than
    /// the agreement tolerance (and at least `step_min_ns`) suggests a step.
    pub step_factor: u64,
    pub step_min_ns: u64,
    /// Frequency uncertainty assumed when extrapolating the estimate's bound
    /// to a sample's time (ppm).
    pub bound_growth_ppm: f64,
    /// Exchanges per scheduled steady probe (1 = no follow-ups).
    pub train_length: u32,
    /// A probe unanswered this long after its send is forgotten and
    /// counted as a timeout (ns).
    pub probe_timeout_ns: u64,
    /// Most probes awaiting a reply, over all sessions.
    pub max_outstanding: usize,
    pub estimator: EstimatorConfig,
}

impl Default for ProberConfig {
    fn default() -> Self {
        Self {
            burst_probes: 8,
            burst_interval_ns: 15_000_000,
            steady_interval_ns: 250_000_000,
            min_interval_ns: 100_000_000,
            // 4 Hz is also the slowest: over real sockets (scripts/sync-real.sh,
            // LAN profile) a 1 s ceiling left fewer low-delay samples and gave
            // a 34.5 us p99 with a 21.5 us bias; a 4 Hz floor gives 5.6 us.
            max_interval_ns: 250_000_000,
            warmup_ns: 60_000_000_000,
            slow_after_agreeing: 8,
            step_max_delay_factor: 2,
            step_factor: 8,
            step_min_ns: 50_000,
            bound_growth_ppm: 1.0,
            train_length: 2,
            // Far above any round trip worth a sample (a phone on a bad
            // link: ~1 s); before it existed, only max_outstanding forgot.
            probe_timeout_ns: 2_000_000_000,
            max_outstanding: 4096,
            estimator: EstimatorConfig::default(),
        }
    }
}

/// How a relay is reached: a UDP address, or a TCP probe connection the
/// edge numbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    Udp(SocketAddr),
    Tcp(u64),
}
