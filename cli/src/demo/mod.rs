//! `tracesync demo`: the main job end to end.
//!
//! - [`live`]: the real daemon and N relays with simulated clocks on
//!   loopback, live status, a rolling merged trace checked against truth.
//! - [`offline`]: recorded traces of simulated machines merged offline
//!   (`tracesync demo --offline`).

/// `println!` that a closed standard output (`tracesync demo | head`)
/// does not turn into a panic: the demo then goes on quietly.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod error;
mod interrupt;
pub use error::DemoError;
pub mod live;
pub mod offline;

use std::path::{Path, PathBuf};

use tracesync_common::exit;

/// `tracesync demo --offline`: runs it and prints its table; the exit code.
pub fn run_offline(relays: usize, seconds: u64, out: PathBuf) -> u8 {
    if relays == 0 || relays > 64 || seconds == 0 || seconds > 3600 {
        eprintln!("tracesync: error: demo: use 1..=64 relays and 1..=3600 seconds");
        return exit::USAGE;
    }
    say!(
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
            say!(
                "{:<8} {:>12} {:>10} {:>8} {:>14} {:>14}",
                "machine",
                "offset (s)",
                "drift ppm",
                "events",
                "p50 err (us)",
                "max err (us)"
            );
            for r in &reports {
                say!(
                    "{:<8} {:>12.3} {:>10.1} {:>8} {:>14.3} {:>14.3}",
                    r.name,
                    r.boot_offset_s,
                    r.ppm,
                    r.events,
                    r.p50_error_ns as f64 / 1e3,
                    r.max_error_ns as f64 / 1e3
                );
            }
            say!(
                "merged trace: {} (open it in https://ui.perfetto.dev)",
                out.join("merged.pftrace").display()
            );
            say!(
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

/// `tracesync demo`: runs it and prints its table; the exit code.
pub fn run_live(relays: usize, seconds: u64, out: PathBuf, rate: u32, metrics_listen: &str) -> u8 {
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
    say!(
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
        Err(crate::demo::DemoError::ReaderGone) => return exit::OK,
        Err(e) => {
            eprintln!("tracesync: error: demo: {e}");
            return e.exit_code();
        }
    };
    say!(
        "{:<10} {:>11} {:>9} {:>9} {:>8} {:>6} {:>13} {:>13} {:>15} {:>8}",
        "source",
        "offset (s)",
        "drift ppm",
        "packets",
        "missing",
        "dups",
        "p99 err (us)",
        "max err (us)",
        "p99 bound (us)",
        "inside"
    );
    for m in &report.machines {
        for (src, s) in report
            .check
            .sources
            .range(format!("{}/", m.name)..format!("{}0", m.name))
        {
            say!(
                "{:<10} {:>11.3} {:>9.1} {:>9} {:>8} {:>6} {:>13.1} {:>13.1} {:>15.1} {:>7.2}%",
                src,
                m.offset_ns as f64 / 1e9,
                m.drift_ppm,
                s.packets,
                s.missing,
                s.duplicates,
                s.p99_error_ns as f64 / 1e3,
                s.max_error_ns as f64 / 1e3,
                s.p99_bound_ns as f64 / 1e3,
                100.0 * s.inside as f64 / s.packets.max(1) as f64,
            );
        }
    }
    say!(
        "rolling capture: {} ({} files, each opens alone)",
        report.output_dir.display(),
        report.check.files.len()
    );
    write_merged(&report.output_dir);
    say!(
        "error = |time as Perfetto places it - ground truth|; bound = the error bound each packet had (its machine's error-bound track); inside = error <= bound"
    );
    // The sync-quality report beside the output.
    let picture = report
        .output_dir
        .parent()
        .unwrap_or(&report.output_dir)
        .join("sync-report.png");
    let drawn = crate::merge::capture::from_dir(&report.output_dir)
        .and_then(|c| crate::report::collect(&c))
        .and_then(|r| crate::report::draw(&r, &picture));
    match drawn {
        Ok(()) => say!("sync quality report: {}", picture.display()),
        Err(e) => eprintln!("tracesync: warning: demo: no report: {e}"),
    }
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

/// The one file a user wants to open: the capture in `output_dir` read
/// back as one, written beside it as merged.pftrace.
fn write_merged(output_dir: &Path) {
    let merged = output_dir
        .parent()
        .unwrap_or(output_dir)
        .join("merged.pftrace");
    let merge = crate::merge::command::MergeArgs {
        manifest: None,
        output: merged.clone(),
        format: crate::merge::output::Format::Perfetto,
        stats: None,
        strict: false,
        machine_per_file: false,
        since: None,
        until: None,
        inputs: vec![output_dir.to_path_buf()],
    };
    if crate::merge::command::run(merge) == exit::OK {
        say!(
            "merged trace: {} (the capture read back as one; open it in https://ui.perfetto.dev)",
            merged.display()
        );
    }
}
