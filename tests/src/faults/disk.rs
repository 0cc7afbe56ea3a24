//! A small filesystem only the daemon sees: a tmpfs of a given size mounted
//! in a private mount namespace that a holder process keeps alive. The
//! daemon runs in that namespace (`nsenter -t HOLDER -m`); the test reads,
//! fills and frees it through `/proc/HOLDER/root`. Nothing is mounted in
//! the test's own namespace, and the tmpfs goes away with the holder.

use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const FILLER: &str = ".tracesync-test-filler";

/// Whether a private mount namespace with a tmpfs can be made here
/// (root, `unshare -m`, `nsenter`). `Err` says why not.
pub fn available() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("mounting a small tmpfs needs root (unshare -m)".into());
    }
    let probe = SmallDisk::mount(1 << 20)?;
    drop(probe);
    let nsenter = Command::new("nsenter").arg("--version").output();
    match nsenter {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("nsenter is missing".into()),
    }
}

/// For tests that need [`SmallDisk`]: true if available, else prints a
/// skip notice and returns false.
pub fn require_or_skip(test: &str) -> bool {
    match available() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// A tmpfs of fixed size in its own mount namespace. See the module docs.
pub struct SmallDisk {
    _tmp: tempfile::TempDir,
    /// The mount point, as the namespace (and the daemon) sees it.
    pub dir: PathBuf,
    holder: Option<Child>,
    holder_pid: u32,
}

impl SmallDisk {
    /// Mounts a tmpfs of `bytes` on a new empty directory.
    pub fn mount(bytes: u64) -> Result<SmallDisk, String> {
        let tmp = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let dir = tmp.path().join("disk");
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir: {e}"))?;
        // The holder lives as long as its stdin, a pipe from this process:
        // as long as the test however long it runs, and no longer if the
        // test is killed.
        let script = "mount -t tmpfs -o size=\"$1\" tracesync-test \"$2\" && echo mounted && \
                      exec cat >/dev/null";
        let mut child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
            .arg(bytes.to_string())
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run unshare -m: {e}"))?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let holder_pid = child.id();
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        if line.trim() != "mounted" {
            let _ = child.kill();
            let out = child.wait_with_output().ok();
            let err = out
                .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
                .unwrap_or_default();
            return Err(format!("unshare -m + mount -t tmpfs failed: {err}"));
        }
        Ok(SmallDisk {
            _tmp: tmp,
            dir,
            holder: Some(child),
            holder_pid,
        })
    }

    /// The command prefix that runs a program in the namespace.
    pub fn command_prefix(&self) -> Vec<String> {
        ["nsenter", "-t", &self.holder_pid.to_string(), "-m", "--"]
            .map(String::from)
            .to_vec()
    }

    /// `path` (as the namespace sees it) from the test's namespace.
    pub fn view(&self, path: &Path) -> PathBuf {
        let rel = path.strip_prefix("/").unwrap_or(path);
        Path::new("/proc")
            .join(self.holder_pid.to_string())
            .join("root")
            .join(rel)
    }

    /// Free bytes on the tmpfs.
    pub fn free_bytes(&self) -> io::Result<u64> {
        let st = nix::sys::statvfs::statvfs(&self.view(&self.dir)).map_err(io::Error::from)?;
        Ok(st.blocks_available() as u64 * st.fragment_size() as u64)
    }

    /// Writes a filler file until the tmpfs is full (ENOSPC); returns its
    /// size. Later writes of the daemon fail until [`release`](Self::release).
    pub fn fill(&self) -> io::Result<u64> {
        let path = self.view(&self.dir.join(FILLER));
        let mut f = OpenOptions::new().create(true).append(true).open(&path)?;
        let mut total = 0u64;
        for chunk in [1 << 20, 64 << 10, 4 << 10, 1] {
            let buf = vec![0x5a_u8; chunk];
            loop {
                match f.write(&buf) {
                    Ok(0) => break,
                    Ok(n) => total += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::StorageFull => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(total)
    }

    /// Removes the filler: the space comes back.
    pub fn release(&self) -> io::Result<()> {
        match std::fs::remove_file(self.view(&self.dir.join(FILLER))) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        if let Some(mut c) = self.holder.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
