//! Running tracesync's real binaries from integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Path of a binary built by this workspace (`target/<profile>/<name>`).
///
/// Integration tests live in their own package, so Cargo's
/// `CARGO_BIN_EXE_*` is not available; the binaries sit next to the
/// directory of the test executable.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --workspace --bins` (scripts/test.sh does)",
        path.display()
    );
    path
}

/// Runs `tracesync` with `args`.
pub fn tracesync(args: &[&str]) -> Output {
    Command::new(bin("tracesync"))
        .args(args)
        .output()
        .expect("run tracesync")
}

/// One line of `tracesync merge --format jsonl`.
pub type Record = serde_json::Value;

/// Runs `tracesync merge --format jsonl` on `inputs` (plus `extra` flags)
/// and returns the records, the exit code and stderr.
pub fn merge_jsonl(inputs: &[&Path], extra: &[&str]) -> (Vec<Record>, i32, String) {
    let mut args = vec!["merge", "--format", "jsonl"];
    args.extend_from_slice(extra);
    let paths: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    let out = tracesync(&args);
    let stdout = String::from_utf8(out.stdout).expect("utf-8 jsonl");
    let records = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad jsonl line {l:?}: {e}")))
        .collect();
    (
        records,
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
