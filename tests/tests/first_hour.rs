//! A newcomer's first hour: no command strands its user. Each test is one
//! path that once left a user waiting, guessing or misled, run through the
//! real binaries:
//!
//! - `tracesync merge ... | head`: ends quietly with 0 when the reader goes
//!   away, as `tail`, `clocks` and coreutils do;
//! - `tracesync tail DIR` on a directory that holds other files and no
//!   capture: refused at once, as `merge DIR` refuses it;
//! - `tracesync tail --machine host`: the word means the host machine,
//!   whatever the host's name.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_tests::build::{self, encode_trace};
use tracesync_tests::live::bin;

/// A trace of `n` instants on one sequence (a few hundred bytes of jsonl
/// each, far more than a pipe holds).
fn big_trace(dir: &Path, n: u64) -> std::path::PathBuf {
    let mut packets = vec![build::clock_snapshot(&[(BOOTTIME, 1_000)])];
    packets.extend((0..n).map(|i| build::instant(1_000 + i * 1_000, BOOTTIME, 1, 7, "tick")));
    let path = dir.join("big.pftrace");
    std::fs::write(&path, encode_trace(&packets)).expect("write trace");
    path
}

/// Runs `tracesync ARGS`, reads `keep` bytes of its output and closes the
/// pipe; its exit code and what it said on stderr.
fn read_then_close(args: &[&str], keep: usize) -> (Option<i32>, String) {
    let mut child = Command::new(bin("tracesync"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tracesync");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = vec![0u8; keep];
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "tracesync {args:?} did not end after its reader went away"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    (status.code(), stderr)
}

#[test]
fn a_merge_whose_reader_goes_away_ends_quietly_with_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = big_trace(dir.path(), 200_000);
    let trace = trace.to_str().expect("utf-8 path");
    for args in [
        vec!["merge", "--format", "jsonl", trace],
        vec!["merge", "-o", "-", trace],
    ] {
        let (code, stderr) = read_then_close(&args, 100);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?} said: {stderr}");
    }
}

/// Runs `tracesync ARGS` until it has printed `lines` lines or `within`
/// passed, then stops it; the lines, its exit code if it ended by itself,
/// and its stderr so far.
fn lines_of(args: &[&str], lines: usize, within: Duration) -> (Vec<String>, Option<i32>, String) {
    use std::io::BufRead;
    let mut child = Command::new(bin("tracesync"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tracesync");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < lines {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => got.push(line),
            Err(_) => break,
        }
    }
    let code = match child.try_wait().expect("wait") {
        Some(status) => status.code(),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    (got, code, stderr)
}

#[test]
fn tail_refuses_a_directory_that_is_no_capture_and_waits_on_an_empty_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("traces");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(other.join("phone.pftrace"), b"").expect("write");
    std::fs::write(other.join("notes.txt"), b"x").expect("write");
    let other = other.to_str().expect("utf-8");
    let (_, code, stderr) = lines_of(&["tail", other], 1, Duration::from_secs(10));
    assert_eq!(code, Some(66), "refused at once: {stderr}");
    assert!(
        stderr.contains("not a capture directory") && stderr.contains("[output] dir"),
        "{stderr}"
    );
    // `merge DIR` refuses it alike.
    let merged = Command::new(bin("tracesync"))
        .args(["merge", "--format", "jsonl", other])
        .output()
        .expect("merge");
    assert_eq!(merged.status.code(), Some(66));

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let (_, code, stderr) = lines_of(
        &["tail", empty.to_str().expect("utf-8")],
        1,
        Duration::from_secs(2),
    );
    assert_eq!(code, None, "an empty directory is waited on: {stderr}");
    assert!(stderr.contains("waiting for a trace file"), "{stderr}");
}

#[test]
fn tail_machine_host_shows_the_hosts_packets_whatever_its_name() {
    use tracesync_tests::live::{Daemon, DaemonOpts};
    let mut daemon = Daemon::start(DaemonOpts::default());
    let output = daemon.output.to_str().expect("utf-8").to_owned();
    // The daemon's own packets (its SystemInfo and ClockSnapshots) are the
    // host's; its machine is named after the host name.
    let (lines, code, stderr) = lines_of(
        &["tail", &output, "--machine", "host", "--format", "jsonl"],
        2,
        Duration::from_secs(20),
    );
    daemon.stop();
    assert!(
        lines.len() >= 2,
        "no host packets shown (exit {code:?}): {stderr}"
    );
    for line in &lines {
        let record: serde_json::Value = serde_json::from_str(line).expect("jsonl");
        assert_eq!(record["raw_id"], 0, "{line}");
        assert!(record["machine"].is_string(), "the host is named: {line}");
    }
    assert!(!stderr.contains("has no machine"), "{stderr}");
}
