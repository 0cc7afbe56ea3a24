//! `tracesync`, the command line: `merge` and `clocks` of recorded traces,
//! `demo`, the lab PKI (`pki`), and the clients of a running `tracesyncd`
//! (`tail`, `status`).
//!
//! - [`args`]: the command line as clap parses it.
//! - [`merge`](mod@merge): the offline merger (two passes over the inputs).
//! - [`clocks`]: the clock graph of recorded traces as a table.
//! - [`demo`]: the main job end to end (live) or offline.
//! - [`check`]: checks a rolling capture of synthetic relays against truth.
//! - [`report`]: plots and a table of a capture's clock-sync quality.
//! - [`connect`], [`status`], `tail`: the control-socket clients.
//! - [`follow`]: `tail DIR`, the rolling files followed as they grow.

pub mod args;
pub mod check;
pub mod clocks;
pub mod connect;
pub mod demo;
pub mod follow;
pub mod merge;
pub mod refine;
pub mod report;
pub mod status;
mod tail;
mod terminal;

use std::process::ExitCode;

use tracesync_common::exit;

use args::{Cli, Command, PkiCommand};
use connect::{DEFAULT_CONTROL, Target};
use merge::{MergeOptions, merge, prepare};
use tracesync_core::control::TailFormat;

pub fn main() -> ExitCode {
    let cli = match exit::parse_args::<Cli>() {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let mut report = |fault: &crate::merge::first_pass::InputFault| eprintln!("tracesync: {fault}");
    let code = match cli.command {
        Command::Merge {
            manifest,
            output,
            format,
            stats,
            strict,
            machine_per_file,
            since,
            until,
            inputs,
        } => {
            if format == merge::output::Format::Perfetto
                && output.as_os_str() == "-"
                && let Err(code) = terminal::refuse_binary_stdout(
                    "merge",
                    "give -o FILE.pftrace, redirect standard output, or use --format jsonl",
                )
            {
                return ExitCode::from(code);
            }
            match merge::capture::detect(&inputs) {
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
                    let inputs_given = inputs.len();
                    let opts = MergeOptions {
                        inputs,
                        manifest,
                        output: Some(output),
                        format,
                        stats,
                        strict,
                        machine_per_file,
                    };
                    match merge(&opts, &mut report) {
                        Ok(outcome) => {
                            if outcome.stats.packets_dropped > 0 {
                                eprintln!(
                                    "tracesync: warning: {} packets had no place on the timeline and were dropped (see --stats)",
                                    outcome.stats.packets_dropped
                                );
                            }
                            outcome.exit_code()
                        }
                        // One bad input said it all on its own line.
                        Err(e @ merge::MergeError::NothingToMerge(_)) if inputs_given == 1 => {
                            e.exit_code()
                        }
                        Err(e) => {
                            eprintln!("tracesync: error: {e}");
                            e.exit_code()
                        }
                    }
                }
            }
        }
        Command::Report { output, inputs } => report::run(&inputs, output.as_deref()),
        Command::Refine { output, stats, dir } => {
            refine::run(&dir, output.as_deref(), stats.as_deref())
        }
        Command::Demo {
            relays,
            seconds,
            out,
            rate,
            metrics_listen,
            offline,
        } => {
            if offline {
                demo::run_offline(relays, seconds, out)
            } else {
                demo::run_live(relays, seconds, out, rate, &metrics_listen)
            }
        }
        Command::Tail {
            connect,
            format,
            machines,
            time,
            lines,
            since,
            dir,
        } => {
            let since = match since.as_deref().map(merge::window::parse_time).transpose() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("tracesync: error: --since: {e}");
                    return ExitCode::from(exit::USAGE);
                }
            };
            if format == TailFormat::Perfetto && (lines.is_some() || since.is_some()) {
                eprintln!(
                    "tracesync: error: tail --format perfetto starts at a preamble, not at -n or \
                     --since; use tracesync merge DIR --since TIME for a window as a trace"
                );
                return ExitCode::from(exit::USAGE);
            }
            let opts = tail::TailOptions {
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
                return ExitCode::from(code);
            }
            match dir {
                Some(dir) => tail::run_dir(&dir, &opts),
                None => {
                    let target = Target::parse(connect.as_deref().unwrap_or(DEFAULT_CONTROL));
                    tail::run_socket(&target, opts)
                }
            }
        }
        Command::Status {
            connect,
            json,
            verbose,
        } => status::run(&Target::parse(&connect), json, verbose),
        Command::Pki { command } => pki(command),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = Cli::command();
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut command, "tracesync", &mut out);
            exit::OK
        }
        Command::Man => {
            use clap::CommandFactory;
            return exit::print_man_page(Cli::command());
        }
        Command::Clocks {
            json,
            manifest,
            machine_per_file,
            inputs,
        } => {
            // A capture directory (as `merge DIR` reads it): its rolled files.
            let inputs = match merge::capture::detect(&inputs) {
                Ok(Some(capture)) if capture.dir.is_some() => {
                    capture.files.into_iter().map(|f| f.path).collect()
                }
                Err(e) => {
                    eprintln!("tracesync: error: {e}");
                    return ExitCode::from(e.code);
                }
                _ => inputs,
            };
            match prepare(
                &inputs,
                manifest.as_deref(),
                machine_per_file,
                false,
                &mut report,
            ) {
                Ok(prepared) => {
                    let code = if prepared.faults.is_empty() {
                        exit::OK
                    } else {
                        exit::DATAERR
                    };
                    match clocks::print(prepared, json) {
                        Ok(()) => code,
                        // A closed reader (`| head`) ends the listing quietly.
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
                        Err(e) => {
                            eprintln!("tracesync: error: cannot write: {e}");
                            exit::IOERR
                        }
                    }
                }
                Err(e) => {
                    eprintln!("tracesync: error: {e}");
                    e.exit_code()
                }
            }
        }
    };
    ExitCode::from(code)
}

fn pki(command: PkiCommand) -> u8 {
    use tracesync_common::tls::pki;
    let group = match &command {
        PkiCommand::Init { group, .. }
        | PkiCommand::Issue { group, .. }
        | PkiCommand::Renew { group, .. } => group.clone(),
        PkiCommand::Revoke { .. } => None,
    };
    let gid = match group.as_deref().map(pki::lookup_group).transpose() {
        Ok(gid) => gid,
        Err(e) => {
            eprintln!("tracesync: error: pki: {e}");
            return e.exit_code();
        }
    };
    let result = match command {
        PkiCommand::Init {
            daemon_names,
            days,
            dir,
            ..
        } => {
            let names = if daemon_names.is_empty() {
                let mut names: Vec<String> = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
                    .into_iter()
                    .collect();
                names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
                names
            } else {
                daemon_names
            };
            pki::init_for(&dir, &names, days)
        }
        PkiCommand::Issue {
            name,
            raw_id,
            days,
            dir,
            ..
        } => pki::issue_for(&dir, &name, raw_id, days),
        PkiCommand::Renew {
            name,
            daemon,
            days,
            dir,
            ..
        } => {
            let holder = match name {
                Some(name) if !daemon => pki::Holder::Relay(name),
                _ => pki::Holder::Daemon,
            };
            pki::renew(&dir, &holder, days)
        }
        PkiCommand::Revoke { name, dir } => pki::revoke(&dir, &name).map(|(crl, already)| {
            if already {
                eprintln!("tracesync: pki: {name}'s certificate was already revoked");
            }
            vec![crl]
        }),
    };
    let result = result.and_then(|files| match gid {
        Some(gid) => pki::share_keys_with_group(&files, gid).map(|()| files),
        None => Ok(files),
    });
    match result {
        Ok(files) => {
            for file in files {
                println!("{}", file.display());
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("tracesync: error: pki: {e}");
            e.exit_code()
        }
    }
}

/// `merge` of a capture (DIR or rolled files), with its window.
fn merge_capture(
    capture: &merge::capture::Capture,
    output: &std::path::Path,
    format: merge::output::Format,
    stats: Option<&std::path::Path>,
    since: Option<String>,
    until: Option<String>,
) -> u8 {
    use merge::window::{parse_time, resolve};
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
    match merge::capture_out::merge_capture(capture, Some(output), format, window, stats) {
        Ok(_) => exit::OK,
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            e.code
        }
    }
}
