//! `tracesync status` and `tracesync tail` against a control server with an
//! in-test hub (real unix sockets), and `tail DIR` over rolling files.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracesync_core::live::{OutPacket, Role};
use tracesync_core::status::{MachineStatus, StatusReport};
use tracesync_daemon::control::{ControlHub, bind_unix, serve};
use tracesync_protocol::scan::field;
use tracesync_protocol::wire;

fn tracesync(args: &[&str]) -> Command {
    let mut c = Command::new(tracesync_tests::run::bin("tracesync"));
    c.args(args);
    c
}

/// Lines of a child's stdout, read on a thread so the test can time out.
struct Lines {
    child: Child,
    rx: mpsc::Receiver<String>,
}

impl Lines {
    fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tracesync");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, rx }
    }

    fn take(&self, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| {
                self.rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a line from tracesync in time")
            })
            .collect()
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn status_without_a_daemon_exits_69_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("control.sock");
    let sock = sock.to_str().expect("utf-8 path");
    for args in [
        vec!["status", "--connect", sock],
        vec!["tail", "--connect", sock],
    ] {
        let out = tracesync(&args).output().expect("run");
        assert_eq!(out.status.code(), Some(69), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("tracesync: cannot reach the daemon at {sock}: ")),
            "{err}"
        );
        assert!(err.contains("is tracesyncd running? (--connect)"), "{err}");
    }
}

fn packet(ts: i64, machine: u32, name: Option<&str>) -> Arc<OutPacket> {
    let mut b = Vec::new();
    wire::put_varint_field(&mut b, field::TIMESTAMP, ts as u64);
    wire::put_varint_field(&mut b, field::TRUSTED_PACKET_SEQUENCE_ID, 4);
    wire::put_len_field(&mut b, 11, &[]);
    Arc::new(OutPacket {
        ts,
        machine_raw_id: machine,
        machine_name: name.map(Arc::from),
        seq: 4,
        clock: 6,
        clock_ts: ts as u64,
        err_ns: 10,
        data_field: Some(11),
        src: Arc::from("relay/0"),
        role: Role::Data,
        origin: None,
        bytes: Bytes::from(b).into(),
    })
}

#[test]
fn status_and_tail_through_the_binary() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("control.sock");
    let report = StatusReport {
        version: "9.9.9".into(),
        machines: vec![MachineStatus {
            name: Some("vm1".into()),
            raw_id: 42,
            connected: true,
            ..Default::default()
        }],
        ..Default::default()
    };
    let (_status_tx, status_rx) = watch::channel(Arc::new(report.clone()));
    let (hub, _requests) = ControlHub::new(1024, status_rx);
    let shutdown = CancellationToken::new();
    let listener = rt.block_on(async { bind_unix(&sock) }).expect("bind");
    rt.spawn(serve(listener, hub.clone(), shutdown.clone()));
    let sock = sock.to_str().expect("utf-8 path");

    let out = tracesync(&["status", "--connect", sock, "--json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let got: StatusReport = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(got, report);
    let out = tracesync(&["status", "--connect", sock])
        .output()
        .expect("run");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.lines().nth(2).is_some_and(|l| l.starts_with("vm1 ")),
        "{table}"
    );

    let tail = Lines::spawn(tracesync(&[
        "tail",
        "--connect",
        sock,
        "--format",
        "jsonl",
        "--machine",
        "vm1",
    ]));
    for _ in 0..500 {
        if hub.packets.receiver_count() > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for i in 0..10 {
        hub.publish(packet(i, 0, None));
        hub.publish(packet(100 + i, 42, Some("vm1")));
    }
    let lines = tail.take(10);
    for (i, line) in lines.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).expect("jsonl");
        assert_eq!(v["ts"], 100 + i as i64);
        assert_eq!(v["machine"], "vm1");
        assert_eq!(v["err_ns"], 10);
    }
    shutdown.cancel();
}

fn framed(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        wire::put_trace_packet(&mut out, p);
    }
    out
}

fn host_event(ts: u64) -> Vec<u8> {
    let mut b = Vec::new();
    wire::put_varint_field(&mut b, field::TIMESTAMP, ts);
    wire::put_varint_field(&mut b, field::TRUSTED_PACKET_SEQUENCE_ID, 3);
    wire::put_len_field(&mut b, 11, &[]);
    b
}

fn host_system_info() -> Vec<u8> {
    let mut info = Vec::new();
    wire::put_len_field(&mut info, 17, b"hostname");
    let mut b = Vec::new();
    wire::put_len_field(&mut b, field::SYSTEM_INFO, &info);
    wire::put_varint_field(&mut b, field::TRUSTED_PACKET_SEQUENCE_ID, 1);
    b
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .expect("append");
}

#[test]
fn tail_dir_follows_a_rotation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("tracesync-20250101T000000Z-000001.pftrace");
    let b = dir.path().join("tracesync-20250101T000100Z-000002.pftrace");
    append(
        &a,
        &framed(&[host_system_info(), host_event(1), host_event(2)]),
    );
    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let tail = Lines::spawn(tracesync(&["tail", dir_arg, "--format", "jsonl"]));
    let first = tail.take(3);
    append(&a, &framed(&[host_event(3)]));
    std::thread::sleep(Duration::from_millis(250));
    // Rotation: B replays the SystemInfo, then carries on.
    append(
        &b,
        &framed(&[host_system_info(), host_event(4), host_event(5)]),
    );
    let rest = tail.take(3);
    let ts: Vec<i64> = first
        .iter()
        .chain(&rest)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("jsonl");
            assert_eq!(v["machine"], "hostname", "{l}");
            // The host's times are exact; remote packets read back take
            // their machine's error-bound track (docs/format.md).
            assert_eq!(v["err_ns"], 0, "{l}");
            v["ts"].as_i64().expect("ts")
        })
        .collect();
    assert_eq!(ts, vec![0, 1, 2, 3, 4, 5]);
    // Nothing more: the replayed SystemInfo was not shown twice.
    assert!(tail.rx.recv_timeout(Duration::from_millis(400)).is_err());
}
