//! Writing a capture read back as one (`merge DIR`, `merge` of rolled
//! files): every packet once, in the daemon's order, as a Perfetto trace
//! (the packets' bytes as written, each file's replayed preamble skipped)
//! or jsonl (the record `tail --format jsonl` prints, `src` the file).
//! With a window only its packets are written, after a preamble of the
//! capture's state at its start, so the output opens alone.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde::Serialize;
use tracesync_common::exit;
use tracesync_core::control::{MachineFilter, PacketFormatter, TailFormat};
use tracesync_core::live::Role;
use tracesync_core::preamble::{PreambleLimits, PreambleState};
use tracesync_protocol::wire;

use super::capture::{Capture, CaptureError, CapturePackets};
use super::output::Format;
use super::window::Window;

/// Counters of a capture merge (`--stats`).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct CaptureStats {
    pub inputs: u64,
    /// Machines with packets written (the host counted when it has any).
    pub machines: u64,
    pub packets_read: u64,
    /// Replayed preamble packets of later files, not written again.
    pub preamble_packets_skipped: u64,
    pub packets_written: u64,
    pub packets_malformed: u64,
    /// Packets outside `--since`/`--until`.
    pub packets_outside_window: u64,
    /// Packets of the window's own preamble (Perfetto output only).
    pub window_preamble_packets: u64,
}

/// Merges `capture` into `output` (None or "-": standard output).
pub fn merge_capture(
    capture: &Capture,
    output: Option<&Path>,
    format: Format,
    window: Option<Window>,
    stats_path: Option<&Path>,
) -> Result<CaptureStats, CaptureError> {
    let target = output.filter(|p| p.as_os_str() != "-");
    let temp = target.and_then(super::temp_path);
    let create_err = |path: &Path, e: io::Error| CaptureError {
        line: format!(
            "{}: cannot create: {e}; check that its directory exists and is writable",
            path.display()
        ),
        code: exit::CANTCREAT,
    };
    let sink: Box<dyn Write> = match (&temp, target) {
        (Some(t), Some(target)) => {
            Box::new(super::create_temp(t).map_err(|e| create_err(target, e))?)
        }
        (None, Some(target)) => {
            Box::new(super::open_special(target).map_err(|e| create_err(target, e))?)
        }
        _ => Box::new(io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let result = write_capture(capture, format, window, &mut out)
        .and_then(|stats| out.flush().map(|()| stats).map_err(write_err));
    drop(out);
    let stats = match result {
        Ok(stats) => stats,
        Err(e) => {
            if let Some(t) = &temp {
                let _ = std::fs::remove_file(t);
            }
            return Err(e);
        }
    };
    if let (Some(t), Some(target)) = (&temp, target) {
        std::fs::rename(t, target).map_err(|e| create_err(target, e))?;
    }
    if let Some(path) = stats_path {
        serde_json::to_string_pretty(&stats)
            .map_err(io::Error::other)
            .and_then(|json| tracesync_capture::modes::write_file(path, (json + "\n").as_bytes()))
            .map_err(|e| create_err(path, e))?;
    }
    Ok(stats)
}

fn write_err(e: io::Error) -> CaptureError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        return CaptureError::closed_output();
    }
    CaptureError {
        line: format!("cannot write the output: {e}"),
        code: exit::IOERR,
    }
}

fn write_capture(
    capture: &Capture,
    format: Format,
    window: Option<Window>,
    out: &mut impl Write,
) -> Result<CaptureStats, CaptureError> {
    let mut stats = CaptureStats {
        inputs: capture.files.len() as u64,
        ..CaptureStats::default()
    };
    let mut packets = CapturePackets::new(capture);
    let mut formatter = PacketFormatter::new(TailFormat::Jsonl, MachineFilter::new(&[]));
    // The state a window's output starts with, until the window starts.
    let mut preamble = window.map(|_| PreambleState::new(PreambleLimits::default()));
    let mut buf = Vec::with_capacity(64 << 10);
    let mut machines = std::collections::BTreeSet::new();
    while let Some(p) = packets.next_packet()? {
        let started = preamble.is_none();
        let inside = window.is_none_or(|w| {
            // Once the window started, state packets keep their sequences
            // whole even if they are a little older.
            w.contains(p.ts) || (started && p.role != Role::Data && p.ts <= w.until)
        });
        if !inside {
            stats.packets_outside_window += 1;
            if let Some(state) = preamble.as_mut() {
                state.observe_raw(&packets.bytes);
            }
            continue;
        }
        if let Some(state) = preamble.take()
            && format == Format::Perfetto
        {
            for bytes in state.packets() {
                put_packet(&mut buf, &bytes);
                stats.window_preamble_packets += 1;
            }
        }
        preamble = None;
        match format {
            Format::Perfetto => put_packet(&mut buf, &packets.bytes),
            Format::Jsonl => {
                formatter.write(&p, &mut buf);
            }
        }
        stats.packets_written += 1;
        // Raw ids are the daemon's (one per relay instance): bounded by its
        // machines, far below the cap even for a hostile file.
        if machines.len() < 1 << 16 {
            machines.insert(p.machine_raw_id);
        }
        if buf.len() >= 64 << 10 {
            out.write_all(&buf).map_err(write_err)?;
            buf.clear();
        }
    }
    out.write_all(&buf).map_err(write_err)?;
    stats.machines = machines.len() as u64;
    stats.packets_read = packets.counts.packets_read;
    stats.preamble_packets_skipped = packets.counts.preamble_skipped;
    stats.packets_malformed = packets.counts.packets_malformed;
    Ok(stats)
}

fn put_packet(buf: &mut Vec<u8>, bytes: &[u8]) {
    wire::put_len_field(buf, 1, bytes);
}
