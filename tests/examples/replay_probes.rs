//! Replays one relay's probe exchanges from a capture's `.sync.jsonl`
//! through the live estimator, as the daemon ran it, and prints the error
//! of the mapping it reported against a relay clock known in closed form:
//! `relay = host + OFFSET_S + PPM x (relay time since the first sample)`
//! (the real-socket harness's relays: `r-offset` is +1000 s and 0 ppm,
//! exact; `r-drift50` is +5000 s and 50 ppm, exact up to a constant, as
//! its drift starts when the relay does).
//!
//! For each sample from `--from` seconds on, the error (relay minus host,
//! ns) of the estimate at the sample's relay time and 0.1 and 0.2 s after
//! it, one per line; with `--summary`, their |p50| / |p99| / |max| in µs
//! instead. Compare estimator builds by running each build's copy of this
//! example on the same kept captures (`SYNC_REAL_KEEP=1
//! scripts/sync-real.sh lan`).
//!
//!     replay_probes CAPTURE/FILE.sync.jsonl --machine RAW_ID --offset-s 1000 [--ppm 50] [--from 10] [--summary]

use std::io::{BufRead, BufReader};

use clap::Parser;
use tracesync_core::sync::{Estimator, EstimatorConfig};

#[derive(Parser)]
struct Args {
    /// A `.sync.jsonl` sidecar of a rolled file.
    sidecar: std::path::PathBuf,
    /// The relay's `machine_raw_id` in the sidecar.
    #[arg(long)]
    machine: u64,
    /// Its true offset from the host (relay minus host, whole seconds).
    #[arg(long)]
    offset_s: i64,
    /// Its true drift (ppm), counted from its first sample.
    #[arg(long, default_value_t = 0.0)]
    ppm: f64,
    /// Leave out the samples of the first seconds (host time since the first).
    #[arg(long, default_value_t = 10)]
    from: u64,
    /// Print p50 / p99 / max of |error| (µs) instead of every error.
    #[arg(long)]
    summary: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let file = std::fs::File::open(&args.sidecar)?;
    let mut estimator = Estimator::new(EstimatorConfig::default());
    let (mut first_t1, mut first_relay) = (None, None);
    let mut errors: Vec<i64> = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        let value: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| format!("{}: line {}: {e}", args.sidecar.display(), n + 1))?;
        let field = |name: &str| value.get(name).and_then(serde_json::Value::as_i64);
        if field("machine_raw_id").map(|m| m as u64) != Some(args.machine) {
            continue;
        }
        let (Some(t1), Some(t2), Some(t3), Some(t4)) =
            (field("t1"), field("t2"), field("t3"), field("t4"))
        else {
            return Err(format!("{}: line {}: no t1..t4", args.sidecar.display(), n + 1).into());
        };
        let [t1, t2, t3, t4] = [t1, t2, t3, t4].map(|t| t as u64);
        let reported = estimator.add_sample(
            t1,
            t2,
            t3,
            t4,
            field("boottime_minus_monotonic_ns").unwrap_or(0),
        );
        let Some(estimate) = reported.or_else(|| estimator.estimate()) else {
            continue;
        };
        let relay_ns = t2 / 2 + t3 / 2;
        let first = *first_relay.get_or_insert(relay_ns);
        if t1.saturating_sub(*first_t1.get_or_insert(t1)) < args.from * 1_000_000_000 {
            continue;
        }
        for ahead in [0, 100_000_000, 200_000_000] {
            let at = relay_ns + ahead;
            let drift = ((at - first) as f64 * args.ppm * 1e-6) as i64;
            let error = estimate.offset_at(at) - args.offset_s * 1_000_000_000 - drift;
            if args.summary {
                errors.push(error);
            } else {
                println!("{error}");
            }
        }
    }
    if args.summary {
        let mut sizes: Vec<u64> = errors.iter().map(|e| e.unsigned_abs()).collect();
        sizes.sort_unstable();
        let at = |p: f64| {
            sizes
                .get(((sizes.len().max(1) - 1) as f64 * p) as usize)
                .map_or(f64::NAN, |&v| v as f64 / 1e3)
        };
        println!(
            "n {} p50 {:.2} p99 {:.2} max {:.2} us",
            sizes.len(),
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
    Ok(())
}
