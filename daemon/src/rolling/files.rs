//! How the writer touches its output directory: never through a symbolic
//! link, and with a way to tell that a file it holds open is still the one
//! at its path.
//!
//! Every file is opened with `O_NOFOLLOW`; every new file is created with
//! `O_CREAT|O_EXCL` (a link, or anything else, at the name makes the create
//! fail instead of writing through it). The rule for a link found at a
//! name the writer wants (docs/format.md, "How files are created"):
//!
//! - a data file or sidecar name: the name is skipped (the next sequence
//!   number is tried); the link is left alone;
//! - one of the writer's temporary names (`index.jsonl.tmp`,
//!   `journal.tmp`): the link is removed (`unlink` removes the link, never
//!   its target) when the output directory belongs to the daemon's user,
//!   else the save fails;
//! - the journal or the index when read at start: the journal is an error
//!   (the daemon does not start), the index is ignored (it is rewritten).
//!
//! Each link is counted and logged once while it stays ([`Links`]).

use std::collections::BTreeSet;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use nix::fcntl::OFlag;
use tracesync_capture::modes;

fn no_follow() -> i32 {
    OFlag::O_NOFOLLOW.bits()
}

/// Creates a new file for reading and writing: `O_CREAT|O_EXCL|O_NOFOLLOW`
/// (fails with AlreadyExists whatever is at `path`, a link included),
/// mode 0640 whatever the umask (`tracesync_capture::modes`).
pub(super) fn create_new(path: &Path, append: bool) -> io::Result<File> {
    modes::open_new_file(
        OpenOptions::new()
            .read(true)
            .write(true)
            .append(append)
            .create_new(true)
            .custom_flags(no_follow()),
        path,
    )
}

/// Opens an existing file without following a link at `path` (a link
/// fails with [`LinkRefused`]).
pub(super) fn open_existing(path: &Path, write: bool) -> io::Result<File> {
    let opened = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(no_follow())
        .open(path);
    match opened {
        // ELOOP: the last component is a link.
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            Err(LinkRefused::error(path))
        }
        other => other,
    }
}

/// What is at a name, the name itself (a link is not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Found {
    Nothing,
    File(Identity),
    Link,
    /// A directory, socket, fifo, device.
    Other,
}

/// A file's identity: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Identity {
    dev: u64,
    ino: u64,
}

impl Identity {
    /// Of an open file (fstat).
    pub(super) fn of(file: &File) -> io::Result<Self> {
        let m = file.metadata()?;
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// lstat of `path`; a missing name or a missing directory is `Nothing`.
pub(super) fn look(path: &Path) -> io::Result<Found> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Ok(Found::Link),
        Ok(m) if m.file_type().is_file() => Ok(Found::File(Identity {
            dev: m.dev(),
            ino: m.ino(),
        })),
        Ok(_) => Ok(Found::Other),
        Err(e) if gone(&e) => Ok(Found::Nothing),
        Err(e) => Err(e),
    }
}

/// The name (or a directory on its way) does not exist.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || e.raw_os_error() == Some(nix::errno::Errno::ENOTDIR as i32)
}

/// Whether `file` is still the file at `path` (not following a link): the
/// same device and inode. False when the name, or the directory, is gone.
pub(super) fn still_at(file: &File, path: &Path) -> io::Result<bool> {
    let open = Identity::of(file)?;
    Ok(look(path)? == Found::File(open))
}

/// Makes room for a new file at one of the writer's temporary names: a
/// leftover regular file (an interrupted save's) is removed; a link is
/// removed when `may_remove_links` (counted in `links`), else refused.
pub(super) fn clear_temporary(path: &Path, links: &Links) -> io::Result<()> {
    match look(path)? {
        Found::Nothing => Ok(()),
        Found::File(_) => std::fs::remove_file(path),
        Found::Link if links.may_remove() => {
            std::fs::remove_file(path)?;
            links.met(path, true, "removed it (a temporary name of the daemon)");
            Ok(())
        }
        Found::Link => {
            links.met(
                path,
                false,
                "left it (the output directory is not the daemon's user's): this save fails",
            );
            Err(LinkRefused::error(path))
        }
        Found::Other => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is not a regular file; remove it (a temporary name of the daemon)",
                path.display()
            ),
        )),
    }
}

/// Writes `bytes` to a new temporary file next to `path` (created as
/// [`create_new`] does, after [`clear_temporary`]), then renames it to
/// `path` (a rename replaces a link at `path`, never its target).
pub(super) fn replace(path: &Path, tmp: &Path, bytes: &[u8], links: &Links) -> io::Result<()> {
    use std::io::Write;
    let result = clear_temporary(tmp, links)
        .and_then(|()| create_new(tmp, false))
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(tmp, path));
    if let Err(e) = &result
        && !is_link_refused(e)
    {
        // Ours (created above) or a leftover: never a link here.
        if look(tmp).is_ok_and(|f| matches!(f, Found::File(_))) {
            let _ = std::fs::remove_file(tmp);
        }
    }
    result
}

/// Recreates the output directory (not its parents) with `mode`; Ok if it
/// is there already.
pub(super) fn recreate_dir(dir: &Path, mode: u32) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {
            // Exactly the mode it had, whatever the umask.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// The permission bits of a directory.
pub(super) fn dir_mode(dir: &Path) -> io::Result<u32> {
    Ok(std::fs::metadata(dir)?.permissions().mode() & 0o7777)
}

/// Whether the directory belongs to the daemon's effective user.
pub(super) fn owned(dir: &Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
}

/// A link at a name the writer wanted, refused (never followed).
#[derive(Debug)]
pub struct LinkRefused {
    pub path: PathBuf,
}

impl LinkRefused {
    pub(super) fn error(path: &Path) -> io::Error {
        io::Error::new(
            io::ErrorKind::AlreadyExists,
            Self {
                path: path.to_path_buf(),
            },
        )
    }
}

impl fmt::Display for LinkRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is a symbolic link; the daemon never follows links in its output directory \
             (remove it)",
            self.path.display()
        )
    }
}

impl std::error::Error for LinkRefused {}

pub(super) fn is_link_refused(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<LinkRefused>())
}

/// The output file or the journal is no longer the file at its path (the
/// output directory was removed or renamed, or the file replaced): the
/// commit that found it failed.
#[derive(Debug)]
pub struct Vanished {
    pub path: PathBuf,
    pub dir: PathBuf,
}

impl Vanished {
    pub(super) fn error(path: &Path, dir: &Path) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            Self {
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
            },
        )
    }
}

impl fmt::Display for Vanished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is no longer in the output directory {} (the directory was removed or renamed, \
             or the file replaced)",
            self.path.display(),
            self.dir.display()
        )
    }
}

impl std::error::Error for Vanished {}

/// Whether an error of the writer is a [`Vanished`] output.
pub fn is_vanished(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<Vanished>())
}

/// Links met at names the writer wanted: each counted and logged once
/// while it stays (shared with the commit thread, which saves the index).
#[derive(Clone, Debug, Default)]
pub(super) struct Links(Arc<Mutex<LinksState>>);

#[derive(Debug, Default)]
struct LinksState {
    /// Names with a link left in place, already counted.
    held: BTreeSet<PathBuf>,
    refused: u64,
    /// Links at temporary names may be removed (the directory is ours).
    may_remove: bool,
}

impl Links {
    fn state(&self) -> std::sync::MutexGuard<'_, LinksState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Links met so far.
    pub(super) fn refused(&self) -> u64 {
        self.state().refused
    }

    pub(super) fn set_may_remove(&self, may: bool) {
        self.state().may_remove = may;
    }

    fn may_remove(&self) -> bool {
        self.state().may_remove
    }

    /// A link at `path`, `removed` or left; `what` says what was done.
    pub(super) fn met(&self, path: &Path, removed: bool, what: &str) {
        let mut s = self.state();
        let new = if removed {
            !s.held.remove(path)
        } else {
            s.held.insert(path.to_path_buf())
        };
        if new {
            s.refused += 1;
            tracing::warn!(
                "{} is a symbolic link: not followed, {what} (the daemon never writes through \
                 links in its output directory)",
                path.display()
            );
        } else {
            tracing::debug!("{} is still a symbolic link", path.display());
        }
    }
}
