//! `tracesync merge` as the command line gives it: a rolling capture (a
//! DIR, or rolled files) read back with its window, or recorded traces
//! merged; what is refused before any input is read, and what is said
//! after.

use std::path::{Path, PathBuf};

use tracesync_common::exit;

use super::capture::{self, Capture};
use super::output::Format;
use super::window::{parse_time, resolve};
use super::{MergeError, MergeOptions, merge};
use crate::terminal;

/// The flags and inputs of `tracesync merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// A perfetto_manifest JSON file (version 1).
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// Output file, or - for standard output.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "OUT|-",
        default_value = "-"
    )]
    pub output: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Perfetto)]
    pub format: Format,
    /// Write counters (Perfetto's stat names) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// Fail on any bad input or any packet with no place on the timeline.
    #[arg(long)]
    pub strict: bool,
    /// Give each input that would go to the host machine a machine of its own.
    #[arg(long)]
    pub machine_per_file: bool,
    /// Of a capture (DIR or rolled files): only packets at or after TIME:
    /// trace-time ns, an RFC 3339 UTC time, or -DURATION before the end (-30s).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Of a capture: only packets at or before TIME (as --since).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub until: Option<String>,
    /// Input traces, or a rolling output directory (DIR), or rolled files
    /// of one capture (read back as one).
    #[arg(required = true, value_name = "INPUT|DIR")]
    pub inputs: Vec<PathBuf>,
}

/// Runs `tracesync merge`; its exit code.
pub fn run(args: MergeArgs) -> u8 {
    let MergeArgs {
        manifest,
        output,
        format,
        stats,
        strict,
        machine_per_file,
        since,
        until,
        inputs,
    } = args;
    if format == Format::Perfetto
        && output.as_os_str() == "-"
        && let Err(code) = terminal::refuse_binary_stdout(
            "merge",
            "give -o FILE.pftrace, redirect standard output, or use --format jsonl",
        )
    {
        return code;
    }
    // Before the output's temporary is made: an interrupt removes it.
    super::interrupted::remove_temporary_on_signal(&output);
    match capture::detect(&inputs) {
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            e.code
        }
        Ok(Some(capture)) => {
            merge_capture(&capture, &output, format, stats.as_deref(), since, until)
        }
        Ok(None) if since.is_some() || until.is_some() => {
            eprintln!(
                "tracesync: error: --since/--until read a rolling capture: give tracesyncd's output DIR or its rolled files (tracesync-*.pftrace)"
            );
            exit::USAGE
        }
        Ok(None) => {
            let opts = MergeOptions {
                inputs,
                manifest,
                output: Some(output),
                format,
                stats,
                strict,
                machine_per_file,
            };
            merge_traces(&opts)
        }
    }
}

/// `merge` of recorded traces.
fn merge_traces(opts: &MergeOptions) -> u8 {
    let mut report = |fault: &super::first_pass::InputFault| eprintln!("tracesync: {fault}");
    match merge(opts, &mut report) {
        Ok(outcome) => {
            if outcome.stats.packets_dropped > 0 {
                eprintln!(
                    "tracesync: warning: {} packets had no place on the timeline and were dropped (see --stats)",
                    outcome.stats.packets_dropped
                );
            }
            outcome.exit_code()
        }
        Err(e) if e.is_closed_output() => exit::OK,
        // One bad input said it all on its own line.
        Err(e @ MergeError::NothingToMerge(_)) if opts.inputs.len() == 1 => e.exit_code(),
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            e.exit_code()
        }
    }
}

/// `merge` of a capture (DIR or rolled files), with its window.
fn merge_capture(
    capture: &Capture,
    output: &Path,
    format: Format,
    stats: Option<&Path>,
    since: Option<String>,
    until: Option<String>,
) -> u8 {
    let parse = |flag: &str, t: Option<String>| match t.as_deref().map(parse_time) {
        None => Ok(None),
        Some(Ok(spec)) => Ok(Some(spec)),
        Some(Err(e)) => Err(format!("--{flag} {e}")),
    };
    let (since, until) = match (parse("since", since), parse("until", until)) {
        (Ok(s), Ok(u)) => (s, u),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("tracesync: error: {e}");
            return exit::USAGE;
        }
    };
    let window = if since.is_some() || until.is_some() {
        match resolve(capture, since, until) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("tracesync: error: {e}");
                return e.code;
            }
        }
    } else {
        None
    };
    match super::capture_out::merge_capture(capture, Some(output), format, window, stats) {
        Ok(_) => exit::OK,
        Err(e) if e.is_closed_output() => exit::OK,
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            e.code
        }
    }
}
