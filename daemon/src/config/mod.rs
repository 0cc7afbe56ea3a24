//! `tracesyncd` configuration: a TOML file (kebab-case keys, unknown keys
//! rejected) overridden by command-line flags.
//!
//! Search order: `--config FILE`, else `/etc/tracesync/daemon.toml` if it
//! exists, else built-in defaults. Range checks run while deserializing, so a
//! bad value is reported as `file:line:column: message`; the same checks
//! parse the flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Parser;

use crate::tls::{TlsConfig, TlsKey, TlsMode};
use serde::{Deserialize, Deserializer};
use toml::Spanned;
use tracesync_protocol::relay::{DEFAULT_DATA_PORT, DEFAULT_SYNC_PORT, MAX_FRAME_BYTES};

/// Config file read when `--config` is not given (if it exists).
pub const DEFAULT_CONFIG_PATH: &str = "/etc/tracesync/daemon.toml";
pub const DEFAULT_CONTROL_PATH: &str = "/run/tracesync/control.sock";
pub const DEFAULT_OUTPUT_DIR: &str = "/var/lib/tracesync";

/// `tracesyncd` command line. Every flag but `--config` / `--check-config`
/// overrides the matching config key.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "tracesyncd",
    version,
    about = "tracesync host daemon: receives relays' traces and writes one rolling merged trace"
)]
pub struct DaemonArgs {
    /// Config file (default: /etc/tracesync/daemon.toml if present).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Parse and check the configuration, print "FILE: ok" or the first error
    /// as file:line:column: message, and exit (78 on an error).
    #[arg(long)]
    pub check_config: bool,
    /// Print the man page tracesyncd(8) (roff) and exit.
    #[arg(long, hide = true)]
    pub man: bool,
    /// With --check-config: check the directories and TLS files as this
    /// user would use them (the unit's User=, e.g. tracesync) instead of
    /// the one running the check.
    #[arg(long, value_name = "USER", requires = "check_config")]
    pub check_user: Option<String>,
    /// Relay data TCP address [listen.data].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Clock-sync address, UDP and the TCP fallback [listen.sync].
    #[arg(long, value_name = "ADDR")]
    pub sync_listen: Option<SocketAddr>,
    /// Control socket path [listen.control].
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Output directory of the rolling trace [output.dir].
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Shared secret relays must present [auth.token].
    #[arg(long, env = "TRACESYNC_TOKEN", hide_env_values = true, value_parser = check_token)]
    pub token: Option<String>,
    /// Merge window in milliseconds [merge.window-ms].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_flag(s, check_window_ms))]
    pub merge_window_ms: Option<u64>,
    /// Ingest shards (threads ordering relays' packets), 0 = the host's
    /// cores minus the writer's [merge.ingest-shards].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_flag(s, check_ingest_shards))]
    pub ingest_shards: Option<u64>,
    /// Rotate the output file at this size, 0 = never [output.rotate-bytes].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_flag(s, check_any))]
    pub rotate_bytes: Option<u64>,
    /// Rotate the output file at this age, 0 = never [output.rotate-seconds].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_flag(s, check_any))]
    pub rotate_seconds: Option<u64>,
    /// Delete the oldest files beyond this total size, 0 = keep all [output.retain-bytes].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_flag(s, check_any))]
    pub retain_bytes: Option<u64>,
    /// Delete files older than this, 0 = keep all [output.retain-seconds].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_flag(s, check_any))]
    pub retain_seconds: Option<u64>,
    /// Most relays connected at once [limits.max-relays].
    #[arg(long, value_name = "N", value_parser = |s: &str| parse_flag(s, check_max_relays))]
    pub max_relays: Option<u64>,
    /// TLS on relay connections: required or off (plaintext) [tls.mode].
    #[arg(long, value_name = "MODE")]
    pub tls: Option<TlsMode>,
    /// The daemon's certificate chain, PEM [tls.cert].
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The daemon's private key, PEM [tls.key].
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA certificate(s) that issue relay certificates, PEM [tls.client-ca].
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// Certificate revocation list(s) of relay certificates, PEM or DER [tls.crl].
    #[arg(long, value_name = "FILE")]
    pub tls_crl: Option<PathBuf>,
    /// Serve Prometheus metrics on this TCP address [metrics.listen].
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Log format: auto (journald-friendly under systemd), text or json [log.format].
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<tracesync_common::logging::LogFormat>,
}

impl DaemonArgs {
    /// Whether the command line gave the path flag `flag` (`output`,
    /// `control`, `tls-cert`, `tls-key`, `tls-client-ca`, `tls-crl`).
    pub fn gave(&self, flag: &str) -> bool {
        match flag {
            "output" => self.output.is_some(),
            "control" => self.control.is_some(),
            "tls-cert" => self.tls_cert.is_some(),
            "tls-key" => self.tls_key.is_some(),
            "tls-client-ca" => self.tls_client_ca.is_some(),
            "tls-crl" => self.tls_crl.is_some(),
            _ => false,
        }
    }
}

/// The whole daemon configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DaemonConfig {
    pub listen: ListenConfig,
    pub auth: AuthConfig,
    pub output: OutputConfig,
    pub merge: MergeConfig,
    pub limits: LimitsConfig,
    pub log: LogConfig,
    pub tls: TlsConfig,
    pub metrics: crate::metrics::MetricsConfig,
    pub sync: crate::sync::config::SyncConfig,
    pub trigger: trigger::TriggerSection,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ListenConfig {
    /// Relay data connections (TCP).
    pub data: SocketAddr,
    /// Clock-sync probes: UDP, and TCP on the same port (fallback).
    pub sync: SocketAddr,
    /// Control socket for `tracesync tail` / `status` (Unix).
    pub control: PathBuf,
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            data: SocketAddr::from(([0, 0, 0, 0], DEFAULT_DATA_PORT)),
            sync: SocketAddr::from(([0, 0, 0, 0], DEFAULT_SYNC_PORT)),
            control: PathBuf::from(DEFAULT_CONTROL_PATH),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Shared secret; None (or empty) accepts every relay. At most
    /// `MAX_TOKEN_BYTES` (a relay's Hello token is refused past it).
    #[serde(deserialize_with = "token")]
    pub token: Option<String>,
    /// Machine names (the relay's Hello name) allowed to connect; empty: all.
    pub allow_machines: Vec<String>,
}

impl AuthConfig {
    /// The token relays must present, if any (an empty token means none).
    pub fn required_token(&self) -> Option<&str> {
        self.token.as_deref().filter(|t| !t.is_empty())
    }

    /// Whether a relay naming itself `machine` may connect.
    pub fn machine_allowed(&self, machine: &str) -> bool {
        allowed(&self.allow_machines, machine)
    }
}

/// An empty allow-list allows every machine.
pub fn allowed(allow_machines: &[String], machine: &str) -> bool {
    allow_machines.is_empty() || allow_machines.iter().any(|m| m == machine)
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct OutputConfig {
    pub dir: PathBuf,
    /// 0 = no size rotation.
    #[serde(deserialize_with = "any_u64")]
    pub rotate_bytes: u64,
    /// 0 = no time rotation.
    #[serde(deserialize_with = "any_u64")]
    pub rotate_seconds: u64,
    /// 0 = no size limit on the directory.
    #[serde(deserialize_with = "any_u64")]
    pub retain_bytes: u64,
    /// 0 = no age limit.
    #[serde(deserialize_with = "any_u64")]
    pub retain_seconds: u64,
    /// How often written packets are made durable and acknowledged.
    #[serde(deserialize_with = "commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// fdatasync on every commit (off: acks mean "written", not "durable").
    pub fsync: bool,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from(DEFAULT_OUTPUT_DIR),
            rotate_bytes: 256 << 20,
            rotate_seconds: 3600,
            retain_bytes: 10 << 30,
            retain_seconds: 7 * 24 * 3600,
            commit_interval_ms: 100,
            fsync: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct MergeConfig {
    /// How far behind the slowest relay's clock the merge holds packets back.
    #[serde(deserialize_with = "window_ms")]
    pub window_ms: u64,
    /// Per relay: packets waiting for a resolvable clock before the relay is paused.
    #[serde(deserialize_with = "pending_packets")]
    pub pending_packets: u64,
    /// All relays: resolved packets waiting for the window, counted as
    /// their bytes plus each queue entry; past it the oldest are written
    /// before the window has passed.
    #[serde(deserialize_with = "queue_bytes")]
    pub queue_bytes: u64,
    /// Ingest shards: relays are spread over this many threads by machine,
    /// each ordering its relays' packets; the writer merges them. 0: the
    /// host's cores minus the writer's (`tracesync_core::shard::resolve_shards`).
    #[serde(deserialize_with = "ingest_shards")]
    pub ingest_shards: u64,
}

impl MergeConfig {
    /// The ingest shards to run on a host of `cores` cores.
    pub fn shards(&self, cores: usize) -> usize {
        let configured = usize::try_from(self.ingest_shards).unwrap_or(usize::MAX);
        tracesync_core::shard::resolve_shards(configured, cores)
    }
}

impl Default for MergeConfig {
    fn default() -> Self {
        Self {
            window_ms: 500,
            pending_packets: 100_000,
            queue_bytes: 64 << 20,
            ingest_shards: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Relays connected at once; more are refused with a reason.
    #[serde(deserialize_with = "max_relays")]
    pub max_relays: u64,
    /// A connection must send Hello within this time.
    #[serde(deserialize_with = "hello_timeout_ms")]
    pub hello_timeout_ms: u64,
    /// Largest frame accepted from a relay.
    #[serde(deserialize_with = "max_frame_bytes")]
    pub max_frame_bytes: u64,
    /// After Hello, a frame that has begun must arrive whole within this
    /// time (a relay trickling bytes is closed with a reason).
    #[serde(deserialize_with = "frame_timeout_ms")]
    pub frame_timeout_ms: u64,
    /// After Hello, a relay that sends nothing (no batch, heartbeat or
    /// byte) for this long is closed; relays send a heartbeat at least
    /// every 2 s.
    #[serde(deserialize_with = "idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Sequences one relay instance may open; a packet on one more is
    /// dropped and the connection closed with a reason.
    #[serde(deserialize_with = "max_sequences_per_relay")]
    pub max_sequences_per_relay: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_relays: 256,
            hello_timeout_ms: 5000,
            max_frame_bytes: MAX_FRAME_BYTES as u64,
            frame_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_sequences_per_relay: 16_384,
        }
    }
}

/// `[log]`: level (applied again on SIGHUP) and format; one definition
/// with the relay's (see [`tracesync_common::logging`]).
pub use tracesync_common::logging::{LogConfig, LogLevel};

// Range checks, shared by the file (with spans) and the flags.

fn check_any(_: u64) -> Result<(), String> {
    Ok(())
}

fn check_range(v: u64, lo: u64, hi: u64, what: &str) -> Result<(), String> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(format!("{what} must be in {lo}..={hi}, got {v}"))
    }
}

fn check_window_ms(v: u64) -> Result<(), String> {
    check_range(v, 0, 60_000, "merge window (ms)")
}
fn check_ingest_shards(v: u64) -> Result<(), String> {
    let max = tracesync_core::shard::MAX_SHARDS as u64;
    check_range(v, 0, max, "ingest shards (0 = automatic)")
}
fn check_commit_interval_ms(v: u64) -> Result<(), String> {
    check_range(v, 1, 10_000, "commit interval (ms)")
}
fn check_pending_packets(v: u64) -> Result<(), String> {
    check_range(v, 1_000, 10_000_000, "pending packets per relay")
}
fn check_queue_bytes(v: u64) -> Result<(), String> {
    check_range(v, 8 << 20, 64 << 30, "merge queue bytes")
}
fn check_max_relays(v: u64) -> Result<(), String> {
    check_range(v, 1, 65_536, "max relays")
}
fn check_hello_timeout_ms(v: u64) -> Result<(), String> {
    check_range(v, 100, 600_000, "hello timeout (ms)")
}
fn check_max_frame_bytes(v: u64) -> Result<(), String> {
    // Relays cut batches at 1 MiB of packets; a smaller limit refuses them.
    check_range(v, 2 << 20, 64 << 20, "max frame bytes")
}

fn check_frame_timeout_ms(v: u64) -> Result<(), String> {
    check_range(v, 1_000, 600_000, "frame timeout (ms)")
}

fn check_idle_timeout_ms(v: u64) -> Result<(), String> {
    // Above a relay's 2 s heartbeat interval with room for a slow link.
    check_range(v, 5_000, 3_600_000, "idle timeout (ms)")
}

fn check_max_sequences_per_relay(v: u64) -> Result<(), String> {
    check_range(v, 16, 1 << 20, "max sequences per relay")
}

/// A token relays can present: at most `MAX_TOKEN_BYTES` (the limit of a
/// Hello's token).
fn check_token(text: &str) -> Result<String, String> {
    use tracesync_protocol::relay::MAX_TOKEN_BYTES;
    if text.len() > MAX_TOKEN_BYTES {
        return Err(format!(
            "token of {} bytes is over the {MAX_TOKEN_BYTES}-byte limit",
            text.len()
        ));
    }
    Ok(text.to_owned())
}

fn token<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let text = String::deserialize(d)?;
    check_token(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn parse_flag(s: &str, check: fn(u64) -> Result<(), String>) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|_| format!("expected a non-negative integer, got {s:?}"))?;
    check(v)?;
    Ok(v)
}

fn checked<'de, D: Deserializer<'de>>(
    d: D,
    check: fn(u64) -> Result<(), String>,
) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    check(v).map_err(serde::de::Error::custom)?;
    Ok(v)
}

macro_rules! checked_fields {
    ($($name:ident => $check:ident),* $(,)?) => {$(
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
            checked(d, $check)
        }
    )*};
}

checked_fields! {
    any_u64 => check_any,
    window_ms => check_window_ms,
    ingest_shards => check_ingest_shards,
    commit_interval_ms => check_commit_interval_ms,
    pending_packets => check_pending_packets,
    queue_bytes => check_queue_bytes,
    max_relays => check_max_relays,
    hello_timeout_ms => check_hello_timeout_ms,
    max_frame_bytes => check_max_frame_bytes,
    frame_timeout_ms => check_frame_timeout_ms,
    idle_timeout_ms => check_idle_timeout_ms,
    max_sequences_per_relay => check_max_sequences_per_relay,
}

pub use tracesync_common::config::ConfigError;

impl DaemonConfig {
    /// Parses a config file's text; `file` only names it in errors.
    pub fn from_toml(text: &str, file: &Path) -> Result<Self, ConfigError> {
        let config: Self = tracesync_common::config::parse(text, file)?;
        // Checks across keys of a section (each key's range is checked above).
        config
            .sync
            .check()
            .map_err(|message| ConfigError::file(Some(file), message))?;
        Ok(config)
    }

    /// Reads the config the args point at (or the default file, or defaults)
    /// and applies the flag overrides. Returns the file used, if any.
    pub fn load(args: &DaemonArgs) -> Result<(Self, Option<PathBuf>), ConfigError> {
        let path = tracesync_common::config::find(args.config.as_deref(), DEFAULT_CONFIG_PATH);
        let mut text = None;
        let mut config = match &path {
            Some(p) => {
                let read = tracesync_common::config::read(p)?;
                let config = Self::from_toml(&read, p)?;
                text = Some(read);
                config
            }
            None => Self::default(),
        };
        config.apply_flags(args);
        config.check_tls(path.as_deref(), text.as_deref())?;
        Ok((config, path))
    }

    /// Loads the `[tls]` files once, so an unreadable or mismatched one is
    /// a config error (`file:line:column` when the path is in the file).
    pub fn check_tls(&self, file: Option<&Path>, text: Option<&str>) -> Result<(), ConfigError> {
        let Err(e) = self.tls.load() else {
            return Ok(());
        };
        let at = match (self.tls.span(e.key), text, file) {
            (Some(span), Some(text), Some(file)) => Some((span, text, file)),
            _ => None,
        };
        if at.is_none() && e.key == TlsKey::Crl {
            // No default: a CRL not in the file came from the flag.
            return Err(ConfigError::flag("tls-crl", e.message));
        }
        let hint = match (&at, e.key) {
            (_, TlsKey::Ca | TlsKey::ServerName | TlsKey::Crl) => String::new(),
            (Some(_), _) => " (".into(),
            (None, TlsKey::Cert) => " (set [tls] cert or --tls-cert; ".into(),
            (None, TlsKey::Key) => " (set [tls] key or --tls-key; ".into(),
            (None, TlsKey::ClientCa) => " (set [tls] client-ca or --tls-client-ca; ".into(),
        };
        let hint = if hint.is_empty() {
            hint
        } else {
            format!(
                "{hint}`tracesync pki init DIR` makes a lab PKI; [tls] mode = \"off\" or \
                 --tls off runs plaintext)"
            )
        };
        let message = format!("{e}{hint}");
        Err(match at {
            Some((span, text, file)) => ConfigError::at(file, text, span.start, message),
            None => ConfigError::file(file, message),
        })
    }

    /// Flags win over the file.
    pub fn apply_flags(&mut self, args: &DaemonArgs) {
        if let Some(a) = args.listen {
            self.listen.data = a;
        }
        if let Some(a) = args.sync_listen {
            self.listen.sync = a;
        }
        if let Some(p) = &args.control {
            self.listen.control = p.clone();
        }
        if let Some(d) = &args.output {
            self.output.dir = d.clone();
        }
        if let Some(t) = &args.token {
            self.auth.token = Some(t.clone());
        }
        if let Some(v) = args.merge_window_ms {
            self.merge.window_ms = v;
        }
        if let Some(v) = args.ingest_shards {
            self.merge.ingest_shards = v;
        }
        if let Some(v) = args.rotate_bytes {
            self.output.rotate_bytes = v;
        }
        if let Some(v) = args.rotate_seconds {
            self.output.rotate_seconds = v;
        }
        if let Some(v) = args.retain_bytes {
            self.output.retain_bytes = v;
        }
        if let Some(v) = args.retain_seconds {
            self.output.retain_seconds = v;
        }
        if let Some(v) = args.max_relays {
            self.limits.max_relays = v;
        }
        if let Some(mode) = args.tls {
            self.tls.mode = mode;
        }
        for (flag, field) in [
            (&args.tls_cert, &mut self.tls.cert),
            (&args.tls_key, &mut self.tls.key),
            (&args.tls_client_ca, &mut self.tls.client_ca),
        ] {
            if let Some(p) = flag {
                *field = Spanned::new(0..0, p.clone());
            }
        }
        if let Some(p) = &args.tls_crl {
            self.tls.crl = Some(Spanned::new(0..0, p.clone()));
        }
        if let Some(a) = args.metrics_listen {
            self.metrics.listen = Some(a);
        }
        if let Some(f) = args.log_format {
            self.log.format = f;
        }
    }
}

mod check_paths;
#[cfg(test)]
mod tests;
pub mod trigger;
