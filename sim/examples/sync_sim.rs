//! Clock-sync simulator runner: every scenario of docs/clock-sync-accuracy.md with
//! our live estimator beside the naive and Perfetto-style baselines.
//!
//! `cargo run --release -p tracesync-sim --example sync_sim [-- --seed N
//! --secs S --events E --scenario NAME --from S]`; several `--seed` may be
//! given. `--from` starts the statistics S s into the run (default 10).

use tracesync_sim::{RunOptions, run, scenarios, table};

fn main() {
    let mut seeds = Vec::new();
    let mut secs = 1800.0;
    let mut events = 4000;
    let mut only: Option<String> = None;
    let mut from = RunOptions::default().warmup_s;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&arg));
        match arg.as_str() {
            "--seed" => seeds.push(value().parse().unwrap_or_else(|_| usage("--seed"))),
            "--secs" => secs = value().parse().unwrap_or_else(|_| usage("--secs")),
            "--events" => events = value().parse().unwrap_or_else(|_| usage("--events")),
            "--scenario" => only = Some(value()),
            "--from" => from = value().parse().unwrap_or_else(|_| usage("--from")),
            _ => usage(&arg),
        }
    }
    if seeds.is_empty() {
        seeds.push(1);
    }
    let mut reports = Vec::new();
    for sc in scenarios::all(secs) {
        if only.as_deref().is_some_and(|o| o != sc.name) {
            continue;
        }
        for &seed in &seeds {
            let opts = RunOptions {
                seed,
                events,
                warmup_s: from,
                ..RunOptions::default()
            };
            reports.push(run(&sc, &opts));
        }
    }
    println!(
        "virtual {secs} s per scenario, {events} events, 4-10 Hz probes (10 Hz in each minute after a burst), statistics from {from} s; errors in µs (p50 / p99 / max)\n"
    );
    print!("{}", table(&reports));
}

fn usage(what: &str) -> ! {
    eprintln!(
        "sync_sim: bad argument {what}; usage: sync_sim [--seed N]... [--secs S] [--events E] [--scenario NAME] [--from S]"
    );
    std::process::exit(2);
}
