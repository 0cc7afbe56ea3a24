//! The flight recorder's windows on disk: each trigger's window, once
//! collected from the ring, is one file `windows/window-<ID>.tsw` in the
//! spool directory until the daemon acknowledges it, so a window survives
//! reconnects, restarts and the ring moving on.
//!
//! A file is `WINDOW_MAGIC`, the crc32 of the rest (u32, little-endian),
//! and the window as one encoded protocol `Window` (trigger, preamble,
//! packets). It is written whole and atomically (a temporary, fsync,
//! rename, fsync of the directory): a reader sees a whole window or none.
//! A file that fails its check is reported and deleted, never shipped.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use prost::Message;
use tracesync_protocol::relay::v1;

use super::{SpoolError, SpoolIssue, types::io_error};

const DIR: &str = "windows";
const PREFIX: &str = "window-";
const SUFFIX: &str = ".tsw";
const WINDOW_MAGIC: &[u8; 8] = b"TSWINDW1";

/// The windows directory of a spool.
pub fn windows_dir(spool_dir: &Path) -> PathBuf {
    spool_dir.join(DIR)
}

fn window_path(spool_dir: &Path, trigger_id: u64) -> PathBuf {
    windows_dir(spool_dir).join(format!("{PREFIX}{trigger_id:016x}{SUFFIX}"))
}

/// Writes a collected window (whole, atomically).
pub fn write_window(spool_dir: &Path, window: &v1::Window) -> Result<(), SpoolError> {
    let dir = windows_dir(spool_dir);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io_error(&dir, "create the directory"))?;
    let body = window.encode_to_vec();
    let mut bytes = Vec::with_capacity(body.len() + 12);
    bytes.extend_from_slice(WINDOW_MAGIC);
    bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    let path = window_path(spool_dir, window.trigger_id);
    tracesync_common::files::replace(&path, &bytes, 0o600).map_err(io_error(&path, "write"))
}

/// Every window on disk, oldest trigger id first; files that fail their
/// check are deleted and reported.
pub fn read_windows(spool_dir: &Path) -> Result<(Vec<v1::Window>, Vec<SpoolIssue>), SpoolError> {
    let dir = windows_dir(spool_dir);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(io_error(&dir, "list")(e)),
    };
    let mut windows = Vec::new();
    let mut issues = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_error(&dir, "list"))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with(PREFIX) && name.ends_with(SUFFIX)) {
            continue;
        }
        let path = entry.path();
        let bytes = fs::read(&path).map_err(io_error(&path, "read"))?;
        match decode(&bytes) {
            Ok(window) => windows.push(window),
            Err(what) => {
                issues.push(SpoolIssue {
                    path: path.clone(),
                    offset: 0,
                    what: format!("{what}; the window is deleted, not shipped"),
                });
                fs::remove_file(&path).map_err(io_error(&path, "delete"))?;
            }
        }
    }
    windows.sort_by_key(|w| w.trigger_id);
    Ok((windows, issues))
}

/// The daemon has trigger `trigger_id`'s window: its file goes.
pub fn delete_window(spool_dir: &Path, trigger_id: u64) -> Result<bool, SpoolError> {
    let path = window_path(spool_dir, trigger_id);
    match fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(&path, "delete")(e)),
    }
}

fn decode(bytes: &[u8]) -> Result<v1::Window, &'static str> {
    let rest = bytes
        .strip_prefix(WINDOW_MAGIC.as_slice())
        .ok_or("not a window file (bad magic)")?;
    let (crc, body) = rest
        .split_first_chunk::<4>()
        .ok_or("window file cut short")?;
    if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
        return Err("window file checksum mismatch");
    }
    v1::Window::decode(body).map_err(|_| "window file does not decode")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(id: u64) -> v1::Window {
        v1::Window {
            trigger_id: id,
            last: true,
            packets: vec![vec![1, 2, 3].into(), vec![4].into()],
            preamble: vec![vec![9].into()],
            trigger: Some(v1::Trigger {
                id,
                name: "crash".into(),
                ..v1::Trigger::default()
            }),
            ..v1::Window::default()
        }
    }

    #[test]
    fn windows_round_trip_and_a_damaged_one_is_dropped() -> Result<(), SpoolError> {
        let dir = tempfile::tempdir().map_err(io_error(Path::new("tmp"), "create"))?;
        assert!(read_windows(dir.path())?.0.is_empty(), "no directory yet");
        write_window(dir.path(), &window(7))?;
        write_window(dir.path(), &window(3))?;
        let (windows, issues) = read_windows(dir.path())?;
        assert_eq!(windows, vec![window(3), window(7)]);
        assert!(issues.is_empty());
        let path = window_path(dir.path(), 7);
        let mut bytes = fs::read(&path).map_err(io_error(&path, "read"))?;
        if let Some(last) = bytes.last_mut() {
            *last ^= 1;
        }
        fs::write(&path, bytes).map_err(io_error(&path, "write"))?;
        let (windows, issues) = read_windows(dir.path())?;
        assert_eq!(windows, vec![window(3)]);
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert!(!path.exists());
        assert!(delete_window(dir.path(), 3)?);
        assert!(!delete_window(dir.path(), 3)?);
        Ok(())
    }
}
