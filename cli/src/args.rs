//! The `tracesync` command line as clap parses it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::clocks::ClocksArgs;
use crate::connect::DEFAULT_CONTROL;
use crate::merge::command::MergeArgs;
use crate::pki::PkiCommand;
use crate::tail::TailArgs;
use tracesync_protocol::trigger::parse_span;

#[derive(Debug, Parser)]
#[command(
    name = "tracesync",
    version,
    about = "Merge Perfetto traces of many machines onto one timeline"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Merge recorded traces (plain, gzip, or .zip/.tar archives) into one multi-machine trace.
    Merge(MergeArgs),
    /// Plots and a table of clock-sync quality per machine of a capture
    /// (DIR or its rolled files).
    Report {
        /// The picture: OUT.svg or OUT.png [default: sync-report.svg].
        #[arg(short = 'o', long = "output", value_name = "OUT.svg|OUT.png")]
        output: Option<PathBuf>,
        #[arg(required = true, value_name = "DIR|FILES")]
        inputs: Vec<PathBuf>,
    },
    /// Re-align a closed capture from every probe sample before and after each
    /// packet (two-sided); OUTDIR is a rolling capture of the same layout.
    Refine {
        /// The refined capture [default: DIR-refined beside DIR].
        #[arg(short = 'o', long = "output", value_name = "OUTDIR")]
        output: Option<PathBuf>,
        /// Write the counters and per-machine figures as JSON to this file.
        #[arg(long, value_name = "FILE")]
        stats: Option<PathBuf>,
        /// tracesyncd's output directory, after the daemon stopped.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// The main job: tracesyncd and N relays with simulated clocks (offsets,
    /// drift) on loopback; live status; a rolling merged trace checked
    /// against ground truth that opens in Perfetto UI.
    Demo {
        /// Relays (simulated machines) besides the host.
        #[arg(long, value_name = "N", default_value_t = 3)]
        relays: usize,
        /// Seconds of live capture.
        #[arg(long, value_name = "S", default_value_t = 10)]
        seconds: u64,
        /// Directory for the rolling output, spools and logs.
        #[arg(long, value_name = "DIR", default_value = "tracesync-demo")]
        out: PathBuf,
        /// Synthetic packets per second per relay.
        #[arg(long, value_name = "N", default_value_t = 2000)]
        rate: u32,
        /// Serve the daemon's Prometheus metrics here ("off": none). When the
        /// default port is busy another free loopback port is used.
        #[arg(long, value_name = "ADDR", default_value = crate::demo::live::DEFAULT_DEMO_METRICS)]
        metrics_listen: String,
        /// Record traces of simulated machines and merge them offline
        /// instead (no daemon, no relays).
        #[arg(long)]
        offline: bool,
    },
    /// Show the live merged stream: from the daemon, or following the rolling files in DIR.
    Tail(TailArgs),
    /// Show the daemon's per-machine status: connection, packets, drops, clock sync.
    Status {
        /// The daemon's control socket, or HOST:PORT where it is forwarded
        /// (tracesyncd listens on the Unix socket only; e.g. ssh -L or socat).
        #[arg(long, value_name = "SOCKET|HOST:PORT", default_value = DEFAULT_CONTROL)]
        connect: String,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
        /// A legend of the columns, every column (ids, bytes, pending, RTT)
        /// and every counter (probe sessions, the prober's rejections).
        #[arg(short, long)]
        verbose: bool,
    },
    /// Fire a flight-recorder trigger: every machine's window [now - before,
    /// now + after] goes into one snapshot file in the daemon's output
    /// directory (relays in ring mode ship theirs).
    Trigger {
        /// The trigger's name (1-64 of A-Z a-z 0-9 . _ -); it is part of
        /// the snapshot's file name.
        #[arg(value_name = "NAME")]
        name: String,
        /// How much before now the window starts (as 30s, 500ms, 2m).
        #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_span)]
        before: Duration,
        /// How much after now the window ends.
        #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_span)]
        after: Duration,
        /// The daemon's control socket, or HOST:PORT where it is forwarded.
        #[arg(long, value_name = "SOCKET|HOST:PORT", default_value = DEFAULT_CONTROL)]
        connect: String,
    },
    /// A lab PKI for mutual TLS between relays and the daemon (rcgen, ECDSA P-256).
    Pki {
        #[command(subcommand)]
        command: PkiCommand,
    },
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell)
    /// to standard output, e.g. `tracesync completions bash >
    /// /usr/share/bash-completion/completions/tracesync`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page tracesync(1) (roff) to standard output, or with
    /// --dir write it and one page per command (tracesync-merge.1, ...).
    Man {
        /// Write every page into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// List every edge of the clock graph of the given inputs, with its origin.
    Clocks(ClocksArgs),
}
