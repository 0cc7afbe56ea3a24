//! The flight recorder's snapshots on the daemon: ring relays' Window
//! parts staged on disk as they come ([`Staging`]), and a trigger's
//! snapshot assembled from them off the ingest thread and written
//! atomically ([`mod@write`]).
//!
//! Staging: each (trigger, relay instance) window is one file
//! `.staging/window-<ID>-<INSTANCE>.parts` in the output directory, each
//! part a little-endian u32 length and the encoded `Window` message. A
//! part 0 starts the file again (a relay restarts an unacknowledged window
//! from its first part on every connection); a part out of order is
//! ignored (the relay resends the whole window on its next connection).
//! Memory: no packet is held once its part is written; at most
//! [`MAX_WINDOW_BYTES`] per window on disk (a window past it is dropped
//! and said).

pub mod output;
pub mod write;

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use prost::Message;
use tracesync_capture::names::SnapshotName;
use tracesync_core::sync::SyncEstimate;
use tracesync_protocol::relay::v1;

/// The staging directory's name in the output directory.
pub use tracesync_capture::names::STAGING_DIR;

/// Bytes of one staged window at most.
pub const MAX_WINDOW_BYTES: u64 = 1 << 30;

/// A ring relay as its Hello named it (the snapshot's core connects it
/// again under the same identity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayInfo {
    pub instance: u64,
    pub raw_id: u32,
    pub name: String,
    pub boot_id: String,
}

/// A staged window, whole, ready for a snapshot.
#[derive(Clone, Debug)]
pub struct StagedWindow {
    pub path: PathBuf,
    pub relay: RelayInfo,
    /// The relay's clock estimate when its window was whole.
    pub estimate: SyncEstimate,
}

#[derive(Debug)]
struct Staged {
    path: PathBuf,
    relay: RelayInfo,
    next_part: u32,
    bytes: u64,
    file: Option<File>,
    /// Every part is in.
    complete: bool,
    /// The estimate it maps with (None: the relay was not synced yet when
    /// it was whole; [`Staging::set_estimate`] gives it later).
    whole: Option<SyncEstimate>,
}

/// What a part did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartOutcome {
    /// Staged; more parts to come.
    More,
    /// The last part: the window is whole.
    Whole,
    /// Whole, but the relay has no clock estimate yet: it waits for one.
    NeedsEstimate,
    /// Not the next part (or past the size limit, or the window is whole
    /// already): ignored.
    Ignored,
}

#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    windows: HashMap<(u64, u64), Staged>,
}

impl Staging {
    /// Staging under `output_dir` (made when the first part comes). Files
    /// left by an earlier run are removed: their relays ship again.
    pub fn new(output_dir: &Path) -> Self {
        let dir = output_dir.join(STAGING_DIR);
        let _ = fs::remove_dir_all(&dir);
        Self {
            dir,
            windows: HashMap::new(),
        }
    }

    /// Stages one part of `relay`'s window; `estimate` is the relay's now
    /// (kept when the window is whole; None: not synced, the window waits
    /// as not whole and the relay ships it again later).
    pub fn part(
        &mut self,
        relay: &RelayInfo,
        window: &v1::Window,
        estimate: Option<SyncEstimate>,
    ) -> io::Result<PartOutcome> {
        let key = (window.trigger_id, relay.instance);
        if window.part == 0 {
            let path = self.dir.join(format!(
                "window-{:016x}-{:016x}.parts",
                window.trigger_id, relay.instance
            ));
            tracesync_capture::modes::create_dirs(&self.dir)?;
            // A restart of the window: its file begins anew (a link at the
            // name is removed, never written through).
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            let file = create_new(&path)?;
            self.windows.insert(
                key,
                Staged {
                    path,
                    relay: relay.clone(),
                    next_part: 0,
                    bytes: 0,
                    file: Some(file),
                    complete: false,
                    whole: None,
                },
            );
        }
        let Some(staged) = self.windows.get_mut(&key) else {
            return Ok(PartOutcome::Ignored);
        };
        let encoded = window.encode_to_vec();
        let fits = staged.bytes.saturating_add(encoded.len() as u64 + 4) <= MAX_WINDOW_BYTES;
        let Some(file) = staged
            .file
            .as_mut()
            .filter(|_| window.part == staged.next_part && fits)
        else {
            return Ok(PartOutcome::Ignored);
        };
        let len = u32::try_from(encoded.len()).map_err(io::Error::other)?;
        file.write_all(&len.to_le_bytes())?;
        file.write_all(&encoded)?;
        staged.bytes += encoded.len() as u64 + 4;
        staged.next_part += 1;
        if !window.last {
            return Ok(PartOutcome::More);
        }
        if let Some(file) = staged.file.take() {
            file.sync_data()?;
        }
        staged.complete = true;
        staged.whole = estimate;
        Ok(if estimate.is_some() {
            PartOutcome::Whole
        } else {
            PartOutcome::NeedsEstimate
        })
    }

    /// Gives a complete window without an estimate the relay's estimate;
    /// true if it was waiting for one.
    pub fn set_estimate(&mut self, id: u64, instance: u64, estimate: SyncEstimate) -> bool {
        match self.windows.get_mut(&(id, instance)) {
            Some(s) if s.complete && s.whole.is_none() => {
                s.whole = Some(estimate);
                true
            }
            _ => false,
        }
    }

    /// The whole staged windows of trigger `id` among `instances`.
    pub fn windows_of(&self, id: u64, instances: &[u64]) -> Vec<StagedWindow> {
        instances
            .iter()
            .filter_map(|i| self.windows.get(&(id, *i)))
            .filter_map(|s| {
                Some(StagedWindow {
                    path: s.path.clone(),
                    relay: s.relay.clone(),
                    estimate: s.whole?,
                })
            })
            .collect()
    }

    /// Deletes every staged window of trigger `id`.
    pub fn forget(&mut self, id: u64) {
        self.windows.retain(|&(t, _), staged| {
            if t == id {
                let _ = fs::remove_file(&staged.path);
            }
            t != id
        });
    }
}

/// Creates a new file for writing in the output directory as the rolled
/// files are: `O_CREAT|O_EXCL|O_NOFOLLOW` (anything at `path`, a link
/// included, makes it fail), mode 0640 whatever the umask.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    tracesync_capture::modes::open_new_file(
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits()),
        path,
    )
}

/// Removes the temporary snapshot files (`.snapshot-<UTC>-<NAME>.pftrace.tmp`)
/// a crash left in `output_dir` (a link is removed, never followed);
/// counted in the metrics and logged. Returns how many went.
pub fn clear_stale(output_dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(output_dir) else {
        return 0;
    };
    let mut removed = 0;
    for name in entries.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
        let stale = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .is_some_and(|n| SnapshotName::parse(n).is_some());
        if !stale {
            continue;
        }
        match fs::remove_file(output_dir.join(&name)) {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!(
                "cannot remove the stale temporary snapshot {}: {e}; remove it by hand",
                output_dir.join(&name).display()
            ),
        }
    }
    if removed > 0 {
        crate::metrics::Event::SnapshotTemporaryRemoved.add(removed);
        tracing::info!(
            "removed {removed} temporary snapshot file(s) a crash left in {}",
            output_dir.display()
        );
    }
    removed
}

/// Reads a staged window's parts back, one at a time.
pub struct Parts {
    file: io::BufReader<File>,
}

impl Parts {
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(Self {
            file: io::BufReader::new(File::open(path)?),
        })
    }
}

impl Iterator for Parts {
    type Item = io::Result<v1::Window>;

    fn next(&mut self) -> Option<Self::Item> {
        use std::io::Read;
        let mut len = [0u8; 4];
        match self.file.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return None,
            Err(e) => return Some(Err(e)),
        }
        let len = u32::from_le_bytes(len) as usize;
        // A part was one frame: a longer length is a damaged file.
        if len > tracesync_protocol::relay::MAX_FRAME_BYTES {
            return Some(Err(io::Error::other(format!(
                "a staged part of {len} bytes is over the frame limit: the staging file is \
                 damaged (the relay ships the window again)"
            ))));
        }
        let mut buf = vec![0u8; len];
        if let Err(e) = self.file.read_exact(&mut buf) {
            return Some(Err(e));
        }
        Some(v1::Window::decode(bytes::Bytes::from(buf)).map_err(io::Error::other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay() -> RelayInfo {
        RelayInfo {
            instance: 9,
            raw_id: 5,
            name: "phone".into(),
            boot_id: "b".into(),
        }
    }

    fn part(n: u32, last: bool) -> v1::Window {
        v1::Window {
            trigger_id: 3,
            part: n,
            last,
            packets: vec![bytes::Bytes::from(vec![n as u8; 10])],
            ..v1::Window::default()
        }
    }

    fn staged(staging: &mut Staging, window: &v1::Window) -> PartOutcome {
        let estimate = Some(SyncEstimate::default());
        staging
            .part(&relay(), window, estimate)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn stale_temporary_snapshots_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let stale = ".snapshot-20261202T152402Z-crash.pftrace.tmp";
        let kept = [
            "snapshot-20261202T152402Z-crash.pftrace",
            ".index.jsonl.tmp",
            "tracesync-20261202T152359Z-000001.pftrace",
        ];
        for name in kept.iter().chain([&stale]) {
            fs::write(dir.path().join(name), b"x").unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(clear_stale(dir.path()), 1);
        assert!(!dir.path().join(stale).exists());
        for name in kept {
            assert!(dir.path().join(name).exists(), "{name}");
        }
    }

    #[test]
    fn parts_are_staged_in_order_and_read_back_and_a_restart_begins_anew() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut staging = Staging::new(dir.path());
        assert_eq!(staged(&mut staging, &part(0, false)), PartOutcome::More);
        assert_eq!(staged(&mut staging, &part(2, false)), PartOutcome::Ignored);
        assert_eq!(staged(&mut staging, &part(1, false)), PartOutcome::More);
        // The relay reconnected: its window starts again from part 0.
        assert_eq!(staged(&mut staging, &part(0, false)), PartOutcome::More);
        assert_eq!(staged(&mut staging, &part(1, true)), PartOutcome::Whole);
        assert_eq!(staged(&mut staging, &part(2, true)), PartOutcome::Ignored);
        let windows = staging.windows_of(3, &[9, 10]);
        assert_eq!(windows.len(), 1);
        let parts: Vec<u32> = Parts::open(&windows[0].path)
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|p| p.map(|w| w.part).unwrap_or(u32::MAX))
            .collect();
        assert_eq!(parts, [0, 1]);
        staging.forget(3);
        assert!(!windows[0].path.exists());
        assert!(staging.windows_of(3, &[9]).is_empty());
    }
}
