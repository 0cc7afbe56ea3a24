//! `[sync]` of the daemon config: the prober's schedule and the sync-point
//! threshold, range-checked while parsing (one line naming the key).

use serde::Deserialize;

use tracesync_core::sync::ProberConfig;

const MS: u64 = 1_000_000;

/// `[sync]` of the daemon config: the prober's schedule and the sync-point
/// threshold. Every key but `sync-point-threshold-ns` and
/// `kernel-rx-timestamps` applies on SIGHUP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SyncConfig {
    /// Probes in a burst (connect, new route, new epoch, suspected step).
    #[serde(deserialize_with = "burst_probes")]
    pub burst_probes: u64,
    /// Spacing of a burst's probes (ms).
    #[serde(deserialize_with = "burst_interval_ms")]
    pub burst_interval_ms: u64,
    /// Steady spacing after a burst (ms); adapts within min..=max.
    #[serde(deserialize_with = "steady_interval_ms")]
    pub steady_interval_ms: u64,
    /// Fastest steady spacing (ms), taken while samples disagree.
    #[serde(deserialize_with = "min_interval_ms")]
    pub min_interval_ms: u64,
    /// Slowest steady spacing (ms), reached while samples agree.
    #[serde(deserialize_with = "max_interval_ms")]
    pub max_interval_ms: u64,
    /// For this long after each burst, steady probes go at the fastest
    /// spacing (ms; 0 = no warm-up).
    #[serde(deserialize_with = "warmup_ms")]
    pub warmup_ms: u64,
    /// Exchanges per steady probe: the follow-ups go out as soon as the
    /// previous reply is in (1 = none).
    #[serde(deserialize_with = "train_length")]
    pub train_length: u64,
    /// A probe unanswered this long is forgotten and counted as a timeout (ms).
    #[serde(deserialize_with = "probe_timeout_ms")]
    pub probe_timeout_ms: u64,
    /// A new RemoteClockSync point is written when a relay's offset moved
    /// by more than this (ns). Needs a restart.
    #[serde(deserialize_with = "sync_point_threshold_ns")]
    pub sync_point_threshold_ns: u64,
    /// Stamp probe replies with the kernel's receive time (SO_TIMESTAMPNS,
    /// mapped onto BOOTTIME) instead of the clock read after the receive.
    /// Needs a restart.
    pub kernel_rx_timestamps: bool,
}

impl Default for SyncConfig {
    fn default() -> Self {
        let prober = ProberConfig::default();
        Self {
            burst_probes: u64::from(prober.burst_probes),
            burst_interval_ms: prober.burst_interval_ns / MS,
            steady_interval_ms: prober.steady_interval_ns / MS,
            min_interval_ms: prober.min_interval_ns / MS,
            max_interval_ms: prober.max_interval_ns / MS,
            warmup_ms: prober.warmup_ns / MS,
            train_length: u64::from(prober.train_length),
            probe_timeout_ms: prober.probe_timeout_ns / MS,
            sync_point_threshold_ns: tracesync_core::live::LiveConfig::default().sync_threshold_ns,
            kernel_rx_timestamps: tracesync_common::rx_stamp::KERNEL_RX_TIMESTAMPS_DEFAULT,
        }
    }
}

impl SyncConfig {
    /// Checks across keys (each key's range is checked while parsing).
    pub fn check(&self) -> Result<(), String> {
        if self.min_interval_ms > self.max_interval_ms {
            return Err(format!(
                "[sync] min-interval-ms ({}) must not exceed max-interval-ms ({})",
                self.min_interval_ms, self.max_interval_ms
            ));
        }
        if !(self.min_interval_ms..=self.max_interval_ms).contains(&self.steady_interval_ms) {
            return Err(format!(
                "[sync] steady-interval-ms ({}) must be within min-interval-ms..=max-interval-ms \
                 ({}..={})",
                self.steady_interval_ms, self.min_interval_ms, self.max_interval_ms
            ));
        }
        Ok(())
    }

    /// The prober's schedule; what `[sync]` does not name keeps its default.
    pub fn prober_config(&self) -> ProberConfig {
        let to_u32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        ProberConfig {
            burst_probes: to_u32(self.burst_probes),
            burst_interval_ns: self.burst_interval_ms.saturating_mul(MS),
            steady_interval_ns: self.steady_interval_ms.saturating_mul(MS),
            min_interval_ns: self.min_interval_ms.saturating_mul(MS),
            max_interval_ns: self.max_interval_ms.saturating_mul(MS),
            warmup_ns: self.warmup_ms.saturating_mul(MS),
            train_length: to_u32(self.train_length),
            probe_timeout_ns: self.probe_timeout_ms.saturating_mul(MS),
            ..ProberConfig::default()
        }
    }
}

crate::ranged_keys::ranged_keys! {
    "sync";
    burst_probes: "burst-probes" in 1..=64,
    burst_interval_ms: "burst-interval-ms" in 1..=1000,
    steady_interval_ms: "steady-interval-ms" in 10..=60000,
    min_interval_ms: "min-interval-ms" in 10..=60000,
    max_interval_ms: "max-interval-ms" in 10..=60000,
    warmup_ms: "warmup-ms" in 0..=3600000,
    train_length: "train-length" in 1..=8,
    probe_timeout_ms: "probe-timeout-ms" in 10..=60000,
    sync_point_threshold_ns: "sync-point-threshold-ns" in 0..=1000000000,
}
