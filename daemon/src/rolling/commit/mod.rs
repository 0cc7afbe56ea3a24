//! Commits off the writer's thread: the durable half of a commit
//! (fdatasync of the data file, then the journal record) runs on a
//! `tracesync-fsync` thread while the writer goes on writing.
//!
//! A commit, in order (recovery trusts every byte a journal record names,
//! so the record is written only after those bytes were fdatasynced):
//! 1. writer thread (`request_commit`): hand the pending bytes to the OS,
//!    encode the record (file length, de-dup state of the streams changed
//!    since the previous record), send the job; the bytes and the streams
//!    it covers are set aside;
//! 2. sync thread: fdatasync the data file, check it is still the file at
//!    its path, then write and fdatasync the record, check the data file
//!    and the journal are still at their paths (else the commit fails: the
//!    output vanished, `reopen.rs`), then save index.jsonl as of the commit
//!    (its rename can wait on the filesystem's journal for tens of ms),
//!    then wake the writer's owner;
//! 3. writer thread (`poll_commits`, `wait_commits`): on success the
//!    record's length becomes the committed length; on failure the job's
//!    bytes and streams go back in front of what was written since, as if
//!    it had never started (a failed fdatasync makes them suspect: cut back
//!    and written again before the next commit).
//!
//! One commit at most is in flight: a request while one runs is merged
//! into the next, started when it ends. Whatever changes the file or the
//! journal under the job (rotation, cutting back after a failure,
//! compaction, a blocking `commit`, close) first waits for it.
//!
//! Commits are numbered. A number handed out is durable once the reported
//! number reaches it: each commit covers every byte written before it
//! started, so a later success also covers an earlier failure.

use crossbeam_channel::{Receiver, SendError, Sender, TryRecvError};
use nix::fcntl::PosixFadviseAdvice;
use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;

use std::path::PathBuf;

use super::current::BUF_BYTES;
use super::files::{self, Links};
use super::index;
use super::{INDEX_NAME, JOURNAL_COMPACT_BYTES, Lost, RollingWriter, Span, at, full_record};
use tracesync_capture::index::IndexEntry;
use tracesync_capture::journal::JournalRecord;

/// Called from the sync thread when a commit finished.
pub type CommitWaker = Arc<dyn Fn() + Send + Sync>;

/// The durable half of one commit.
struct Job {
    /// A descriptor of the data file, and its path.
    data: File,
    data_path: PathBuf,
    /// fdatasync the data file (`fsync`).
    sync_data: bool,
    /// The data file's length at the commit before this one: durable
    /// already, so its pages leave the page cache once this commit's
    /// fdatasync is done (see [`drop_cached`]).
    durable_before: u64,
    journal: File,
    journal_path: PathBuf,
    record: Vec<u8>,
    /// fdatasync the journal.
    fsync: bool,
    /// index.jsonl as of the commit, and where it goes.
    index: (PathBuf, Vec<IndexEntry>),
    links: Links,
    wake: Option<CommitWaker>,
}

/// How a job went; the index is a convenience, its failure fails nothing.
struct Done {
    result: Result<(), Failed>,
    index: io::Result<()>,
}

/// Which step of a job failed.
#[derive(Debug)]
enum Failed {
    Data(io::Error),
    Journal(io::Error),
    /// The file is no longer the one at its path.
    Gone(Lost),
}

fn run(job: &Job) -> Done {
    let result = sync(job);
    let index = match result {
        Ok(()) => index::save(&job.index.0, &job.index.1, &job.links),
        Err(_) => Ok(()),
    };
    Done { result, index }
}

fn sync(job: &Job) -> Result<(), Failed> {
    if job.sync_data {
        job.data.sync_data().map_err(Failed::Data)?;
        drop_cached(&job.data, job.durable_before);
    }
    // Before the record: it must never name another file at that path.
    still_at(&job.data, &job.data_path, Lost::Data)?;
    (&job.journal)
        .write_all(&job.record)
        .map_err(Failed::Journal)?;
    if job.fsync {
        job.journal.sync_data().map_err(Failed::Journal)?;
    }
    // Durable means durable where the output is: both still there when
    // the commit is reported (what is acknowledged follows).
    still_at(&job.data, &job.data_path, Lost::Data)?;
    still_at(&job.journal, &job.journal_path, Lost::Journal)
}

/// Drops the data file's pages below `len` from the page cache: they were
/// durable before this commit, so only a reader of old data needs them
/// again (it reads the disk). The newest commit's bytes stay cached for
/// readers that follow the file (`tail DIR`). Without this the output
/// filled the page cache, and each new write went into memory the kernel
/// (on a VM, the host) had to find first: the daemon's 4 KiB phase over
/// mutual TLS measured 37.8-76.4% of raw TCP from hour to hour, its copy
/// into the page cache 22-68% of its CPU (docs/performance.md). A
/// hint, as journald gives for its closed files: a failure changes
/// nothing.
fn drop_cached(data: &File, len: u64) {
    let Ok(len) = i64::try_from(len) else {
        return;
    };
    if len > 0 {
        let _ = nix::fcntl::posix_fadvise(data, 0, len, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
    }
}

/// The open `file` is still the one at `path`.
fn still_at(file: &File, path: &std::path::Path, which: Lost) -> Result<(), Failed> {
    match files::still_at(file, path) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Failed::Gone(which)),
        Err(e) if which == Lost::Data => Err(Failed::Data(e)),
        Err(e) => Err(Failed::Journal(e)),
    }
}

/// The sync thread; it ends when this is dropped (after its job).
struct SyncThread {
    jobs: Sender<Job>,
    done: Receiver<Done>,
}

impl SyncThread {
    /// None if the thread cannot be started: commits then run in place.
    fn start() -> Option<Self> {
        // One job in flight and one outcome waiting: the writer never
        // queues a second commit behind the first.
        let (jobs, rx) = crossbeam_channel::bounded::<Job>(1);
        let (tx, done) = crossbeam_channel::bounded(1);
        std::thread::Builder::new()
            .name("tracesync-fsync".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    // Outcome first: a woken owner always finds it.
                    if tx.send(run(&job)).is_err() {
                        return;
                    }
                    if let Some(wake) = &job.wake {
                        wake();
                    }
                }
            })
            .ok()?;
        Some(Self { jobs, done })
    }
}

/// A commit handed to the sync thread.
struct InFlight {
    id: u64,
    /// The file length its record names.
    len: u64,
    /// The bytes past the committed length it covers, kept for a rewrite.
    bytes: Vec<u8>,
    /// The streams its record carries.
    keys: BTreeSet<(u64, u32)>,
    record_len: usize,
    /// `entry.packets` at the length it names, and the packets in `bytes`.
    packets: u64,
    span: Span,
}

/// Commit bookkeeping of a [`RollingWriter`].
#[derive(Default)]
pub(super) struct Commits {
    thread: Option<SyncThread>,
    in_flight: Option<InFlight>,
    /// Requested while one was in flight: start it when that one ends.
    want_next: bool,
    /// Highest commit number handed out.
    issued: u64,
    /// Every commit number up to this is durable.
    durable: u64,
    /// `durable` as last reported by `poll_commits`/`wait_commits`.
    reported: u64,
    waker: Option<CommitWaker>,
    /// The room of the last committed bytes, reused as the next pending.
    spare: Vec<u8>,
}

impl fmt::Debug for Commits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commits")
            .field("thread", &self.thread.is_some())
            .field("in_flight", &self.in_flight.as_ref().map(|j| (j.id, j.len)))
            .field("want_next", &self.want_next)
            .field("issued", &self.issued)
            .field("durable", &self.durable)
            .finish()
    }
}

impl Commits {
    /// With a sync thread (else every commit runs in place).
    pub(super) fn threaded() -> Self {
        Self {
            thread: SyncThread::start(),
            ..Self::default()
        }
    }
}

impl RollingWriter {
    /// Starts making everything written so far durable, without waiting
    /// for the disk: `Some(n)` is durable once commit `n` is reported
    /// (`poll_commits`); `None`: durable already (nothing new, or the
    /// commit ran in place). An error leaves nothing committed lost;
    /// request again later.
    pub fn request_commit(&mut self) -> io::Result<Option<u64>> {
        if let Some(job) = &self.commits.in_flight {
            let (id, len) = (job.id, job.len);
            if !self.written_since(len) {
                return Ok(Some(id));
            }
            let commits = &mut self.commits;
            if !commits.want_next {
                commits.want_next = true;
                commits.issued += 1;
            }
            return Ok(Some(commits.issued));
        }
        self.start_commit(false)
    }

    /// Collects a finished commit without waiting (and starts a merged
    /// one): `Some(n)` when commits through `n` became durable since the
    /// last report. An error: that commit failed, nothing it covered is
    /// durable yet.
    pub fn poll_commits(&mut self) -> io::Result<Option<u64>> {
        self.poll_in_flight()?;
        Ok(self.take_durable())
    }

    /// Takes a finished commit, if any, and starts a merged one; leaves
    /// the report to `poll_commits`.
    fn poll_in_flight(&mut self) -> io::Result<()> {
        if self.commits.in_flight.is_some() {
            let done = match &self.commits.thread {
                Some(thread) => match thread.done.try_recv() {
                    Ok(done) => Some(done),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => Some(self.thread_gone()),
                },
                None => Some(self.thread_gone()),
            };
            if let Some(done) = done {
                self.finish(done)?;
                if self.commits.want_next {
                    self.start_commit(false)?;
                }
            }
        }
        Ok(())
    }

    /// Like [`poll_commits`](Self::poll_commits), but waits until no
    /// commit runs or is merged to run.
    pub fn wait_commits(&mut self) -> io::Result<Option<u64>> {
        while self.commits.in_flight.is_some() {
            self.wait_in_flight()?;
            if self.commits.want_next {
                self.start_commit(false)?;
            }
        }
        Ok(self.take_durable())
    }

    /// Called from the sync thread after each commit it ran.
    pub fn set_commit_waker(&mut self, waker: CommitWaker) {
        self.commits.waker = Some(waker);
    }

    /// Commits through this number are durable (for tests and metrics).
    pub fn durable_commit(&self) -> u64 {
        self.commits.durable
    }

    /// Makes everything written so far durable before it returns, and
    /// records it in the journal. On error nothing committed before is
    /// lost; retry later.
    pub fn commit(&mut self) -> io::Result<()> {
        self.wait_in_flight()?;
        self.start_commit(true).map(drop)
    }

    /// The write path's early commit (too much uncommitted, or no room
    /// for the next `need` bytes): takes a finished commit, starts the
    /// next; while one is still in flight, merges into the next, and waits
    /// only when the pending bytes' room ([`BUF_BYTES`]) is full (the disk
    /// is slower than the input).
    pub(super) fn commit_early(&mut self, need: usize) -> io::Result<()> {
        self.poll_in_flight()?;
        if self.commits.in_flight.is_some() {
            if self.current.pending.len() + need <= BUF_BYTES {
                return self.request_commit().map(drop);
            }
            self.wait_in_flight()?;
        }
        self.start_commit(false).map(drop)
    }

    /// Waits for the commit in flight, if any, and takes its outcome.
    pub(super) fn wait_in_flight(&mut self) -> io::Result<()> {
        if self.commits.in_flight.is_none() {
            return Ok(());
        }
        let done = match &self.commits.thread {
            Some(thread) => thread.done.recv().unwrap_or_else(|_| self.thread_gone()),
            None => self.thread_gone(),
        };
        self.finish(done)
    }

    /// Everything written is durable now (a rotation synced it all): every
    /// number handed out is.
    pub(super) fn all_durable(&mut self) {
        let commits = &mut self.commits;
        commits.want_next = false;
        if commits.durable < commits.issued {
            commits.durable = commits.issued;
            if let Some(wake) = &commits.waker {
                wake();
            }
        }
    }

    fn written_since(&self, len: u64) -> bool {
        !self.changed.is_empty() || self.current.entry.bytes != len
    }

    fn thread_gone(&mut self) -> Done {
        // Commits run in place from now on.
        self.commits.thread = None;
        Done {
            result: Err(Failed::Data(io::Error::other("the sync thread is gone"))),
            index: Ok(()),
        }
    }

    fn take_durable(&mut self) -> Option<u64> {
        let commits = &mut self.commits;
        (commits.durable > commits.reported).then(|| {
            commits.reported = commits.durable;
            commits.durable
        })
    }

    /// Starts the next commit (none may be in flight); in place if `inline`
    /// or without a sync thread.
    fn start_commit(&mut self, inline: bool) -> io::Result<Option<u64>> {
        debug_assert!(self.commits.in_flight.is_none());
        self.flush()?;
        if !self.written_since(self.current.committed_len) {
            // A merged request that found nothing new is covered too.
            self.all_durable();
            return Ok(None);
        }
        let commits = &mut self.commits;
        let id = if commits.want_next {
            commits.want_next = false;
            commits.issued
        } else {
            commits.issued += 1;
            commits.issued
        };
        // Compaction replaces the journal: in place, with nothing written
        // between the commit and the full record (it names the state now).
        let compact = self.journal.len() > JOURNAL_COMPACT_BYTES;
        let inline = inline || compact || self.commits.thread.is_none();
        let c = &self.current;
        let record = JournalRecord {
            file: c.entry.name.clone(),
            len: c.entry.bytes,
            next_out_seq: self.next_out_seq,
            full: false,
            streams: self.changed.iter().map(|k| self.streams[k]).collect(),
        };
        let journal_path = self.journal.path().to_path_buf();
        let encoded = self
            .journal
            .begin_append(&record)
            .map_err(at(&journal_path, "append to"))?;
        let job = Job {
            data: c.file.try_clone().map_err(at(&c.path, "fsync"))?,
            data_path: c.path.clone(),
            sync_data: self.config.fsync,
            durable_before: c.committed_len,
            journal: self
                .journal
                .writer()
                .map_err(at(&journal_path, "append to"))?,
            journal_path,
            record: encoded,
            fsync: self.journal.fsync(),
            index: (self.config.dir.join(INDEX_NAME), self.index()),
            links: self.links.clone(),
            wake: self.commits.waker.clone(),
        };
        let c = &mut self.current;
        let bytes = std::mem::replace(&mut c.pending, std::mem::take(&mut self.commits.spare));
        c.flushed = 0;
        self.commits.in_flight = Some(InFlight {
            id,
            len: c.entry.bytes,
            bytes,
            keys: std::mem::take(&mut self.changed),
            record_len: job.record.len(),
            packets: c.entry.packets,
            span: std::mem::take(&mut c.pending_span),
        });
        let job = match (&self.commits.thread, inline) {
            (Some(thread), false) => match thread.jobs.send(job) {
                Ok(()) => return Ok(Some(id)),
                Err(SendError(job)) => {
                    self.commits.thread = None;
                    job
                }
            },
            _ => job,
        };
        let done = run(&job);
        self.finish(done)?;
        self.all_durable();
        if compact {
            self.compact_journal();
        }
        Ok(None)
    }

    /// Takes the outcome of the commit in flight.
    fn finish(&mut self, done: Done) -> io::Result<()> {
        let Some(job) = self.commits.in_flight.take() else {
            return Ok(());
        };
        if let Err(e) = done.index {
            // The next commit rewrites it whole.
            self.stats.index_write_errors += 1;
            if files::is_link_refused(&e) {
                // Logged once where the link was met.
                tracing::debug!("cannot write {INDEX_NAME}: {e}");
            } else {
                tracing::warn!("cannot write {INDEX_NAME}: {e}");
            }
        }
        let c = &mut self.current;
        match done.result {
            Ok(()) => {
                self.journal.end_append(job.record_len, true);
                c.committed_len = job.len;
                c.committed_packets = job.packets;
                let mut bytes = job.bytes;
                bytes.clear();
                // Room grown past the usual (a packet larger than it, a
                // rewrite after a failure) is not kept.
                if bytes.capacity() > BUF_BYTES {
                    bytes = Vec::new();
                }
                self.commits.spare = bytes;
                self.commits.durable = self.commits.durable.max(job.id);
                self.stats.commits += 1;
                Ok(())
            }
            Err(failed) => {
                self.journal.end_append(job.record_len, false);
                // The job's bytes and streams are uncommitted again, in front
                // of what was written since.
                let mut bytes = job.bytes;
                let n = bytes.len();
                bytes.extend_from_slice(&c.pending);
                c.pending = bytes;
                c.flushed += n;
                c.pending_span = job.span.then(c.pending_span);
                self.changed.extend(job.keys);
                self.commits.want_next = false;
                Err(match failed {
                    Failed::Data(e) => {
                        c.suspect = true;
                        at(&c.path, "fsync")(e)
                    }
                    Failed::Journal(e) => at(self.journal.path(), "append to")(e),
                    Failed::Gone(which) => self.lost(which),
                })
            }
        }
    }

    /// Replaces the journal by one full record of the committed state.
    fn compact_journal(&mut self) {
        let c = &self.current;
        if self.written_since(c.committed_len) {
            return;
        }
        let record = full_record(c, &self.streams, self.next_out_seq);
        let path = self.journal.path().to_path_buf();
        match super::journal::Journal::compact(&path, &record, self.config.fsync, &self.links) {
            Ok(j) => self.journal = j,
            // The appended journal stays valid; compaction is retried.
            Err(e) if files::is_link_refused(&e) => {
                // Logged once where the link was met.
                tracing::debug!("cannot compact {}: {e}", path.display());
            }
            Err(e) => tracing::warn!("cannot compact {}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests;
