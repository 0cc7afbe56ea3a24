//! The relay's configuration: a TOML file (kebab-case keys, unknown keys
//! rejected) overridden by command-line flags.
//!
//! Search order for the file: `--config FILE`, else
//! `/etc/tracesync/relay.toml` if it exists, else built-in defaults.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

mod control;
mod flags;
mod ring;

pub use control::{ControlSettings, MAX_TRIGGER_ON};
pub use flags::{Flags, RelayCommand};
pub use ring::{
    DEFAULT_RING_BYTES, DEFAULT_RING_SECONDS, MIN_RING_BYTES, RING_SOURCE_LAG, RingSettings,
};

use crate::clocks::ClockSchedule;
use crate::spool::WhenFull;
use crate::tls::{RelayTls, TlsFlags, TlsKey, TlsSection};

/// File looked for when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/tracesync/relay.toml";
/// Spool directory when neither the file nor a flag names one (systemd's
/// `StateDirectory=` overrides it through `$STATE_DIRECTORY`).
pub const DEFAULT_SPOOL_DIR: &str = "/var/lib/tracesync-relay";
pub const DEFAULT_SPOOL_MEMORY_BYTES: u64 = 64 << 20;
pub const DEFAULT_SPOOL_DISK_BYTES: u64 = 1 << 30;
pub const DEFAULT_LINGER_MS: u64 = 20;
/// Seconds a configuration fault (TLS on one side only, the wrong port, a
/// certificate the other side does not accept) may last before the relay
/// exits with 78 (or 77); `--keep-retrying` never gives up.
pub const DEFAULT_GIVE_UP_AFTER_SECONDS: u64 = 60;
/// Sent and unacknowledged bytes at most. Acks come a merge window plus a
/// commit after sending (about 0.2-0.7 s), so this caps a relay's rate at
/// about window / that delay: 64 MiB keeps 4 KiB packets above 100 MB/s
/// per relay with the daemon's default 500 ms window.
pub const DEFAULT_WINDOW_BYTES: u64 = 64 << 20;
/// Two full batches: below this a relay would wait for every ack.
pub const MIN_WINDOW_BYTES: u64 = 1 << 20;
/// Below these the spool cannot hold a few batches and would thrash.
pub const MIN_SPOOL_MEMORY_BYTES: u64 = 64 << 10;
pub const MIN_SPOOL_DISK_BYTES: u64 = 256 << 10;

/// The file's keys (all optional).
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct FileConfig {
    host: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    sources: Option<Vec<Spanned<String>>>,
    token: Option<String>,
    spool: Option<PathBuf>,
    when_full: Option<Spanned<String>>,
    spool_memory_bytes: Option<Spanned<u64>>,
    spool_disk_bytes: Option<Spanned<u64>>,
    linger_ms: Option<Spanned<u64>>,
    window_bytes: Option<Spanned<u64>>,
    give_up_after_seconds: Option<Spanned<u64>>,
    keep_retrying: Option<bool>,
    mode: Option<Spanned<String>>,
    ring: Option<ring::RingSection>,
    control_socket: Option<PathBuf>,
    trigger_on: Option<Vec<Spanned<String>>>,
    clock_offset_ns: Option<i64>,
    clock_drift_ppm: Option<Spanned<f64>>,
    sync: Option<crate::probe::SyncConfig>,
    tls: Option<TlsSection>,
    #[serde(default)]
    log: tracesync_common::logging::LogConfig,
    #[serde(default)]
    metrics: tracesync_common::metrics::MetricsConfig,
}

/// Which clock the relay reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClockChoice {
    System,
    Simulated { offset_ns: i64, drift_ppm: f64 },
}

/// Everything the relay runs with, after file and flags are merged.
#[derive(Clone, Debug, PartialEq)]
pub struct RelayConfig {
    /// The file the settings came from, if any.
    pub file: Option<PathBuf>,
    pub host: String,
    pub name: Option<String>,
    pub sources: Vec<String>,
    pub token: String,
    pub spool_dir: PathBuf,
    pub when_full: WhenFull,
    pub spool_memory_bytes: u64,
    pub spool_disk_bytes: u64,
    pub linger: Duration,
    pub window_bytes: u64,
    /// `--mode` and `[ring]`.
    pub ring: RingSettings,
    /// `control-socket` and `trigger-on`.
    pub control: ControlSettings,
    /// How long a configuration fault may last before the relay exits;
    /// None: keep retrying.
    pub give_up_after: Option<Duration>,
    pub clock: ClockChoice,
    pub sync: crate::probe::SyncConfig,
    /// Test only (flags): wander and steps on top of the simulated clock.
    pub clock_schedule: ClockSchedule,
    pub tls: RelayTls,
    pub log: tracesync_common::logging::LogConfig,
    pub metrics: tracesync_common::metrics::MetricsConfig,
}

pub use tracesync_common::config::ConfigError;

impl RelayConfig {
    /// Finds and reads the file (search order above) and applies the flags.
    pub fn load(flags: &Flags) -> Result<Self, ConfigError> {
        let (config, text) = Self::read(flags)?;
        config.check_tls(text.as_deref())?;
        Ok(config)
    }

    /// As [`load`](Self::load) without loading the TLS files (they may
    /// not exist yet: `--print-name` names the certificate to make).
    pub fn load_without_tls(flags: &Flags) -> Result<Self, ConfigError> {
        Ok(Self::read(flags)?.0)
    }

    /// The merged configuration and the file's text.
    fn read(flags: &Flags) -> Result<(Self, Option<String>), ConfigError> {
        let path = tracesync_common::config::find(flags.config.as_deref(), DEFAULT_CONFIG_PATH);
        let text = path
            .as_deref()
            .map(tracesync_common::config::read)
            .transpose()?;
        let config = Self::from_parts(path.as_deref(), text.as_deref(), flags)?;
        Ok((config, text))
    }

    /// Loads the `[tls]` files once, so an unreadable or mismatched one is
    /// a config error at its key (`file:line:column`) or flag.
    pub fn check_tls(&self, text: Option<&str>) -> Result<(), ConfigError> {
        let Err(e) = self.tls.client(&self.host) else {
            return Ok(());
        };
        let message = format!("tls.{}: {}", e.key.name(), e.message);
        if let (Some(span), Some(text), Some(file)) = (self.tls.span(e.key), text, &self.file) {
            return Err(ConfigError::at(file, text, span.start, message));
        }
        // Not in the file: from a flag unless it is the default.
        let defaults = RelayTls::default();
        let (flag, from_flag) = match e.key {
            TlsKey::Ca => ("tls-ca", self.tls.ca != defaults.ca),
            TlsKey::Cert => ("tls-cert", self.tls.cert != defaults.cert),
            TlsKey::Key => ("tls-key", self.tls.key != defaults.key),
            TlsKey::ServerName => ("tls-server-name", self.tls.server_name.is_some()),
            TlsKey::ClientCa | TlsKey::Crl => ("tls-ca", false),
        };
        if from_flag {
            return Err(ConfigError::flag(flag, e.message));
        }
        Err(ConfigError::file(
            self.file.as_deref(),
            format!(
                "{message} (set [tls] {key} or --tls-{key}; `tracesync pki` makes a lab PKI; \
                 [tls] mode = \"off\" or --tls off runs plaintext)",
                key = e.key.name()
            ),
        ))
    }

    /// Merges file text (if any) and flags; `path` names the file in errors.
    pub fn from_parts(
        path: Option<&Path>,
        text: Option<&str>,
        flags: &Flags,
    ) -> Result<Self, ConfigError> {
        let place = Place {
            file: path.unwrap_or(Path::new("<config>")),
            text: text.unwrap_or_default(),
        };
        let file: FileConfig = match text {
            Some(text) => tracesync_common::config::parse(text, place.file)?,
            None => FileConfig::default(),
        };
        // Checked in this order: the first bad value is the one reported.
        let host = pick_host(flags, &file, place)?;
        let name = pick_name(flags, &file, place)?;
        let sources = pick_sources(flags, &file, place)?;
        let limits = Limits::pick(flags, &file, place)?;
        let ring = RingSettings::pick(
            flags,
            file.mode.as_ref(),
            file.ring.as_ref(),
            limits.spool_disk_bytes,
            place,
        )?;
        let control = ControlSettings::pick(
            flags,
            file.control_socket.as_ref(),
            file.trigger_on.as_ref(),
            place,
        )?;
        let token = match (&flags.token, &file.token) {
            (Some(flag), _) => {
                check_token(flag).map_err(|message| ConfigError::flag("token", message))?
            }
            (None, Some(value)) => {
                check_token(value).map_err(|message| ConfigError::file(path, message))?
            }
            (None, None) => String::new(),
        };
        let (clock, clock_schedule) = pick_clock(flags, &file, place)?;
        let spool_dir = flags
            .spool
            .clone()
            .or(file.spool)
            .or_else(|| std::env::var_os("STATE_DIRECTORY").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SPOOL_DIR));
        let tls_flags = TlsFlags {
            mode: flags.tls,
            ca: flags.tls_ca.clone(),
            cert: flags.tls_cert.clone(),
            key: flags.tls_key.clone(),
            server_name: flags.tls_server_name.clone(),
        };
        let mut log = file.log;
        if let Some(format) = flags.log_format {
            log.format = format;
        }
        let mut metrics = file.metrics;
        if let Some(addr) = flags.metrics_listen {
            metrics.listen = Some(addr);
        }
        Ok(Self {
            tls: RelayTls::merge(file.tls, &tls_flags),
            file: path.map(Path::to_path_buf),
            host,
            name,
            sources,
            token,
            spool_dir,
            when_full: limits.when_full,
            spool_memory_bytes: limits.spool_memory_bytes,
            spool_disk_bytes: limits.spool_disk_bytes,
            linger: Duration::from_millis(limits.linger_ms),
            window_bytes: limits.window_bytes,
            ring,
            control,
            give_up_after: limits.give_up_after,
            clock,
            sync: {
                let sync = file.sync.unwrap_or_default();
                crate::probe::SyncConfig {
                    transport: flags.sync_transport.unwrap_or(sync.transport),
                    ..sync
                }
            },
            clock_schedule,
            log,
            metrics,
        })
    }
}

/// The config file's name and text, for an error at a value's place
/// (`file:line:column`).
#[derive(Clone, Copy)]
struct Place<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Place<'_> {
    fn at(self, span: std::ops::Range<usize>, message: String) -> ConfigError {
        ConfigError::at(self.file, self.text, span.start, message)
    }
}

fn pick_host(flags: &Flags, file: &FileConfig, place: Place<'_>) -> Result<String, ConfigError> {
    Ok(match (&flags.host, &file.host) {
        (Some(flag), _) => {
            check_host(flag).map_err(|message| ConfigError::flag("host", message))?
        }
        (None, Some(value)) => {
            check_host(value.get_ref()).map_err(|m| place.at(value.span(), m))?
        }
        (None, None) => format!("127.0.0.1:{}", tracesync_protocol::relay::DEFAULT_DATA_PORT),
    })
}

fn pick_name(
    flags: &Flags,
    file: &FileConfig,
    place: Place<'_>,
) -> Result<Option<String>, ConfigError> {
    Ok(match (&flags.name, &file.name) {
        (Some(flag), _) => {
            Some(check_name(flag).map_err(|message| ConfigError::flag("name", message))?)
        }
        (None, Some(value)) => {
            Some(check_name(value.get_ref()).map_err(|m| place.at(value.span(), m))?)
        }
        (None, None) => None,
    })
}

/// The flags' sources replace the file's list.
fn pick_sources(
    flags: &Flags,
    file: &FileConfig,
    place: Place<'_>,
) -> Result<Vec<String>, ConfigError> {
    if !flags.sources.is_empty() {
        for spec in &flags.sources {
            check_source(spec).map_err(|message| ConfigError::flag("source", message))?;
        }
        return Ok(flags.sources.clone());
    }
    let mut sources = Vec::new();
    for spec in file.sources.iter().flatten() {
        check_source(spec.get_ref()).map_err(|m| place.at(spec.span(), m))?;
        sources.push(spec.get_ref().clone());
    }
    Ok(sources)
}

/// The spool's and the uplink's limits.
struct Limits {
    when_full: WhenFull,
    spool_memory_bytes: u64,
    spool_disk_bytes: u64,
    linger_ms: u64,
    window_bytes: u64,
    give_up_after: Option<Duration>,
}

impl Limits {
    fn pick(flags: &Flags, file: &FileConfig, place: Place<'_>) -> Result<Self, ConfigError> {
        let when_full = match (flags.when_full, &file.when_full) {
            (Some(policy), _) => policy,
            (None, Some(value)) => {
                WhenFull::parse(value.get_ref()).map_err(|m| place.at(value.span(), m))?
            }
            (None, None) => WhenFull::Block,
        };
        let spool_memory_bytes = pick_min(
            flags.spool_memory_bytes,
            file.spool_memory_bytes.as_ref(),
            DEFAULT_SPOOL_MEMORY_BYTES,
            MIN_SPOOL_MEMORY_BYTES,
            "spool-memory-bytes",
            place,
        )?;
        let spool_disk_bytes = pick_min(
            flags.spool_disk_bytes,
            file.spool_disk_bytes.as_ref(),
            DEFAULT_SPOOL_DISK_BYTES,
            MIN_SPOOL_DISK_BYTES,
            "spool-disk-bytes",
            place,
        )?;
        let linger_ms = pick_range(
            flags.linger_ms,
            file.linger_ms.as_ref(),
            DEFAULT_LINGER_MS,
            1..=10_000,
            "linger-ms",
            place,
        )?;
        let window_bytes = pick_min(
            flags.window_bytes,
            file.window_bytes.as_ref(),
            DEFAULT_WINDOW_BYTES,
            MIN_WINDOW_BYTES,
            "window-bytes",
            place,
        )?;
        let give_up_after_seconds = pick_range(
            flags.give_up_after_seconds,
            file.give_up_after_seconds.as_ref(),
            DEFAULT_GIVE_UP_AFTER_SECONDS,
            1..=86_400,
            "give-up-after-seconds",
            place,
        )?;
        let keep_retrying = flags.keep_retrying || file.keep_retrying.unwrap_or(false);
        Ok(Self {
            when_full,
            spool_memory_bytes,
            spool_disk_bytes,
            linger_ms,
            window_bytes,
            give_up_after: (!keep_retrying).then(|| Duration::from_secs(give_up_after_seconds)),
        })
    }
}

/// The system clock, or a simulated one when any of its settings is given.
fn pick_clock(
    flags: &Flags,
    file: &FileConfig,
    place: Place<'_>,
) -> Result<(ClockChoice, ClockSchedule), ConfigError> {
    let offset = flags.clock_offset_ns.or(file.clock_offset_ns);
    let drift = match (flags.clock_drift_ppm, &file.clock_drift_ppm) {
        (Some(ppm), _) => Some(
            check_drift(ppm).map_err(|message| ConfigError::flag("clock-drift-ppm", message))?,
        ),
        (None, Some(value)) => {
            Some(check_drift(*value.get_ref()).map_err(|m| place.at(value.span(), m))?)
        }
        (None, None) => None,
    };
    let clock_schedule = ClockSchedule {
        wander: flags.clock_wander,
        steps: flags.clock_step.clone(),
        slews: flags.clock_slew.clone(),
    };
    let clock = if offset.is_some() || drift.is_some() || !clock_schedule.is_empty() {
        ClockChoice::Simulated {
            offset_ns: offset.unwrap_or(0),
            drift_ppm: drift.unwrap_or(0.0),
        }
    } else {
        ClockChoice::System
    };
    Ok((clock, clock_schedule))
}

/// `HOST:PORT`, or `HOST` alone (the default port is added).
fn check_host(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty daemon address; give HOST:PORT, e.g. 127.0.0.1:7410".into());
    }
    if text.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(text.to_owned());
    }
    if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        let port = tracesync_protocol::relay::DEFAULT_DATA_PORT;
        return Ok(std::net::SocketAddr::new(ip, port).to_string());
    }
    match text.rsplit_once(':') {
        Some((host, port)) => {
            if host.is_empty() || host.contains(':') {
                return Err(format!(
                    "bad daemon address {text:?}; write IPv6 as [ADDR]:PORT"
                ));
            }
            port.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .map(|_| text.to_owned())
                .ok_or_else(|| format!("bad port in daemon address {text:?}; give 1-65535"))
        }
        None => Ok(format!(
            "{text}:{}",
            tracesync_protocol::relay::DEFAULT_DATA_PORT
        )),
    }
}

fn check_name(text: &str) -> Result<String, String> {
    use tracesync_protocol::relay::MAX_MACHINE_NAME_BYTES;
    if text.is_empty() || text.len() > MAX_MACHINE_NAME_BYTES || text.chars().any(char::is_control)
    {
        return Err(format!(
            "bad machine name {text:?}; give 1-255 printable characters"
        ));
    }
    Ok(text.to_owned())
}

/// A token the daemon would take: at most `MAX_TOKEN_BYTES` (the daemon
/// refuses a longer Hello token as `hello_too_large`).
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

/// Shape check only; the sources module parses the spec in full.
fn check_source(spec: &str) -> Result<(), String> {
    let kind = spec.split(':').next().unwrap_or_default();
    match kind {
        "file" | "unix" | "synthetic" if spec.len() > kind.len() + 1 => Ok(()),
        "stdin" if spec == "stdin" => Ok(()),
        _ => Err(format!(
            "bad source {spec:?}; give file:PATH, unix:PATH, stdin or synthetic:RATE"
        )),
    }
}

fn check_drift(ppm: f64) -> Result<f64, String> {
    if ppm.is_finite() && ppm.abs() <= 10_000.0 {
        Ok(ppm)
    } else {
        Err(format!(
            "drift {ppm} ppm is out of range; give -10000..10000"
        ))
    }
}

fn pick_min(
    flag: Option<u64>,
    file: Option<&Spanned<u64>>,
    default: u64,
    min: u64,
    key: &'static str,
    place: Place<'_>,
) -> Result<u64, ConfigError> {
    pick_range(flag, file, default, min..=u64::MAX, key, place)
}

fn pick_range(
    flag: Option<u64>,
    file: Option<&Spanned<u64>>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
    key: &'static str,
    place: Place<'_>,
) -> Result<u64, ConfigError> {
    let message = |v: u64| {
        format!(
            "{key} = {v} is out of range; give {}..{}",
            range.start(),
            range.end()
        )
    };
    match (flag, file) {
        (Some(v), _) if range.contains(&v) => Ok(v),
        (Some(v), _) => Err(ConfigError::flag(key, message(v))),
        (None, Some(v)) if range.contains(v.get_ref()) => Ok(*v.get_ref()),
        (None, Some(v)) => Err(place.at(v.span(), message(*v.get_ref()))),
        (None, None) => Ok(default),
    }
}

#[cfg(test)]
mod tests;
