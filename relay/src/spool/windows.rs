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
//!
//! A trigger taken and not yet collected (its window's end is still
//! ahead) is `windows/trigger-<ID>.pending` likewise (`PENDING_MAGIC`, an
//! encoded `Trigger`), so a restart takes it again; it goes once its
//! window is collected or given up.

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
const PENDING_PREFIX: &str = "trigger-";
const PENDING_SUFFIX: &str = ".pending";
const PENDING_MAGIC: &[u8; 8] = b"TSTRIG01";

/// The windows directory of a spool.
pub fn windows_dir(spool_dir: &Path) -> PathBuf {
    spool_dir.join(DIR)
}

fn window_path(spool_dir: &Path, trigger_id: u64) -> PathBuf {
    windows_dir(spool_dir).join(format!("{PREFIX}{trigger_id:016x}{SUFFIX}"))
}

fn pending_path(spool_dir: &Path, trigger_id: u64) -> PathBuf {
    windows_dir(spool_dir).join(format!("{PENDING_PREFIX}{trigger_id:016x}{PENDING_SUFFIX}"))
}

/// Writes a collected window (whole, atomically).
pub fn write_window(spool_dir: &Path, window: &v1::Window) -> Result<(), SpoolError> {
    let path = window_path(spool_dir, window.trigger_id);
    write_checked(spool_dir, &path, WINDOW_MAGIC, &window.encode_to_vec())
}

/// Every window on disk, oldest trigger id first; files that fail their
/// check are deleted and reported.
pub fn read_windows(spool_dir: &Path) -> Result<(Vec<v1::Window>, Vec<SpoolIssue>), SpoolError> {
    read_all(
        spool_dir,
        (PREFIX, SUFFIX),
        WINDOW_MAGIC,
        |w: &v1::Window| w.trigger_id,
    )
}

/// The daemon has trigger `trigger_id`'s window: its file goes.
pub fn delete_window(spool_dir: &Path, trigger_id: u64) -> Result<bool, SpoolError> {
    remove(&window_path(spool_dir, trigger_id))
}

/// Keeps a trigger whose window is not collected yet.
pub fn write_pending(spool_dir: &Path, trigger: &v1::Trigger) -> Result<(), SpoolError> {
    let path = pending_path(spool_dir, trigger.id);
    write_checked(spool_dir, &path, PENDING_MAGIC, &trigger.encode_to_vec())
}

/// Every pending trigger on disk, oldest id first (damaged files are
/// deleted and reported).
pub fn read_pending(spool_dir: &Path) -> Result<(Vec<v1::Trigger>, Vec<SpoolIssue>), SpoolError> {
    read_all(
        spool_dir,
        (PENDING_PREFIX, PENDING_SUFFIX),
        PENDING_MAGIC,
        |t: &v1::Trigger| t.id,
    )
}

/// The trigger's window was collected or given up.
pub fn delete_pending(spool_dir: &Path, trigger_id: u64) -> Result<bool, SpoolError> {
    remove(&pending_path(spool_dir, trigger_id))
}

fn write_checked(
    spool_dir: &Path,
    path: &Path,
    magic: &[u8; 8],
    body: &[u8],
) -> Result<(), SpoolError> {
    let dir = windows_dir(spool_dir);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io_error(&dir, "create the directory"))?;
    let mut bytes = Vec::with_capacity(body.len() + 12);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    bytes.extend_from_slice(body);
    tracesync_common::files::replace(path, &bytes, 0o600).map_err(io_error(path, "write"))
}

/// Every file named `<prefix>...<suffix>` in the windows directory,
/// decoded, sorted by `id`.
fn read_all<M: Message + Default>(
    spool_dir: &Path,
    (prefix, suffix): (&str, &str),
    magic: &[u8; 8],
    id: impl Fn(&M) -> u64,
) -> Result<(Vec<M>, Vec<SpoolIssue>), SpoolError> {
    let dir = windows_dir(spool_dir);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(io_error(&dir, "list")(e)),
    };
    let mut found = Vec::new();
    let mut issues = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_error(&dir, "list"))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with(prefix) && name.ends_with(suffix)) {
            continue;
        }
        let path = entry.path();
        let bytes = fs::read(&path).map_err(io_error(&path, "read"))?;
        match decode(&bytes, magic) {
            Ok(message) => found.push(message),
            Err(what) => {
                issues.push(SpoolIssue {
                    path: path.clone(),
                    offset: 0,
                    what: format!("{what}; deleted, never shipped"),
                });
                fs::remove_file(&path).map_err(io_error(&path, "delete"))?;
            }
        }
    }
    found.sort_by_key(|m| id(m));
    Ok((found, issues))
}

fn remove(path: &Path) -> Result<bool, SpoolError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(path, "delete")(e)),
    }
}

fn decode<M: Message + Default>(bytes: &[u8], magic: &[u8; 8]) -> Result<M, &'static str> {
    let rest = bytes
        .strip_prefix(magic.as_slice())
        .ok_or("not a window or trigger file (bad magic)")?;
    let (crc, body) = rest.split_first_chunk::<4>().ok_or("file cut short")?;
    if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
        return Err("checksum mismatch");
    }
    M::decode(body).map_err(|_| "does not decode")
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
        let trigger = window(5).trigger.unwrap_or_default();
        write_pending(dir.path(), &trigger)?;
        assert_eq!(read_pending(dir.path())?.0, vec![trigger]);
        assert!(
            read_windows(dir.path())?.0.is_empty(),
            "a pending trigger is no window"
        );
        assert!(delete_pending(dir.path(), 5)?);
        assert!(read_pending(dir.path())?.0.is_empty());
        Ok(())
    }
}
