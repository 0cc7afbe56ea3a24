//! Rotation and retention: ending the current file and starting the next
//! with the preamble, deleting expired complete files, saving the index.

use std::io;

use std::time::SystemTime;
use tracesync_capture::index::IndexEntry;

use super::current::BUF_BYTES;
use super::journal::Journal;
use super::{INDEX_NAME, Lost, RollingWriter, at, files, full_record, index};

impl RollingWriter {
    pub(super) fn should_rotate(&self, now: SystemTime) -> bool {
        let c = &self.current;
        let old = c.old_at.is_some_and(|at| now >= at);
        // A file gets at least one packet, however small the limits.
        c.data_packets > 0 && (c.entry.bytes >= self.config.max_file_bytes || old)
    }

    /// Ends the current file and starts the next one with the preamble.
    pub(super) fn rotate(&mut self, now: SystemTime) -> io::Result<()> {
        // The commit in flight ends first: the full record below and the
        // sync of the whole file take over from it.
        self.wait_in_flight()?;
        self.flush()?;
        self.sync_current()?;
        // The old file is complete only if it is still there: else what
        // was not committed goes to a new file (`reopen.rs`).
        self.check_current()?;
        let preamble = self.preamble.packets();
        let (next, seq) = Self::start_file(
            &self.config,
            &self.links,
            now,
            self.next_file_seq,
            &preamble,
        )?;
        let record = full_record(&next, &self.streams, self.next_out_seq);
        let path = self.journal.path().to_path_buf();
        match Journal::compact(&path, &record, self.config.fsync, &self.links) {
            Ok(j) => self.journal = j,
            Err(e) => {
                let _ = std::fs::remove_file(&next.path);
                return Err(at(&path, "compact")(e));
            }
        }
        self.next_file_seq = seq + 1;
        self.changed.clear();
        let mut old = std::mem::replace(&mut self.current, next);
        // The old file is durable whole: its pending bytes' room serves
        // the new one (not freed and grown again every rotation).
        let mut room = std::mem::take(&mut old.pending);
        room.clear();
        if room.capacity() <= BUF_BYTES {
            self.current.pending = room;
        }
        self.open_writeback();
        old.finish_entry();
        self.done.push(old.entry);
        self.stats.files_started += 1;
        self.stats.rotations += 1;
        self.stats.packets_written += preamble.len() as u64;
        self.stats.preamble_packets_written += preamble.len() as u64;
        self.stats.bytes_written += self.current.entry.bytes;
        self.apply_retention(now);
        self.save_index();
        self.all_durable();
        Ok(())
    }

    /// Deletes expired complete files and their sidecars.
    pub(super) fn apply_retention(&mut self, now: SystemTime) {
        let limits = tracesync_capture::index::Retention {
            max_bytes: self.config.retain_bytes,
            max_age: self.config.retain_age,
        };
        let mut all = self.done.clone();
        all.push(self.current.entry.clone());
        let expired =
            tracesync_capture::index::expired(&all, &self.current.entry.name, limits, now);
        for name in expired {
            let path = self.config.dir.join(&name);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.stats.retention_errors += 1;
                    tracing::warn!("cannot remove {}: {e}; kept in the index", path.display());
                    continue;
                }
            }
            let _ = std::fs::remove_file(
                self.config
                    .dir
                    .join(tracesync_capture::sidecar::sidecar_name(&name)),
            );
            if let Some(i) = self.done.iter().position(|e| e.name == name) {
                let e = self.done.remove(i);
                self.stats.files_deleted += 1;
                self.stats.bytes_deleted += e.bytes;
            }
        }
    }

    /// Fails (as a commit would) when the file being written is no
    /// longer at its path.
    pub(super) fn check_current(&mut self) -> io::Result<()> {
        let c = &self.current;
        match files::still_at(&c.file, &c.path) {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.lost(Lost::Data)),
            Err(e) => Err(at(&c.path, "stat")(e)),
        }
    }

    /// Lists a file written beside the rolled ones (a snapshot), replacing
    /// a line of the same name, and saves the index.
    pub fn add_index_entry(&mut self, entry: IndexEntry) {
        self.done.retain(|e| e.name != entry.name);
        self.done.push(entry);
        self.save_index();
    }

    pub(super) fn save_index(&mut self) {
        let path = self.config.dir.join(INDEX_NAME);
        let all = self.index();
        if let Err(e) = index::save(&path, &all, &self.links) {
            // The index is a convenience: the next commit rewrites it whole.
            self.stats.index_write_errors += 1;
            if files::is_link_refused(&e) {
                // Logged once where the link was met.
                tracing::debug!("cannot write {}: {e}", path.display());
            } else {
                tracing::warn!("cannot write {}: {e}", path.display());
            }
        }
    }
}
