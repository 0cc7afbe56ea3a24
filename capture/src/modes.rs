//! The permission bits of what the daemon and the CLI write into a capture
//! (or a merged or refined copy of one): traces, sidecars, the index and
//! the journal are `0640` (the owner reads and writes, its group reads:
//! the service group under the shipped unit, so operators in it can read
//! the traces), their directories `0750`; others get nothing, whoever runs
//! the program and whatever its umask. The bits are set on the new file's
//! descriptor (or the new directory) after it is created, because the mode
//! given to `open(2)` is masked by the umask: a daemon run by hand under
//! umask 022 would otherwise write files any local user can read, and one
//! under umask 077 files its group cannot.
//!
//! Invariant: a file or directory already there is never changed (it is
//! not ours to change); only what was just created gets these bits.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Traces, sidecars, index, journal.
pub const FILE_MODE: u32 = 0o640;
/// The directories they are written in.
pub const DIR_MODE: u32 = 0o750;

/// Opens `path` with `options`, which must create it (`create_new`, or
/// `create` for a temporary name of our own), and gives the new file
/// exactly [`FILE_MODE`]. A file that was already there and is not the
/// caller's keeps its mode.
pub fn open_new_file(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    let file = options.mode(FILE_MODE).open(path)?;
    match file.set_permissions(Permissions::from_mode(FILE_MODE)) {
        // Another user's file opened for writing: not ours to change.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(file),
        Err(e) => Err(e),
        Ok(()) => Ok(file),
    }
}

/// Writes `bytes` to `path` (a report beside a capture: `--stats`): a new
/// file gets exactly [`FILE_MODE`]; one already there is truncated and
/// keeps its mode.
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = match open_new_file(OpenOptions::new().write(true).create_new(true), path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            OpenOptions::new().write(true).truncate(true).open(path)?
        }
        other => other?,
    };
    io::Write::write_all(&mut file, bytes)
}

/// Creates `dir` and each missing parent with exactly [`DIR_MODE`];
/// directories already there are left as they are. Fails as
/// `create_dir_all` does (a file in the way, no permission).
pub fn create_dirs(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(d) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(d),
            _ => break,
        }
        at = d.parent();
    }
    for d in missing.iter().rev() {
        match DirBuilder::new().mode(DIR_MODE).create(d) {
            Ok(()) => std::fs::set_permissions(d, Permissions::from_mode(DIR_MODE))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    // What was there already must be a directory (or a link to one).
    std::fs::create_dir_all(dir)
}

/// Creates the directory `dir` (not its parents) with exactly
/// [`DIR_MODE`].
pub fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().mode(DIR_MODE).create(dir)?;
    std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).map_or(0, |m| m.mode() & 0o7777)
    }

    /// The umask is process-wide: the cases under each umask run in one
    /// test, one after the other.
    #[test]
    fn modes_do_not_depend_on_the_umask() {
        let tmp = tempfile::tempdir().expect("tempdir");
        for (i, umask) in [0o022, 0o077, 0o000].into_iter().enumerate() {
            let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(umask));
            let dir = tmp.path().join(format!("{i}/a/b"));
            let created = create_dirs(&dir);
            let file = dir.join("f.pftrace");
            let opened = open_new_file(OpenOptions::new().write(true).create_new(true), &file);
            let single = tmp.path().join(format!("{i}/single"));
            let made = create_dir(&single);
            let report = tmp.path().join(format!("{i}/stats.json"));
            let reported = write_file(&report, b"{}");
            nix::sys::stat::umask(old);
            created.expect("dirs");
            opened.expect("file");
            made.expect("dir");
            reported.expect("report");
            assert_eq!(mode(&report), FILE_MODE, "under umask {umask:o}");
            for d in [
                tmp.path().join(format!("{i}")),
                tmp.path().join(format!("{i}/a")),
                dir,
                single,
            ] {
                assert_eq!(mode(&d), DIR_MODE, "{} under umask {umask:o}", d.display());
            }
            assert_eq!(mode(&file), FILE_MODE, "under umask {umask:o}");
        }
        // A directory already there keeps its mode; a file in the way fails.
        let there = tmp.path().join("there");
        std::fs::create_dir(&there).expect("mkdir");
        std::fs::set_permissions(&there, Permissions::from_mode(0o755)).expect("chmod");
        create_dirs(&there.join("sub")).expect("dirs");
        assert_eq!(mode(&there), 0o755);
        std::fs::write(there.join("file"), b"x").expect("write");
        assert!(create_dirs(&there.join("file")).is_err());
        // A report already there is rewritten and keeps its mode.
        std::fs::set_permissions(there.join("file"), Permissions::from_mode(0o600)).expect("chmod");
        write_file(&there.join("file"), b"yz").expect("rewrite");
        assert_eq!(std::fs::read(there.join("file")).expect("read"), b"yz");
        assert_eq!(mode(&there.join("file")), 0o600);
    }
}
