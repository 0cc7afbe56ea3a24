//! `tracesync`, the command line: `merge` and `clocks` of recorded traces,
//! `demo`, the lab PKI (`pki`), and the clients of a running `tracesyncd`
//! (`tail`, `status`, `trigger`).
//!
//! - [`args`]: the command line as clap parses it.
//! - [`merge`](mod@merge): the offline merger (two passes over the inputs).
//! - [`clocks`]: the clock graph of recorded traces as a table.
//! - [`demo`]: the main job end to end (live) or offline.
//! - [`check`]: checks a rolling capture of synthetic relays against truth.
//! - [`report`]: plots and a table of a capture's clock-sync quality.
//! - [`connect`], [`status`], `tail`, [`trigger`]: the control-socket clients.
//! - [`pki`]: the lab PKI for mutual TLS.
//! - [`follow`]: `tail DIR`, the rolling files followed as they grow.

// The function budget is for the product's code; a test reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines))]

pub mod args;
pub mod check;
pub mod clocks;
pub mod connect;
pub mod demo;
pub mod follow;
pub mod merge;
pub mod pki;
mod quantiles;
pub mod refine;
pub mod report;
pub mod status;
mod tail;
mod terminal;
pub mod trigger;

use std::process::ExitCode;

use tracesync_common::exit;

use args::{Cli, Command};
use connect::Target;

pub fn main() -> ExitCode {
    let cli = match exit::parse_args::<Cli>() {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let code = match cli.command {
        Command::Merge(args) => merge::command::run(args),
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
        Command::Tail(args) => tail::run(args),
        Command::Status {
            connect,
            json,
            verbose,
        } => status::run(&Target::parse(&connect), json, verbose),
        Command::Trigger {
            name,
            before,
            after,
            connect,
        } => trigger::run(
            &Target::parse(&connect),
            &trigger::TriggerArgs {
                name,
                before,
                after,
            },
        ),
        Command::Pki { command } => pki::run(command),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = Cli::command();
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut command, "tracesync", &mut out);
            exit::OK
        }
        Command::Man { dir } => {
            use clap::CommandFactory;
            return match dir {
                None => exit::print_man_page(Cli::command()),
                Some(dir) => exit::write_man_pages(Cli::command(), &dir),
            };
        }
        Command::Clocks(args) => clocks::run(args),
    };
    ExitCode::from(code)
}
