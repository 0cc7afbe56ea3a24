//! The `tracesync` command line as clap parses it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tracesync_core::control::{TailFormat, TimeMode};

use crate::connect::DEFAULT_CONTROL;
use crate::merge::output::Format;

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
    Merge {
        /// A perfetto_manifest JSON file (version 1).
        #[arg(long)]
        manifest: Option<PathBuf>,
        /// Output file, or - for standard output.
        #[arg(short = 'o', long = "output", default_value = "-")]
        output: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Perfetto)]
        format: Format,
        /// Write counters (Perfetto's stat names) as JSON to this file.
        #[arg(long)]
        stats: Option<PathBuf>,
        /// Fail on any bad input or any packet with no place on the timeline.
        #[arg(long)]
        strict: bool,
        /// Give each input that would go to the host machine a machine of its own.
        #[arg(long)]
        machine_per_file: bool,
        /// Of a capture (DIR or rolled files): only packets at or after TIME:
        /// trace-time ns, an RFC 3339 UTC time, or -DURATION before the end (-30s).
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        since: Option<String>,
        /// Of a capture: only packets at or before TIME (as --since).
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        until: Option<String>,
        /// Input traces, or a rolling output directory (DIR), or rolled files
        /// of one capture (read back as one).
        #[arg(required = true, value_name = "INPUTS|DIR")]
        inputs: Vec<PathBuf>,
    },
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
        #[arg(long)]
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
        #[arg(long, default_value_t = 3)]
        relays: usize,
        /// Seconds of live capture.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Directory for the rolling output, spools and logs.
        #[arg(long, default_value = "tracesync-demo")]
        out: PathBuf,
        /// Synthetic packets per second per relay.
        #[arg(long, default_value_t = 2000)]
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
    Tail {
        /// The daemon's control socket, or HOST:PORT where it is forwarded
        /// (tracesyncd listens on the Unix socket only; e.g. ssh -L or socat)
        /// [default: /run/tracesync/control.sock].
        #[arg(long, value_name = "SOCKET|ADDR", conflicts_with = "dir")]
        connect: Option<String>,
        #[arg(long, value_enum, default_value_t = TailFormat::Text)]
        format: TailFormat,
        /// Only this machine (name, raw id, or `host`); repeat for several.
        #[arg(long = "machine", value_name = "NAME")]
        machines: Vec<String>,
        /// How text lines show time: UTC wall clock (RFC 3339, µs), host
        /// BOOTTIME seconds, or trace time in ns as written.
        #[arg(long, value_enum, default_value_t = TimeMode::Wall)]
        time: TimeMode,
        /// Start with the last N records (text, jsonl; at most 100000), then follow.
        #[arg(short = 'n', long = "lines", value_name = "N",
              value_parser = clap::value_parser!(u64).range(..=crate::tail::MAX_LINES))]
        lines: Option<u64>,
        /// Start with the records at or after TIME (text, jsonl), then follow:
        /// trace-time ns, an RFC 3339 UTC time, or -DURATION before the end (-30s).
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        since: Option<String>,
        /// Follow the rolling files in this directory instead of the daemon.
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Show the daemon's per-machine status: connection, packets, drops, clock sync.
    Status {
        /// The daemon's control socket, or HOST:PORT where it is forwarded
        /// (tracesyncd listens on the Unix socket only; e.g. ssh -L or socat).
        #[arg(long, value_name = "SOCKET|ADDR", default_value = DEFAULT_CONTROL)]
        connect: String,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
        /// A legend of the columns, every column (ids, bytes, pending, RTT)
        /// and every counter (probe sessions, the prober's rejections).
        #[arg(short, long)]
        verbose: bool,
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
    /// Print the man page tracesync(1) (roff) to standard output.
    #[command(hide = true)]
    Man,
    /// List every edge of the clock graph of the given inputs, with its origin.
    Clocks {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        manifest: Option<PathBuf>,
        #[arg(long)]
        machine_per_file: bool,
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PkiCommand {
    /// Make a CA (ca.crt, ca.key) and the daemon's certificate (daemon.crt, daemon.key) in DIR.
    Init {
        /// Names the daemon's certificate carries (host names or IPs; relays
        /// check the one they connect to). Default: this host's name,
        /// localhost, 127.0.0.1, ::1.
        #[arg(long = "daemon-name", value_name = "NAME")]
        daemon_names: Vec<String>,
        /// Days the daemon's certificate is valid (from an hour ago, for clock
        /// skew); the CA is valid for 3650 days, or as long if longer.
        #[arg(long, value_name = "N", default_value_t = tracesync_common::tls::pki::DEFAULT_DAYS,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(tracesync_common::tls::pki::MAX_DAYS)))]
        days: u32,
        #[arg(value_name = "DIR", default_value = tracesync_common::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
        /// Make the new private keys (not the CA's) readable by this group
        /// (mode 0640), e.g. `tracesync` for the shipped units' User=tracesync.
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
    },
    /// Issue a relay certificate for machine NAME (NAME.crt, NAME.key), signed by DIR/ca.key.
    Issue {
        /// The machine name the relay sends (its --name, or its host name).
        #[arg(long)]
        name: String,
        /// Also bind this raw machine id (only for relays with a fixed id).
        #[arg(long, value_name = "ID")]
        raw_id: Option<u32>,
        /// Days the certificate is valid (from an hour ago, for clock skew).
        #[arg(long, value_name = "N", default_value_t = tracesync_common::tls::pki::DEFAULT_DAYS,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(tracesync_common::tls::pki::MAX_DAYS)))]
        days: u32,
        #[arg(value_name = "DIR", default_value = tracesync_common::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
        /// Make the new private keys (not the CA's) readable by this group
        /// (mode 0640), e.g. `tracesync` for the shipped units' User=tracesync.
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
    },
    /// Replace NAME.crt/NAME.key (or, with --daemon, daemon.crt/daemon.key) by a new key and
    /// certificate with the same names, signed by the same CA (DIR/ca.key).
    Renew {
        /// The machine whose relay certificate to renew.
        #[arg(long, required_unless_present = "daemon", conflicts_with = "daemon")]
        name: Option<String>,
        /// Renew the daemon's certificate instead.
        #[arg(long)]
        daemon: bool,
        /// Days the new certificate is valid (from an hour ago, for clock skew).
        #[arg(long, value_name = "N", default_value_t = tracesync_common::tls::pki::DEFAULT_DAYS,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(tracesync_common::tls::pki::MAX_DAYS)))]
        days: u32,
        #[arg(value_name = "DIR", default_value = tracesync_common::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
        /// Make the new private keys (not the CA's) readable by this group
        /// (mode 0640), e.g. `tracesync` for the shipped units' User=tracesync.
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
    },
    /// Revoke NAME.crt: add its serial to DIR/ca.crl (made if missing), signed by DIR/ca.key.
    /// The daemon refuses it once its [tls] crl names that file and it restarts.
    Revoke {
        /// The machine whose current certificate (NAME.crt) to revoke.
        #[arg(long)]
        name: String,
        #[arg(value_name = "DIR", default_value = tracesync_common::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
    },
}
