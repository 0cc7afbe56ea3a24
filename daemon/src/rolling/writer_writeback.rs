//! Early writeback of the file being written: a helper thread fdatasyncs
//! the file in the background while the writer goes on, so the disk works
//! while the ingest thread does, and the commit's own fdatasync finds
//! little left to write (instead of the disk idling between commits and
//! the whole interval's bytes being written while ingest waits).
//!
//! Only a hint: durability still comes from the commit's fdatasync on the
//! writer's own descriptor. The helper syncs through a descriptor of its
//! own (opened on the same file, not a dup), so a writeback error is still
//! reported to the writer's fdatasync (the kernel reports an error to every
//! open file description), never swallowed here.

use crossbeam_channel::{Sender, TrySendError};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::files::{self, Identity};

/// Start a background writeback once this many bytes were handed to the
/// OS since the last one.
pub(super) const WRITEBACK_BYTES: u64 = 4 << 20;

/// The helper thread; stops when dropped.
#[derive(Debug)]
pub(super) struct Writeback {
    requests: Sender<Arc<File>>,
    /// The current file, opened again for the helper.
    file: Option<Arc<File>>,
    /// Bytes handed to the OS since the last request.
    since: u64,
}

impl Writeback {
    /// Starts the helper thread (None if it cannot be started: then there
    /// is simply no early writeback).
    pub(super) fn start() -> Option<Self> {
        // One request waiting at most; when full a writeback is under way
        // and the request is dropped (a hint only).
        let (requests, rx) = crossbeam_channel::bounded::<Arc<File>>(1);
        std::thread::Builder::new()
            .name("tracesync-writeback".into())
            .spawn(move || {
                while let Ok(file) = rx.recv() {
                    // Errors reach the writer's own fdatasync.
                    let _ = file.sync_data();
                }
            })
            .ok()?;
        Some(Self {
            requests,
            file: None,
            since: 0,
        })
    }

    /// A new file is being written (after a rotation or at start):
    /// `path`, opened again (never through a link), if it is still the
    /// writer's `file`.
    pub(super) fn open(&mut self, path: &Path, file: &File) -> io::Result<()> {
        self.since = 0;
        self.file = None;
        let again = files::open_existing(path, true)?;
        if Identity::of(&again)? != Identity::of(file)? {
            return Err(io::Error::other("not the file being written"));
        }
        self.file = Some(Arc::new(again));
        Ok(())
    }

    /// `n` more bytes were handed to the OS: starts a writeback when
    /// enough have gathered (skipped while the previous one still runs).
    pub(super) fn wrote(&mut self, n: u64) {
        self.since += n;
        if self.since < WRITEBACK_BYTES {
            return;
        }
        let Some(file) = &self.file else {
            return;
        };
        match self.requests.try_send(Arc::clone(file)) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => self.since = 0,
            // Still busy with the last one: ask again after the next write.
            Err(TrySendError::Full(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn writeback_is_asked_for_every_few_mib_handed_to_the_os() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut file = File::create(&path).unwrap();
        let mut writeback = Writeback::start().unwrap();
        // No file yet: nothing to sync, nothing panics.
        writeback.wrote(WRITEBACK_BYTES);
        writeback.open(&path, &file).unwrap();
        assert_eq!(writeback.since, 0);
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..(WRITEBACK_BYTES >> 20) - 1 {
            file.write_all(&chunk).unwrap();
            writeback.wrote(chunk.len() as u64);
        }
        assert_eq!(writeback.since, WRITEBACK_BYTES - (1 << 20));
        file.write_all(&chunk).unwrap();
        writeback.wrote(chunk.len() as u64);
        // Asked (the helper is idle, the request queue empty).
        assert_eq!(writeback.since, 0);
        file.sync_data().unwrap();
        drop(writeback);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), WRITEBACK_BYTES);
    }

    #[test]
    fn a_missing_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let other = File::create(dir.path().join("other")).unwrap();
        let mut writeback = Writeback::start().unwrap();
        assert!(writeback.open(&dir.path().join("gone"), &other).is_err());
        // Another file at the path: not this one's writeback.
        File::create(dir.path().join("another")).unwrap();
        assert!(writeback.open(&dir.path().join("another"), &other).is_err());
        writeback.wrote(WRITEBACK_BYTES * 2);
    }
}
