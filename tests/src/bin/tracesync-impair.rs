//! `tracesync-impair`: a userspace link impairment proxy for clock-sync
//! runs on one box (netem is not everywhere). Forwards UDP and TCP from a
//! listen address to an upstream address through seeded per-direction link
//! models (base delay, one-sided queueing, jitter, spikes, loss and
//! reordering for UDP) and releases packets at absolute deadlines.
//!
//!   tracesync-impair --profile lan --seed 1 \
//!       --tcp 0.0.0.0:7400=10.201.0.1:7400 --udp 0.0.0.0:7401=10.201.0.1:7401 \
//!       --stats impair.json
//!
//! Runs until SIGTERM or SIGINT; writes its counters and its own release
//! lateness (the scheduling error it adds) to `--stats` every second and
//! on exit, and prints them to stderr on exit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use clap::Parser;
use nix::sys::signal::{SigSet, Signal};
use tracesync_tests::impair::model::{profile, profile_names};
use tracesync_tests::impair::proxy::{Proxy, ProxyConfig};

#[derive(Parser, Debug)]
#[command(name = "tracesync-impair", about = "UDP/TCP link impairment proxy")]
struct Flags {
    /// Link profile: loopback, lan, wifi, asym-static, asym-jitter, lan-pareto,
    /// usb (adb's link: give its ports as --tcp only).
    #[arg(long, default_value = "loopback")]
    profile: String,
    /// Seed of the link models (per direction and connection streams are
    /// derived from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// UDP forward LISTEN=UPSTREAM (repeatable).
    #[arg(long, value_parser = parse_pair)]
    udp: Vec<(SocketAddr, SocketAddr)>,
    /// TCP forward LISTEN=UPSTREAM (repeatable).
    #[arg(long, value_parser = parse_pair)]
    tcp: Vec<(SocketAddr, SocketAddr)>,
    /// Write counters and release lateness (JSON) here.
    #[arg(long)]
    stats: Option<PathBuf>,
}

fn parse_pair(text: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (a, b) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: want LISTEN=UPSTREAM"))?;
    let parse = |s: &str| s.parse::<SocketAddr>().map_err(|e| format!("{s:?}: {e}"));
    Ok((parse(a)?, parse(b)?))
}

fn write_stats(path: &Option<PathBuf>, proxy: &Proxy) {
    if let Some(path) = path {
        let tmp = path.with_extension("tmp");
        let text = proxy.stats_json().to_string();
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let Some(profile) = profile(&flags.profile) else {
        eprintln!(
            "tracesync-impair: unknown profile {:?}; one of {:?}",
            flags.profile,
            profile_names()
        );
        return ExitCode::from(64);
    };
    if flags.udp.is_empty() && flags.tcp.is_empty() {
        eprintln!("tracesync-impair: nothing to forward: give --udp and/or --tcp");
        return ExitCode::from(64);
    }
    // Block the stop signals in every thread (threads inherit the mask);
    // the main thread takes them with sigwait.
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    if let Err(e) = stop.thread_block() {
        eprintln!("tracesync-impair: cannot block signals: {e}");
        return ExitCode::from(70);
    }
    let proxy = match Proxy::start(ProxyConfig {
        profile,
        seed: flags.seed,
        udp: flags.udp.clone(),
        tcp: flags.tcp.clone(),
    }) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tracesync-impair: {e}");
            return ExitCode::from(71);
        }
    };
    eprintln!(
        "tracesync-impair: profile {} seed {} udp {:?} tcp {:?}",
        profile.name, flags.seed, proxy.udp_addrs, proxy.tcp_addrs
    );
    write_stats(&flags.stats, &proxy);
    // A thread refreshes the stats file; the main thread waits for a signal.
    let stats_path = flags.stats.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let proxy = std::sync::Arc::new(proxy);
    let p = std::sync::Arc::clone(&proxy);
    let refresher = std::thread::spawn(move || {
        while let Err(RecvTimeoutError::Timeout) = done_rx.recv_timeout(Duration::from_secs(1)) {
            write_stats(&stats_path, &p);
        }
    });
    let _ = stop.wait();
    drop(done_tx);
    let _ = refresher.join();
    write_stats(&flags.stats, &proxy);
    eprintln!("tracesync-impair: stopping; {}", proxy.stats_json());
    ExitCode::SUCCESS
}
