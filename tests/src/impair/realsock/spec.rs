//! What a real-socket run is given: its wiring, binaries and relays.

use super::*;

/// Where the three binaries are.
#[derive(Clone, Debug)]
pub struct Bins {
    pub daemon: PathBuf,
    pub relay: PathBuf,
    pub impair: PathBuf,
    /// `tracesync`, for `refine` after the run.
    pub cli: PathBuf,
}

impl Bins {
    /// `tracesyncd`, `tracesync-relay`, `tracesync-impair` and `tracesync`
    /// in `dir`.
    pub fn in_dir(dir: &Path) -> Bins {
        Bins {
            daemon: dir.join("tracesyncd"),
            relay: dir.join("tracesync-relay"),
            impair: dir.join("tracesync-impair"),
            cli: dir.join("tracesync"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RelaySpec {
    pub name: String,
    /// Time-namespace offset of BOOTTIME and MONOTONIC (s).
    pub timens_s: i64,
    /// `--clock-drift-ppm` (the relay's simulated clock), if any.
    pub drift_ppm: Option<f64>,
    /// Synthetic events per second.
    pub rate: u64,
    /// More relay flags (e.g. `--clock-wander`, `--clock-step`).
    pub extra_args: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct RunSpec {
    pub profile: String,
    pub seed: u64,
    pub seconds: u64,
    pub warmup_s: u64,
    pub relays: Vec<RelaySpec>,
    pub bins: Bins,
    /// Keep the run directory (logs, output) instead of deleting it.
    pub keep: bool,
    /// Run the proxy with `chrt --fifo 10` when `chrt` is there.
    pub realtime_proxy: bool,
    /// Kernel receive timestamps on both probe ends (the
    /// `TRACESYNC_KERNEL_RX_TIMESTAMPS` switch); None: the binaries' default.
    pub kernel_timestamps: Option<bool>,
    /// `tracesyncd --config` (None: no file, the built-in defaults).
    pub daemon_config: Option<PathBuf>,
}

impl RunSpec {
    /// The standard pair: one relay offset by a time namespace only, one
    /// with 50 ppm simulated drift on top of another offset.
    /// A relay whose simulated clock also wanders (5 ppm sine, 60 s) and
    /// steps forward by 200 µs `step_at_s` after start (20 ppm drift, +3000 s).
    pub fn wander_and_step_relay(step_at_s: u64) -> RelaySpec {
        RelaySpec {
            name: "r-wander-step".into(),
            timens_s: 3000,
            drift_ppm: Some(20.0),
            rate: 200,
            extra_args: vec![
                "--clock-wander".into(),
                "5:60".into(),
                "--clock-step".into(),
                format!("{step_at_s}:200000"),
            ],
        }
    }

    /// A relay whose simulated clock slews as an NTP daemon corrects 1 ms
    /// (ntpd's and the kernel's largest rate, 500 ppm, for 2 s) from
    /// `slew_at_s` after start (20 ppm drift, +2000 s).
    pub fn slewing_relay(slew_at_s: u64) -> RelaySpec {
        RelaySpec {
            name: "r-slew".into(),
            timens_s: 2000,
            drift_ppm: Some(20.0),
            rate: 200,
            extra_args: vec!["--clock-slew".into(), format!("{slew_at_s}:2:500")],
        }
    }

    pub fn standard(profile: &str, seconds: u64, bins: Bins) -> RunSpec {
        RunSpec {
            profile: profile.into(),
            seed: 1,
            seconds,
            warmup_s: 10,
            relays: vec![
                RelaySpec {
                    name: "r-offset".into(),
                    timens_s: 1000,
                    drift_ppm: None,
                    rate: 200,
                    extra_args: Vec::new(),
                },
                RelaySpec {
                    name: "r-drift50".into(),
                    timens_s: 5000,
                    drift_ppm: Some(50.0),
                    rate: 200,
                    extra_args: Vec::new(),
                },
            ],
            bins,
            keep: false,
            realtime_proxy: true,
            kernel_timestamps: None,
            daemon_config: None,
        }
    }
}
