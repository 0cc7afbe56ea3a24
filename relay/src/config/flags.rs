//! The relay's command line: each flag overrides the same key of the
//! configuration file; the `--clock-*` ones are for tests and demos.

use std::path::PathBuf;

use clap::Parser;
use tracesync_protocol::trigger::RelayMode;

use crate::clocks::ClockSchedule;
use crate::spool::WhenFull;
use crate::tls::TlsMode;

/// Command-line flags; each overrides the same key of the file.
#[derive(Parser, Debug, Default, Clone)]
#[command(
    name = "tracesync-relay",
    version,
    about = "Streams this machine's Perfetto trace packets to a tracesync daemon"
)]
pub struct Flags {
    /// Configuration file (default: /etc/tracesync/relay.toml if it exists).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate the configuration, print the first error as file:line:column, and exit.
    #[arg(long)]
    pub check_config: bool,
    /// Print the machine name this relay sends (--name, the file's name, else the
    /// machine's own: its host name, or an Android device's MODEL-SERIAL) and exit:
    /// the name its certificate must carry (tracesync pki issue --name NAME).
    #[arg(long)]
    pub print_name: bool,
    /// Print the man page tracesync-relay(8) (roff) and exit.
    #[arg(long, hide = true)]
    pub man: bool,
    /// Daemon address HOST:PORT (default 127.0.0.1:7410).
    #[arg(long, value_name = "ADDR")]
    pub host: Option<String>,
    /// Machine name shown in the merged trace (default: the host name; on
    /// Android, MODEL-SERIAL from ro.product.model and ro.serialno).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A trace source: `file:PATH`, `unix:PATH`, `stdin`, `synthetic:RATE[,size=B][,seqs=N]`.
    /// Repeat for several; replaces the file's list.
    #[arg(long = "source", value_name = "SPEC")]
    pub sources: Vec<String>,
    /// Shared token the daemon expects.
    #[arg(
        long,
        env = "TRACESYNC_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Spool directory (instance id, unacknowledged batches, source cursors).
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,
    /// What to do when the spool is full: block sources, or drop the oldest batches.
    #[arg(long, value_name = "POLICY", value_parser = parse_when_full)]
    pub when_full: Option<WhenFull>,
    /// Memory for packets waiting to be cut into batches plus cached batches.
    #[arg(long, value_name = "N")]
    pub spool_memory_bytes: Option<u64>,
    /// Disk for unacknowledged batches.
    #[arg(long, value_name = "N")]
    pub spool_disk_bytes: Option<u64>,
    /// Longest a packet waits before its batch is cut (ms).
    #[arg(long, value_name = "MS")]
    pub linger_ms: Option<u64>,
    /// Most bytes sent to the daemon and not yet acknowledged.
    #[arg(long, value_name = "N")]
    pub window_bytes: Option<u64>,
    /// stream: send every packet as it comes; ring: keep the last
    /// --ring-seconds / --ring-bytes in the spool and send only a
    /// trigger's window `[mode]`.
    #[arg(long, value_name = "MODE", value_parser = RelayMode::parse)]
    pub mode: Option<RelayMode>,
    /// Ring mode: seconds of packets kept `[ring] seconds`.
    #[arg(long, value_name = "S")]
    pub ring_seconds: Option<u64>,
    /// Ring mode: bytes of packets kept, at most spool-disk-bytes `[ring] bytes`.
    #[arg(long, value_name = "N")]
    pub ring_bytes: Option<u64>,
    /// Unix socket where `tracesync-relay trigger` reaches this relay
    /// (default /run/tracesync-relay/control.sock) [control-socket].
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<PathBuf>,
    /// A Perfetto trigger of this name in this relay's packets
    /// (TracePacket.trigger) fires a flight-recorder trigger (repeatable;
    /// replaces the file's list) [trigger-on].
    #[arg(long = "trigger-on", value_name = "NAME")]
    pub trigger_on: Vec<String>,
    /// Test/demo: pose as a machine whose clocks are this far ahead (ns).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub clock_offset_ns: Option<i64>,
    /// Test/demo: pose as a machine whose clocks drift by this much (ppm).
    #[arg(long, value_name = "X", allow_hyphen_values = true)]
    pub clock_drift_ppm: Option<f64>,
    /// How clock-sync probes travel: auto (UDP, else TCP), udp, or tcp.
    #[arg(long, value_name = "T", value_parser = crate::probe::SyncTransport::parse)]
    pub sync_transport: Option<crate::probe::SyncTransport>,
    /// Test only: sinusoidal frequency wander of the simulated clock,
    /// amplitude (ppm) and period (s).
    #[arg(long, value_name = "PPM:PERIOD_S", allow_hyphen_values = true,
          value_parser = ClockSchedule::parse_wander)]
    pub clock_wander: Option<(f64, f64)>,
    /// Test only: step every clock by NS (negative: back) AT_S seconds
    /// after start (repeatable).
    #[arg(long, value_name = "AT_S:NS", allow_hyphen_values = true,
          value_parser = ClockSchedule::parse_step)]
    pub clock_step: Vec<(f64, i64)>,
    /// Test only: slew every clock by PPM (negative: slow) for SECS
    /// seconds from AT_S seconds after start, as an NTP daemon does
    /// (repeatable).
    #[arg(long, value_name = "AT_S:SECS:PPM", allow_hyphen_values = true,
          value_parser = ClockSchedule::parse_slew)]
    pub clock_slew: Vec<(f64, f64, f64)>,
    /// TLS to the daemon: required or off (plaintext) `[tls] mode`.
    #[arg(long, value_name = "MODE")]
    pub tls: Option<TlsMode>,
    /// CA certificate(s) the daemon's certificate must chain to `[tls] ca`.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This relay's certificate chain, PEM `[tls] cert`.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// This relay's private key, PEM `[tls] key`.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Name the daemon's certificate must carry (default: the host of --host) `[tls] server-name`.
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Serve Prometheus metrics on this TCP address `[metrics] listen`.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Log format: auto (journald-friendly under systemd), text or json `[log] format`.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<tracesync_common::logging::LogFormat>,
    /// Exit (78, or 77 for a certificate the daemon refuses) when a
    /// configuration fault (plaintext against TLS, the sync port, a wrong CA
    /// or certificate) lasted this long with no session in between
    /// [give-up-after-seconds; default 60, 1..=86400].
    #[arg(long, value_name = "SECONDS")]
    pub give_up_after_seconds: Option<u64>,
    /// Never exit on a configuration fault: keep retrying with backoff (for
    /// units that must outlive a daemon being reconfigured) [keep-retrying].
    #[arg(long)]
    pub keep_retrying: bool,
    #[command(subcommand)]
    pub command: Option<RelayCommand>,
}

/// What else the binary does besides relaying.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum RelayCommand {
    /// Fire a flight-recorder trigger from this machine: the relay running
    /// here carries it to its daemon, which saves every machine's window
    /// [now - before, now + after] into one snapshot.
    Trigger {
        /// The trigger's name (1-64 of A-Z a-z 0-9 . _ -); it is part of
        /// the snapshot's file name.
        #[arg(value_name = "NAME")]
        name: String,
        /// How much before now the window starts (as 30s, 500ms, 2m).
        #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_span)]
        before: std::time::Duration,
        /// How much after now the window ends.
        #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_span)]
        after: std::time::Duration,
        /// The relay's control socket (default: control-socket of the
        /// relay's config, else /run/tracesync-relay/control.sock).
        #[arg(long, value_name = "SOCKET")]
        connect: Option<PathBuf>,
    },
}

fn parse_span(text: &str) -> Result<std::time::Duration, String> {
    tracesync_protocol::trigger::parse_span(text)
}

fn parse_when_full(text: &str) -> Result<WhenFull, String> {
    WhenFull::parse(text)
}
