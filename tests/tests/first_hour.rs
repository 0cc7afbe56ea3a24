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
    let mut closed = false;
    while got.len() < lines {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => got.push(line),
            Err(e) => {
                closed = e == std::sync::mpsc::RecvTimeoutError::Disconnected;
                break;
            }
        }
    }
    // Its standard output closes a moment before it is reaped: a program
    // that closed it is given the rest of the time to end by itself.
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if !closed || Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
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

/// Processes whose command line names `dir` (the demo's children).
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(cmdline);
        }
    }
    found
}

/// Runs a live demo, interrupts it once its status shows (`to_group`: as a
/// terminal does, SIGINT to the whole process group; else to the demo
/// alone), and checks it ends at once with 130, leaving nothing running.
fn interrupt_a_demo(to_group: bool) {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("demo");
    let mut child = Command::new(bin("tracesync"))
        .args([
            "demo",
            "--seconds",
            "120",
            "--metrics-listen",
            "off",
            "--out",
        ])
        .arg(&out)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn demo");
    let pid = Pid::from_raw(child.id() as i32);
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let mut running = false;
    while !running && stdout.read_line(&mut line).is_ok_and(|n| n > 0) {
        running = line.starts_with("--- t =");
        line.clear();
    }
    assert!(running, "the demo never showed its status");
    // Its reader stays (a closed one stops a demo too, quietly).
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let sent = Instant::now();
    if to_group {
        killpg(pid, Signal::SIGINT).expect("SIGINT to the group");
    } else {
        kill(pid, Signal::SIGINT).expect("SIGINT to the demo");
    }
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "the demo still runs 10 s after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(!stderr.contains("cannot reach the daemon"), "{stderr}");
    std::thread::sleep(Duration::from_millis(200));
    let left = processes_naming(&out);
    assert!(left.is_empty(), "still running: {left:?}");
}

#[test]
fn a_demo_whose_reader_goes_away_stops_quietly_with_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("demo");
    let out_arg = out.to_str().expect("utf-8");
    let started = Instant::now();
    let (code, stderr) = read_then_close(
        &[
            "demo",
            "--seconds",
            "120",
            "--metrics-listen",
            "off",
            "--out",
            out_arg,
        ],
        1,
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "ran on for its 120 s"
    );
    assert!(processes_naming(&out).is_empty());
}

#[test]
fn ctrl_c_stops_a_demo_at_once_with_130() {
    interrupt_a_demo(true);
}

#[test]
fn sigint_to_the_demo_alone_stops_its_daemon_and_relays_too() {
    interrupt_a_demo(false);
}

#[test]
fn a_relay_whose_source_is_missing_says_so_in_its_log_and_in_status() {
    use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts};
    let mut daemon = Daemon::start(DaemonOpts::default());
    let missing = "/nonexistent-dir-of-this-test/trace.pftrace";
    let mut relay = Relay::start(
        &daemon,
        RelayOpts {
            name: "phone".into(),
            sources: vec![format!("file:{missing}"), "synthetic:100".into()],
            ..RelayOpts::default()
        },
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let shown = loop {
        let out = Command::new(bin("tracesync"))
            .args(["status", "--connect"])
            .arg(&daemon.control)
            .output()
            .expect("tracesync status");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("source on phone") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let log = relay.log();
    relay.stop();
    daemon.stop();
    // Wrapped at 80 columns: the words, not the line.
    let words: Vec<&str> = shown.split_whitespace().collect();
    let said = words.join(" ");
    assert!(
        said.contains(&format!(
            "source on phone: file:{missing} waiting: no such file"
        )),
        "{shown}"
    );
    assert!(
        !shown.contains("synthetic:100"),
        "a source that reads is no problem: {shown}"
    );
    assert!(log.contains("no such file"), "{log}");
}
