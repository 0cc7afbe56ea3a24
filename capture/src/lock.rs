//! One daemon per capture directory: `tracesyncd` holds an exclusive
//! `flock` on [`LOCK_NAME`] in `[output] dir` for as long as it runs, with
//! its pid written in the file. A second daemon on the same directory fails at
//! once with the holder's pid instead of recovering the first one's relays
//! and writing files beside it.
//!
//! The lock belongs to the open file description: it goes away with the
//! process (a crash or SIGKILL included), so a stale pid in the file never
//! blocks a restart.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::names::LOCK_NAME;

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct OutputLock {
    _file: Flock<File>,
    pub path: PathBuf,
}

/// Why the lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process holds it; its pid as written in the file, if any.
    Held {
        path: PathBuf,
        pid: Option<u32>,
    },
    /// `[output] dir` is there but is no directory.
    NotADirectory {
        dir: PathBuf,
    },
    /// `[output] dir` cannot be made (a parent is missing rights, or is a
    /// file).
    CannotCreate {
        dir: PathBuf,
        source: io::Error,
    },
    Io {
        path: PathBuf,
        source: io::Error,
    },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held { path, pid } => {
                let dir = path.parent().unwrap_or(Path::new("."));
                let holder = match pid {
                    Some(pid) => format!("tracesyncd pid {pid}"),
                    None => "another tracesyncd".to_owned(),
                };
                write!(
                    f,
                    "[output] dir {} is in use by {holder} (it holds {}); stop that daemon, \
                     or give this one another [output] dir (--output)",
                    dir.display(),
                    path.display()
                )
            }
            LockError::NotADirectory { dir } => write!(
                f,
                "[output] dir {} is not a directory; give a directory (--output)",
                dir.display()
            ),
            LockError::CannotCreate { dir, source } => write!(
                f,
                "[output] dir {} cannot be created: {source}; create it (writable by the \
                 daemon's user) or give another (--output)",
                dir.display()
            ),
            LockError::Io { path, source } if source.kind() == io::ErrorKind::PermissionDenied => {
                let dir = path.parent().unwrap_or(Path::new("."));
                write!(
                    f,
                    "[output] dir {} is not writable by this user (it cannot create {}): give \
                     the daemon's user write access, or another dir (--output)",
                    dir.display(),
                    path.display()
                )
            }
            LockError::Io { path, source } => {
                write!(f, "cannot lock {}: {source} ([output] dir)", path.display())
            }
        }
    }
}

impl LockError {
    /// Whether the lock was refused for lack of permission.
    pub fn is_permission(&self) -> bool {
        matches!(self, LockError::Io { source, .. } | LockError::CannotCreate { source, .. }
            if source.kind() == io::ErrorKind::PermissionDenied)
    }
}

/// Makes `dir` if missing (0750, as the writer would: `modes.rs`) and
/// takes its lock without waiting; writes this process's pid into it.
pub fn lock(dir: &Path) -> Result<OutputLock, LockError> {
    let path = dir.join(LOCK_NAME);
    let io_error = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(LockError::NotADirectory {
            dir: dir.to_path_buf(),
        });
    }
    crate::modes::create_dirs(dir).map_err(|source| LockError::CannotCreate {
        dir: dir.to_path_buf(),
        source,
    })?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&path)
        .map_err(io_error)?;
    let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => locked,
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            let pid = file
                .read_to_string(&mut text)
                .ok()
                .and_then(|_| text.trim().parse().ok());
            return Err(LockError::Held { path, pid });
        }
        Err((_, errno)) => return Err(io_error(io::Error::from(errno))),
    };
    let written = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    written.map_err(io_error)?;
    Ok(OutputLock { _file: file, path })
}

/// Whether a running daemon holds `dir`'s lock, and its pid as written
/// there: `Some` while one writes into `dir`. Only looks (a shared lock
/// tried and dropped); a missing lock file is no holder.
pub fn holder(dir: &Path) -> Option<Option<u32>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(dir.join(LOCK_NAME))
        .ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_) => None,
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            Some(
                file.read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok()),
            )
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_directory_names_the_holder_and_a_released_one_is_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let first = lock(&out).expect("first lock");
        let text = std::fs::read_to_string(out.join(LOCK_NAME)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        // flock locks belong to the open file: a second open in this same
        // process conflicts like another process would.
        let second = lock(&out).expect_err("second lock");
        let message = second.to_string();
        assert!(
            message.contains(&format!("in use by tracesyncd pid {}", std::process::id())),
            "{message}"
        );
        assert!(matches!(second, LockError::Held { .. }));
        assert_eq!(holder(&out), Some(Some(std::process::id())));
        drop(first);
        assert_eq!(holder(&out), None);
        lock(&out).expect("lock after release");
    }

    #[test]
    fn a_file_as_output_dir_and_one_that_cannot_be_made_name_the_real_cause() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out");
        std::fs::write(&file, "x").unwrap();
        let e = lock(&file).expect_err("a file");
        assert!(matches!(e, LockError::NotADirectory { .. }), "{e}");
        assert!(e.to_string().contains("is not a directory"), "{e}");
        let e = lock(&file.join("below")).expect_err("under a file");
        assert!(matches!(e, LockError::CannotCreate { .. }), "{e}");
        assert!(e.to_string().contains("cannot be created"), "{e}");
        assert!(!e.to_string().contains("cannot lock"), "{e}");
    }

    #[test]
    fn a_lock_file_that_is_a_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(LOCK_NAME)).unwrap();
        let error = lock(dir.path()).expect_err("symlink");
        assert!(matches!(error, LockError::Io { .. }), "{error}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
