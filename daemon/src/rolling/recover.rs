//! What `RollingWriter::open` finds in the output directory: the files
//! already there, and, from the journal, the de-duplication state and the
//! last file's committed length (its tail past that is cut off).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use tracesync_protocol::reader::{FileReadError, TraceFile};

use super::files::{self, Links};
use super::index;
use super::journal;
use super::{RecoveredStream, RollingError};
use tracesync_capture::index::IndexEntry;
use tracesync_capture::journal::JournalState;
use tracesync_capture::names::{INDEX_NAME, JOURNAL_NAME, RolledName};
use tracesync_capture::sidecar::sidecar_name;
use tracesync_core::preamble::{PreambleLimits, PreambleState};

/// The directory's state before the writer starts a new file.
#[derive(Debug)]
pub struct Found {
    /// Every rolled file, complete, in file order.
    pub entries: Vec<IndexEntry>,
    pub next_file_seq: u64,
    pub preamble: PreambleState,
    pub streams: BTreeMap<(u64, u32), RecoveredStream>,
    pub next_out_seq: u32,
    pub truncated_bytes: u64,
    pub orphans_removed: u64,
    pub journal_ignored_bytes: u64,
    pub bad_index_lines: u64,
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> RollingError + 'a {
    move |source| RollingError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Rolled files in `dir`: (seq, name, length), in file order. Only
/// regular files: a link with a rolled file's name is not one (counted in
/// `links`, left alone).
fn list(dir: &Path, links: &Links) -> Result<Vec<(u64, String, u64)>, RollingError> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_err("list", dir))? {
        let e = e.map_err(io_err("list", dir))?;
        let Some(name) = e.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(RolledName { seq, .. }) = RolledName::parse(&name) else {
            continue;
        };
        // Not following a link (lstat).
        let meta = e.metadata().map_err(io_err("stat", &e.path()))?;
        if meta.file_type().is_symlink() {
            links.met(&e.path(), false, "not taken for an output file");
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        let len = meta.len();
        files.push((seq, name, len));
    }
    files.sort();
    Ok(files)
}

fn remove_with_sidecar(dir: &Path, name: &str) -> Result<(), RollingError> {
    let path = dir.join(name);
    std::fs::remove_file(&path).map_err(io_err("remove", &path))?;
    let sidecar = dir.join(sidecar_name(name));
    match std::fs::remove_file(&sidecar) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", &sidecar)(e)),
        _ => Ok(()),
    }
}

/// Cuts `path` to `len` and rebuilds the preamble state from what is left.
/// Returns (bytes cut, packets read, largest sequence id seen).
fn truncate_and_read(
    path: &Path,
    len: u64,
    preamble: &mut PreambleState,
) -> Result<(u64, u64, u32), RollingError> {
    let file = files::open_existing(path, true).map_err(io_err("open", path))?;
    let actual = file.metadata().map_err(io_err("stat", path))?.len();
    let cut = actual.saturating_sub(len);
    if cut > 0 {
        file.set_len(len).map_err(io_err("truncate", path))?;
        file.sync_all().map_err(io_err("fsync", path))?;
    }
    // Read back through the same descriptor (at offset 0 still).
    let mut trace = TraceFile::new(file).map_err(io_err("read", path))?;
    let (mut packets, mut max_seq) = (0, 0);
    loop {
        match trace.next_packet() {
            Ok(Some(p)) => {
                packets += 1;
                max_seq = max_seq.max(preamble.observe_raw(p.bytes).unwrap_or(0));
            }
            Ok(None) => break,
            // Bytes before the committed length were fsynced whole; a
            // malformed record there is damage we cannot repair: keep what
            // was read and go on with a new file.
            Err(FileReadError::Format(e)) => {
                tracing::warn!(
                    "{}: {e}; preamble state rebuilt up to there",
                    path.display()
                );
                break;
            }
            Err(FileReadError::Io(e)) => return Err(io_err("read", path)(e)),
        }
    }
    Ok((cut, packets, max_seq))
}

/// Reads the directory, recovers the last file from the journal. Links
/// are never followed (a link at the journal's name is an error).
pub fn scan(dir: &Path, limits: PreambleLimits, links: &Links) -> Result<Found, RollingError> {
    let index_path = dir.join(INDEX_NAME);
    let (indexed, bad_index_lines) =
        index::load(&index_path, links).map_err(io_err("read", &index_path))?;
    let mut indexed: HashMap<String, IndexEntry> =
        indexed.into_iter().map(|e| (e.name.clone(), e)).collect();
    let journal_path: PathBuf = dir.join(JOURNAL_NAME);
    let journal = journal::read(&journal_path)
        .inspect_err(|e| {
            if files::is_link_refused(e) {
                links.met(&journal_path, false, "the daemon does not start");
            }
        })
        .map_err(io_err("read", &journal_path))?
        .unwrap_or_default();
    let mut files = list(dir, links)?;
    let mut found = Found {
        entries: Vec::new(),
        next_file_seq: files.last().map_or(1, |f| f.0 + 1),
        preamble: PreambleState::new(limits),
        streams: BTreeMap::new(),
        next_out_seq: 1,
        truncated_bytes: 0,
        orphans_removed: 0,
        journal_ignored_bytes: journal.ignored_bytes,
        bad_index_lines,
    };
    if let JournalState {
        file: Some(last),
        len,
        next_out_seq,
        streams,
        ..
    } = journal
    {
        let last_seq = RolledName::parse(&last).map_or(0, |n| n.seq);
        // Files after the journal's were started by a rotation that never
        // got to its journal record: they hold only a preamble.
        for (_, name, _) in files.iter().filter(|f| f.0 > last_seq) {
            remove_with_sidecar(dir, name)?;
            found.orphans_removed += 1;
        }
        files.retain(|f| f.0 <= last_seq);
        if let Some(f) = files.iter_mut().find(|f| f.1 == last) {
            let path = dir.join(&last);
            let (cut, packets, max_seq) = truncate_and_read(&path, len, &mut found.preamble)?;
            found.truncated_bytes = cut;
            f.2 -= cut;
            let entry = indexed
                .entry(last.clone())
                .or_insert_with(|| IndexEntry::found(last.clone(), f.2));
            entry.packets = packets;
            found.next_out_seq = found.next_out_seq.max(max_seq.saturating_add(1));
        }
        found.streams = streams;
        found.next_out_seq = found.next_out_seq.max(next_out_seq);
    }
    found.entries = files
        .into_iter()
        .map(|(_, name, len)| {
            let mut e = indexed
                .remove(&name)
                .unwrap_or_else(|| IndexEntry::found(name, len));
            e.bytes = len;
            e.complete = true;
            e
        })
        .collect();
    Ok(found)
}
