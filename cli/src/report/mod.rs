//! `tracesync report DIR|FILES... [-o OUT.svg|OUT.png]`: how good the
//! alignment of a capture was, per remote machine, from its sync-quality
//! tracks (docs/format.md, "Sync-quality tracks") and its packets read back
//! as `merge DIR` reads them: the offset as its residual around a line
//! fitted per epoch (`fit.rs`) with the error bound as a band, round trip,
//! bound, epochs (plots, `plot.rs`; their text, `pen.rs`), and a summary
//! table (printed, and drawn above the plots; a machine without packets
//! has no bound, "-").

mod fit;
mod pen;
mod plot;
#[cfg(test)]
mod tests;

pub use plot::draw;

use std::collections::BTreeMap;
use std::path::Path;

use hdrhistogram::Histogram;
use tracesync_capture::sidecar;
use tracesync_common::exit;
use tracesync_core::live::Role;
use tracesync_core::sync_quality::{QualityTrack, read_sample};
use tracesync_protocol::scan::scan_packet;
use tracesync_protocol::text::escape_control;

use crate::merge::capture::{Capture, CaptureError, CapturePackets, detect, from_dir};

/// One remote machine's series and counts.
#[derive(Debug)]
pub struct MachineReport {
    pub raw_id: u32,
    pub name: String,
    /// (trace time s from the capture's start, value) per track.
    pub offset_us: Vec<(f64, f64)>,
    pub bound_us: Vec<(f64, f64)>,
    pub rtt_us: Vec<(f64, f64)>,
    pub freq_ppm: Vec<(f64, f64)>,
    /// (time s, what) of each epoch change.
    pub epochs: Vec<(f64, String)>,
    /// Per-packet error bounds (ns) of its data packets (None only if the
    /// histogram could not be made).
    pub bounds: Option<Histogram<u64>>,
    pub packets: u64,
    /// Its last packet (s from the capture's start): its series hold
    /// their last value until then.
    pub last_s: f64,
    /// Packets older than one before them in the capture (by more than
    /// the read-back times' 2 µs); in a snapshot, which holds one machine
    /// after another, older than one before them of their own machine.
    pub late: u64,
    /// Its newest data packet's time so far (a snapshot's order check).
    newest_ts: i64,
    /// Raw probe samples in the files' `.sync.jsonl` sidecars.
    pub probe_samples: u64,
}

impl MachineReport {
    fn new(raw_id: u32) -> Self {
        Self {
            raw_id,
            name: format!("machine-{raw_id}"),
            offset_us: Vec::new(),
            bound_us: Vec::new(),
            rtt_us: Vec::new(),
            freq_ppm: Vec::new(),
            epochs: Vec::new(),
            bounds: Histogram::new(3).ok(),
            packets: 0,
            last_s: 0.0,
            late: 0,
            newest_ts: i64::MIN,
            probe_samples: 0,
        }
    }

    /// The summary row's cells (see [`COLUMNS`]): packets, probe samples,
    /// p50/p99/max per-packet bound ("-" with no packet), epochs, late.
    pub fn cells(&self) -> [String; 8] {
        let bound = |q: Option<f64>| match (&self.bounds, q) {
            (Some(h), _) if h.is_empty() => "-".to_owned(),
            (Some(h), Some(q)) => us(h.value_at_quantile(q)),
            (Some(h), None) => us(h.max()),
            (None, _) => "-".to_owned(),
        };
        [
            // A forged row or a terminal escape in a name prints escaped.
            escape_control(&self.name).into_owned(),
            self.packets.to_string(),
            self.probe_samples.to_string(),
            bound(Some(0.5)),
            bound(Some(0.99)),
            bound(None),
            self.epochs.len().to_string(),
            self.late.to_string(),
        ]
    }

    /// The summary row, aligned under [`header`].
    pub fn row(&self) -> String {
        line(&self.cells())
    }
}

/// The summary table's columns: title and width in characters. The first
/// is left-aligned, the others right-aligned, one space apart.
pub const COLUMNS: [(&str, usize); 8] = [
    ("machine", 16),
    ("packets", 9),
    ("samples", 9),
    ("p50 bound", 11),
    ("p99 bound", 11),
    ("max bound", 11),
    ("epochs", 7),
    ("late", 7),
];

/// One line of the table from its cells.
fn line<S: AsRef<str>>(cells: &[S]) -> String {
    let mut out = String::new();
    for (i, (cell, (_, width))) in cells.iter().zip(COLUMNS).enumerate() {
        let cell = cell.as_ref();
        let text = if i == 0 {
            format!("{cell:<width$}")
        } else {
            format!(" {cell:>width$}")
        };
        out.push_str(&text);
    }
    out
}

/// The table's header line.
pub fn header() -> String {
    line(&COLUMNS.map(|c| c.0))
}

fn us(ns: u64) -> String {
    format!("{:.1} µs", ns as f64 / 1000.0)
}

const LATE_SLACK_NS: i64 = 2_000;

/// Probe samples per machine raw id in the capture's sidecars (lines that
/// do not parse are skipped, as the format says).
fn probe_samples(capture: &Capture) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for f in &capture.files {
        let Ok(text) = std::fs::read(sidecar::sidecar_path(&f.path)) else {
            continue;
        };
        for sample in text.split(|&b| b == b'\n').filter_map(sidecar::parse_line) {
            *out.entry(sample.machine_raw_id).or_default() += 1;
        }
    }
    out
}

/// Everything a report shows.
#[derive(Debug, Default)]
pub struct Report {
    pub machines: Vec<MachineReport>,
    /// Capture length (s).
    pub span_s: f64,
    pub files: usize,
}

impl Report {
    /// The summary table, one line per remote machine.
    pub fn table(&self) -> Vec<String> {
        let mut lines = vec![header()];
        lines.extend(self.machines.iter().map(MachineReport::row));
        lines
    }
}

/// Reads a capture into a report.
pub fn collect(capture: &Capture) -> Result<Report, CaptureError> {
    let mut packets = CapturePackets::new(capture);
    let mut machines: BTreeMap<u32, MachineReport> = BTreeMap::new();
    let mut start: Option<i64> = None;
    let mut end = i64::MIN;
    let mut seen_any = false;
    // A snapshot is written machine after machine, each in time order: a
    // packet is late only against its own machine's.
    let per_machine_order = matches!(capture.files.as_slice(), [only]
        if tracesync_capture::names::SnapshotName::parse(&only.name).is_some());
    while let Some(p) = packets.next_packet()? {
        seen_any = true;
        if p.machine_raw_id == 0 {
            continue;
        }
        let t0 = *start.get_or_insert(p.ts);
        let t = (p.ts - t0) as f64 / 1e9;
        let m = machines
            .entry(p.machine_raw_id)
            .or_insert_with(|| MachineReport::new(p.machine_raw_id));
        m.last_s = m.last_s.max(t);
        if let Some(name) = &p.machine_name {
            m.name = name.to_string();
        }
        if p.role == Role::SyncQuality {
            let Ok(fields) = scan_packet(&packets.bytes) else {
                continue;
            };
            let Some(sample) = read_sample(&fields, &packets.bytes) else {
                continue;
            };
            let series = match sample.track {
                QualityTrack::Offset => &mut m.offset_us,
                QualityTrack::ErrorBound => &mut m.bound_us,
                QualityTrack::RoundTrip => &mut m.rtt_us,
                QualityTrack::FreqError => &mut m.freq_ppm,
                QualityTrack::Epochs => {
                    m.epochs.push((t, sample.name.unwrap_or_default()));
                    continue;
                }
            };
            if let Some(v) = sample.value {
                series.push((t, v));
            }
            continue;
        }
        if p.role == Role::Data && p.clock != 0 {
            m.packets += 1;
            // Auto-resizing: records any u64.
            if let Some(h) = &mut m.bounds {
                let _ = h.record(p.err_ns);
            }
            // Read-back times are within the sync-point threshold of the
            // daemon's: only an inversion beyond it is a late packet.
            let newest = if per_machine_order { m.newest_ts } else { end };
            if p.ts.saturating_add(LATE_SLACK_NS) < newest {
                m.late += 1;
            }
            m.newest_ts = m.newest_ts.max(p.ts);
        }
        end = end.max(p.ts);
    }
    if !seen_any {
        return Err(CaptureError {
            line: "the capture holds no packet; nothing to report".into(),
            code: exit::DATAERR,
        });
    }
    let samples = probe_samples(capture);
    for m in machines.values_mut() {
        m.probe_samples = samples.get(&m.raw_id).copied().unwrap_or(0);
    }
    Ok(Report {
        span_s: start.map_or(0.0, |s| (end.max(s) - s) as f64 / 1e9),
        files: capture.files.len(),
        machines: machines.into_values().collect(),
    })
}

/// Runs `tracesync report`; returns the exit code.
pub fn run(inputs: &[std::path::PathBuf], output: Option<&Path>) -> u8 {
    let capture = match inputs {
        [dir] if dir.is_dir() => from_dir(dir),
        _ => match detect(inputs) {
            Ok(Some(c)) => Ok(c),
            Ok(None) => Err(not_a_capture(inputs)),
            Err(e) => Err(e),
        },
    };
    let result = capture.and_then(|c| collect(&c)).and_then(|report| {
        let out = output.unwrap_or(Path::new("sync-report.svg"));
        plot::draw(&report, out)?;
        Ok((report, out.to_owned()))
    });
    match result {
        Ok((report, out)) => {
            for line in report.table() {
                println!("{line}");
            }
            println!("report: {}", out.display());
            exit::OK
        }
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            e.code
        }
    }
}

fn not_a_capture(inputs: &[std::path::PathBuf]) -> CaptureError {
    let missing = inputs.iter().find(|p| !p.exists());
    match missing {
        Some(p) => CaptureError {
            line: format!("{}: no such file or directory", p.display()),
            code: exit::NOINPUT,
        },
        None => CaptureError {
            line: format!(
                "{}: not a rolling capture; give tracesyncd's output DIR or its rolled files (tracesync-<start>-<seq>.pftrace)",
                inputs[0].display()
            ),
            code: exit::DATAERR,
        },
    }
}
