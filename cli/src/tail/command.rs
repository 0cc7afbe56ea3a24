//! `tracesync tail` as the command line gives it: what is refused before
//! anything is read, then the daemon's stream or a capture directory.

use std::path::PathBuf;

use tracesync_common::exit;
use tracesync_core::control::{TailFormat, TimeMode};

use super::dir::run_dir;
use super::file::run_file;
use super::live::run_socket;
use super::options::{MAX_LINES, TailOptions};
use crate::connect::{DEFAULT_CONTROL, Target};
use crate::merge::window;
use crate::terminal;

/// The flags of `tracesync tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// The daemon's control socket, or HOST:PORT where it is forwarded
    /// (tracesyncd listens on the Unix socket only; e.g. ssh -L or socat)
    /// [default: /run/tracesync/control.sock].
    #[arg(long, value_name = "SOCKET|HOST:PORT", conflicts_with = "dir")]
    pub connect: Option<String>,
    #[arg(long, value_enum, default_value_t = TailFormat::Text)]
    pub format: TailFormat,
    /// Only this machine (name, raw id, or `host`); repeat for several.
    #[arg(long = "machine", value_name = "NAME")]
    pub machines: Vec<String>,
    /// How text lines show time: UTC wall clock (RFC 3339, µs), host
    /// BOOTTIME seconds, or trace time in ns as written.
    #[arg(long, value_enum, default_value_t = TimeMode::Wall)]
    pub time: TimeMode,
    /// Start with the last N records (text, jsonl; at most 100000), then follow.
    #[arg(short = 'n', long = "lines", value_name = "N",
          value_parser = clap::value_parser!(u64).range(..=MAX_LINES))]
    pub lines: Option<u64>,
    /// Start with the records at or after TIME (text, jsonl), then follow:
    /// trace-time ns, an RFC 3339 UTC time, or -DURATION before the end (-30s).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Follow the rolling files in this directory instead of the daemon;
    /// or print one snapshot (or rolled) FILE and exit.
    #[arg(value_name = "DIR|FILE")]
    pub dir: Option<PathBuf>,
}

/// Runs `tracesync tail`; its exit code.
pub fn run(args: TailArgs) -> u8 {
    let TailArgs {
        connect,
        format,
        machines,
        time,
        lines,
        since,
        dir,
    } = args;
    let since = match since.as_deref().map(window::parse_time).transpose() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tracesync: error: --since: {e}");
            return exit::USAGE;
        }
    };
    if format == TailFormat::Perfetto && (lines.is_some() || since.is_some()) {
        eprintln!(
            "tracesync: error: tail --format perfetto starts at a preamble, not at -n or \
             --since; use tracesync merge DIR --since TIME for a window as a trace"
        );
        return exit::USAGE;
    }
    let opts = TailOptions {
        format,
        machines,
        time,
        lines,
        since,
    };
    if format == TailFormat::Perfetto
        && let Err(code) = terminal::refuse_binary_stdout(
            "tail --format perfetto",
            "redirect standard output to a file or pipe (| trace_processor), or use \
             --format text or jsonl",
        )
    {
        return code;
    }
    match dir {
        Some(file) if file.is_file() => run_file(&file, &opts),
        Some(dir) => run_dir(&dir, &opts),
        None => {
            let target = Target::parse(connect.as_deref().unwrap_or(DEFAULT_CONTROL));
            run_socket(&target, opts)
        }
    }
}
