//! `tracesync-feeder`: feeds a daemon pre-encoded batches of small packets
//! over the real relay protocol, for measuring the daemon alone
//! (`scripts/bench-live.sh`, phase feeder; `tracesync_tests::feeder`).
//!
//!   tracesync-feeder run --host 127.0.0.1:7410 --name bench-1 --token T \
//!       --tls-ca ca.crt --tls-cert bench-1.crt --tls-key bench-1.key
//!   tracesync-feeder check --output OUT_DIR SUMMARY_FILE...
//!
//! `run` sends until SIGTERM or SIGINT (or `--seconds`), waits for the
//! last acks, and prints its summary line on stdout. `check` reads the
//! rolled output and the summary lines and prints
//! `written=N lost=N duplicated=N`; it exits 1 if any packet was lost or
//! duplicated.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tracesync_relay::tls::{RelayTls, TlsFlags, TlsMode};
use tracesync_tests::feeder::{self, FeederConfig};

#[derive(Parser, Debug)]
#[command(
    name = "tracesync-feeder",
    about = "Feeds tracesyncd small packets for benchmarks"
)]
struct Flags {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Feed a daemon until SIGTERM, SIGINT or --seconds.
    Run(RunFlags),
    /// Count lost and duplicated packets of finished runs.
    Check {
        /// The daemon's rolling output directory.
        #[arg(long)]
        output: PathBuf,
        /// Files holding the feeders' summary lines.
        summaries: Vec<PathBuf>,
    },
}

#[derive(clap::Args, Debug)]
struct RunFlags {
    /// Daemon data address, HOST:PORT.
    #[arg(long)]
    host: String,
    /// Machine name (with mutual TLS, the certificate's name).
    #[arg(long)]
    name: String,
    #[arg(long, default_value = "")]
    token: String,
    /// TLS to the daemon: required or off.
    #[arg(long, value_enum, default_value = "required")]
    tls: TlsMode,
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// TrackEvents per batch.
    #[arg(long, default_value_t = 4096)]
    batch_packets: usize,
    /// Relay sequences the TrackEvents are spread over.
    #[arg(long, default_value_t = 4)]
    sequences: u32,
    /// Stop sending after this many seconds (default: at SIGTERM or SIGINT).
    #[arg(long)]
    seconds: Option<f64>,
    /// Seconds to wait for the last acks once sending stopped.
    #[arg(long, default_value_t = 10.0)]
    drain_seconds: f64,
}

fn main() -> ExitCode {
    match Flags::parse().command {
        Command::Run(flags) => run(flags),
        Command::Check { output, summaries } => check(&output, &summaries),
    }
}

fn run(flags: RunFlags) -> ExitCode {
    let tls = RelayTls::merge(
        None,
        &TlsFlags {
            mode: Some(flags.tls),
            ca: flags.tls_ca,
            cert: flags.tls_cert,
            key: flags.tls_key,
            server_name: None,
        },
    );
    let tls = match tls.client(&flags.host) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("--tls-{}: {}", e.key.name(), e.message);
            return ExitCode::from(2);
        }
    };
    let seconds = |s: f64| Duration::try_from_secs_f64(s).ok();
    let config = FeederConfig {
        host: flags.host,
        name: flags.name,
        token: flags.token,
        tls,
        batch_packets: flags.batch_packets,
        sequences: flags.sequences,
        run_for: flags.seconds.and_then(seconds),
        drain_timeout: seconds(flags.drain_seconds).unwrap_or(Duration::from_secs(10)),
    };
    // One thread: the feeder's CPU is what it costs per packet, not what
    // a pool spreads; the probe responder has a thread of its own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stop = CancellationToken::new();
    let outcome = runtime.block_on(async {
        let signals = stop_on_signals(stop.clone());
        let outcome = feeder::run(config, stop).await;
        signals.abort();
        outcome
    });
    match outcome {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(reason) => {
            eprintln!("the daemon refused the feeder: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// Cancels `stop` at SIGTERM or SIGINT.
fn stop_on_signals(stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    use tokio::signal::unix::{SignalKind, signal};
    tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            eprintln!("cannot watch SIGTERM/SIGINT: stop with --seconds");
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        stop.cancel();
    })
}

fn check(output: &std::path::Path, summaries: &[PathBuf]) -> ExitCode {
    let mut feeders = Vec::new();
    for path in summaries {
        match std::fs::read_to_string(path) {
            Ok(text) => feeders.extend(text.lines().filter_map(feeder::check::parse_summary)),
            Err(e) => {
                eprintln!("{}: cannot read: {e}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    match feeder::check::tally(output, &feeders) {
        Ok(t) => {
            println!(
                "written={} lost={} duplicated={}",
                t.written, t.lost, t.duplicated
            );
            if t.lost == 0 && t.duplicated == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
