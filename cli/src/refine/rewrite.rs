//! One rolled file rewritten with the refined mappings: every packet as
//! written, in the same order, except each refined machine's sync points
//! and its offset and error-bound samples, which are replaced by those of
//! its two-sided mapping (`tracesync_core::refine`), written right before
//! the machine's timed packets. Frequency, round-trip and epoch samples,
//! descriptors and every other machine's packets pass through.
//!
//! The reader state (`FileResolver`: clock snapshots, the live sync points
//! and bounds) follows the input across files, as `merge DIR` reads it, so
//! each packet's relay time and live bound are known; the output state
//! starts afresh in every file, so each output file opens alone.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::sync::Arc;

use hdrhistogram::Histogram;
use tracesync_capture::modes;
use tracesync_common::exit;
use tracesync_core::live::Role;
use tracesync_core::refine::{Placement, RefinedTracks};
use tracesync_core::sync::smoother::Sides;
use tracesync_core::sync_quality::{QualityTrack, is_quality_seq, read_sample};
use tracesync_protocol::reader::{FileReadError, TraceFile};
use tracesync_protocol::scan::scan_packet;
use tracesync_protocol::wire;

use super::probes::MachineMapping;
use crate::follow::resolve::{FileResolver, SeenPackets};
use crate::merge::capture::{CaptureError, CaptureFile};

/// Per remote machine: what the live capture gave its data packets and
/// what the refined one gives them.
#[derive(Debug, Default)]
pub struct MachineFigures {
    pub packets: u64,
    /// Error bound readers gave each data packet (ns): live, refined.
    pub live: Option<Histogram<u64>>,
    pub refined: Option<Histogram<u64>>,
    /// Data packets mapped from samples on both sides.
    pub both_sides: u64,
    /// Data packets the refined mapping could not place (kept live).
    pub kept_live: u64,
    pub sync_points: u64,
}

/// What one output file holds (its index.jsonl line).
#[derive(Debug, Default)]
pub struct FileOut {
    pub bytes: u64,
    pub packets: u64,
    pub preamble_bytes: u64,
    pub preamble_packets: u64,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
}

/// State carried from file to file.
pub struct Rewriter<'a> {
    mappings: &'a BTreeMap<u32, MachineMapping>,
    resolver: FileResolver,
    seen: SeenPackets,
    tracks: BTreeMap<u32, RefinedTracks>,
    pub figures: BTreeMap<u32, MachineFigures>,
    pub packets_read: u64,
    pub packets_replaced: u64,
    pub packets_malformed: u64,
    /// Packets placed by a mapping rewritten here (data and samples).
    pub packets_placed: u64,
}

impl<'a> Rewriter<'a> {
    pub fn new(mappings: &'a BTreeMap<u32, MachineMapping>, names: &[(u32, String)]) -> Self {
        let mut resolver = FileResolver::default();
        for (raw_id, name) in names {
            resolver.name_machine(*raw_id, name);
        }
        Self {
            mappings,
            resolver,
            seen: SeenPackets::default(),
            tracks: BTreeMap::new(),
            figures: BTreeMap::new(),
            packets_read: 0,
            packets_replaced: 0,
            packets_malformed: 0,
            packets_placed: 0,
        }
    }

    /// Rewrites `input` (the capture's `index`-th file) into `output`.
    pub fn file(
        &mut self,
        input: &CaptureFile,
        index: usize,
        output: &std::path::Path,
    ) -> Result<FileOut, CaptureError> {
        let read_err = |e: std::io::Error| CaptureError {
            line: format!("{}: cannot read: {e}", input.path.display()),
            code: exit::IOERR,
        };
        let write_err = |e: std::io::Error| CaptureError {
            line: format!("{}: cannot write: {e}", output.display()),
            code: exit::IOERR,
        };
        let file = File::open(&input.path).map_err(|e| CaptureError {
            line: format!("{}: cannot open: {e}", input.path.display()),
            code: exit::NOINPUT,
        })?;
        let mut reader =
            TraceFile::new(Box::new(file) as Box<dyn Read + Send>).map_err(read_err)?;
        let new_file = modes::open_new_file(
            std::fs::OpenOptions::new().write(true).create_new(true),
            output,
        );
        let out_file = new_file.map_err(|e| CaptureError {
            line: format!("{}: cannot create: {e}", output.display()),
            code: exit::CANTCREAT,
        })?;
        let mut out = BufWriter::with_capacity(1 << 20, out_file);
        for t in self.tracks.values_mut() {
            t.new_file();
        }
        let src: Arc<str> = Arc::from(input.name.as_str());
        // The input's preamble: by index.jsonl's count, else (a later file
        // without one) by content, as `merge DIR` finds it.
        let mut preamble_left = input.preamble_packets.unwrap_or(0);
        let mut in_replay = index > 0 && input.preamble_packets.is_none();
        let mut result = FileOut::default();
        let mut before: Vec<Vec<u8>> = Vec::new();
        let mut frame = Vec::with_capacity(256);
        loop {
            let packet = match reader.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(FileReadError::Io(e)) => return Err(read_err(e)),
                Err(FileReadError::Format(e)) => {
                    return Err(CaptureError {
                        line: format!(
                            "{}: {e}; not a Perfetto trace written by tracesyncd",
                            input.path.display()
                        ),
                        code: exit::DATAERR,
                    });
                }
            };
            self.packets_read += 1;
            let bytes = packet.bytes;
            let in_preamble = if preamble_left > 0 {
                preamble_left -= 1;
                true
            } else if in_replay && self.seen.contains(bytes) {
                true
            } else {
                in_replay = false;
                false
            };
            before.clear();
            let keep = self.packet(bytes, &src, in_preamble, &mut before, &mut result);
            for b in before
                .iter()
                .map(Vec::as_slice)
                .chain(keep.then_some(bytes))
            {
                frame.clear();
                wire::put_len_field(&mut frame, 1, b);
                out.write_all(&frame).map_err(write_err)?;
                result.bytes += frame.len() as u64;
                result.packets += 1;
                if in_preamble {
                    result.preamble_bytes += frame.len() as u64;
                    result.preamble_packets += 1;
                }
            }
        }
        let file = out.into_inner().map_err(|e| write_err(e.into_error()))?;
        file.sync_all().map_err(write_err)?;
        Ok(result)
    }

    /// Learns from one input packet; fills `before` with what goes before
    /// it; whether the packet itself is kept.
    fn packet(
        &mut self,
        bytes: &[u8],
        src: &Arc<str>,
        in_preamble: bool,
        before: &mut Vec<Vec<u8>>,
        file: &mut FileOut,
    ) -> bool {
        let Ok(fields) = scan_packet(bytes) else {
            self.packets_malformed += 1;
            return true;
        };
        let p = self.resolver.resolve_scanned(&fields, bytes, src);
        if p.role != Role::Data {
            self.seen.insert(bytes);
        }
        let machine = p.machine_raw_id;
        // As the daemon's index: every timed packet after the preamble.
        let timed = fields.timestamp.is_some();
        let count_ts = |file: &mut FileOut, ts: i64| {
            if !in_preamble && timed {
                file.first_ts = Some(file.first_ts.map_or(ts, |f| f.min(ts)));
                file.last_ts = Some(file.last_ts.map_or(ts, |l| l.max(ts)));
            }
        };
        let Some(mapping) = self.mappings.get(&machine).filter(|_| machine != 0) else {
            count_ts(file, p.ts);
            return true;
        };
        let tracks = self.tracks.entry(machine).or_default();
        if let Some(seq) = fields
            .trusted_packet_sequence_id
            .filter(|s| is_quality_seq(*s))
        {
            tracks.quality_seq = Some(seq);
        }
        // The live alignment of this machine is replaced, not repeated.
        let replaced = fields.remote_clock_sync.is_some()
            || read_sample(&fields, bytes).is_some_and(|s| {
                matches!(s.track, QualityTrack::Offset | QualityTrack::ErrorBound)
            });
        if replaced {
            self.packets_replaced += 1;
            return false;
        }
        let relay_ns = fields
            .timestamp
            .and_then(|_| self.resolver.machine_boottime(machine, p.clock, p.clock_ts));
        let Some(relay_ns) = relay_ns else {
            count_ts(file, p.ts);
            return true;
        };
        let (placement, sides) = match mapping.place(relay_ns) {
            Some((placement, sides)) => (placement, Some(sides)),
            None => (
                Placement {
                    host_ns: p.ts,
                    bound_ns: p.err_ns,
                },
                None,
            ),
        };
        let written = tracks.before(machine, relay_ns, placement, before);
        self.packets_placed += 1;
        count_ts(file, written.placed_ns);
        let f = self.figures.entry(machine).or_default();
        f.sync_points += u64::from(written.sync_point);
        if p.role == Role::Data && !in_preamble {
            f.packets += 1;
            if p.err_ns > 0 {
                crate::quantiles::record(&mut f.live, p.err_ns);
            }
            crate::quantiles::record(&mut f.refined, written.in_force_ns.max(1));
            match sides {
                Some(Sides::Both) => f.both_sides += 1,
                None => f.kept_live += 1,
                Some(_) => {}
            }
        }
        true
    }
}
