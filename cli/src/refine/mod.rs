//! `tracesync refine DIR [-o OUTDIR]`: a closed capture re-aligned from
//! every probe sample before *and* after each packet (docs/clock-sync-refine.md,
//! "Final: both sides").
//!
//! The live daemon decided each packet's place from the samples before it.
//! Once the capture is closed, its `.sync.jsonl` sidecars hold every
//! sample; `probes.rs` fits each remote machine's whole capture both ways
//! (never across a step or suspend), and `rewrite.rs` writes each rolled
//! file and each snapshot again with sync points and error-bound samples
//! from that mapping.
//!
//! Invariants:
//! - OUTDIR is a rolling capture of the same layout: the same file names
//!   and packets in the same order (only the refined machines' sync points
//!   and offset/bound samples differ), snapshots included, index.jsonl
//!   with each file's and snapshot's new lengths and preamble, the
//!   sidecars, and a journal naming the last file; every file opens
//!   alone; `merge OUTDIR`, `tail OUTDIR` and `report OUTDIR` read it as
//!   they read DIR.
//! - Each snapshot is read with a fresh reader state, as the first rolled
//!   file (it opens alone); its packets count in the packet totals but not
//!   in the per-machine figures (they repeat packets of the rolled files).
//! - Nothing of DIR is changed; OUTDIR appears whole or not at all (built
//!   in a temporary directory beside it, renamed at the end).
//! - Deterministic: the same DIR gives byte-identical files.
//! - Memory: the probe samples of the capture and one file's write buffer;
//!   packets are streamed.

mod outdir;
mod probes;
mod rewrite;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tracesync_capture::{lock, modes};
use tracesync_common::exit;
use tracesync_protocol::text::escape_control;

use crate::merge::capture::{CaptureError, CaptureFile, from_dir};
use rewrite::{MachineFigures, Rewriter};

/// Per remote machine, what `--stats` and the table show.
#[derive(Debug, Serialize)]
pub struct MachineStats {
    pub raw_id: u32,
    pub name: String,
    pub packets: u64,
    pub probe_samples: usize,
    pub segments: usize,
    pub live_p50_ns: u64,
    pub live_p99_ns: u64,
    pub refined_p50_ns: u64,
    pub refined_p99_ns: u64,
    /// Share of data packets mapped from samples on both sides.
    pub both_sides: f64,
    /// Data packets the refined mapping could not place (live kept).
    pub kept_live: u64,
    pub sync_points: u64,
}

/// Counters of a refine (`--stats`).
#[derive(Debug, Default, Serialize)]
pub struct RefineStats {
    pub files: usize,
    /// Snapshots rewritten (their packets are in the totals below).
    pub snapshots: usize,
    pub packets_read: u64,
    pub packets_written: u64,
    /// Live sync points and offset/bound samples of refined machines.
    pub packets_replaced: u64,
    pub packets_malformed: u64,
    pub sidecar_files: u64,
    pub probe_samples: u64,
    pub sidecar_lines_skipped: u64,
    /// Sidecars not read: a link, or not a regular file (each said).
    pub sidecar_files_skipped: u64,
    pub machines: Vec<MachineStats>,
}

/// Runs the command; the exit code.
pub fn run(dir: &Path, output: Option<&Path>, stats_path: Option<&Path>) -> u8 {
    match refine(dir, output) {
        Ok((stats, out)) => {
            for line in table(&stats) {
                println!("{line}");
            }
            println!("refined: {}", out.display());
            if let Some(path) = stats_path {
                let written = serde_json::to_string_pretty(&stats)
                    .map_err(std::io::Error::other)
                    .and_then(|json| modes::write_file(path, (json + "\n").as_bytes()));
                if let Err(e) = written {
                    eprintln!("tracesync: error: {}: cannot write: {e}", path.display());
                    return exit::CANTCREAT;
                }
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            e.code
        }
    }
}

/// The default OUTDIR: `DIR-refined` beside DIR.
fn default_output(dir: &Path) -> PathBuf {
    let trimmed: PathBuf = dir.components().collect();
    let mut name = trimmed
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "capture".into());
    name.push("-refined");
    trimmed.with_file_name(name)
}

/// A snapshot given for DIR: one line saying what to give instead.
fn refuse_snapshot(path: &Path) -> Result<(), CaptureError> {
    let snapshot = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| tracesync_capture::names::SnapshotName::parse(n).is_some());
    if snapshot && path.is_file() {
        return Err(CaptureError {
            line: format!(
                "{}: a snapshot is not refined alone (its probe samples are in the capture's \
                 sidecars); refine its output directory, which rewrites the snapshot too",
                path.display()
            ),
            code: exit::USAGE,
        });
    }
    Ok(())
}

/// DIR is a directory no running daemon writes.
fn closed_capture(dir: &Path) -> Result<(), CaptureError> {
    if !dir.is_dir() {
        return Err(CaptureError {
            line: format!(
                "{}: not a directory; give tracesyncd's output directory (a closed capture)",
                dir.display()
            ),
            code: if dir.exists() {
                exit::USAGE
            } else {
                exit::NOINPUT
            },
        });
    }
    if let Some(pid) = lock::holder(dir) {
        let holder = pid.map_or("a running tracesyncd".to_owned(), |p| {
            format!("tracesyncd pid {p}")
        });
        return Err(CaptureError {
            line: format!(
                "{}: still being written by {holder}; refine a closed capture: stop the daemon first",
                dir.display()
            ),
            code: exit::TEMPFAIL,
        });
    }
    Ok(())
}

fn refine(dir: &Path, output: Option<&Path>) -> Result<(RefineStats, PathBuf), CaptureError> {
    refuse_snapshot(dir)?;
    closed_capture(dir)?;
    let capture = from_dir(dir)?;
    let out = output.map_or_else(|| default_output(dir), Path::to_path_buf);
    let staging = outdir::Staging::begin(dir, &out)?;

    let (exchanges, counts) = probes::read_exchanges(&capture)?;
    let mappings: BTreeMap<u32, probes::MachineMapping> = exchanges
        .iter()
        .map(|(&id, xs)| (id, probes::mapping(xs)))
        .collect();
    drop(exchanges);

    let mut rewriter = Rewriter::new(&mappings, &capture.names);
    let mut written = Vec::with_capacity(capture.files.len());
    for (i, f) in capture.files.iter().enumerate() {
        let result = rewriter.file(f, i, &staging.path(&f.name));
        match result {
            Ok(r) => written.push(r),
            Err(e) => {
                staging.abandon();
                return Err(e);
            }
        }
    }
    let (snapshots, [read, replaced, malformed]) =
        match snapshots(dir, &staging, &mappings, &capture.names) {
            Ok(done) => done,
            Err(e) => {
                staging.abandon();
                return Err(e);
            }
        };
    if let Err(e) = staging.finish(&capture, &written, &snapshots) {
        staging.abandon();
        return Err(e);
    }

    let names: BTreeMap<u32, String> = capture.names.iter().cloned().collect();
    let mut stats = RefineStats {
        files: capture.files.len(),
        snapshots: snapshots.len(),
        packets_read: rewriter.packets_read + read,
        packets_written: written
            .iter()
            .chain(snapshots.iter().map(|(_, w)| w))
            .map(|w| w.packets)
            .sum(),
        packets_replaced: rewriter.packets_replaced + replaced,
        packets_malformed: rewriter.packets_malformed + malformed,
        sidecar_files: counts.files,
        probe_samples: counts.samples,
        sidecar_lines_skipped: counts.lines_skipped,
        sidecar_files_skipped: counts.skipped,
        machines: Vec::new(),
    };
    let empty = MachineFigures::default();
    for (&raw_id, m) in &mappings {
        let f = rewriter.figures.get(&raw_id).unwrap_or(&empty);
        let q =
            |h: &Option<hdrhistogram::Histogram<u64>>, v: f64| crate::quantiles::at(h.as_ref(), v);
        stats.machines.push(MachineStats {
            raw_id,
            name: names
                .get(&raw_id)
                .cloned()
                .unwrap_or_else(|| format!("machine-{raw_id}")),
            packets: f.packets,
            probe_samples: m.samples,
            segments: m.smoother.segments(),
            live_p50_ns: q(&f.live, 0.5),
            live_p99_ns: q(&f.live, 0.99),
            refined_p50_ns: q(&f.refined, 0.5),
            refined_p99_ns: q(&f.refined, 0.99),
            both_sides: if f.packets == 0 {
                0.0
            } else {
                f.both_sides as f64 / f.packets as f64
            },
            kept_live: f.kept_live,
            sync_points: f.sync_points,
        });
    }
    Ok((stats, out))
}

/// DIR's snapshots rewritten with the same mappings, each with a fresh
/// reader state (each opens alone, as the first rolled file); what each
/// holds, and the packets read, replaced and malformed.
type Snapshots = (Vec<(String, rewrite::FileOut)>, [u64; 3]);

fn snapshots(
    dir: &Path,
    staging: &outdir::Staging,
    mappings: &BTreeMap<u32, probes::MachineMapping>,
    names: &[(u32, String)],
) -> Result<Snapshots, CaptureError> {
    let mut written = Vec::new();
    let mut counts = [0; 3];
    for name in staging.snapshots() {
        let mut alone = Rewriter::new(mappings, names);
        let input = CaptureFile::snapshot(dir, &name);
        let out = alone.file(&input, 0, &staging.path(&name))?;
        written.push((name, out));
        counts[0] += alone.packets_read;
        counts[1] += alone.packets_replaced;
        counts[2] += alone.packets_malformed;
    }
    Ok((written, counts))
}

/// The table printed: one line per refined machine.
fn table(stats: &RefineStats) -> Vec<String> {
    let us = |ns: u64| format!("{:.1} µs", ns as f64 / 1000.0);
    let mut lines = vec![format!(
        "{} files, {} packets, {} probe samples",
        stats.files, stats.packets_written, stats.probe_samples
    )];
    lines.push(format!(
        "{:<16} {:>9} {:>8} {:>5} {:>11} {:>11} {:>11} {:>11} {:>6}",
        "machine",
        "packets",
        "samples",
        "segs",
        "live p50",
        "live p99",
        "final p50",
        "final p99",
        "both"
    ));
    for m in &stats.machines {
        lines.push(format!(
            "{:<16} {:>9} {:>8} {:>5} {:>11} {:>11} {:>11} {:>11} {:>5.0}%",
            escape_control(&m.name),
            m.packets,
            m.probe_samples,
            m.segments,
            us(m.live_p50_ns),
            us(m.live_p99_ns),
            us(m.refined_p50_ns),
            us(m.refined_p99_ns),
            m.both_sides * 100.0
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_names_print_escaped_in_the_table() {
        let machine = |name: &str| MachineStats {
            raw_id: 7,
            name: name.to_owned(),
            packets: 1,
            probe_samples: 1,
            segments: 1,
            live_p50_ns: 0,
            live_p99_ns: 0,
            refined_p50_ns: 0,
            refined_p99_ns: 0,
            both_sides: 1.0,
            kept_live: 0,
            sync_points: 0,
        };
        let stats = RefineStats {
            machines: [
                "vm\nforged 1 2 3",
                "x\u{1b}]0;owned\u{7}",
                "rlm\u{200f}\u{2028}",
            ]
            .map(machine)
            .into(),
            ..RefineStats::default()
        };
        let lines = table(&stats);
        assert_eq!(lines.len(), 2 + 3, "one line per machine: {lines:#?}");
        for line in &lines {
            assert!(
                !line.chars().any(tracesync_protocol::text::needs_escape),
                "{line:?}"
            );
        }
        assert!(
            lines[4].starts_with("rlm\\u{200f}\\u{2028}"),
            "{:?}",
            lines[4]
        );
    }

    #[test]
    fn the_default_output_is_beside_the_capture() {
        assert_eq!(
            default_output(Path::new("/srv/capture/")),
            PathBuf::from("/srv/capture-refined")
        );
        assert_eq!(
            default_output(Path::new("out")),
            PathBuf::from("out-refined")
        );
    }
}
