//! Small files replaced whole and read back without following symbolic
//! links: the lab PKI's certificates and CRL, the daemon's identity
//! bindings.
//!
//! [`replace`] writes a temporary beside the file (created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW`, so it never writes through a link planted
//! there), fsyncs it, renames it over the file (a link at the file's name
//! is replaced, not followed) and fsyncs the directory: a reader, or the
//! next start after a crash, sees the old file or the new one, whole.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

/// The temporary [`replace`] writes `path` through: `.<name>.tmp` beside it.
pub fn temporary_of(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp"))
}

/// Replaces `path` with `bytes` atomically and durably (see the module
/// doc); a new file gets `mode`. A temporary left by a crash is removed
/// first (removing a link does not follow it).
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let tmp = temporary_of(path);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(OFlag::O_NOFOLLOW.bits() | OFlag::O_CLOEXEC.bits())
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(path)
}

/// fsync of the directory holding `path`, so a rename in it is durable.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// Opens the regular file `path` for reading without following a
/// symbolic link. `Ok(None)`: there is no such file; a link, a directory, a
/// pipe or a socket is an error saying which.
pub fn open_regular(path: &Path) -> io::Result<Option<File>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_NOFOLLOW.bits() | OFlag::O_CLOEXEC.bits() | OFlag::O_NONBLOCK.bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(io::Error::new(
                e.kind(),
                "it is a symbolic link, which is not followed",
            ));
        }
        Err(e) => return Err(e),
    };
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() || kind.is_socket() {
            "a pipe or socket"
        } else {
            "not a regular file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is {what}"),
        ));
    }
    Ok(Some(file))
}

/// Reads at most `limit` bytes of the regular file `path` without
/// following a symbolic link ([`open_regular`]). `Ok(None)`: there is no
/// such file. The bool says the file was longer than `limit` (the rest is
/// not read).
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Option<(Vec<u8>, bool)>> {
    let Some(file) = open_regular(path)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    let cut = bytes.len() as u64 > limit;
    if cut {
        bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(Some((bytes, cut)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_writes_whole_files_and_never_follows_links() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        replace(&path, b"one", 0o600).unwrap();
        replace(&path, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert!(!temporary_of(&path).exists());

        // A link planted at the temporary's name is removed, not written through.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, temporary_of(&path)).unwrap();
        replace(&path, b"three", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&path).unwrap(), b"three");

        // A link at the file's name is replaced by the file, not followed.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let err = read_regular(&path, 100).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        replace(&path, b"four", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }

    #[test]
    fn read_regular_bounds_and_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        assert!(read_regular(&path, 10).unwrap().is_none());
        std::fs::write(&path, b"0123456789abc").unwrap();
        assert_eq!(
            read_regular(&path, 10).unwrap(),
            Some((b"0123456789".to_vec(), true))
        );
        assert_eq!(
            read_regular(&path, 13).unwrap(),
            Some((b"0123456789abc".to_vec(), false))
        );
        let err = read_regular(dir.path(), 10).unwrap_err();
        assert!(err.to_string().contains("directory"), "{err}");
    }
}
