//! The commit journal as the daemon writes it: opened (compacted to one
//! full record), appended to after each commit, read back at start
//! without following a link. Its format is `tracesync_capture::journal`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tracesync_capture::journal::{self, JournalRecord, JournalState, MAGIC, RecoveredStream};

use super::files::{self, Links};

/// Reads a journal; `None` if there is none. A link at `path` is not
/// followed: an error.
pub fn read(path: &Path) -> io::Result<Option<JournalState>> {
    match files::open_existing(path, false) {
        Ok(f) => journal::read_from(f).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Fsyncs a directory, so renames and new files in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// An open journal, appended to on each commit.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Length up to the last record known written whole.
    good_len: u64,
    /// A failed append may have left a partial record past `good_len`.
    dirty: bool,
    fsync: bool,
    /// The streams its records written whole add up to (what a full
    /// record of the durable state carries, if the journal must be
    /// started over: `RollingWriter::reopen`).
    durable: BTreeMap<(u64, u32), RecoveredStream>,
    /// The streams of the record being appended.
    appending: Vec<RecoveredStream>,
}

impl Journal {
    /// Replaces the journal at `path` with one full record, atomically.
    /// The temporary file is created new, never through a link
    /// (`files::clear_temporary`); the rename replaces a link at `path`,
    /// never its target.
    pub fn compact(
        path: &Path,
        record: &JournalRecord,
        fsync: bool,
        links: &Links,
    ) -> io::Result<Self> {
        let mut bytes = MAGIC.to_vec();
        journal::encode(record, &mut bytes)?;
        let tmp = path.with_extension("tmp");
        // The handle is opened on the temporary file and kept: after the
        // rename it is the journal, so nothing can fail past the rename.
        let write_tmp = || -> io::Result<File> {
            files::clear_temporary(&tmp, links)?;
            let mut f = files::create_new(&tmp, true)?;
            f.write_all(&bytes)?;
            if fsync {
                f.sync_data()?;
            }
            Ok(f)
        };
        let file = match write_tmp() {
            Ok(f) => f,
            Err(e) => {
                // Ours, or a leftover; never a link (left alone).
                if matches!(files::look(&tmp), Ok(files::Found::File(_))) {
                    let _ = std::fs::remove_file(&tmp);
                }
                return Err(e);
            }
        };
        std::fs::rename(&tmp, path)?;
        if fsync
            && let Some(dir) = path.parent()
            && let Err(e) = sync_dir(dir)
        {
            // The rename is done; at worst a crash brings back the previous
            // journal, whose state is older but consistent.
            tracing::warn!("cannot fsync {}: {e}", dir.display());
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            good_len: bytes.len() as u64,
            dirty: false,
            fsync,
            durable: record
                .streams
                .iter()
                .map(|s| ((s.relay_instance, s.relay_sequence), *s))
                .collect(),
            appending: Vec::new(),
        })
    }

    /// Appends one record and makes it durable (if fsync is on). The
    /// writer appends in two halves around its sync thread instead.
    #[cfg(test)]
    pub fn append(&mut self, record: &JournalRecord) -> io::Result<()> {
        let bytes = self.begin_append(record)?;
        let written = self.file.write_all(&bytes).and_then(|()| {
            if self.fsync {
                self.file.sync_data()?;
            }
            Ok(())
        });
        self.end_append(bytes.len(), written.is_ok());
        written
    }

    /// The first half of an append that another thread finishes (see
    /// `commit.rs`): drops a partial record a failed append left, and
    /// encodes `record`. Write the bytes with [`Journal::writer`], then
    /// call [`Journal::end_append`].
    pub fn begin_append(&mut self, record: &JournalRecord) -> io::Result<Vec<u8>> {
        if self.dirty {
            // Drop a partial record a failed append left, or readers would
            // stop there and miss every later record.
            self.file.set_len(self.good_len)?;
            self.dirty = false;
        }
        let mut bytes = Vec::new();
        journal::encode(record, &mut bytes)?;
        // Until the append is known whole, a partial record may be there.
        self.dirty = true;
        self.appending.clone_from(&record.streams);
        Ok(bytes)
    }

    /// A second descriptor of the journal (same open file, so appends go
    /// to its end) for the thread that writes and syncs a record.
    pub fn writer(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// The record `begin_append` encoded (`len` bytes) was written and
    /// synced (`ok`), or not: then it is cut off before the next one.
    pub fn end_append(&mut self, len: usize, ok: bool) {
        if ok {
            self.dirty = false;
            self.good_len += len as u64;
            for s in self.appending.drain(..) {
                self.durable.insert((s.relay_instance, s.relay_sequence), s);
            }
        }
        self.appending.clear();
    }

    /// The streams as the records written whole leave them.
    pub fn durable_streams(&self) -> Vec<RecoveredStream> {
        self.durable.values().copied().collect()
    }

    /// Whether the journal was opened to fdatasync its records.
    pub fn fsync(&self) -> bool {
        self.fsync
    }

    pub fn len(&self) -> u64 {
        self.good_len
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
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

    fn record(file: &str, len: u64, full: bool, streams: Vec<RecoveredStream>) -> JournalRecord {
        JournalRecord {
            file: file.into(),
            len,
            next_out_seq: 200,
            full,
            streams,
        }
    }

    #[test]
    fn deltas_apply_over_a_full_record_and_reading_stops_at_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal");
        let links = Links::default();
        let mut j = Journal::compact(
            &path,
            &record("a", 10, true, vec![stream(1, 2, 5)]),
            true,
            &links,
        )
        .expect("compact");
        let mut ends = vec![j.len()];
        j.append(&record("a", 20, false, vec![stream(1, 3, 9)]))
            .expect("append");
        let good = j.len();
        ends.push(good);
        j.append(&record("a", 30, false, vec![stream(1, 2, 11)]))
            .expect("append");
        ends.push(j.len());
        let state = read(&path).expect("read").expect("exists");
        assert_eq!(state.len, 30);
        assert_eq!(state.records, 3);
        assert_eq!(state.ignored_bytes, 0);
        assert_eq!(
            state.streams.values().cloned().collect::<Vec<_>>(),
            [stream(1, 2, 11), stream(1, 3, 9)]
        );

        // A flipped byte in the last record: the state before it.
        let mut bytes = std::fs::read(&path).expect("read");
        let last = bytes.len() - 3;
        bytes[last] ^= 0x20;
        let state = journal::parse(&bytes);
        assert_eq!((state.len, state.records), (20, 2));
        assert_eq!(state.ignored_bytes, bytes.len() as u64 - good);
        assert_eq!(state.streams[&(1, 2)].written_through, 5);

        // Every torn length reads as the records wholly before the cut.
        let whole = std::fs::read(&path).expect("read");
        for cut in 0..whole.len() {
            let state = journal::parse(&whole[..cut]);
            let whole_records = ends.iter().filter(|&&end| end <= cut as u64).count();
            assert_eq!(state.records, whole_records as u64, "cut at {cut}");
        }

        // A full record replaces the stream set.
        let j = Journal::compact(
            &path,
            &record("b", 4, true, vec![stream(9, 9, 1)]),
            false,
            &links,
        )
        .expect("compact");
        let state = read(&path).expect("read").expect("exists");
        assert_eq!(state.file.as_deref(), Some("b"));
        assert_eq!(state.streams.len(), 1);
        assert_eq!(j.len(), std::fs::metadata(&path).expect("meta").len());
    }

    #[test]
    fn missing_and_foreign_journals() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("journal");
        assert_eq!(read(&path).expect("read"), None);
        std::fs::write(&path, b"not a journal").expect("write");
        let state = read(&path).expect("read").expect("exists");
        assert_eq!(state.records, 0);
        assert_eq!(state.file, None);
        assert_eq!(state.ignored_bytes, 13);
    }
}
