//! A snapshot's windows of the stream relays and the host: read back from
//! the daemon's own rolled output (the files covering the window, the one
//! being written included), each packet's host time told by core's
//! [`FileResolver`] as `tail DIR` tells it, and handed to the assembly,
//! which cuts it to the window and writes the state in force before each
//! machine's first packet.
//!
//! Invariants:
//! - Machines whose windows come from their ring (`ring`) are skipped: a
//!   ring relay's sync points and sync-quality values in the output would
//!   only repeat what its window's replay makes.
//! - Each packet is handed over once: the preamble a later file replays
//!   is skipped (index.jsonl's count, else by content), as
//!   `tracesync merge DIR` reads a capture.
//! - Reading stops past the window's end (plus [`PAST_END_NS`]) or at the
//!   end of the file being written (a torn last packet there is the
//!   writer's unfinished write: the watermark says the window is before
//!   it). Memory: one packet at a time and the resolver's bounded maps.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use tracesync_capture::index::Index;
use tracesync_capture::names;
use tracesync_core::live::Role;
use tracesync_core::readback::{FileResolver, SeenPackets};
use tracesync_core::trigger::Assembly;
use tracesync_protocol::reader::TraceFile;

/// Packets this far past the window's end stop the reading (sync points
/// put a packet's read-back time within their threshold of the daemon's;
/// the output is ordered by the daemon's).
pub const PAST_END_NS: i64 = 1_000_000_000;

/// What the output gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputRead {
    pub files: u64,
    pub packets: u64,
    /// Packets that did not scan (skipped).
    pub malformed: u64,
}

/// Feeds the output in `dir` over host window [`from`, `to`] to
/// `assembly`, every machine but those in `ring`; `sink` takes the framed
/// bytes as they are made.
pub fn feed(
    dir: &Path,
    (from, to): (i64, i64),
    ring: &BTreeSet<u32>,
    assembly: &mut Assembly,
    sink: &mut impl io::Write,
) -> io::Result<OutputRead> {
    let index = Index::read(dir).unwrap_or_default();
    let mut rolled: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| names::is_rolled(n))
        .collect();
    rolled.sort_by(|a, b| names::writing_order(a).cmp(&names::writing_order(b)));
    // From the last file that starts at or before the window (its preamble
    // holds the state in force before it): earlier ones end before it.
    let starts_before = |n: &String| {
        index
            .entry(n)
            .and_then(|e| e.first_ts)
            .is_some_and(|t| t <= from)
    };
    let first = rolled.iter().rposition(starts_before).unwrap_or(0);
    let mut resolver = FileResolver::default();
    for (raw_id, name) in index.machine_names() {
        resolver.name_machine(raw_id, &name);
    }
    let mut seen = SeenPackets::default();
    let src: Arc<str> = Arc::from("");
    let mut read = OutputRead::default();
    for (i, name) in rolled.iter().enumerate().skip(first) {
        let entry = index.entry(name);
        if entry.and_then(|e| e.first_ts).is_some_and(|t| t > to) {
            break;
        }
        let later = i > first;
        let mut skip = if later {
            entry.and_then(|e| e.preamble_packets)
        } else {
            Some(0)
        };
        let mut in_replay = skip.is_none();
        let path = dir.join(name);
        let file = match File::open(&path) {
            Ok(f) => f,
            // Gone to retention since the listing: the next one.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io::Error::other(format!("{}: {e}", path.display()))),
        };
        read.files += 1;
        let mut reader = TraceFile::new(file)?;
        // An error is the file's end being written (or damaged): what
        // comes before it is what the window needs.
        while let Ok(Some(packet)) = reader.next_packet() {
            let bytes = packet.bytes;
            if let Some(n) = skip.as_mut().filter(|n| **n > 0) {
                *n -= 1;
                let _ = resolver.resolve(bytes, &src);
                continue;
            }
            if in_replay {
                if seen.contains(bytes) {
                    let _ = resolver.resolve(bytes, &src);
                    continue;
                }
                in_replay = false;
            }
            let Some(out) = resolver.resolve(bytes, &src) else {
                read.malformed += 1;
                continue;
            };
            if out.role != Role::Data {
                seen.insert(bytes);
            }
            if out.role == Role::Data && out.ts > to.saturating_add(PAST_END_NS) {
                return Ok(read);
            }
            if ring.contains(&out.machine_raw_id) {
                continue;
            }
            read.packets += 1;
            assembly.output_packet(out);
            sink.write_all(&assembly.take_bytes())?;
        }
    }
    Ok(read)
}
