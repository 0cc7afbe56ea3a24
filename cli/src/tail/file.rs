//! `tracesync tail FILE`: one snapshot (`snapshot-<UTC>-<NAME>.pftrace`) or
//! one rolled file, printed as `tail DIR` prints the stream (text, jsonl or
//! perfetto; `--machine`, `--time`, `-n`, `--since`), then done: a
//! snapshot is written whole at once, so there is nothing to follow.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::path::Path;

use tracesync_common::exit;
use tracesync_core::control::{MachineFilter, PacketFormatter, TailFormat};
use tracesync_protocol::wire;

use super::dir::first_host_relation;
use super::options::{MAX_LINES, TailOptions};
use crate::merge::capture::{self, CapturePackets};
use crate::merge::window::{self, TimeSpec};

/// Prints the file at `path`; its exit code.
pub fn run_file(path: &Path, opts: &TailOptions) -> u8 {
    let capture = match capture::detect(&[path.to_path_buf()]) {
        Ok(Some(c)) => c,
        Ok(None) => {
            eprintln!(
                "tracesync: error: {}: neither a snapshot (snapshot-<UTC>-<NAME>.pftrace) nor a \
                 rolled file (tracesync-<start>-<seq>.pftrace); give one of tracesyncd's files, \
                 its output directory, or --connect SOCKET",
                path.display()
            );
            return exit::NOINPUT;
        }
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            return e.code;
        }
    };
    let since = match opts.since {
        None => i64::MIN,
        Some(TimeSpec::Trace(ns)) => ns,
        Some(spec) => match window::resolve(&capture, Some(spec), None) {
            Ok(w) => w.since,
            Err(e) => {
                eprintln!("tracesync: error: --since: {e}");
                return e.code;
            }
        },
    };
    let mut formatter = PacketFormatter::new(opts.format, MachineFilter::new(&opts.machines));
    formatter = formatter.with_time(opts.time, first_host_relation(path));
    let keep = opts.lines.map(|n| n.min(MAX_LINES) as usize);
    let mut held: VecDeque<Vec<u8>> = VecDeque::new();
    let mut out = io::stdout().lock();
    let mut buf = Vec::with_capacity(64 << 10);
    let mut packets = CapturePackets::new(&capture);
    let result = (|| -> Result<(), capture::CaptureError> {
        while let Some(p) = packets.next_packet()? {
            formatter.observe(&p);
            if p.ts < since {
                continue;
            }
            if opts.format == TailFormat::Perfetto {
                wire::put_len_field(&mut buf, 1, &packets.bytes);
            } else if let Some(n) = keep {
                let mut record = Vec::new();
                if formatter.write(&p, &mut record) {
                    if held.len() == n {
                        held.pop_front();
                    }
                    held.push_back(record);
                }
            } else {
                formatter.write(&p, &mut buf);
            }
            if buf.len() >= 64 << 10 {
                write(&mut out, &buf)?;
                buf.clear();
            }
        }
        for record in held.drain(..) {
            buf.extend_from_slice(&record);
        }
        write(&mut out, &buf)?;
        out.flush().map_err(|e| write_error(&e))
    })();
    match result {
        Ok(()) => exit::OK,
        Err(e) if e.is_closed_output() => exit::OK,
        Err(e) => {
            eprintln!("tracesync: error: {e}");
            e.code
        }
    }
}

fn write(out: &mut impl Write, buf: &[u8]) -> Result<(), capture::CaptureError> {
    out.write_all(buf).map_err(|e| write_error(&e))
}

fn write_error(e: &io::Error) -> capture::CaptureError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        return capture::CaptureError::closed_output();
    }
    capture::CaptureError {
        line: format!("cannot write the output: {e}"),
        code: exit::IOERR,
    }
}
