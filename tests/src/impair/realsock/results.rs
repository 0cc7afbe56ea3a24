//! What a real-socket run gives back, per relay and in all.

use super::*;

/// p50 / p99 / max of absolute errors (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrStats {
    pub n: usize,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl ErrStats {
    pub fn of(mut v: Vec<u64>) -> ErrStats {
        v.sort_unstable();
        ErrStats {
            n: v.len(),
            p50: quantile(&v, 0.5),
            p99: quantile(&v, 0.99),
            max: v.last().copied().unwrap_or(0),
        }
    }

    pub(in crate::impair) fn cells(&self) -> String {
        format!("{} / {} / {}", us(self.p50), us(self.p99), us(self.max))
    }
}

#[derive(Clone, Debug, Default)]
pub struct RelayResult {
    pub name: String,
    pub timens_s: i64,
    pub drift_ppm: Option<f64>,
    pub extra_args: Vec<String>,
    pub events_total: u64,
    pub missing: u64,
    pub duplicates: u64,
    /// Events after the warm-up.
    pub measured: usize,
    pub merged: ErrStats,
    pub live: ErrStats,
    /// Mean of (merged - truth) (ns): the bias, e.g. of an asymmetric path.
    pub mean_signed_ns: i64,
    /// Measured events whose merged error is within their packet's bound.
    pub in_bound: usize,
    /// Measured events with no tail record (no per-packet bound known).
    pub no_bound: usize,
    pub bound_p50_ns: u64,
    pub probe_samples: usize,
    pub naive: Option<ErrStats>,
    pub perfetto: Option<ErrStats>,
    /// After `tracesync refine`: |placed - truth| of the measured events;
    /// (inside the refined bound, events) of all its events.
    pub refined: Option<ErrStats>,
    pub refined_inside: (u64, u64),
    /// The relay's UDP probes: (t2 from the kernel, stamped in userspace
    /// instead), from its log; None when it logged none.
    pub relay_rx_stamps: Option<(u64, u64)>,
    /// The transport its probes took at the end (`udp`, `tcp`), as the
    /// daemon's status said; None when it had none.
    pub probe_route: Option<String>,
}

impl RelayResult {
    pub fn coverage(&self) -> f64 {
        let known = self.measured - self.no_bound;
        if known == 0 {
            return 0.0;
        }
        self.in_bound as f64 / known as f64
    }
}

#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub profile: String,
    pub seed: u64,
    pub seconds: u64,
    pub warmup_s: u64,
    pub relays: Vec<RelayResult>,
    /// The proxy's final stats (JSON it wrote).
    pub proxy: serde_json::Value,
    pub tail_lagged: u64,
    pub dir: Option<PathBuf>,
    /// None: the proxy was not in the path (direct wiring).
    pub proxied: bool,
    /// What the run asked for (None: the binaries' default).
    pub kernel_timestamps: Option<bool>,
    /// The daemon's UDP sync socket: (t4 from the kernel, stamped in
    /// userspace instead), from its log; None when it logged none.
    pub daemon_rx_stamps: Option<(u64, u64)>,
}

/// (kernel, fallbacks) from the last "receive timestamps" summary line of a
/// log (`kernel=N missing=N after_now=N before_anchor=N clocks_moved=N`).
pub fn rx_stamp_counts(log: &str) -> Option<(u64, u64)> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("receive timestamps (kernel used"))?;
    let field = |name: &str| -> Option<u64> {
        let at = line.find(&format!("{name}="))? + name.len() + 1;
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let fallbacks = ["missing", "after_now", "before_anchor", "clocks_moved"]
        .iter()
        .map(|f| field(f).unwrap_or(0))
        .sum();
    Some((field("kernel")?, fallbacks))
}
