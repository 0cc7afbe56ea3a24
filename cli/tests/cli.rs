//! The `tracesync` binary's command-line contract (exit codes, usage).
//! Also makes `cargo test` build the binaries the `tests` package runs.

use std::process::Command;

fn tracesync(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tracesync"))
        .args(args)
        .output()
        .expect("run tracesync")
}

#[test]
fn usage_errors_exit_64() {
    let out = tracesync(&["merge"]);
    assert_eq!(out.status.code(), Some(64));
    let out = tracesync(&["no-such-command"]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn missing_input_exits_66_with_one_line() {
    let out = tracesync(&["merge", "-o", "-", "/nonexistent/input.pftrace"]);
    assert_eq!(out.status.code(), Some(66));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("/nonexistent/input.pftrace"), "{err}");
}

#[test]
fn help_exits_0() {
    let out = tracesync(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("merge"));
}
