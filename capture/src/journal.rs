//! The commit journal: after each commit, the current file's durable length
//! and the de-duplication state of the streams that changed, as
//! crc32-checked records; compacted to one full record on rotation.
//!
//! Layout: the magic `TSJRNL1\n`, then records of `u32 LE payload length`,
//! `u32 LE crc32 of the payload`, payload (one JSON [`JournalRecord`]).
//! Reading stops at the first torn or corrupt record: everything before it
//! was fsynced before the commit that wrote it returned. The daemon appends
//! (daemon/src/rolling/journal.rs); readers only [`parse`].

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use tracesync_core::live::RecoveredStream;

use crate::names::JOURNAL_NAME;

pub const MAGIC: &[u8; 8] = b"TSJRNL1\n";
/// Records longer than this are treated as corrupt.
pub const MAX_RECORD_BYTES: u32 = 64 << 20;

/// One commit (or a compaction, `full`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalRecord {
    /// Name of the trace file being written.
    pub file: String,
    /// Its durable length in bytes.
    pub len: u64,
    /// Smallest output sequence id not yet used.
    pub next_out_seq: u32,
    /// Whether `streams` is the whole state (else: the streams changed since
    /// the previous record).
    pub full: bool,
    pub streams: Vec<RecoveredStream>,
}

/// The state the journal's valid records add up to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JournalState {
    pub file: Option<String>,
    pub len: u64,
    pub next_out_seq: u32,
    /// By (relay instance, relay sequence).
    pub streams: BTreeMap<(u64, u32), RecoveredStream>,
    pub records: u64,
    /// Bytes after the last valid record (a torn or corrupt tail).
    pub ignored_bytes: u64,
}

impl JournalState {
    fn apply(&mut self, r: JournalRecord) {
        if r.full {
            self.streams.clear();
        }
        for s in r.streams {
            self.streams.insert((s.relay_instance, s.relay_sequence), s);
        }
        self.file = Some(r.file);
        self.len = r.len;
        self.next_out_seq = r.next_out_seq;
        self.records += 1;
    }
}

/// At most this much of a journal is read (a corrupt or hostile one is
/// cut there: four of the largest records).
pub const MAX_READ_BYTES: u64 = MAX_RECORD_BYTES as u64 * 4;

/// The state of the journal `reader` yields, up to [`MAX_READ_BYTES`].
pub fn read_from(reader: impl Read) -> io::Result<JournalState> {
    let mut bytes = Vec::new();
    reader.take(MAX_READ_BYTES).read_to_end(&mut bytes)?;
    Ok(parse(&bytes))
}

/// Reads the journal of capture directory `dir` as a reader does; `None`
/// if there is none. (The daemon opens its own without following links.)
pub fn read_dir_journal(dir: &Path) -> io::Result<Option<JournalState>> {
    match std::fs::File::open(dir.join(JOURNAL_NAME)) {
        Ok(f) => read_from(f).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The state of a journal's bytes, up to the first bad record.
pub fn parse(bytes: &[u8]) -> JournalState {
    let mut state = JournalState::default();
    let Some(mut rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
        state.ignored_bytes = bytes.len() as u64;
        return state;
    };
    while let Some(record) = next_record(&mut rest) {
        state.apply(record);
    }
    state.ignored_bytes = rest.len() as u64;
    state
}

/// Takes one valid record off the front of `rest`.
fn next_record(rest: &mut &[u8]) -> Option<JournalRecord> {
    let (header, body) = rest.split_first_chunk::<8>()?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > MAX_RECORD_BYTES {
        return None;
    }
    let payload = body.get(..len as usize)?;
    if crc32fast::hash(payload) != crc {
        return None;
    }
    let record = serde_json::from_slice(payload).ok()?;
    *rest = &body[len as usize..];
    Some(record)
}

pub fn encode(record: &JournalRecord, out: &mut Vec<u8>) -> io::Result<()> {
    let payload = serde_json::to_vec(record).map_err(io::Error::other)?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= MAX_RECORD_BYTES)
        .ok_or_else(|| io::Error::other("journal record too large"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// A whole journal of one full record: `state`'s streams, naming `file`
/// at durable length `len` (a capture rewritten elsewhere, e.g. by
/// `tracesync refine`, keeps its sources and its recovery point).
pub fn compacted(state: &JournalState, file: &str, len: u64) -> io::Result<Vec<u8>> {
    let record = JournalRecord {
        file: file.to_owned(),
        len,
        next_out_seq: state.next_out_seq,
        full: true,
        streams: state.streams.values().cloned().collect(),
    };
    let mut out = MAGIC.to_vec();
    encode(&record, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(instance: u64, seq: u32, through: u64) -> RecoveredStream {
        RecoveredStream {
            out_seq: seq + 100,
            relay_instance: instance,
            relay_sequence: seq,
            machine_raw_id: 7,
            written_through: through,
        }
    }

    fn record(len: u64, full: bool, streams: Vec<RecoveredStream>) -> JournalRecord {
        JournalRecord {
            file: "a".into(),
            len,
            next_out_seq: 200,
            full,
            streams,
        }
    }

    #[test]
    fn records_add_up_and_a_compacted_journal_holds_their_state() {
        let mut bytes = MAGIC.to_vec();
        encode(&record(10, true, vec![stream(1, 2, 5)]), &mut bytes).expect("encode");
        encode(&record(20, false, vec![stream(1, 3, 9)]), &mut bytes).expect("encode");
        encode(&record(30, false, vec![stream(1, 2, 11)]), &mut bytes).expect("encode");
        let state = parse(&bytes);
        assert_eq!((state.len, state.records, state.ignored_bytes), (30, 3, 0));
        assert_eq!(
            state.streams.values().copied().collect::<Vec<_>>(),
            [stream(1, 2, 11), stream(1, 3, 9)]
        );
        let whole = compacted(&state, "b", 4).expect("compact");
        let again = parse(&whole);
        assert_eq!(again.file.as_deref(), Some("b"));
        assert_eq!((again.len, again.records), (4, 1));
        assert_eq!(again.streams, state.streams);
        assert_eq!(read_from(whole.as_slice()).expect("read"), again);
    }

    #[test]
    fn foreign_bytes_are_ignored_and_a_missing_journal_is_none() {
        let state = parse(b"not a journal");
        assert_eq!((state.records, state.ignored_bytes), (0, 13));
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_dir_journal(dir.path()).expect("read"), None);
    }
}
