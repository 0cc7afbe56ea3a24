//! A rolling capture read back as one: `tracesync merge DIR` (the daemon's
//! output directory, its files in index.jsonl order) or `merge FILES...` of
//! rolled files (`tracesync-<start>-<seq>.pftrace`), or one snapshot
//! (`snapshot-<UTC>-<NAME>.pftrace`, a file of the same form), and
//! `tracesync report`.
//!
//! The daemon already merged, stamped and ordered every packet: machine
//! ids are its raw ids in every file, output sequence ids are unique across
//! the capture (they continue across restarts), and the sync points say
//! each remote machine's offset. Reading a capture back is reading its
//! files in order, skipping the preamble of every file after the first
//! (what it replays was in an earlier file): by `preamble_packets` of
//! index.jsonl, else by content as `tail DIR` does
//! (`crate::follow::resolve::SeenPackets`). Trace times and error bounds
//! come from the same resolver as `tail DIR` (`crate::follow::resolve`),
//! `src` from the directory's journal as `tail DIR` names them
//! (`crate::follow::sources`).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracesync_capture::index::Index;
use tracesync_capture::names;
use tracesync_common::exit;
use tracesync_core::live::{OutPacket, Role};
use tracesync_protocol::reader::{FileReadError, TraceFile};

use crate::follow::list;
use crate::follow::resolve::{FileResolver, SeenPackets};
use crate::follow::sources::SourceLabels;

/// One rolled file of a capture.
#[derive(Clone, Debug)]
pub struct CaptureFile {
    pub path: PathBuf,
    /// Its file name (the jsonl `src` of its packets).
    pub name: String,
    /// Packets of its preamble, from index.jsonl.
    pub preamble_packets: Option<u64>,
    /// index.jsonl's `last_ts` of the file.
    pub last_ts: Option<i64>,
}

/// The files of one capture, in writing order.
#[derive(Clone, Debug)]
pub struct Capture {
    pub files: Vec<CaptureFile>,
    /// Machine names index.jsonl gives, by raw id: the names of packets
    /// written before their machine's first SystemInfo.
    pub names: Vec<(u32, String)>,
    /// The directory whose `journal` names the sources (`src`).
    pub dir: Option<PathBuf>,
}

/// One line for the user and the exit code.
#[derive(Debug, thiserror::Error)]
#[error("{line}")]
pub struct CaptureError {
    pub line: String,
    pub code: u8,
}

impl CaptureError {
    fn new(code: u8, line: String) -> Self {
        Self { line, code }
    }

    /// The reader of standard output went away (`| head`): nothing to say,
    /// exit 0.
    pub fn closed_output() -> Self {
        Self::new(exit::OK, String::new())
    }

    pub fn is_closed_output(&self) -> bool {
        self.code == exit::OK
    }
}

/// The capture `inputs` name: one directory, or rolled files only. None
/// for any other inputs (an ordinary merge).
pub fn detect(inputs: &[PathBuf]) -> Result<Option<Capture>, CaptureError> {
    if let [dir] = inputs
        && dir.is_dir()
    {
        return from_dir(dir).map(Some);
    }
    // A snapshot alone is read as the daemon wrote it, like a rolled file:
    // its machine ids are the daemon's raw ids (with other traces it is
    // one input of an ordinary merge).
    if let [file] = inputs
        && file.is_file()
        && file
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| names::SnapshotName::parse(n).is_some())
    {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        let index = file.parent().map(read_index).unwrap_or_default();
        return Ok(Some(Capture {
            files: vec![CaptureFile::new(file.clone(), name, &index)],
            names: index.machine_names(),
            dir: file.parent().map(Path::to_path_buf),
        }));
    }
    let rolled = !inputs.is_empty()
        && inputs.iter().all(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(names::is_rolled)
        });
    if !rolled {
        return Ok(None);
    }
    let mut files: Vec<CaptureFile> = inputs
        .iter()
        .map(|p| {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_owned();
            let index = p.parent().map(read_index).unwrap_or_default();
            CaptureFile::new(p.clone(), name, &index)
        })
        .collect();
    files.sort_by(|a, b| names::writing_order(&a.name).cmp(&names::writing_order(&b.name)));
    files.dedup_by(|a, b| a.path == b.path);
    let dir = inputs
        .first()
        .and_then(|p| p.parent())
        .map(Path::to_path_buf);
    let names = dir
        .as_deref()
        .map(|d| read_index(d).machine_names())
        .unwrap_or_default();
    Ok(Some(Capture { files, names, dir }))
}

/// The capture in directory `dir`.
pub fn from_dir(dir: &Path) -> Result<Capture, CaptureError> {
    let listing = list(dir).map_err(|e| {
        CaptureError::new(
            exit::NOINPUT,
            format!("{}: cannot list: {e}", dir.display()),
        )
    })?;
    // Only the daemon's rolled files: a directory of other traces is not a
    // capture (merge those by naming them).
    let rolled: Vec<String> = listing
        .files
        .into_iter()
        .filter(|name| names::is_rolled(name))
        .collect();
    if rolled.is_empty() {
        return Err(CaptureError::new(
            exit::NOINPUT,
            format!(
                "{}: a directory with no rolled files (tracesync-*.pftrace); give tracesyncd's output directory, or name the trace files to merge",
                dir.display()
            ),
        ));
    }
    let index = read_index(dir);
    let files = rolled
        .into_iter()
        .map(|name| CaptureFile::new(dir.join(&name), name, &index))
        .collect();
    Ok(Capture {
        files,
        names: index.machine_names(),
        dir: Some(dir.to_path_buf()),
    })
}

/// index.jsonl of `dir`; an unreadable one is empty, as `tail DIR` takes it
/// (the files are still read, their preambles told by content).
fn read_index(dir: &Path) -> Index {
    Index::read(dir).unwrap_or_default()
}

impl CaptureFile {
    /// One snapshot of `dir`, with its index.jsonl line's preamble count.
    pub fn snapshot(dir: &Path, name: &str) -> Self {
        Self::new(dir.join(name), name.to_owned(), &read_index(dir))
    }

    fn new(path: PathBuf, name: String, index: &Index) -> Self {
        let entry = index.entry(&name);
        Self {
            path,
            preamble_packets: entry.and_then(|e| e.preamble_packets),
            last_ts: entry.and_then(|e| e.last_ts),
            name,
        }
    }
}

impl Capture {
    /// The largest `last_ts` index.jsonl gives, if any.
    pub fn indexed_end(&self) -> Option<i64> {
        self.files.iter().filter_map(|f| f.last_ts).max()
    }
}

/// Counters of a capture read.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadCounts {
    pub packets_read: u64,
    pub preamble_skipped: u64,
    pub packets_malformed: u64,
}

/// The packets of a capture in order, each once, resolved.
pub struct CapturePackets<'a> {
    capture: &'a Capture,
    next_file: usize,
    reader: Option<TraceFile<Box<dyn Read + Send>>>,
    src: Arc<str>,
    /// Preamble packets still to skip in the current file (index count).
    skip_left: u64,
    /// Skipping by content (no index count): until the first new packet.
    in_replay: bool,
    seen: SeenPackets,
    resolver: FileResolver,
    labels: SourceLabels,
    pub counts: ReadCounts,
    /// The raw bytes of the packet last returned.
    pub bytes: Vec<u8>,
    /// Packets held from the first remote packet read before any bound
    /// sample of its machine (the daemon's sync point and track
    /// descriptors come right before the first sample) until that sample.
    held: VecDeque<(OutPacket, Vec<u8>)>,
    ready: VecDeque<(OutPacket, Vec<u8>)>,
}

/// Packets held for a machine's first bound sample at most.
const MAX_HELD: usize = 256;

impl<'a> CapturePackets<'a> {
    pub fn new(capture: &'a Capture) -> Self {
        let mut resolver = FileResolver::default();
        for (raw_id, name) in &capture.names {
            resolver.name_machine(*raw_id, name);
        }
        Self {
            capture,
            next_file: 0,
            reader: None,
            src: Arc::from(""),
            skip_left: 0,
            in_replay: false,
            seen: SeenPackets::default(),
            resolver,
            labels: SourceLabels::default(),
            counts: ReadCounts::default(),
            bytes: Vec::new(),
            held: VecDeque::new(),
            ready: VecDeque::new(),
        }
    }

    /// The next packet of the capture (its bytes in `self.bytes`); None at
    /// the end. A remote packet takes the error bound in force on its
    /// machine's error-bound track; the few before its machine's first
    /// bound sample take that sample's. A file that is not a trace, or
    /// breaks, is an error naming the file and byte offset.
    pub fn next_packet(&mut self) -> Result<Option<OutPacket>, CaptureError> {
        loop {
            if let Some((p, bytes)) = self.ready.pop_front() {
                self.bytes = bytes;
                return Ok(Some(p));
            }
            let Some(p) = self.next_resolved()? else {
                if self.held.is_empty() {
                    return Ok(None);
                }
                self.ready.append(&mut self.held);
                continue;
            };
            let unbounded = p.machine_raw_id != 0 && p.err_ns == 0;
            if self.held.is_empty() && !unbounded {
                return Ok(Some(p));
            }
            self.held.push_back((p, std::mem::take(&mut self.bytes)));
            let resolver = &self.resolver;
            let bounded = self.held.iter().all(|(p, _)| {
                p.machine_raw_id == 0 || p.err_ns != 0 || resolver.bound(p.machine_raw_id).is_some()
            });
            if bounded || self.held.len() >= MAX_HELD {
                for (p, _) in &mut self.held {
                    if p.machine_raw_id != 0 && p.err_ns == 0 {
                        p.err_ns = resolver.bound(p.machine_raw_id).unwrap_or(0);
                    }
                }
                self.ready.append(&mut self.held);
            }
        }
    }

    /// The next packet read, resolved, its bytes in `self.bytes`.
    fn next_resolved(&mut self) -> Result<Option<OutPacket>, CaptureError> {
        loop {
            if self.reader.is_none() && !self.open_next()? {
                return Ok(None);
            }
            let file = &self.capture.files[self.next_file - 1];
            // open_next returned true: a reader is open.
            let Some(reader) = self.reader.as_mut() else {
                return Ok(None);
            };
            let packet = match reader.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => {
                    self.reader = None;
                    continue;
                }
                Err(FileReadError::Io(e)) => {
                    return Err(CaptureError::new(
                        exit::IOERR,
                        format!("{}: cannot read: {e}", file.path.display()),
                    ));
                }
                Err(FileReadError::Format(e)) => {
                    return Err(CaptureError::new(
                        exit::DATAERR,
                        format!(
                            "{}: {e}; not a Perfetto trace written by tracesyncd (a torn last packet: copy the file without it)",
                            file.path.display()
                        ),
                    ));
                }
            };
            self.counts.packets_read += 1;
            let bytes = packet.bytes;
            if self.skip_left > 0 {
                self.skip_left -= 1;
                self.counts.preamble_skipped += 1;
                // What it replays still sets the reader's state.
                let _ = self.resolver.resolve(bytes, &self.src);
                continue;
            }
            if self.in_replay {
                if self.seen.contains(bytes) {
                    self.counts.preamble_skipped += 1;
                    let _ = self.resolver.resolve(bytes, &self.src);
                    continue;
                }
                self.in_replay = false;
            }
            let Some(mut out) = self.resolver.resolve(bytes, &self.src) else {
                self.counts.packets_malformed += 1;
                continue;
            };
            if out.role != Role::Data {
                self.seen.insert(bytes);
            }
            if let Some(dir) = &self.capture.dir {
                self.labels.relabel(dir, &mut out);
            }
            self.bytes.clear();
            self.bytes.extend_from_slice(bytes);
            return Ok(Some(out));
        }
    }

    fn open_next(&mut self) -> Result<bool, CaptureError> {
        let Some(file) = self.capture.files.get(self.next_file) else {
            return Ok(false);
        };
        let later = self.next_file > 0;
        self.next_file += 1;
        let opened = File::open(&file.path).and_then(|f| {
            if f.metadata()?.is_dir() {
                return Err(io::Error::other("is a directory"));
            }
            TraceFile::new(Box::new(f) as Box<dyn Read + Send>)
        });
        let reader = opened.map_err(|e| {
            let code = if e.kind() == io::ErrorKind::NotFound {
                exit::NOINPUT
            } else {
                exit::IOERR
            };
            CaptureError::new(code, format!("{}: cannot open: {e}", file.path.display()))
        })?;
        self.reader = Some(reader);
        self.src = Arc::from(file.name.as_str());
        self.skip_left = if later {
            file.preamble_packets.unwrap_or(0)
        } else {
            0
        };
        self.in_replay = later && file.preamble_packets.is_none();
        Ok(true)
    }
}
