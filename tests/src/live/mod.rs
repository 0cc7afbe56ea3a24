//! Live-capture harness: runs the real `tracesyncd` and `tracesync-relay`
//! (relays optionally in Linux time namespaces), asks the daemon for its
//! status, and checks the rolling output by the synthetic identities.
//!
//! - [`process`]: [`Daemon`] and [`Relay`] (start, stop, kill -9, restart on
//!   the same output dir / spool; children are killed on drop).
//! - [`output`]: reads every rolled file, resolves each packet's host time
//!   as Perfetto does (machine id + the sync point in effect) and counts
//!   missing, duplicated and misplaced synthetic events.
//! - [`judge`]: the same files through the real trace processor.

pub mod judge;
pub mod lab_pki;
pub mod output;
pub mod process;

pub use output::{OutputCheck, SourceCheck, check_output};
pub use process::{Daemon, DaemonOpts, DaemonTls, Relay, RelayOpts, RelayTls, TimeNamespace};

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// `tracesyncd`, `tracesync-relay` and `tracesync` from the target dir of
/// the current build; built once with `cargo build --bins` when missing.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test exe>
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>")
        .to_path_buf();
    let path = dir.join(name);
    if !path.exists() {
        build_bins_once(&dir);
    }
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --workspace --bins` (scripts/test.sh does)",
        path.display()
    );
    path
}

fn build_bins_once(profile_dir: &std::path::Path) {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--workspace", "--bins"])
            .current_dir(crate::tp::repo_root());
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        eprintln!("live: building the workspace binaries ({cmd:?})");
        match cmd.status() {
            Ok(s) if s.success() => {}
            other => eprintln!("live: cargo build --bins failed: {other:?}"),
        }
    });
}

/// Whether this machine can run relays in their own time namespace
/// (`unshare --time --boottime S --monotonic S`: root, a kernel with time
/// namespaces, util-linux with `--time`). `Err` says why not.
pub fn time_namespaces() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            if !nix::unistd::geteuid().is_root() {
                return Err("time namespaces need root (unshare --time)".into());
            }
            let out = Command::new("unshare")
                .args(["--time", "--boottime", "7", "--monotonic", "7"])
                .args(["cat", "/proc/self/timens_offsets"])
                .output()
                .map_err(|e| format!("cannot run unshare: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || !text.contains("boottime") {
                return Err(format!(
                    "unshare --time does not work here ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(())
        })
        .clone()
}

/// For tests that need time namespaces: true if available, else prints a
/// skip notice and returns false.
pub fn require_time_namespaces_or_skip(test: &str) -> bool {
    match time_namespaces() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// A random token (hex) for one daemon, without a random-number crate.
pub fn random_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// The host's CLOCK_BOOTTIME (ns): the live output's trace time.
pub fn host_boottime_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// The largest `error_bound_ns` the daemon reported per machine name over
/// a run (status samples): the bound every packet placed in the run is
/// held to.
#[derive(Clone, Debug, Default)]
pub struct BoundTracker {
    pub max_bound_ns: std::collections::BTreeMap<String, u64>,
    pub samples: u64,
}

impl BoundTracker {
    pub fn record(&mut self, status: &serde_json::Value) {
        self.samples += 1;
        for m in status["machines"].as_array().into_iter().flatten() {
            // The current estimate's bound, and the largest bound any
            // written packet carried (covers estimates between samples).
            let bound = m["error_bound_ns"].as_u64().max(m["max_err_ns"].as_u64());
            if let (Some(name), Some(bound)) = (m["name"].as_str(), bound) {
                let e = self.max_bound_ns.entry(name.to_owned()).or_default();
                *e = (*e).max(bound);
            }
        }
    }

    /// Samples the daemon's status every `every` for `total`.
    pub fn sample_for(
        &mut self,
        daemon: &Daemon,
        total: std::time::Duration,
        every: std::time::Duration,
    ) {
        let end = std::time::Instant::now() + total;
        while std::time::Instant::now() < end {
            if let Ok(s) = daemon.status() {
                self.record(&s);
            }
            std::thread::sleep(every);
        }
    }
}
