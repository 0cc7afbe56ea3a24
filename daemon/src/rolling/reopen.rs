//! Starting over after the output vanished: a commit (or a rotation) found
//! the file being written, or the journal, no longer at its path (the
//! output directory removed or renamed, the file replaced). Writing on
//! into the open file would make nothing durable that anyone can read, so
//! the commit failed (nothing it covered is acknowledged) and the next
//! flush calls [`RollingWriter::reopen`]:
//!
//! 1. the directory is made again, with its mode at open, if it is gone
//!    (not its parents: until it can be made, every commit fails again and
//!    is retried at the next tick);
//! 2. only the journal gone (the data file still there): a new journal,
//!    one full record of the committed state;
//! 3. else a new file (the next number), starting with the preamble as of
//!    the last commit (read back from the old file's descriptor, which
//!    still reads after an unlink, as recovery reads a file after a
//!    crash), and a new journal naming it, whose full record holds the
//!    streams as the journal's durable records left them; the bytes past
//!    the last commit stay pending, so the next commit writes them there,
//!    as after any failed commit. Files of the index no longer in the
//!    directory leave the index.
//!
//! What was acknowledged before the output vanished went with it; nothing
//! acknowledged afterwards is lost.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::SystemTime;

use tracesync_core::preamble::PreambleState;
use tracesync_protocol::reader::{FileReadError, TraceFile};

use super::current::{Current, Seen};
use super::files::{self, Found, Vanished};
use super::journal::{self, Journal};
use super::{JOURNAL_NAME, Lost, RollingWriter, at};
use tracesync_capture::journal::JournalRecord;

impl RollingWriter {
    /// Notes that the current file (or the journal) is no longer at its
    /// path: counted, and the error the commit or rotation that found it
    /// returns. The next flush starts over.
    pub(super) fn lost(&mut self, which: Lost) -> io::Error {
        self.stats.vanished += 1;
        // A lost data file takes the journal's loss along.
        if self.vanished != Some(Lost::Data) {
            self.vanished = Some(which);
        }
        let path = match which {
            Lost::Data => self.current.path.clone(),
            Lost::Journal => self.journal.path().to_path_buf(),
        };
        Vanished::error(&path, &self.config.dir)
    }

    /// See the module docs. An error leaves the writer to try again.
    pub(super) fn reopen(&mut self) -> io::Result<()> {
        let Some(lost) = self.vanished else {
            return Ok(());
        };
        self.wait_in_flight()?;
        let dir = self.config.dir.clone();
        self.recreate_dir(&dir)?;
        let journal_path = dir.join(JOURNAL_NAME);
        let c = &self.current;
        let data_there = files::still_at(&c.file, &c.path).unwrap_or(false);
        if lost == Lost::Journal && data_there {
            return self.new_journal(&journal_path);
        }
        self.new_file(&dir, &journal_path)
    }

    /// Step 1: the directory, made again if it is gone.
    fn recreate_dir(&mut self, dir: &Path) -> io::Result<()> {
        files::recreate_dir(dir, self.dir_mode).map_err(at(dir, "create the output directory"))?;
        if self.config.fsync
            && let Some(parent) = dir.parent()
            && let Err(e) = journal::sync_dir(parent)
        {
            tracing::debug!("cannot fsync {}: {e}", parent.display());
        }
        self.links.set_may_remove(files::owned(dir));
        Ok(())
    }

    /// Step 2: only the journal gone; a new one, one full record of the
    /// committed state.
    fn new_journal(&mut self, journal_path: &Path) -> io::Result<()> {
        let c = &self.current;
        let record = JournalRecord {
            file: c.entry.name.clone(),
            len: c.committed_len,
            next_out_seq: self.next_out_seq,
            full: true,
            streams: self.journal.durable_streams(),
        };
        self.journal = Journal::compact(journal_path, &record, self.config.fsync, &self.links)
            .map_err(at(journal_path, "write"))?;
        self.vanished = None;
        tracing::info!(
            "{} written anew; {} goes on",
            journal_path.display(),
            c.path.display()
        );
        Ok(())
    }

    /// Step 3: a new file starting with the committed preamble and a new
    /// journal naming it; what was not durable goes there.
    fn new_file(&mut self, dir: &Path, journal_path: &Path) -> io::Result<()> {
        let now = SystemTime::now().max(self.last_now);
        let preamble = self.committed_preamble().packets();
        let (next, seq) = Self::start_file(
            &self.config,
            &self.links,
            now,
            self.next_file_seq,
            &preamble,
        )?;
        let record = JournalRecord {
            file: next.entry.name.clone(),
            len: next.committed_len,
            next_out_seq: self.next_out_seq,
            full: true,
            streams: self.journal.durable_streams(),
        };
        match Journal::compact(journal_path, &record, self.config.fsync, &self.links) {
            Ok(j) => self.journal = j,
            Err(e) => {
                let _ = std::fs::remove_file(&next.path);
                return Err(at(journal_path, "write")(e));
            }
        }
        self.next_file_seq = seq + 1;
        let old = std::mem::replace(&mut self.current, next);
        self.carry_pending(old);
        self.vanished = None;
        let before = self.done.len();
        self.done
            .retain(|e| matches!(files::look(&dir.join(&e.name)), Ok(Found::File(_))));
        self.stats.files_started += 1;
        self.stats.packets_written += preamble.len() as u64;
        self.stats.preamble_packets_written += preamble.len() as u64;
        self.stats.bytes_written += self.current.committed_len;
        self.open_writeback();
        self.save_index();
        tracing::info!(
            "the output goes on in {}: the {} bytes not yet durable are written there \
             ({} older files still in {} are indexed, {} gone)",
            self.current.path.display(),
            self.current.pending.len(),
            self.done.len(),
            dir.display(),
            before - self.done.len()
        );
        Ok(())
    }

    /// What `old` had not made durable: pending again, in the current file
    /// (with the machines seen in it).
    fn carry_pending(&mut self, old: Current) {
        let c = &mut self.current;
        let span = old.pending_span;
        c.data_packets = span.packets;
        c.entry.bytes += old.pending.len() as u64;
        c.entry.packets += span.packets;
        c.entry.first_ts = span.first_ts;
        c.entry.last_ts = span.last_ts;
        for (raw_id, seen) in old.machines {
            if seen.last_packet > old.committed_packets {
                let last_packet = seen.last_packet - old.committed_packets + c.committed_packets;
                c.machines.insert(
                    raw_id,
                    Seen {
                        name: seen.name,
                        last_packet,
                    },
                );
            }
        }
        c.pending = old.pending;
        c.flushed = 0;
        c.pending_span = span;
    }

    /// The preamble state as of the last commit: the current file read
    /// back through its descriptor up to the committed length (its own
    /// preamble, then what was committed), as recovery rebuilds it. If
    /// that read fails, the state as of the last packet written.
    fn committed_preamble(&self) -> PreambleState {
        let c = &self.current;
        let mut state = PreambleState::new(self.config.preamble);
        let reader = ReadAt {
            file: &c.file,
            pos: 0,
            end: c.committed_len,
        };
        let read = TraceFile::new(reader)
            .map_err(FileReadError::Io)
            .and_then(|mut trace| {
                while let Some(p) = trace.next_packet()? {
                    state.observe_raw(p.bytes);
                }
                Ok(())
            });
        if let Err(e) = read {
            tracing::warn!(
                "cannot read {} back ({e}): the next file starts with the state as of the \
                 last packet written",
                c.path.display()
            );
            state = PreambleState::new(self.config.preamble);
            for p in self.preamble.packets() {
                state.observe_raw(&p);
            }
        }
        state
    }
}

/// Reads `file` from `pos` to `end` by offset (the writer's own offset is
/// left alone).
struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}
