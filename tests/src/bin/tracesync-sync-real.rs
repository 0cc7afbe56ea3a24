//! `tracesync-sync-real [--seconds N] [--seed N] [--keep]
//! [--kernel-timestamps on|off|both] [--daemon-config FILE] [PROFILE...]`: the real-socket
//! clock-sync accuracy run (needs root): for each profile, `tracesyncd` and
//! two relays (one offset by a time namespace, one with 50 ppm simulated
//! drift as well) in network namespaces, talking over loopback (`loopback`),
//! a direct veth (`veth`) or through `tracesync-impair` (every other
//! profile); prints a markdown table. scripts/sync-real.sh builds and runs
//! it.

use std::process::ExitCode;

use clap::Parser;
use tracesync_tests::impair::realsock::{self, Bins, RunSpec, Wiring};

#[derive(Parser, Debug)]
#[command(name = "tracesync-sync-real")]
struct Flags {
    /// Seconds per profile (the first `--warmup` are not measured).
    #[arg(long, default_value_t = 40)]
    seconds: u64,
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep each run's directory (logs, output, sidecars).
    #[arg(long)]
    keep: bool,
    /// Add a third relay whose clock wanders (5 ppm, 60 s) and steps
    /// +200 µs at this many seconds (0: no such relay).
    #[arg(long, default_value_t = 0)]
    step_at: u64,
    /// Add a relay whose clock slews +500 ppm for 2 s (1 ms) at this many
    /// seconds (0: no such relay).
    #[arg(long, default_value_t = 0)]
    slew_at: u64,
    /// Kernel receive timestamps on both probe ends: on, off, or both
    /// (each profile runs twice, userspace stamps first).
    #[arg(long, default_value = "on", value_parser = ["on", "off", "both"])]
    kernel_timestamps: String,
    /// A config file for `tracesyncd` (e.g. `[sync]` settings to compare
    /// with the defaults on the same build); its flags still set the
    /// addresses, output and token.
    #[arg(long)]
    daemon_config: Option<std::path::PathBuf>,
    /// Profiles (default: loopback lan wifi asym-static asym-jitter).
    profiles: Vec<String>,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    if let Err(why) = realsock::available() {
        eprintln!("tracesync-sync-real: {why}");
        return ExitCode::from(77);
    }
    let profiles = if flags.profiles.is_empty() {
        ["loopback", "lan", "wifi", "asym-static", "asym-jitter"]
            .map(String::from)
            .to_vec()
    } else {
        flags.profiles.clone()
    };
    if let Some(bad) = profiles.iter().find(|p| Wiring::of(p).is_none()) {
        eprintln!(
            "tracesync-sync-real: unknown profile {bad:?}; one of {:?}",
            Wiring::profile_names()
        );
        return ExitCode::from(64);
    }
    let stamps: &[bool] = match flags.kernel_timestamps.as_str() {
        "off" => &[false],
        "both" => &[false, true],
        _ => &[true],
    };
    let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|p| p.to_path_buf()))
    else {
        eprintln!("tracesync-sync-real: cannot find my own directory");
        return ExitCode::from(70);
    };
    let bins = Bins::in_dir(&dir);
    let mut results = Vec::new();
    let mut failed = false;
    for p in &profiles {
        for &kernel in stamps {
            let mut spec = RunSpec::standard(p, flags.seconds, bins.clone());
            spec.seed = flags.seed;
            spec.warmup_s = flags.warmup;
            spec.keep = flags.keep;
            spec.kernel_timestamps = Some(kernel);
            spec.daemon_config.clone_from(&flags.daemon_config);
            if flags.step_at > 0 {
                spec.relays
                    .push(RunSpec::wander_and_step_relay(flags.step_at));
            }
            if flags.slew_at > 0 {
                spec.relays.push(RunSpec::slewing_relay(flags.slew_at));
            }
            let what = if kernel { "kernel" } else { "user" };
            eprintln!("sync-real: {p} ({what} rx stamps): {} s ...", flags.seconds);
            match realsock::run(&spec) {
                Ok(r) => {
                    if let Some(d) = &r.dir {
                        eprintln!("sync-real: {p}: kept {}", d.display());
                    }
                    if r.proxied {
                        eprintln!("sync-real: {p}: proxy {}", r.proxy);
                    }
                    results.push(r);
                }
                Err(e) => {
                    eprintln!("sync-real: {p}: FAILED: {e}");
                    failed = true;
                }
            }
        }
    }
    println!(
        "seed {}, {} s per profile, {} s warm-up excluded\n",
        flags.seed, flags.seconds, flags.warmup
    );
    print!("{}", realsock::table(&results));
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
