//! `tracesync-vm-host`: the host's side of `scripts/vm-relay.sh`.
//!
//!   tracesync-vm-host ping --socket PING.sock --count 150 --interval-ms 100 --log pings.jsonl
//!   tracesync-vm-host quit --socket PING.sock
//!   tracesync-vm-host check --dir OUT --merged merged.jsonl --pings pings.jsonl \
//!       --live live.jsonl --status status.json --machine tracesync-vm --arch x86_64
//!
//! `ping` sends numbered pings over the guest's serial port (qemu wires it
//! to a unix socket) and logs host send/receive BOOTTIME and the guest's
//! stamp of each; `quit` tells the guest program to stop; `check` prints
//! the run's figures, ending with
//! `vm-relay: arch ARCH; packets N lost L dup D; causality K/K inside; drift X ppm`,
//! and exits 0 only if nothing was lost or duplicated and every ping event
//! lies inside its window (1 otherwise; sysexits for bad input).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tracesync_tests::vm::Ping;
use tracesync_tests::vm::check::{Inputs, check};
use tracesync_tests::vm::ping::{Channel, PingPlan};

#[derive(Parser, Debug)]
#[command(name = "tracesync-vm-host", about = "Host side of scripts/vm-relay.sh")]
struct Flags {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send numbered pings over the guest's serial port and log them.
    Ping {
        /// The unix socket qemu made for the guest's second serial port.
        #[arg(long)]
        socket: PathBuf,
        #[arg(long, default_value_t = 150)]
        count: u64,
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
        /// Longest wait for the guest to boot and say it is ready (s).
        #[arg(long, default_value_t = 60)]
        ready_timeout: u64,
        /// Ping log (one JSON object per ping).
        #[arg(long)]
        log: PathBuf,
    },
    /// Tell the guest program to exit (the guest then stops its relay).
    Quit {
        #[arg(long)]
        socket: PathBuf,
    },
    /// Check the finished run and print its figures.
    Check {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        merged: PathBuf,
        #[arg(long)]
        pings: PathBuf,
        /// `tracesync tail --format jsonl` of the capture (the live bounds).
        #[arg(long)]
        live: Option<PathBuf>,
        #[arg(long)]
        status: Option<PathBuf>,
        #[arg(long)]
        machine: String,
        /// The guest's architecture (`uname -m`), which its SystemInfo
        /// must name and the last line names.
        #[arg(long)]
        arch: String,
        /// Skip loading the rolled files in the trace processor.
        #[arg(long)]
        no_trace_processor: bool,
    },
}

fn main() -> ExitCode {
    match run(Flags::parse().command) {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("tracesync-vm-host: {message}");
            ExitCode::from(code)
        }
    }
}

/// sysexits: 65 bad data, 66 no input, 69 unavailable, 73 cannot create.
fn run(command: Command) -> Result<ExitCode, (u8, String)> {
    match command {
        Command::Ping {
            socket,
            count,
            interval_ms,
            ready_timeout,
            log,
        } => {
            let mut out = std::fs::File::create(&log)
                .map_err(|e| (73, format!("{}: cannot create: {e}", log.display())))?;
            let ready = Duration::from_secs(ready_timeout);
            let mut channel = Channel::connect(&socket, ready).map_err(|e| (69, e))?;
            channel.wait_ready(ready).map_err(|e| (69, e))?;
            let plan = PingPlan {
                count,
                interval: Duration::from_millis(interval_ms),
                ready_timeout: ready,
                answer_timeout: Duration::from_secs(5),
            };
            let mut write_err = None;
            let pings = channel
                .run(&plan, |p| {
                    if let Err(e) = writeln!(out, "{}", p.to_json()) {
                        write_err.get_or_insert(e);
                    }
                })
                .map_err(|e| (69, e))?;
            if let Some(e) = write_err {
                return Err((74, format!("{}: {e}", log.display())));
            }
            let windows: Vec<u64> = pings.iter().map(|p| p.recv_ns - p.send_ns).collect();
            eprintln!(
                "vm-relay: {} pings answered over the serial port, window {}",
                pings.len(),
                tracesync_tests::vm::stats::p50_p99_us(&windows)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Quit { socket } => {
            let mut channel =
                Channel::connect(&socket, Duration::from_secs(5)).map_err(|e| (69, e))?;
            channel.quit().map_err(|e| (69, e))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            dir,
            merged,
            pings,
            live,
            status,
            machine,
            arch,
            no_trace_processor,
        } => {
            let pings = read_pings(&pings)?;
            let status = match status {
                None => None,
                Some(path) => {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| (66, format!("{}: {e}", path.display())))?;
                    Some(serde_json::from_str(&text).map_err(|e| {
                        (65, format!("{}: not a status report: {e}", path.display()))
                    })?)
                }
            };
            let trace_processor = !no_trace_processor;
            if trace_processor && !tracesync_tests::tp::available() {
                return Err((
                    69,
                    "the trace processor is not in .cache/ (run `bash scripts/setup-test-deps.sh`, \
                     or pass --no-trace-processor)"
                        .into(),
                ));
            }
            let inputs = Inputs {
                dir,
                merged,
                live,
                pings,
                status,
                machine,
                arch,
                trace_processor,
            };
            let report = check(&inputs);
            for line in report.lines(&inputs.machine) {
                println!("{line}");
            }
            Ok(if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

fn read_pings(path: &PathBuf) -> Result<Vec<Ping>, (u8, String)> {
    let text =
        std::fs::read_to_string(path).map_err(|e| (66, format!("{}: {e}", path.display())))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            Ping::from_json(l).map_err(|e| (65, format!("{} line {}: {e}", path.display(), i + 1)))
        })
        .collect()
}
