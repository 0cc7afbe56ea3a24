//! The rolling writer (docs/format.md): size/time rotation, retention,
//! index.jsonl, self-contained files (preamble replay), a commit journal
//! for de-duplication state, recovery of a torn file on restart.
//!
//! Blocking API: the daemon runs it on its own thread; a commit's
//! fdatasyncs run on a sync thread of its own (`commit.rs`). File layout
//! and guarantees: docs/format.md, "Rolling output".
//!
//! Every public method of [`RollingWriter`] is here; its parts: `current`
//! (the file being written: packets into its pending bytes, flushes, the
//! rewrite after a failure, its index line and probe-sample sidecar),
//! `rotation` (rotation, retention, the index), `reopen` (a new file after
//! the output vanished), `commit` (commits and the sync thread), `index`
//! and `journal` (their IO), `files` (no link is ever followed; is a file
//! still at its path). The directory's format is `tracesync_capture`'s.

mod commit;
mod current;
mod files;
mod index;
mod journal;
mod recover;
mod reopen;
mod rotation;
#[cfg(test)]
mod tests;
mod writer_writeback;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tracesync_protocol::wire;

pub use commit::CommitWaker;
pub use files::{LinkRefused, Vanished, is_vanished};
pub use tracesync_core::preamble::{PreambleLimits, role_of};

use current::{Current, FRAMING_MAX, Span};
use files::{Found, Links};
use journal::Journal;
use tracesync_capture::index::IndexEntry;
use tracesync_capture::journal::JournalRecord;
use tracesync_capture::names::{INDEX_NAME, JOURNAL_NAME, RolledName};
use tracesync_capture::sidecar::ProbeSample;
use tracesync_capture::sidecar::sidecar_name;
use tracesync_core::live::OutPacket;
use tracesync_core::live::{Recovered, RecoveredStream};
use writer_writeback::Writeback;

/// The journal is compacted at the next commit past this size.
const JOURNAL_COMPACT_BYTES: u64 = 8 << 20;

/// Where and how the rolling output is written.
#[derive(Clone, Debug, PartialEq)]
pub struct RollingConfig {
    pub dir: PathBuf,
    /// Rotate before a write once the file has this many bytes.
    pub max_file_bytes: u64,
    /// Rotate before a write once the file is this old.
    pub max_file_age: Duration,
    /// Delete the oldest complete files while all files exceed this.
    pub retain_bytes: u64,
    /// Delete complete files started longer ago than this; zero: never.
    pub retain_age: Duration,
    /// fdatasync files and the journal on commit and rotation.
    pub fsync: bool,
    /// Bounds of the replayed preamble state.
    pub preamble: PreambleLimits,
}

impl RollingConfig {
    /// The defaults: 256 MiB or 10 minutes per file, keep 10 GiB and 7 days.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_file_bytes: 256 << 20,
            max_file_age: Duration::from_secs(600),
            retain_bytes: 10 << 30,
            retain_age: Duration::from_secs(7 * 86_400),
            fsync: true,
            preamble: PreambleLimits::default(),
        }
    }
}

/// Errors of `open`.
#[derive(Debug, thiserror::Error)]
pub enum RollingError {
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// Counters since `open`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RollingStats {
    pub files_started: u64,
    pub rotations: u64,
    /// Packets and bytes (Trace framing included) written, preambles too.
    pub packets_written: u64,
    pub bytes_written: u64,
    pub preamble_packets_written: u64,
    pub commits: u64,
    pub files_deleted: u64,
    pub bytes_deleted: u64,
    /// Incremental-state packets not replayed: their sequence's state was
    /// over `PreambleLimits::per_sequence_bytes`.
    pub incremental_state_overflow: u64,
    /// Preamble keys forgotten to stay within `PreambleLimits`.
    pub preamble_forgotten: u64,
    pub index_write_errors: u64,
    pub retention_errors: u64,
    /// Cut off the last file by recovery (past its last commit).
    pub recovered_truncated_bytes: u64,
    /// Preamble-only files of an unfinished rotation removed by recovery.
    pub recovered_orphans_removed: u64,
    /// Journal bytes past its last valid record, ignored by recovery.
    pub journal_ignored_bytes: u64,
    pub index_bad_lines: u64,
    /// Times the data past the last commit was written again from memory
    /// after a failed write or fsync (e.g. a full disk).
    pub rewrites: u64,
    /// Commits (or rotations) that found the file being written, or the
    /// journal, no longer at its path (the output directory removed or
    /// renamed, the file replaced): each failed, and a new file took what
    /// was not durable (`reopen.rs`).
    pub vanished: u64,
    /// Symbolic links met at names the writer wanted (never followed;
    /// each counted once while it stays).
    pub symlinks_refused: u64,
}

/// Which file was found no longer at its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lost {
    Data,
    Journal,
}

/// Adds the path to an I/O error, keeping its kind (ENOSPC stays StorageFull).
fn at<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(io::Error) -> io::Error + 'a {
    move |e| io::Error::new(e.kind(), format!("cannot {action} {}: {e}", path.display()))
}

fn frame(body: &[u8], out: &mut Vec<u8>) {
    wire::put_trace_packet(out, body);
}

/// Writes the rolling output. See the module docs.
#[derive(Debug)]
pub struct RollingWriter {
    config: RollingConfig,
    current: Current,
    /// Complete files, oldest first.
    done: Vec<IndexEntry>,
    preamble: tracesync_core::preamble::PreambleState,
    streams: BTreeMap<(u64, u32), RecoveredStream>,
    changed: BTreeSet<(u64, u32)>,
    next_out_seq: u32,
    next_file_seq: u64,
    journal: Journal,
    stats: RollingStats,
    /// Background writeback of the current file (with `fsync` only).
    writeback: Option<Writeback>,
    /// Commits in flight on the sync thread (`commit.rs`).
    commits: commit::Commits,
    /// Links met in the output directory (shared with the sync thread).
    links: Links,
    /// The output directory's mode at open, to make it again with.
    dir_mode: u32,
    /// The current file or the journal was found no longer at its path:
    /// the next flush starts over in a new file (`reopen.rs`).
    vanished: Option<Lost>,
    /// The latest time a write or open was given.
    last_now: SystemTime,
}

impl RollingWriter {
    /// Opens the output directory (created if missing), recovers the last
    /// run's committed state, and starts a new file.
    pub fn open(config: RollingConfig) -> Result<(Self, Recovered), RollingError> {
        Self::open_at(config, SystemTime::now())
    }

    /// [`open`](Self::open) with the wall-clock time given.
    pub fn open_at(
        config: RollingConfig,
        now: SystemTime,
    ) -> Result<(Self, Recovered), RollingError> {
        let dir = config.dir.clone();
        let dir_error = |source| RollingError::Io {
            action: "create",
            path: dir.clone(),
            source,
        };
        tracesync_capture::modes::create_dirs(&dir).map_err(dir_error)?;
        let dir_mode = files::dir_mode(&dir).map_err(dir_error)?;
        let links = Links::default();
        links.set_may_remove(files::owned(&dir));
        let found = recover::scan(&dir, config.preamble, &links)?;
        crate::snapshot::clear_stale(&dir);
        let recovered = Recovered {
            streams: found.streams.values().copied().collect(),
            next_out_seq: found.next_out_seq,
            sync_floors: found.preamble.sync_floors(),
            sequences: found.preamble.recovered_sequences(),
            names: tracesync_capture::index::machine_names(&found.entries),
        };
        let preamble = found.preamble.packets();
        let opened = Self::start_file(&config, &links, now, found.next_file_seq, &preamble)
            .and_then(|(current, seq)| {
                let record = full_record(&current, &found.streams, found.next_out_seq);
                let path = dir.join(JOURNAL_NAME);
                let journal = Journal::compact(&path, &record, config.fsync, &links)
                    .map_err(at(&path, "write"))?;
                Ok((current, journal, seq))
            });
        let (current, journal, seq) = opened.map_err(|source| RollingError::Io {
            action: "start",
            path: dir.join(RolledName::new(now, found.next_file_seq).to_string()),
            source,
        })?;
        let stats = RollingStats {
            files_started: 1,
            packets_written: preamble.len() as u64,
            bytes_written: current.entry.bytes,
            preamble_packets_written: preamble.len() as u64,
            recovered_truncated_bytes: found.truncated_bytes,
            recovered_orphans_removed: found.orphans_removed,
            journal_ignored_bytes: found.journal_ignored_bytes,
            index_bad_lines: found.bad_index_lines,
            ..RollingStats::default()
        };
        let mut writer = Self {
            config,
            current,
            done: found.entries,
            preamble: found.preamble,
            streams: found.streams,
            changed: BTreeSet::new(),
            next_out_seq: found.next_out_seq,
            next_file_seq: seq + 1,
            journal,
            stats,
            writeback: None,
            commits: commit::Commits::default(),
            links,
            dir_mode,
            vanished: None,
            last_now: now,
        };
        if writer.config.fsync {
            writer.commits = commit::Commits::threaded();
            writer.writeback = Writeback::start();
            writer.open_writeback();
        }
        writer.apply_retention(now);
        writer.save_index();
        Ok((writer, recovered))
    }

    /// Creates file number `seq` (or a later one whose names are free,
    /// see [`next_candidate`]) and writes (and syncs) its preamble.
    /// Returns it and the number it got.
    fn start_file(
        config: &RollingConfig,
        links: &Links,
        now: SystemTime,
        mut seq: u64,
        preamble: &[bytes::Bytes],
    ) -> io::Result<(Current, u64)> {
        let mut skipped = 0;
        let (name, path, mut file) = loop {
            let name = RolledName::new(now, seq).to_string();
            let path = config.dir.join(&name);
            let sidecar = config.dir.join(sidecar_name(&name));
            let is_link = |p: &Path| files::look(p).is_ok_and(|f| f == Found::Link);
            // The name that keeps this number from being used.
            let taken = if is_link(&sidecar) {
                links.met(&sidecar, false, "that file number is skipped");
                sidecar
            } else {
                match files::create_new(&path, false) {
                    Ok(file) => break (name, path, file),
                    // A file number past every file found at start is
                    // never one of ours: whatever holds it was planted.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        if is_link(&path) {
                            links.met(&path, false, "that file number is skipped");
                        }
                        path
                    }
                    Err(e) => return Err(at(&path, "create")(e)),
                }
            };
            skipped += 1;
            if skipped >= MAX_SKIPPED_NAMES {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "cannot create a new trace file in {}: {skipped} file numbers were taken \
                         by names planted in the directory, the last {}; remove what does not \
                         belong there (links, files not written by the daemon)",
                        config.dir.display(),
                        taken.display()
                    ),
                ));
            }
            seq = next_candidate(seq, skipped);
        };
        let mut bytes = Vec::new();
        for p in preamble {
            frame(p, &mut bytes);
        }
        let synced = file.write_all(&bytes).and_then(|()| {
            if config.fsync {
                file.sync_data()?;
                journal::sync_dir(&config.dir)?;
            }
            Ok(())
        });
        if let Err(e) = synced {
            let _ = std::fs::remove_file(&path);
            return Err(at(&path, "write")(e));
        }
        let len = bytes.len() as u64;
        let current = Current {
            path,
            file,
            start: now,
            old_at: now.checked_add(config.max_file_age),
            pending: Vec::new(),
            flushed: 0,
            suspect: false,
            data_packets: 0,
            machines: BTreeMap::new(),
            entry: IndexEntry {
                preamble_bytes: len,
                preamble_packets: Some(preamble.len() as u64),
                packets: preamble.len() as u64,
                complete: false,
                ..IndexEntry::found(name, len)
            },
            committed_len: len,
            committed_packets: preamble.len() as u64,
            pending_span: Span::default(),
            sidecar: None,
        };
        Ok((current, seq))
    }

    /// Writes one packet (rotating first if the size or age limit is
    /// reached). On error the packet was not taken and nothing is torn: the
    /// caller may retry it later.
    pub fn write(&mut self, packet: &OutPacket, now: SystemTime) -> io::Result<()> {
        self.last_now = self.last_now.max(now);
        if self.vanished.is_some() {
            // A new file first (else a rotation would start two).
            self.reopen()?;
        }
        let need = packet.bytes.len() + FRAMING_MAX;
        if self.current.needs_commit(need) {
            // Bounds the bytes kept for a rewrite: commit early (durable
            // sooner is always allowed; acks still follow the caller's).
            self.commit_early(need)?;
        } else if self.current.needs_flush() {
            self.flush()?;
        }
        if self.should_rotate(now) {
            self.rotate(now)?;
        }
        let len = self.current.append(packet, need);
        self.stats.packets_written += 1;
        self.stats.bytes_written += len;
        self.preamble.observe_packet(
            packet.role,
            packet.machine_raw_id,
            packet.seq,
            &packet.bytes,
        );
        self.next_out_seq = self.next_out_seq.max(packet.seq.saturating_add(1));
        if let Some(o) = packet.origin {
            let key = (o.relay_instance, o.relay_sequence);
            let s = self.streams.entry(key).or_insert(RecoveredStream {
                out_seq: packet.seq,
                relay_instance: o.relay_instance,
                relay_sequence: o.relay_sequence,
                machine_raw_id: packet.machine_raw_id,
                written_through: o.index,
            });
            s.out_seq = packet.seq;
            s.machine_raw_id = packet.machine_raw_id;
            s.written_through = s.written_through.max(o.index);
            self.changed.insert(key);
        }
        Ok(())
    }

    /// Hands the pending bytes to the OS (see [`Current::flush`]), after
    /// making a new file if the output vanished and waiting for the commit
    /// in flight if the file is to be cut back.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        if self.vanished.is_some() {
            self.reopen()?;
        }
        if self.current.suspect {
            // The commit in flight may cover bytes about to be cut.
            self.wait_in_flight()?;
        }
        if self.current.flush(self.writeback.as_mut())? {
            self.stats.rewrites += 1;
        }
        Ok(())
    }

    /// Points the background writeback at the current file (none if it
    /// cannot be opened again: the commits sync it all, as without).
    pub(super) fn open_writeback(&mut self) {
        if let Some(writeback) = &mut self.writeback
            && let Err(e) = writeback.open(&self.current.path, &self.current.file)
        {
            tracing::debug!("no early writeback of {}: {e}", self.current.path.display());
        }
    }

    /// fdatasync of the current file (if configured).
    pub(super) fn sync_current(&mut self) -> io::Result<()> {
        self.current.sync_data(self.config.fsync)
    }

    /// Appends raw probe samples, one a line, to the current file's
    /// `.sync.jsonl` sidecar.
    pub fn write_sync_samples(&mut self, samples: &[ProbeSample]) -> io::Result<()> {
        self.current
            .write_samples(&self.config.dir, samples, &self.links)
    }

    /// New rotation and retention limits (a reload): rotation is checked
    /// before the next write, retention at the next rotation.
    pub fn set_limits(
        &mut self,
        max_file_bytes: u64,
        max_file_age: Duration,
        retain_bytes: u64,
        retain_age: Duration,
    ) {
        self.config.max_file_bytes = max_file_bytes;
        self.config.max_file_age = max_file_age;
        self.current.old_at = self.current.start.checked_add(max_file_age);
        self.config.retain_bytes = retain_bytes;
        self.config.retain_age = retain_age;
    }

    /// Commits, marks the current file complete in the index.
    pub fn close(mut self) -> io::Result<()> {
        self.commit()?;
        let Self {
            config,
            mut current,
            mut done,
            links,
            ..
        } = self;
        current.finish_entry();
        done.push(current.entry);
        let path = config.dir.join(INDEX_NAME);
        index::save(&path, &done, &links).map_err(at(&path, "write"))
    }

    /// The file being written.
    pub fn current_path(&self) -> &Path {
        &self.current.path
    }

    /// The preamble the next file would start with, as of the last packet
    /// written, each packet with its machine's raw id.
    pub fn preamble(&self) -> Vec<(u32, bytes::Bytes)> {
        self.preamble.packets_by_machine()
    }

    /// Bytes written to the current file and its sequence number (the one
    /// in its name), for metrics.
    pub fn current_file(&self) -> (u64, u64) {
        (
            self.current.entry.bytes,
            self.next_file_seq.saturating_sub(1),
        )
    }

    /// The index lines as they are now (the current file last).
    pub fn index(&self) -> Vec<IndexEntry> {
        let mut all = self.done.clone();
        all.push(self.current.index_entry());
        all
    }

    pub fn stats(&self) -> RollingStats {
        let counters = self.preamble.counters();
        RollingStats {
            incremental_state_overflow: counters.incremental_state_overflow,
            preamble_forgotten: counters.forgotten,
            symlinks_refused: self.links.refused(),
            ..self.stats
        }
    }
}

/// File numbers a new file tries at most before it fails.
const MAX_SKIPPED_NAMES: u32 = 64;

/// Taken file numbers stepped over one by one (a leftover or two keep the
/// numbering dense); past them, each try jumps ahead at random.
const DENSE_SKIPS: u32 = 4;

/// Widest random jump between two tries: names planted ahead would have to
/// cover this many numbers per try to be met again (2^24 links per second
/// of start time, where the 64 tries meet them by chance 1 time in 2^18).
const JUMP_SPAN: u64 = 1 << 24;

/// The file number to try after `seq`, `skipped` numbers having been
/// taken: the next one for the first few, then a jump that a stranger who
/// planted names ahead cannot predict (std's per-process random hash keys
/// mixed with a counter and the clock; not a secret, only unguessable).
fn next_candidate(seq: u64, skipped: u32) -> u64 {
    if skipped < DENSE_SKIPS {
        return seq.saturating_add(1);
    }
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static TRIES: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(TRIES.fetch_add(1, Ordering::Relaxed));
    hasher.write_u64(tracesync_common::clock::boottime_ns());
    seq.saturating_add(1 + hasher.finish() % JUMP_SPAN)
}

fn full_record(
    c: &Current,
    streams: &BTreeMap<(u64, u32), RecoveredStream>,
    next_out_seq: u32,
) -> JournalRecord {
    JournalRecord {
        file: c.entry.name.clone(),
        len: c.entry.bytes,
        next_out_seq,
        full: true,
        streams: streams.values().copied().collect(),
    }
}
