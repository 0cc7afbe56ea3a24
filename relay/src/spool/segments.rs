//! Segment files on disk: naming, the scan that rebuilds the spool on open,
//! and reading one record back.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::SpoolError;
use super::record::{self, HeaderCheck, RecordKind, SEGMENT_MAGIC};
use super::types::io_error;

const PREFIX: &str = "segment-";
const SUFFIX: &str = ".tss";

pub fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{PREFIX}{number:016}{SUFFIX}"))
}

fn segment_number(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)?
        .parse()
        .ok()
}

/// Something wrong found in the spool, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpoolIssue {
    pub path: PathBuf,
    pub offset: u64,
    pub what: String,
}

impl fmt::Display for SpoolIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: offset {}: {}",
            self.path.display(),
            self.offset,
            self.what
        )
    }
}

/// One segment file.
#[derive(Clone, Debug)]
pub struct SegmentFile {
    pub number: u64,
    pub path: PathBuf,
    pub bytes: u64,
}

/// Where a batch lives on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchLocation {
    pub seq: u64,
    pub first_packet_index: u64,
    pub packet_count: u32,
    pub segment: u64,
    pub offset: u64,
    pub record_len: u32,
    pub payload_bytes: usize,
}

/// What the scan of a spool directory found.
#[derive(Debug, Default)]
pub struct Scan {
    pub segments: Vec<SegmentFile>,
    pub batches: Vec<BatchLocation>,
    pub cursors: BTreeMap<u16, Bytes>,
    pub next_seq: u64,
    pub next_packet_index: u64,
    pub issues: Vec<SpoolIssue>,
    /// The newest segment ended cleanly, so new records may follow it.
    pub last_appendable: bool,
}

/// Reads every segment in order, verifying each record; truncates a torn
/// tail record; stops a segment at the first corrupt record (reported).
pub fn scan_dir(dir: &Path) -> Result<Scan, SpoolError> {
    let mut numbers = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir, "list"))? {
        let entry = entry.map_err(io_error(dir, "list"))?;
        if let Some(number) = entry.file_name().to_str().and_then(segment_number) {
            numbers.push(number);
        }
    }
    numbers.sort_unstable();
    let mut scan = Scan {
        next_seq: 1,
        ..Scan::default()
    };
    for number in numbers {
        let path = segment_path(dir, number);
        let bytes = Bytes::from(fs::read(&path).map_err(io_error(&path, "read"))?);
        let (end, clean) = scan_segment(&path, number, &bytes, &mut scan);
        if end < bytes.len() as u64 && clean {
            // A torn tail: drop it so the next append starts on a boundary.
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(io_error(&path, "open"))?;
            file.set_len(end).map_err(io_error(&path, "truncate"))?;
        }
        scan.segments.push(SegmentFile {
            number,
            path,
            bytes: end,
        });
        scan.last_appendable = clean;
    }
    Ok(scan)
}

/// Returns how far the segment is valid and whether it ended cleanly (a
/// torn tail counts as clean once truncated).
fn scan_segment(path: &Path, number: u64, bytes: &Bytes, scan: &mut Scan) -> (u64, bool) {
    let issue = |offset: usize, what: &str| SpoolIssue {
        path: path.to_path_buf(),
        offset: offset as u64,
        what: what.to_owned(),
    };
    if bytes.len() < SEGMENT_MAGIC.len() || &bytes[..SEGMENT_MAGIC.len()] != SEGMENT_MAGIC {
        if SEGMENT_MAGIC.starts_with(bytes) {
            // Created but the magic never fully reached the disk.
            scan.issues
                .push(issue(0, "empty segment (torn at creation); ignored"));
        } else {
            scan.issues
                .push(issue(0, "not a spool segment (bad magic); ignored"));
        }
        return (bytes.len() as u64, false);
    }
    let mut pos = SEGMENT_MAGIC.len();
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let record_len = match record::check_header(rest) {
            HeaderCheck::Complete { record_len, .. } => record_len,
            HeaderCheck::Torn => {
                scan.issues.push(issue(
                    pos,
                    "torn record at the end (crash mid-write); truncated",
                ));
                return (pos as u64, true);
            }
            HeaderCheck::Garbage(why) => {
                scan.issues
                    .push(issue(pos, &format!("{why}; rest of the segment skipped")));
                return (pos as u64, false);
            }
        };
        let record = match record::decode(&bytes.slice(pos..pos + record_len)) {
            Ok(record) => record,
            Err(why) if pos + record_len == bytes.len() => {
                scan.issues.push(issue(
                    pos,
                    &format!("{why} in the last record (torn write); truncated"),
                ));
                return (pos as u64, true);
            }
            Err(why) => {
                scan.issues
                    .push(issue(pos, &format!("{why}; rest of the segment skipped")));
                return (pos as u64, false);
            }
        };
        for (source, cursor) in &record.cursors {
            scan.cursors.insert(*source, cursor.clone());
        }
        match record.kind {
            RecordKind::Checkpoint => {
                scan.next_seq = scan.next_seq.max(record.seq);
                scan.next_packet_index = scan.next_packet_index.max(record.first_packet_index);
            }
            RecordKind::Batch | RecordKind::LegacyBatch if record.seq < scan.next_seq => {
                scan.issues.push(issue(
                    pos,
                    &format!(
                        "batch {} repeats an earlier seq (next was {}); skipped",
                        record.seq, scan.next_seq
                    ),
                ));
            }
            RecordKind::Batch | RecordKind::LegacyBatch
                if record.seq.checked_add(1).is_none()
                    || record
                        .first_packet_index
                        .checked_add(u64::from(record.packet_count))
                        .is_none() =>
            {
                scan.issues.push(issue(
                    pos,
                    &format!(
                        "batch {} (first packet {}, {} packets) runs past 2^64; skipped",
                        record.seq, record.first_packet_index, record.packet_count
                    ),
                ));
            }
            RecordKind::Batch | RecordKind::LegacyBatch => {
                scan.batches.push(BatchLocation {
                    seq: record.seq,
                    first_packet_index: record.first_packet_index,
                    packet_count: record.packet_count,
                    segment: number,
                    offset: pos as u64,
                    record_len: record_len as u32,
                    payload_bytes: record.payload_bytes,
                });
                // Checked by the guard above.
                scan.next_seq = record.seq.saturating_add(1);
                scan.next_packet_index = record
                    .first_packet_index
                    .saturating_add(u64::from(record.packet_count));
            }
        }
        pos += record_len;
    }
    (pos as u64, true)
}

/// Reads and verifies one batch record: its packets in wire form.
pub fn read_batch(dir: &Path, at: &BatchLocation) -> Result<Bytes, SpoolError> {
    let path = segment_path(dir, at.segment);
    let mut file = File::open(&path).map_err(io_error(&path, "open"))?;
    // Read into unfilled capacity: a zeroed buffer would cost a memset of
    // every resent byte on top of the copy.
    let len = at.record_len as usize;
    let mut buf = Vec::with_capacity(len);
    file.seek(SeekFrom::Start(at.offset))
        .and_then(|_| file.take(len as u64).read_to_end(&mut buf))
        .map_err(io_error(&path, "read"))?;
    if buf.len() != len {
        return Err(SpoolError::Corrupt {
            path,
            offset: at.offset,
            reason: format!("record cut short: {} of {len} bytes", buf.len()),
        });
    }
    let record = record::decode(&Bytes::from(buf)).map_err(|why| SpoolError::Corrupt {
        path: path.clone(),
        offset: at.offset,
        reason: why.to_owned(),
    })?;
    let is_batch = matches!(record.kind, RecordKind::Batch | RecordKind::LegacyBatch);
    if !is_batch || record.seq != at.seq {
        return Err(SpoolError::Corrupt {
            path,
            offset: at.offset,
            reason: format!("expected batch {} here", at.seq),
        });
    }
    Ok(record.wire)
}
