//! `tracesync tail` as journalctl users expect it (issue 17), through the
//! real daemon and relays: `--time wall|boot|trace`, `-n N` and `--since
//! TIME` for `tail DIR` (rolled files read back) and for the daemon's
//! socket (its bounded history), an unknown `--machine` named against the
//! known ones, `tail DIR` woken by inotify (latency from a packet written
//! to printed), and a restarted daemon that names a relay before its next
//! Hello.

#![allow(clippy::too_many_lines, reason = "a test reads top to bottom")]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_tests::build;
use tracesync_tests::live::process::machine;
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, bin};

/// Runs `tracesync` with `args` for `secs`, then ends it (tail follows
/// forever): its stdout and stderr.
fn tail_for(args: &[&str], dir: Option<&Path>, secs: f64) -> Output {
    let mut cmd = Command::new(bin("tracesync"));
    cmd.args(args);
    if let Some(dir) = dir {
        cmd.arg(dir);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tracesync tail");
    // Read while it runs: a full pipe would stop the tail.
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    std::thread::sleep(Duration::from_secs_f64(secs));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = child.wait().expect("tail");
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn jsonl(out: &Output) -> Vec<serde_json::Value> {
    lines(&out.stdout)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// (ts, raw_id, seq, kind, size): a record's identity across formats.
fn key(r: &serde_json::Value) -> (i64, u64, u64, String, u64) {
    (
        r["ts"].as_i64().expect("ts"),
        r["raw_id"].as_u64().expect("raw_id"),
        r["seq"].as_u64().expect("seq"),
        r["kind"].as_str().unwrap_or("").to_owned(),
        r["size"].as_u64().expect("size"),
    )
}

/// REALTIME minus BOOTTIME of this machine now (ns).
fn wall_minus_boot() -> i128 {
    let now = |id| {
        nix::time::clock_gettime(id)
            .map(|t| i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()))
            .expect("clock")
    };
    now(nix::time::ClockId::CLOCK_REALTIME) - now(nix::time::ClockId::CLOCK_BOOTTIME)
}

/// The first field of a text line parsed as RFC 3339 (ns since the epoch).
fn wall_field(line: &str) -> i128 {
    let field = line.split_whitespace().next().expect("a field");
    assert_eq!(
        field.len(),
        "2026-11-26T01:07:51.123456+00:00".len(),
        "{line}"
    );
    assert!(field.ends_with("+00:00"), "{line}");
    time::OffsetDateTime::parse(field, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{e}: {line}"))
        .unix_timestamp_nanos()
}

/// A capture of two relays over several files, closed.
fn closed_capture(test: &str) -> (Daemon, Vec<String>) {
    // In the target's temporary directory: left there for a look after a failure.
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(test);
    let _ = std::fs::remove_dir_all(&out);
    let mut daemon = Daemon::start(DaemonOpts {
        rotate_bytes: Some(96 << 10),
        output_dir: Some(out),
        ..DaemonOpts::default()
    });
    let names = ["hist-a", "hist-b"];
    let mut relays: Vec<Relay> = names
        .iter()
        .map(|n| Relay::start(&daemon, RelayOpts::synthetic(n, 400)))
        .collect();
    daemon.wait_synced(&names, Duration::from_secs(30));
    daemon.wait_progress(&names, 1500);
    for r in &mut relays {
        assert!(r.stop().success(), "{test}: {}", r.log());
    }
    assert!(daemon.stop().success(), "{test}: {}", daemon.log());
    (daemon, names.iter().map(|s| s.to_string()).collect())
}

#[test]
fn tail_dir_starts_where_asked_and_shows_time_as_asked() {
    let (daemon, names) = closed_capture("tail_dir");
    let dir = daemon.output.as_path();
    // Every record of the capture, in file order.
    let merged = Command::new(bin("tracesync"))
        .args(["merge", "--format", "jsonl"])
        .arg(dir)
        .output()
        .expect("merge");
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let all = jsonl(&merged);
    let files = tracesync_tests::live::output::rolled_files(dir);
    assert!(files.len() >= 3, "{} files", files.len());

    // -n N reaches back over files: the capture's last N records.
    let n = 3000;
    let out = tail_for(&["tail", "--format", "jsonl", "-n", "3000"], Some(dir), 3.0);
    let got: Vec<_> = jsonl(&out).iter().map(key).collect();
    let want: Vec<_> = all[all.len() - n..].iter().map(key).collect();
    eprintln!(
        "tail_history: tail DIR -n {n}: {} records over {} files (capture {})",
        got.len(),
        files.len(),
        all.len()
    );
    assert_eq!(got.len(), n, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(got, want, "the last {n} records, in file order");

    // --time trace / boot / wall of the same last 5 records.
    let last: Vec<i64> = all[all.len() - 5..].iter().map(|r| key(r).0).collect();
    let trace = lines(&tail_for(&["tail", "-n", "5", "--time", "trace"], Some(dir), 1.5).stdout);
    let firsts = |ls: &[String]| -> Vec<String> {
        ls.iter()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_owned())
            .collect()
    };
    assert_eq!(
        firsts(&trace),
        last.iter().map(i64::to_string).collect::<Vec<_>>()
    );
    let boot = lines(&tail_for(&["tail", "-n", "5", "--time", "boot"], Some(dir), 1.5).stdout);
    let want_boot: Vec<String> = last
        .iter()
        .map(|t| format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000))
        .collect();
    assert_eq!(firsts(&boot), want_boot);
    // Wall is the default: this machine's relation, to within 50 ms (the
    // capture's host snapshots read the same clocks).
    let wall = lines(&tail_for(&["tail", "-n", "5"], Some(dir), 1.5).stdout);
    assert_eq!(wall.len(), 5, "{wall:?}");
    let delta = wall_minus_boot();
    for (line, ts) in wall.iter().zip(&last) {
        let off = wall_field(line) - (i128::from(*ts) + delta);
        assert!(off.abs() < 50_000_000, "{line}: {off} ns off");
    }
    eprintln!("tail_history: tail DIR -n 5 (wall): {}", wall[4]);

    // --since TIME: trace ns, and -DURATION before the capture's end.
    let at = all[all.len() - 40]["ts"].as_i64().expect("ts");
    let since = at.to_string();
    let out = tail_for(
        &["tail", "--format", "jsonl", "--since", &since],
        Some(dir),
        2.0,
    );
    let want: Vec<_> = all.iter().filter(|r| key(r).0 >= at).map(key).collect();
    assert_eq!(jsonl(&out).iter().map(key).collect::<Vec<_>>(), want);
    let end = all.iter().map(|r| key(r).0).max().expect("end");
    let out = tail_for(
        &["tail", "--format", "jsonl", "--since", "-1s"],
        Some(dir),
        2.0,
    );
    let got: Vec<_> = jsonl(&out).iter().map(key).collect();
    let want: Vec<_> = all
        .iter()
        .map(key)
        .filter(|k| k.0 >= end - 1_000_000_000)
        .collect();
    eprintln!("tail_history: tail DIR --since -1s: {} records", got.len());
    assert_eq!(got, want);
    // RFC 3339 --since: the wall time of the 40th-last record.
    let rfc = time::OffsetDateTime::from_unix_timestamp_nanos(
        i128::from(at) + delta - 1_000, // a µs early: rounding of the relation
    )
    .expect("time")
    .format(&time::format_description::well_known::Rfc3339)
    .expect("format");
    let out = tail_for(
        &["tail", "--format", "jsonl", "--since", &rfc],
        Some(dir),
        2.0,
    );
    let got = jsonl(&out);
    assert!(
        (40..=60).contains(&got.len()),
        "--since {rfc}: {} records (40 expected, give or take the clock relation)",
        got.len()
    );

    // An unknown machine: one line naming the known ones; exit on SIGTERM only.
    let out = tail_for(&["tail", "-n", "0", "--machine", "nosuch"], Some(dir), 1.5);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let host = all
        .iter()
        .find(|r| r["raw_id"] == 0)
        .and_then(|r| r["machine"].as_str())
        .unwrap_or("host")
        .to_owned();
    let mut known = vec![host];
    known.extend(names.iter().cloned());
    known.sort();
    // The known machines in any order: the relays' machine ids follow the
    // order they connected in, which two relays started together do not fix.
    let (head, tail) = (
        format!(
            "tracesync: warning: {} has no machine \"nosuch\" (known: ",
            dir.display()
        ),
        "); showing its packets if it appears",
    );
    let line = err.lines().next().unwrap_or_default();
    eprintln!("tail_history: {}", err.trim_end());
    let listed = line
        .strip_prefix(head.as_str())
        .and_then(|rest| rest.strip_suffix(tail))
        .unwrap_or_else(|| panic!("warning line: {err}"));
    let mut listed: Vec<&str> = listed.split(", ").collect();
    listed.sort_unstable();
    assert_eq!(listed, known, "{err}");
    assert!(out.stdout.is_empty());

    // Bad TIME, perfetto with -n: one line, exit 64.
    let bad = Command::new(bin("tracesync"))
        .args(["tail", "--since", "yesterday"])
        .arg(dir)
        .output()
        .expect("tail");
    assert_eq!(bad.status.code(), Some(64));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr),
        "tracesync: error: --since: \"yesterday\": not a TIME; give trace-time ns (123456789), an \
         RFC 3339 UTC time (2026-11-25T22:14:00Z) or -DURATION before the end (-30s, -5m, -1h, \
         -250ms)\n"
    );
    let bad = Command::new(bin("tracesync"))
        .args(["tail", "--format", "perfetto", "-n", "5"])
        .arg(dir)
        .stdout(Stdio::piped())
        .output()
        .expect("tail");
    assert_eq!(bad.status.code(), Some(64));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr),
        "tracesync: error: tail --format perfetto starts at a preamble, not at -n or --since; \
         use tracesync merge DIR --since TIME for a window as a trace\n"
    );
}

#[test]
fn tail_of_the_daemon_starts_with_its_recent_history() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut relay = Relay::start(&daemon, RelayOpts::synthetic("hist-live", 500));
    daemon.wait_synced(&["hist-live"], Duration::from_secs(30));
    daemon.wait_progress(&["hist-live"], 2000);
    let control = daemon.control.to_str().expect("utf-8").to_owned();

    // -n 200: 200 held records at once, then the live stream, each
    // record once and in order across the seam.
    let out = tail_for(
        &[
            "tail",
            "--connect",
            &control,
            "--format",
            "jsonl",
            "-n",
            "200",
        ],
        None,
        2.0,
    );
    let history_tail = jsonl(&out);
    eprintln!(
        "tail_history: tail --connect -n 200: {} records in 2 s",
        history_tail.len()
    );
    // About 1000 live records at 500/s, fewer on a loaded machine.
    assert!(
        history_tail.len() > 200 + 100,
        "the history, then the live stream: {}",
        history_tail.len()
    );

    // --since -1s: the held records of the last second (trace ns = this
    // machine's BOOTTIME), then live.
    let boot_now = tracesync_tests::live::host_boottime_ns() as i64;
    let out = tail_for(
        &[
            "tail",
            "--connect",
            &control,
            "--format",
            "jsonl",
            "--since",
            "-1s",
        ],
        None,
        1.0,
    );
    let got = jsonl(&out);
    let first = key(&got[0]).0;
    eprintln!(
        "tail_history: tail --connect --since -1s: first record {} ms before the request",
        (boot_now - first) / 1_000_000
    );
    assert!(
        first >= boot_now - 1_000_000_000 - 50_000_000,
        "{first} vs {boot_now}"
    );
    assert!(
        first <= boot_now - 1_000_000_000 + 300_000_000,
        "{first} vs {boot_now}: the last second held"
    );

    // Text lines in wall time (default), boot and trace.
    let text = lines(&tail_for(&["tail", "--connect", &control, "-n", "3"], None, 0.5).stdout);
    assert!(text.len() >= 3, "{text:?}");
    let delta = wall_minus_boot();
    let wall = wall_field(&text[0]);
    let boot = wall - delta;
    assert!(
        (boot - i128::from(boot_now)).abs() < 5_000_000_000,
        "{}",
        text[0]
    );
    let trace = lines(
        &tail_for(
            &["tail", "--connect", &control, "-n", "3", "--time", "trace"],
            None,
            0.5,
        )
        .stdout,
    );
    assert!(
        trace[0]
            .split_whitespace()
            .next()
            .expect("field")
            .parse::<i64>()
            .is_ok(),
        "{}",
        trace[0]
    );
    // A perfetto tail cannot start in the history (the daemon says so too).
    let mut raw = daemon
        .control_request("{\"cmd\":\"tail\",\"format\":\"perfetto\",\"lines\":5}\n")
        .expect("request");
    let mut reply = String::new();
    BufReader::new(&mut raw)
        .read_line(&mut reply)
        .expect("reply");
    assert!(
        reply.contains("a perfetto tail starts at a preamble"),
        "{reply}"
    );
    // An unknown machine: named against the daemon's.
    let out = tail_for(
        &["tail", "--connect", &control, "--machine", "nosuch"],
        None,
        1.0,
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let status = daemon.status().expect("status");
    let host = status["machines"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["raw_id"] == 0))
        .and_then(|m| m["name"].as_str())
        .unwrap_or("host")
        .to_owned();
    assert_eq!(
        err.lines().next(),
        Some(
            format!(
                "tracesync: warning: the daemon knows no machine \"nosuch\" (known: {host}, \
                 hist-live); showing its packets if it connects"
            )
            .as_str()
        ),
        "{err}"
    );
    assert!(relay.stop().success(), "{}", relay.log());
    assert!(daemon.stop().success());

    // The -n 200 tail is a stretch of the capture as the files hold it:
    // each record once, none missing across the seam of history and live.
    let merged = Command::new(bin("tracesync"))
        .args(["merge", "--format", "jsonl"])
        .arg(&daemon.output)
        .output()
        .expect("merge");
    let all: Vec<_> = jsonl(&merged).iter().map(raw_key).collect();
    let got: Vec<_> = history_tail.iter().map(raw_key).collect();
    let at = all
        .windows(got.len())
        .position(|w| w == got.as_slice())
        .unwrap_or_else(|| {
            panic!(
                "the tail's {} records are not a stretch of the files'",
                got.len()
            )
        });
    eprintln!(
        "tail_history: the -n 200 tail is records {at}..{} of the {} written",
        at + got.len(),
        all.len()
    );
}

/// A record's identity without the times the files re-resolve: (raw_id,
/// seq, kind, size) and, of a track event, its raw timestamp (a snapshot's
/// or sync point's `clock_ts` read back differs from the live one).
fn raw_key(r: &serde_json::Value) -> String {
    let raw = if r["kind"] == "track_event" {
        format!("{} {}", r["clock"], r["clock_ts"])
    } else {
        String::new()
    };
    format!(
        "{} {} {} {} {raw}",
        r["raw_id"], r["seq"], r["kind"], r["size"]
    )
}

/// A rolled file name (`tracesync-<start>-<seq>.pftrace`).
const ROLLED: &str = "tracesync-20261126T000000Z-000001.pftrace";

#[test]
fn tail_dir_prints_a_packet_within_milliseconds_of_its_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(ROLLED);
    let mut file = std::fs::File::create(&path).expect("create");
    let start = build::clock_snapshot(&[(BOOTTIME, 1_000)]);
    file.write_all(&build::encode_trace(&[start]))
        .expect("write");
    file.sync_all().expect("sync");
    let mut child = Command::new(bin("tracesync"))
        .args(["tail", "--format", "jsonl"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tail");
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    // The snapshot's record: the tail has caught up.
    rx.recv_timeout(Duration::from_secs(10))
        .expect("first record");
    let mut latencies = Vec::new();
    for i in 0..30u64 {
        std::thread::sleep(Duration::from_millis(37));
        let ts = 2_000_000 + i * 1_000;
        let p = build::instant(ts, BOOTTIME, 1, 1, "tick");
        let written = Instant::now();
        file.write_all(&build::encode_trace(&[p])).expect("append");
        let (seen, line) = rx.recv_timeout(Duration::from_secs(10)).expect("record");
        assert!(line.contains(&format!("\"ts\":{ts}")), "{line}");
        latencies.push(seen - written);
    }
    let _ = child.kill();
    let _ = child.wait();
    latencies.sort();
    let p50 = latencies[latencies.len() / 2];
    let max = latencies[latencies.len() - 1];
    eprintln!(
        "tail_history: tail DIR latency from write to printed: p50 {p50:?} max {max:?} (30 packets)"
    );
    assert!(
        p50 < Duration::from_millis(20),
        "p50 {p50:?}: polling, not inotify?"
    );
}

#[test]
fn a_restarted_daemon_names_a_connected_relay_before_its_next_hello() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut relay = Relay::start(&daemon, RelayOpts::synthetic("kept-name", 200));
    let status = daemon.wait_connected(&["kept-name"], Duration::from_secs(30));
    daemon.wait_progress(&["kept-name"], 400);
    let raw_id = machine(&status, "kept-name").expect("machine")["raw_id"].clone();
    // The relay stays connected but says nothing until the check is done.
    let pid = nix::unistd::Pid::from_raw(relay.pid().expect("relay pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    assert!(daemon.stop().success(), "{}", daemon.log());
    daemon.restart();
    // The first report of the new ingest loop (the one before it is empty).
    let status = daemon.wait_status("the first report", Duration::from_secs(10), |s| {
        s["host_boottime_ns"].as_u64().unwrap_or(0) > 0
    });
    let row = status["machines"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["raw_id"] == raw_id))
        .cloned();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    let row = row.unwrap_or_else(|| panic!("no row for raw id {raw_id}: {status}"));
    eprintln!(
        "tail_history: after a restart, raw id {raw_id} is {} (connected {})",
        row["name"], row["connected"]
    );
    assert_eq!(row["name"], "kept-name", "{row}");
    assert_eq!(
        row["connected"], false,
        "checked before the relay's next Hello: {row}"
    );
    daemon.wait_connected(&["kept-name"], Duration::from_secs(30));
    assert!(relay.stop().success(), "{}", relay.log());
    assert!(daemon.stop().success());
}
