//! Waiting for the rolling files of a directory to change: inotify through
//! the `notify` crate, so `tail DIR` prints a packet as soon as the daemon
//! writes it. Where inotify cannot be had (no more watches, a filesystem
//! without it) it falls back to a poll every [`FALLBACK_POLL`], said once
//! on stderr.

use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::Duration;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};

/// How often the directory is read without inotify.
pub const FALLBACK_POLL: Duration = Duration::from_secs(1);
/// With inotify, a re-read after this long without any event: a safety net
/// for a missed event (an overflowed inotify queue is reported, but a file
/// replaced by another program may not be).
pub const SAFETY_POLL: Duration = Duration::from_secs(5);
/// Wake-ups queued at most; one is enough to read everything new.
const QUEUE: usize = 64;

/// Wakes the follower when something in the directory changes.
pub struct DirWatch {
    /// None: polling (inotify unavailable).
    inotify: Option<(RecommendedWatcher, Receiver<()>)>,
}

impl DirWatch {
    /// Watches `dir` (not recursively); on failure says why once and polls.
    pub fn new(dir: &Path) -> Self {
        match watch(dir) {
            Ok(inotify) => Self {
                inotify: Some(inotify),
            },
            Err(e) => {
                eprintln!(
                    "tracesync: warning: cannot watch {} with inotify ({e}); reading it every {} s \
                     instead (raise fs.inotify.max_user_watches if that is the cause)",
                    dir.display(),
                    FALLBACK_POLL.as_secs()
                );
                Self { inotify: None }
            }
        }
    }

    /// Whether inotify is in use.
    pub fn is_inotify(&self) -> bool {
        self.inotify.is_some()
    }

    /// Blocks until the directory or a file in it changed (or the safety
    /// or fallback interval passed).
    pub fn wait(&self) {
        let Some((_, rx)) = &self.inotify else {
            std::thread::sleep(FALLBACK_POLL);
            return;
        };
        match rx.recv_timeout(SAFETY_POLL) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            // The watcher's thread is gone: do not spin.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(FALLBACK_POLL),
        }
        // One read takes in every change queued so far.
        while rx.try_recv().is_ok() {}
    }
}

fn watch(dir: &Path) -> notify::Result<(RecommendedWatcher, Receiver<()>)> {
    let (tx, rx): (SyncSender<()>, Receiver<()>) = mpsc::sync_channel(QUEUE);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let wake = match event {
            // Reads and opens change nothing.
            Ok(event) => !matches!(event.kind, EventKind::Access(_)),
            // An error (an overflowed queue): read everything again.
            Err(_) => true,
        };
        if wake {
            // Full: a wake-up is already queued.
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(dir, RecursiveMode::NonRecursive)?;
    Ok((watcher, rx))
}
