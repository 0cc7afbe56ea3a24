//! Logging of `tracesyncd`, `tracesync-relay` and the `tracesync` tools:
//! tracing-subscriber on stderr, in one of three shapes.
//!
//! - journald (stderr is the journal stream, `JOURNAL_STREAM` names it):
//!   no colours, no timestamps (journald stamps every line), and a syslog
//!   `<N>` priority prefix so `journalctl -p warning` filters by level.
//! - text (a terminal or a file): timestamps, level, target; colours only
//!   on a terminal.
//! - JSON (`[log] format = "json"` or `--log-format json`): one object per
//!   line, for log shippers.
//!
//! The level comes from `[log] level`, unless `RUST_LOG` is set: then
//! `RUST_LOG` wins, also over a reload. The filter sits behind a reload
//! handle: [`set_level`] changes it without a restart (SIGHUP).

use std::fmt;
use std::sync::OnceLock;

use serde::Deserialize;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

/// `[log]`: level and format.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct LogConfig {
    /// Used when RUST_LOG is not set.
    pub level: LogLevel,
    pub format: LogFormat,
}

/// `[log] level`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// `[log] format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// journald-friendly when stderr is the journal, else text with times.
    #[default]
    Auto,
    /// Text with timestamps (colours on a terminal).
    Text,
    /// One JSON object per line.
    Json,
}

/// What [`init`] chose (for tests and the startup log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Journald,
    Text { ansi: bool },
    Json,
}

static RELOAD: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
/// RUST_LOG was set at startup: it wins over the config, also on reload.
static FROM_ENV: OnceLock<bool> = OnceLock::new();

/// Which shape `format` means here (stderr's kind and `JOURNAL_STREAM`).
pub fn shape(format: LogFormat) -> Shape {
    match format {
        LogFormat::Json => Shape::Json,
        LogFormat::Auto if stderr_is_journal() => Shape::Journald,
        LogFormat::Auto | LogFormat::Text => Shape::Text {
            ansi: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        },
    }
}

/// True when stderr is the stream systemd connected to the journal: the
/// `JOURNAL_STREAM` variable (`DEVICE:INODE`) matches stderr's own. A child
/// that inherited the variable but writes elsewhere gets text.
pub fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr()) {
        // Parsed as the fields' own types (they differ between targets).
        Ok(st) => dev.parse() == Ok(st.st_dev) && ino.parse() == Ok(st.st_ino),
        Err(_) => false,
    }
}

/// Installs the global subscriber: `RUST_LOG` if set, else `level` (an
/// EnvFilter directive such as `info` or `info,tracesync_core::live=debug`).
/// A second call does nothing. Returns the shape used.
pub fn init(level: &str, format: LogFormat) -> Shape {
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let filter = env
        .as_deref()
        .and_then(|v| EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info")));
    let (filter, handle) = reload::Layer::new(filter);
    let shape = shape(format);
    let output: Box<dyn Layer<_> + Send + Sync> = match shape {
        Shape::Journald => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .event_format(Journald)
            .boxed(),
        Shape::Text { ansi } => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .boxed(),
        Shape::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    if tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .try_init()
        .is_ok()
    {
        let _ = RELOAD.set(handle);
        let _ = FROM_ENV.set(env.is_some());
    }
    shape
}

/// What [`set_level`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelChange {
    Applied,
    /// `RUST_LOG` was set at startup and still wins.
    KeptEnv,
    /// [`init`] did not install the subscriber (e.g. in tests).
    NotInitialized,
}

/// Changes the filter at run time (SIGHUP), unless `RUST_LOG` set it.
/// `level` is an EnvFilter directive; a bad one is an error and changes
/// nothing.
pub fn set_level(level: &str) -> Result<LevelChange, String> {
    let filter = EnvFilter::try_new(level).map_err(|e| format!("log level {level:?}: {e}"))?;
    let Some(handle) = RELOAD.get() else {
        return Ok(LevelChange::NotInitialized);
    };
    if FROM_ENV.get().copied().unwrap_or(false) {
        return Ok(LevelChange::KeptEnv);
    }
    handle
        .reload(filter)
        .map_err(|e| format!("cannot change the log level: {e}"))?;
    Ok(LevelChange::Applied)
}

/// `<N>LEVEL target: message fields`: the `<N>` syslog priority is read
/// (and removed) by journald (`SyslogLevelPrefix=yes`, the default).
struct Journald;

fn syslog_priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7, // debug, trace
    }
}

impl<S, N> FormatEvent<S, N> for Journald
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        write!(
            writer,
            "<{}>{} {}: ",
            syslog_priority(*meta.level()),
            meta.level(),
            meta.target()
        )?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_follow_syslog() {
        assert_eq!(syslog_priority(Level::ERROR), 3);
        assert_eq!(syslog_priority(Level::WARN), 4);
        assert_eq!(syslog_priority(Level::INFO), 6);
        assert_eq!(syslog_priority(Level::DEBUG), 7);
    }

    #[test]
    fn json_is_json_and_text_is_not_journald_without_the_variable() {
        assert_eq!(shape(LogFormat::Json), Shape::Json);
        if std::env::var_os("JOURNAL_STREAM").is_none() {
            assert!(matches!(shape(LogFormat::Auto), Shape::Text { .. }));
        }
    }

    #[test]
    fn a_bad_level_is_an_error() {
        assert!(set_level("info,=[").is_err());
        // Not initialized in unit tests: a good level is accepted, no-op.
        assert_eq!(set_level("debug"), Ok(LevelChange::NotInitialized));
    }
}
