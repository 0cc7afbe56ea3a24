//! The `tracesync` command line: `merge`, `clocks`, `demo`, and the live
//! commands `tail` and `status` (which talk to `tracesyncd`).

pub mod connect;
pub mod status;
mod tail;

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracesync_protocol::clock_ids::builtin_name;

use crate::control::TailFormat;
use crate::merge::output::Format;
use crate::merge::{MergeOptions, Prepared, merge, prepare};
use connect::{DEFAULT_CONTROL, Target};
use tracesync_common::exit;

#[derive(Debug, Parser)]
#[command(
    name = "tracesync",
    version,
    about = "Merge Perfetto traces of many machines onto one timeline"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
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
        /// The daemon's control socket, or HOST:PORT of its TCP control listener
        /// [default: /run/tracesync/control.sock].
        #[arg(long, value_name = "SOCKET|ADDR", conflicts_with = "dir")]
        connect: Option<String>,
        #[arg(long, value_enum, default_value_t = TailFormat::Text)]
        format: TailFormat,
        /// Only this machine (name, raw id, or `host`); repeat for several.
        #[arg(long = "machine", value_name = "NAME")]
        machines: Vec<String>,
        /// Follow the rolling files in this directory instead of the daemon.
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Show the daemon's per-machine status: connection, packets, drops, clock sync.
    Status {
        /// The daemon's control socket, or HOST:PORT of its TCP control listener.
        #[arg(long, value_name = "SOCKET|ADDR", default_value = DEFAULT_CONTROL)]
        connect: String,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A lab PKI for mutual TLS between relays and the daemon (rcgen, ECDSA P-256).
    Pki {
        #[command(subcommand)]
        command: PkiCommand,
    },
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
enum PkiCommand {
    /// Make a CA (ca.crt, ca.key) and the daemon's certificate (daemon.crt, daemon.key) in DIR.
    Init {
        /// Names the daemon's certificate carries (host names or IPs; relays
        /// check the one they connect to). Default: this host's name,
        /// localhost, 127.0.0.1, ::1.
        #[arg(long = "daemon-name", value_name = "NAME")]
        daemon_names: Vec<String>,
        #[arg(value_name = "DIR", default_value = crate::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
    },
    /// Issue a relay certificate for machine NAME (NAME.crt, NAME.key), signed by DIR/ca.key.
    Issue {
        /// The machine name the relay sends (its --name, or its host name).
        #[arg(long)]
        name: String,
        /// Also bind this raw machine id (only for relays with a fixed id).
        #[arg(long, value_name = "ID")]
        raw_id: Option<u32>,
        #[arg(value_name = "DIR", default_value = crate::tls::DEFAULT_TLS_DIR)]
        dir: PathBuf,
    },
}

fn pki(command: PkiCommand) -> u8 {
    let result = match command {
        PkiCommand::Init { daemon_names, dir } => {
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
            crate::tls::pki::init(&dir, &names)
        }
        PkiCommand::Issue { name, raw_id, dir } => crate::tls::pki::issue(&dir, &name, raw_id),
    };
    match result {
        Ok(files) => {
            for file in files {
                println!("{}", file.display());
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("tracesync: error: pki: {e}");
            exit::CANTCREAT
        }
    }
}

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
            inputs,
        } => {
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
                Err(e) => {
                    eprintln!("tracesync: error: {e}");
                    e.exit_code()
                }
            }
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
                demo(relays, seconds, out)
            } else {
                live_demo(relays, seconds, out, rate, &metrics_listen)
            }
        }
        Command::Tail {
            connect,
            format,
            machines,
            dir,
        } => match dir {
            Some(dir) => tail::run_dir(&dir, format, machines),
            None => {
                let target = Target::parse(connect.as_deref().unwrap_or(DEFAULT_CONTROL));
                tail::run_socket(&target, format, machines)
            }
        },
        Command::Status { connect, json } => status::run(&Target::parse(&connect), json),
        Command::Pki { command } => pki(command),
        Command::Clocks {
            json,
            manifest,
            machine_per_file,
            inputs,
        } => {
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
                    match print_clocks(prepared, json) {
                        Ok(()) => code,
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

fn demo(relays: usize, seconds: u64, out: PathBuf) -> u8 {
    if relays == 0 || relays > 64 || seconds == 0 || seconds > 3600 {
        eprintln!("tracesync: error: demo: use 1..=64 relays and 1..=3600 seconds");
        return exit::USAGE;
    }
    println!(
        "tracesync demo (offline): {relays} simulated machines + host, {seconds} s each, into {}",
        out.display()
    );
    let opts = crate::demo::offline::DemoOptions {
        machines: relays,
        seconds,
        out: out.clone(),
    };
    match crate::demo::offline::run(&opts) {
        Ok(reports) => {
            println!(
                "{:<8} {:>12} {:>10} {:>8} {:>14} {:>14}",
                "machine", "offset (s)", "drift ppm", "events", "p50 err (us)", "max err (us)"
            );
            for r in &reports {
                println!(
                    "{:<8} {:>12.3} {:>10.1} {:>8} {:>14.3} {:>14.3}",
                    r.name,
                    r.boot_offset_s,
                    r.ppm,
                    r.events,
                    r.p50_error_ns as f64 / 1e3,
                    r.max_error_ns as f64 / 1e3
                );
            }
            println!(
                "merged trace: {} (open it in https://ui.perfetto.dev)",
                out.join("merged.pftrace").display()
            );
            println!(
                "error = |merged ts - ground truth|; between snapshots (every 100 ms) drift is not corrected: 50 ppm -> up to 5 us"
            );
            exit::OK
        }
        Err(e) => {
            eprintln!("tracesync: error: demo: {e}");
            exit::CANTCREAT
        }
    }
}

fn live_demo(relays: usize, seconds: u64, out: PathBuf, rate: u32, metrics_listen: &str) -> u8 {
    let metrics = match crate::demo::live::metrics_addr(metrics_listen) {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("tracesync: error: demo: {e}");
            return exit::USAGE;
        }
    };
    if relays == 0 || relays > 64 || seconds == 0 || seconds > 3600 || rate == 0 {
        eprintln!("tracesync: error: demo: use 1..=64 relays, 1..=3600 seconds and a rate > 0");
        return exit::USAGE;
    }
    println!(
        "tracesync demo: tracesyncd + {relays} relays with simulated clocks on loopback, {seconds} s, into {}",
        out.display()
    );
    let opts = crate::demo::live::LiveDemoOptions {
        relays,
        seconds,
        out,
        rate,
        metrics,
    };
    let report = match crate::demo::live::run(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tracesync: error: demo: {e}");
            return exit::SOFTWARE;
        }
    };
    println!(
        "{:<10} {:>11} {:>9} {:>9} {:>8} {:>6} {:>13} {:>13} {:>11}",
        "source",
        "offset (s)",
        "drift ppm",
        "packets",
        "missing",
        "dups",
        "p99 err (us)",
        "max err (us)",
        "bound (us)"
    );
    let status = report.last_status.as_ref();
    for m in &report.machines {
        for (src, s) in report
            .check
            .sources
            .range(format!("{}/", m.name)..format!("{}0", m.name))
        {
            let bound = status
                .and_then(|st| {
                    st.machines
                        .iter()
                        .find(|x| x.name.as_deref() == Some(&m.name))
                })
                .and_then(|x| x.error_bound_ns)
                .map_or("-".to_owned(), |b| format!("{:.1}", b as f64 / 1e3));
            println!(
                "{:<10} {:>11.3} {:>9.1} {:>9} {:>8} {:>6} {:>13.1} {:>13.1} {:>11}",
                src,
                m.offset_ns as f64 / 1e9,
                m.drift_ppm,
                s.packets,
                s.missing,
                s.duplicates,
                s.p99_error_ns as f64 / 1e3,
                s.max_error_ns as f64 / 1e3,
                bound
            );
        }
    }
    println!(
        "merged rolling trace: {} ({} files; open them in https://ui.perfetto.dev)",
        report.output_dir.display(),
        report.check.files.len()
    );
    println!(
        "error = |time as Perfetto places it - ground truth|; bound = the daemon's reported error bound"
    );
    let lost = report.check.total_missing() + report.check.total_duplicates();
    if report.check.total_packets() == 0 || lost > 0 {
        eprintln!(
            "tracesync: error: demo: {} packets checked, {} missing, {} duplicated",
            report.check.total_packets(),
            report.check.total_missing(),
            report.check.total_duplicates()
        );
        return exit::SOFTWARE;
    }
    exit::OK
}

/// Prints the graph like Perfetto's clock_snapshot table, plus each edge's origin.
fn print_clocks(prepared: Prepared, json: bool) -> std::io::Result<()> {
    let Prepared {
        inputs, mut plan, ..
    } = prepared;
    let mut sources: HashMap<(u32, u32), &str> = HashMap::new();
    for (input, file) in inputs.iter().zip(&plan.files) {
        for p in file
            .machines
            .base
            .iter()
            .chain(file.machines.embedded.values())
        {
            sources
                .entry((p.machine, p.scope))
                .or_insert(&input.display);
        }
    }
    let edges = plan.timeline.graph().edges().to_vec();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if !json {
        writeln!(
            out,
            "snapshot_id\torigin\tmachine\tsource\tclock_id\tclock_name\tseq\tclock_value\tts"
        )?;
    }
    for edge in edges {
        for (node, value) in &edge.clocks {
            let machine = plan
                .machines
                .get(node.machine)
                .name
                .clone()
                .unwrap_or_default();
            let source = sources
                .get(&(node.machine, node.scope))
                .copied()
                .unwrap_or("");
            let ts = if plan.timeline.graph().is_incremental(*node) || *value < 0 {
                None
            } else {
                plan.timeline.to_trace_time(*node, *value as u64).ok()
            };
            let origin = format!("{:?}", edge.origin).to_lowercase();
            let name = builtin_name(node.clock);
            if json {
                let row = serde_json::json!({
                    "snapshot_id": edge.snapshot_id, "origin": origin, "machine": machine,
                    "raw_id": plan.machines.get(node.machine).raw_id, "source": source,
                    "clock_id": node.clock, "clock_name": name, "seq": node.seq,
                    "clock_value": value, "ts": ts,
                });
                writeln!(out, "{row}")?;
            } else {
                let ts = ts.map_or_else(|| "-".to_owned(), |t| t.to_string());
                writeln!(
                    out,
                    "{}\t{origin}\t{machine}\t{source}\t{}\t{}\t{}\t{value}\t{ts}",
                    edge.snapshot_id,
                    node.clock,
                    name.unwrap_or("-"),
                    node.seq
                )?;
            }
        }
    }
    out.flush()
}
