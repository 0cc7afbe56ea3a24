//! `file:PATH`: follows a Perfetto trace file being written, like `tail -F`.
//!
//! The file is polled for growth (a trace written with `write_into_file`
//! grows in chunks, so a packet cut at the end of the file waits for the
//! rest). A file that shrinks was truncated and is read again from the
//! start; a path that names another inode was replaced and is reopened once
//! the old file is read to its end; a path that does not exist yet is
//! waited for. Each restart is a new stream with new relay sequences.

use std::io::SeekFrom;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::fs::File;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use super::Condition;
use super::pipeline::{Pipeline, Replay, ReplayState};
use super::{Cursor, SourceBatch, SourceContext, send_batch};

/// How often a quiet file is looked at again.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Bytes read per call.
const READ_CHUNK: usize = 256 << 10;

/// A file's identity: (device, inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// What the follower sees after reading the open file to its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing new: wait.
    Unchanged,
    /// More bytes: read on.
    Grew,
    /// The open file is shorter than what was read: start over.
    Truncated,
    /// The path names another file now: reopen it.
    Replaced,
}

/// Decides what to do next (pure): `open` is the file being read,
/// `read_to` how far, `open_len` its length now, `at_path` what the path
/// names now (None: nothing, e.g. deleted; the open file is kept).
pub fn classify(open: FileId, read_to: u64, open_len: u64, at_path: Option<FileId>) -> Change {
    if open_len < read_to {
        Change::Truncated
    } else if open_len > read_to {
        // Finish the old file before following a replacement.
        Change::Grew
    } else if at_path.is_some_and(|id| id != open) {
        Change::Replaced
    } else {
        Change::Unchanged
    }
}

/// Where to start reading a newly opened file: at the cursor if it is for
/// this very file and within it, else at the start.
pub fn start_offset(resume: &Cursor, id: FileId, len: u64) -> u64 {
    match *resume {
        Cursor::File { dev, ino, offset } if (FileId { dev, ino }) == id && offset <= len => offset,
        _ => 0,
    }
}

/// How a followed file ended: the caller reopens it or stops.
#[must_use]
enum Next {
    Reopen,
    Stop,
}

struct Follower {
    path: PathBuf,
    label: String,
    index: u16,
    ctx: SourceContext,
    tx: mpsc::Sender<SourceBatch>,
}

pub(crate) async fn run(
    path: PathBuf,
    label: String,
    index: u16,
    ctx: SourceContext,
    resume: Cursor,
    tx: mpsc::Sender<SourceBatch>,
) {
    let follower = Follower {
        path,
        label,
        index,
        ctx,
        tx,
    };
    let mut resume = resume;
    loop {
        let Some(file) = follower.wait_for_file().await else {
            return;
        };
        let (id, len) = match file.metadata().await {
            Ok(meta) => (FileId::of(&meta), meta.len()),
            Err(e) => {
                follower.report(format!("cannot stat: {e}; retrying"));
                if follower.sleep().await {
                    return;
                }
                continue;
            }
        };
        let start = start_offset(&std::mem::take(&mut resume), id, len);
        match follower.follow(file, id, start).await {
            Next::Reopen => follower.ctx.stats.restarts.fetch_add(1, Ordering::Relaxed),
            Next::Stop => return,
        };
    }
}

impl Follower {
    fn report(&self, what: String) {
        let line = format!("source {} ({}): {what}", self.index, self.label);
        self.ctx.stats.report(line);
    }

    /// Sleeps one poll interval; true on shutdown.
    async fn sleep(&self) -> bool {
        tokio::select! {
            () = self.ctx.shutdown.cancelled() => true,
            () = tokio::time::sleep(POLL_INTERVAL) => false,
        }
    }

    /// Opens the path, waiting while it does not exist; None on shutdown.
    async fn wait_for_file(&self) -> Option<File> {
        let mut reported = false;
        loop {
            match File::open(&self.path).await {
                Ok(f) => {
                    self.ctx.stats.set_state(Condition::Reading, "");
                    return Some(f);
                }
                Err(e) if !reported => {
                    reported = true;
                    if e.kind() == std::io::ErrorKind::NotFound {
                        let detail = "no such file; waiting for it to appear (is it the path \
                                      the trace is written to?)";
                        tracing::warn!("source {} ({}): {detail}", self.index, self.label);
                        self.ctx.stats.set_state(Condition::Waiting, detail);
                    } else {
                        let detail = format!("cannot open: {e}; retrying until it can be read");
                        self.ctx.stats.set_state(Condition::Waiting, detail.clone());
                        self.report(detail);
                    }
                }
                Err(_) => {}
            }
            if self.sleep().await {
                return None;
            }
        }
    }

    async fn follow(&self, mut file: File, id: FileId, start: u64) -> Next {
        let replay = if start > 0 {
            self.replay_state(&mut file, start).await
        } else {
            Replay::default()
        };
        if let Err(e) = file.seek(SeekFrom::Start(start)).await {
            self.report(format!(
                "cannot seek to {start}: {e}; reading from the start"
            ));
            return Next::Reopen;
        }
        let mut pipeline = Pipeline::new(self.ctx.sequences.clone(), start);
        let packets = pipeline.replay(&replay, &self.ctx.stats).packets;
        if !packets.is_empty() {
            // The resume point stays the cursor: a relay that dies before
            // more is read replays the state again, which is harmless.
            let batch = SourceBatch {
                source: self.index,
                packets,
                cursor: Cursor::File {
                    dev: id.dev,
                    ino: id.ino,
                    offset: start,
                },
            };
            if !send_batch(&self.tx, &self.ctx, batch).await {
                return Next::Stop;
            }
        }
        let mut buf = vec![0u8; READ_CHUNK];
        let mut read_to = start;
        // After bad bytes the stream cannot be resynchronised: the file is
        // only watched until it is truncated or replaced.
        let mut failed = false;
        loop {
            while !failed {
                let n = match file.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) => {
                        self.report(format!("read error at byte offset {read_to}: {e}"));
                        failed = true;
                        break;
                    }
                };
                read_to += n as u64;
                pipeline.push(&buf[..n]);
                match self.send_ready(&mut pipeline, id).await {
                    Ok(true) => {}
                    Ok(false) => return Next::Stop,
                    Err(()) => failed = true,
                }
            }
            let at_path = tokio::fs::metadata(&self.path)
                .await
                .ok()
                .map(|m| FileId::of(&m));
            let open_len = file.metadata().await.map_or(read_to, |m| m.len());
            match classify(id, read_to, open_len, at_path) {
                Change::Grew if !failed => continue,
                Change::Truncated => {
                    tracing::info!(
                        "source {} ({}): file truncated to {open_len} bytes; reading it from the start",
                        self.index,
                        self.label
                    );
                    return Next::Reopen;
                }
                Change::Replaced => {
                    tracing::info!(
                        "source {} ({}): file replaced; following the new one",
                        self.index,
                        self.label
                    );
                    return Next::Reopen;
                }
                Change::Grew | Change::Unchanged => {}
            }
            if self.sleep().await {
                return Next::Stop;
            }
        }
    }

    /// The incremental state of every producer sequence at `start`, read
    /// again from the file's first byte (see [`ReplayState`]). A read
    /// problem is reported and the stream resumes without it.
    async fn replay_state(&self, file: &mut File, start: u64) -> Replay {
        let mut state = ReplayState::new();
        let mut buf = vec![0u8; READ_CHUNK];
        let mut read = 0u64;
        let problem = match file.seek(SeekFrom::Start(0)).await {
            Err(e) => Some(format!("cannot seek to 0: {e}")),
            Ok(_) => loop {
                let want = usize::try_from(start - read).map_or(READ_CHUNK, |l| l.min(READ_CHUNK));
                if want == 0 {
                    break None;
                }
                match file.read(&mut buf[..want]).await {
                    Ok(0) => break Some(format!("the file ends at byte {read}")),
                    Ok(n) => {
                        read += n as u64;
                        if let Err(e) = state.push(&buf[..n]) {
                            break Some(e.to_string());
                        }
                    }
                    Err(e) => break Some(format!("read error at byte offset {read}: {e}")),
                }
                if self.ctx.shutdown.is_cancelled() {
                    return Replay::default();
                }
            },
        };
        if let Some(p) = problem {
            self.ctx
                .stats
                .replay_failures
                .fetch_add(1, Ordering::Relaxed);
            self.report(format!(
                "resuming at byte {start} without the producers' incremental state ({p}): \
                 their packets may be skipped until they clear it again"
            ));
            return Replay::default();
        }
        if state.overflowed > 0 {
            self.ctx
                .stats
                .replay_failures
                .fetch_add(state.overflowed, Ordering::Relaxed);
            self.report(format!(
                "resuming at byte {start}: the incremental state of {} sequence(s) is over the \
                 replay bounds and is not replayed",
                state.overflowed
            ));
        }
        let sequences = state.sequences();
        let replay = state.into_replay();
        tracing::info!(
            "source {} ({}): resuming at byte {start}; replaying the incremental state of \
             {sequences} producer sequence(s) ({} packets)",
            self.index,
            self.label,
            replay.packets.len()
        );
        replay
    }

    /// Sends every complete packet; Ok(false) to stop, Err on bad framing.
    async fn send_ready(&self, pipeline: &mut Pipeline, id: FileId) -> Result<bool, ()> {
        loop {
            let batch = match pipeline.next_batch(&self.ctx.stats) {
                Ok(b) if b.packets.is_empty() => return Ok(true),
                Ok(b) => b,
                Err(e) => {
                    self.ctx.stats.stream_errors.fetch_add(1, Ordering::Relaxed);
                    self.report(format!(
                        "{e}; not a Perfetto trace or corrupt: nothing more is read \
                         until the file is truncated or replaced"
                    ));
                    return Err(());
                }
            };
            let label = format!("source {} ({})", self.index, self.label);
            self.ctx.fire_packet_triggers(&label, &batch.triggers);
            let batch = SourceBatch {
                source: self.index,
                packets: batch.packets,
                cursor: Cursor::File {
                    dev: id.dev,
                    ino: id.ino,
                    offset: batch.end_offset,
                },
            };
            if !send_batch(&self.tx, &self.ctx, batch).await {
                return Ok(false);
            }
        }
    }
}

/// The (dev, ino) of a path, if it exists (for tests and resume checks).
pub fn file_id(path: &Path) -> std::io::Result<FileId> {
    std::fs::metadata(path).map(|m| FileId::of(&m))
}

#[cfg(test)]
mod tests;
