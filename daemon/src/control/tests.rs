use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracesync_core::preamble::{PreambleLimits, PreambleState, strip_for_replay};

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::reader::TraceReader;
use tracesync_protocol::scan::field;
use tracesync_protocol::wire;

use super::*;
use tracesync_core::control::{TailFormat, lag_notice_record};
use tracesync_core::live::{OutPacket, Role};
use tracesync_core::status::{MachineStatus, StatusReport};

/// A TracePacket with a timestamp, a sequence id, a machine id and a
/// payload field of `data_field` (empty).
pub(crate) fn packet_bytes(ts: u64, seq: u32, machine: u32, data_field: u32) -> Bytes {
    let mut b = Vec::new();
    wire::put_varint_field(&mut b, field::TIMESTAMP, ts);
    wire::put_varint_field(&mut b, field::TRUSTED_PACKET_SEQUENCE_ID, u64::from(seq));
    if machine != 0 {
        wire::put_varint_field(&mut b, field::MACHINE_ID, u64::from(machine));
    }
    wire::put_len_field(&mut b, data_field, &[]);
    Bytes::from(b)
}

fn out_packet(ts: i64, machine: u32, name: Option<&str>, seq: u32, role: Role) -> Arc<OutPacket> {
    let data_field = match role {
        Role::SystemInfo => field::SYSTEM_INFO,
        Role::ClockSnapshot => field::CLOCK_SNAPSHOT,
        Role::SyncPoint => field::REMOTE_CLOCK_SYNC,
        _ => 11,
    };
    Arc::new(OutPacket {
        ts,
        machine_raw_id: machine,
        machine_name: name.map(Arc::from),
        seq,
        clock: 6,
        clock_ts: ts as u64 + 5,
        err_ns: 1500,
        data_field: Some(data_field),
        src: Arc::from(format!("{}/synthetic", name.unwrap_or("host"))),
        role,
        origin: None,
        bytes: packet_bytes(ts as u64, seq, machine, data_field).into(),
    })
}

struct Fixture {
    hub: ControlHub,
    /// Stands in for the rolling writer's preamble state: the responder
    /// task answers perfetto tails' requests from it.
    preamble: Arc<std::sync::Mutex<PreambleState>>,
    path: std::path::PathBuf,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<()>,
    _status_tx: watch::Sender<Arc<StatusReport>>,
    _dir: tempfile::TempDir,
}

fn report() -> StatusReport {
    StatusReport {
        version: "test".into(),
        machines: vec![MachineStatus {
            name: Some("phone".into()),
            raw_id: 7,
            connected: true,
            packets: 10,
            drops: BTreeMap::from([("clock_sync_failure_no_path".to_owned(), 2)]),
            offset_ns: Some(-1234),
            ..Default::default()
        }],
        ..Default::default()
    }
}

async fn start(capacity: usize) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run/control.sock");
    let (status_tx, status_rx) = watch::channel(Arc::new(report()));
    let (hub, mut requests) = ControlHub::new(capacity, status_rx);
    let preamble = Arc::new(std::sync::Mutex::new(PreambleState::new(
        PreambleLimits::default(),
    )));
    let state = Arc::clone(&preamble);
    tokio::spawn(async move {
        while let Some(request) = requests.recv().await {
            let packets = state.lock().expect("preamble").packets_by_machine();
            request.answer(packets);
        }
    });
    let listener = bind_unix(&path).expect("bind");
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(listener, hub.clone(), shutdown.clone()));
    Fixture {
        hub,
        preamble,
        path,
        shutdown,
        server,
        _status_tx: status_tx,
        _dir: dir,
    }
}

impl Fixture {
    /// As the ingest loop does: the writer observes the packet, then it is
    /// published.
    fn publish(&self, packet: Arc<OutPacket>) {
        self.preamble.lock().expect("preamble").observe_packet(
            packet.role,
            packet.machine_raw_id,
            packet.seq,
            &packet.bytes,
        );
        self.hub.publish(packet);
    }

    async fn request(&self, line: &str) -> UnixStream {
        let mut s = UnixStream::connect(&self.path).await.expect("connect");
        s.write_all(line.as_bytes()).await.expect("send");
        s
    }

    /// Waits until `n` tail clients are subscribed.
    async fn subscribers(&self, n: usize) {
        for _ in 0..500 {
            if self.hub.packets.receiver_count() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("{n} subscribers did not arrive");
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.server)
            .await
            .expect("server stops at shutdown")
            .expect("server task");
    }
}

async fn read_lines(stream: UnixStream, n: usize) -> Vec<String> {
    let mut lines = BufReader::new(stream).lines();
    let mut out = Vec::new();
    while out.len() < n {
        let line = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .expect("line in time")
            .expect("read");
        match line {
            Some(l) => out.push(l),
            None => break,
        }
    }
    out
}

#[tokio::test]
async fn status_round_trip() {
    let f = start(16).await;
    let s = f.request("{\"cmd\":\"status\"}\n").await;
    let lines = read_lines(s, 2).await;
    assert_eq!(lines.len(), 1, "one line, then the daemon closes");
    let got: StatusReport = serde_json::from_str(&lines[0]).expect("StatusReport JSON");
    assert_eq!(got, report());
    f.stop().await;
}

#[tokio::test]
async fn bad_request_gets_an_error_line() {
    let f = start(16).await;
    let s = f.request("{\"cmd\":\"reboot\"}\n").await;
    let lines = read_lines(s, 2).await;
    assert_eq!(lines.len(), 1);
    let v: serde_json::Value = serde_json::from_str(&lines[0]).expect("json");
    assert!(
        v["error"].as_str().expect("error").contains("bad request"),
        "{v}"
    );
    f.stop().await;
}

#[tokio::test]
async fn tail_jsonl_has_the_design_fields() {
    let f = start(64).await;
    let s = f.request("{\"cmd\":\"tail\",\"format\":\"jsonl\"}\n").await;
    f.subscribers(1).await;
    f.hub
        .publish(out_packet(1_000, 7, Some("phone \"1\""), 3, Role::Data));
    f.hub
        .publish(out_packet(2_000, 0, None, 1, Role::ClockSnapshot));
    let lines = read_lines(s, 2).await;
    let a: serde_json::Value = serde_json::from_str(&lines[0]).expect("json");
    assert_eq!(
        a,
        serde_json::json!({"ts": 1000, "machine": "phone \"1\"", "raw_id": 7, "clock": 6,
            "clock_ts": 1005, "seq": 3, "src": "phone \"1\"/synthetic", "kind": "track_event",
            "size": 10, "err_ns": 1500})
    );
    let b: serde_json::Value = serde_json::from_str(&lines[1]).expect("json");
    assert_eq!(b["machine"], serde_json::Value::Null);
    assert_eq!(b["kind"], "clock_snapshot");
    assert_eq!(b["ts"], 2000);
    f.stop().await;
}

#[tokio::test]
async fn tail_machine_filter() {
    let f = start(64).await;
    let s = f
        .request("{\"cmd\":\"tail\",\"format\":\"jsonl\",\"machines\":[\"vm\",\"host\"]}\n")
        .await;
    f.subscribers(1).await;
    for i in 0..30 {
        let (id, name) = [(0, None), (7, Some("phone")), (9, Some("vm"))][i % 3];
        f.publish(out_packet(i as i64, id, name, 1, Role::Data));
    }
    f.publish(out_packet(99, 9, Some("vm"), 1, Role::Data));
    let lines = read_lines(s, 21).await;
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["raw_id"]
                .as_u64()
                .expect("id")
        })
        .collect();
    assert_eq!(ids.len(), 21);
    assert!(ids.iter().all(|&id| id == 0 || id == 9), "{ids:?}");
    f.stop().await;
}

#[tokio::test]
async fn text_lag_notice_then_the_stream_goes_on() {
    let f = start(4).await;
    let s = f.request("{\"cmd\":\"tail\",\"time\":\"boot\"}\n").await;
    f.subscribers(1).await;
    // The client task cannot run while this loop does (one-thread runtime),
    // so it falls 996 packets behind.
    for i in 0..1000 {
        f.hub
            .publish(out_packet(i * 1_000_000_000 + 5, 0, None, 1, Role::Data));
    }
    let lines = read_lines(s, 5).await;
    assert_eq!(lines[0], "# tracesync: lagged, 996 packets skipped");
    assert!(lines[1].starts_with("996.000000005 host "), "{}", lines[1]);
    assert!(lines[4].starts_with("999.000000005 host "), "{}", lines[4]);
    assert!(lines[4].contains("track_event"), "{}", lines[4]);
    assert!(lines[4].contains("±1.5us"), "{}", lines[4]);
    f.stop().await;
}

/// A client that never reads blocks only its own task: the sender finishes
/// 100k packets, and a reading client gets every packet or a lag notice
/// counting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_client_does_not_block_the_sender() {
    let f = start(1024).await;
    let stuck = f.request("{\"cmd\":\"tail\",\"format\":\"text\"}\n").await;
    let reader = f.request("{\"cmd\":\"tail\",\"format\":\"jsonl\"}\n").await;
    f.subscribers(2).await;
    const N: i64 = 100_000;
    let reading = tokio::spawn(async move {
        let mut lines = BufReader::new(reader).lines();
        let (mut records, mut lagged) = (0u64, 0u64);
        loop {
            let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
                .await
                .expect("reader gets data")
                .expect("read")
                .expect("stream open");
            let v: serde_json::Value = serde_json::from_str(&line).expect("json");
            if let Some(n) = v["lagged"].as_u64() {
                lagged += n;
                continue;
            }
            records += 1;
            if v["ts"] == N - 1 {
                return (records, lagged);
            }
        }
    });
    let sender = tokio::time::timeout(Duration::from_secs(30), async {
        for i in 0..N {
            f.publish(out_packet(i, 0, None, 1, Role::Data));
            if i % 1000 == 0 {
                tokio::task::yield_now().await;
            }
        }
    });
    sender
        .await
        .expect("the sender is never blocked by the stuck client");
    let (records, lagged) = reading.await.expect("reader task");
    assert!(records > 0);
    assert_eq!(
        records + lagged,
        N as u64,
        "every packet delivered or counted"
    );
    // The stuck client, once it reads, learns what it missed.
    let mut lines = BufReader::new(stuck).lines();
    let mut saw_notice = false;
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await
    {
        if line.starts_with("# tracesync: lagged, ") {
            saw_notice = true;
            break;
        }
    }
    assert!(saw_notice, "the stuck client gets a lag notice");
    f.stop().await;
}

fn trace_packets(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut reader = TraceReader::new();
    reader.push(bytes);
    let mut out = Vec::new();
    while let Ok(Some(p)) = reader.next_packet() {
        out.push(p.bytes.to_vec());
    }
    out
}

#[tokio::test]
async fn perfetto_tail_opens_with_the_preamble() {
    let f = start(64).await;
    let before = [
        out_packet(1, 0, None, 1, Role::SystemInfo),
        out_packet(2, 7, Some("phone"), 1, Role::SystemInfo),
        out_packet(3, 7, Some("phone"), 1, Role::ClockSnapshot),
        out_packet(4, 7, Some("phone"), 1, Role::ClockSnapshot),
        out_packet(5, 7, Some("phone"), 9, Role::IncrementalStateCleared),
        out_packet(6, 7, Some("phone"), 9, Role::IncrementalState),
        out_packet(7, 7, Some("phone"), 9, Role::Data),
        out_packet(8, 7, Some("phone"), 1, Role::SyncPoint),
    ];
    for p in &before {
        f.publish(Arc::clone(p));
    }
    let mut s = f
        .request("{\"cmd\":\"tail\",\"format\":\"perfetto\"}\n")
        .await;
    f.subscribers(1).await;
    let after = out_packet(9, 7, Some("phone"), 9, Role::Data);
    f.publish(Arc::clone(&after));
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    while trace_packets(&bytes).len() < 7 {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
            .await
            .expect("packets in time")
            .expect("read");
        assert!(n > 0, "stream ended early");
        bytes.extend_from_slice(&chunk[..n]);
    }
    let got = trace_packets(&bytes);
    // As a rolled file starts: the latest SystemInfo, snapshot and sync
    // point, then the sequence's incremental state replayed without its
    // events and timestamps (they went out before the tail started).
    let whole = |p: &OutPacket| p.bytes.to_vec();
    let replayed = |p: &OutPacket| strip_for_replay(&p.bytes.to_bytes()).to_vec();
    let want: Vec<Vec<u8>> = vec![
        whole(&before[0]),
        whole(&before[1]),
        whole(&before[3]),
        whole(&before[7]),
        replayed(&before[4]),
        replayed(&before[5]),
        whole(&after),
    ];
    assert_eq!(got, want);
    f.stop().await;
}

#[tokio::test]
async fn a_filtered_perfetto_tail_gets_only_its_machines_preamble() {
    let f = start(64).await;
    let host = out_packet(1, 0, None, 1, Role::SystemInfo);
    let phone = out_packet(2, 7, Some("phone"), 2, Role::SystemInfo);
    let phone_state = out_packet(3, 7, Some("phone"), 9, Role::IncrementalStateCleared);
    for p in [&host, &phone, &phone_state] {
        f.publish(Arc::clone(p));
    }
    // The status report names raw id 7 "phone": the filter matches by name.
    let mut s = f
        .request("{\"cmd\":\"tail\",\"format\":\"perfetto\",\"machines\":[\"phone\"]}\n")
        .await;
    f.subscribers(1).await;
    let after = out_packet(4, 7, Some("phone"), 9, Role::Data);
    f.publish(Arc::clone(&after));
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    while trace_packets(&bytes).len() < 3 {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
            .await
            .expect("packets in time")
            .expect("read");
        assert!(n > 0, "stream ended early");
        bytes.extend_from_slice(&chunk[..n]);
    }
    let want = vec![
        phone.bytes.to_vec(),
        strip_for_replay(&phone_state.bytes.to_bytes()).to_vec(),
        after.bytes.to_vec(),
    ];
    assert_eq!(trace_packets(&bytes), want);
    f.stop().await;
}

#[tokio::test]
async fn perfetto_tail_ends_with_a_notice_when_it_lags() {
    let f = start(4).await;
    let mut s = f
        .request("{\"cmd\":\"tail\",\"format\":\"perfetto\"}\n")
        .await;
    f.subscribers(1).await;
    for i in 0..100 {
        f.publish(out_packet(i, 0, None, 1, Role::Data));
    }
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut bytes))
        .await
        .expect("the daemon ends the stream")
        .expect("read");
    assert_eq!(bytes, lag_notice_record(96));
    f.stop().await;
}

#[tokio::test]
async fn clients_beyond_the_limit_are_refused() {
    let f = start(16).await;
    let mut held = Vec::new();
    for _ in 0..MAX_CLIENTS {
        held.push(f.request("{\"cmd\":\"tail\"}\n").await);
    }
    f.subscribers(MAX_CLIENTS).await;
    let s = f.request("{\"cmd\":\"tail\"}\n").await;
    let lines = read_lines(s, 1).await;
    assert!(
        lines[0].contains("too many control clients"),
        "{}",
        lines[0]
    );
    // A status request takes no tail place: still answered.
    let s = f.request("{\"cmd\":\"status\"}\n").await;
    let lines = read_lines(s, 1).await;
    let got: StatusReport = serde_json::from_str(&lines[0]).expect("a status line");
    assert_eq!(got, report());
    drop(held);
    f.stop().await;
}

#[tokio::test]
async fn idle_clients_never_keep_status_out() {
    use super::waiting::MAX_WAITING;
    let f = start(16).await;
    // Twice as many clients as may wait, none sending a request.
    let mut idle = Vec::new();
    for _ in 0..2 * MAX_WAITING {
        idle.push(UnixStream::connect(&f.path).await.expect("connect"));
    }
    let started = std::time::Instant::now();
    for _ in 0..10 {
        let s = f.request("{\"cmd\":\"status\"}\n").await;
        let lines = read_lines(s, 1).await;
        let got: StatusReport = serde_json::from_str(&lines[0]).expect("a status line");
        assert_eq!(got, report());
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The oldest idle clients were closed (EOF), the newest are still open.
    let mut buf = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), idle[0].read(&mut buf))
        .await
        .expect("the oldest idle client is closed");
    assert!(matches!(closed, Ok(0)), "{closed:?}");
    let newest = idle.last_mut().expect("idle clients");
    let open = tokio::time::timeout(Duration::from_millis(200), newest.read(&mut buf)).await;
    assert!(
        open.is_err(),
        "the newest idle client still waits: {open:?}"
    );
    drop(idle);
    f.stop().await;
}

#[tokio::test]
async fn tcp_listener_speaks_the_same_protocol() {
    let (_status_tx, status_rx) = watch::channel(Arc::new(report()));
    let (hub, _requests) = ControlHub::new(16, status_rx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve_tcp(listener, hub, shutdown.clone()));
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"{\"cmd\":\"status\"}\n").await.expect("send");
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).await.expect("read");
    let got: StatusReport = serde_json::from_str(&line).expect("json");
    assert_eq!(got, report());
    shutdown.cancel();
    server.await.expect("server stops");
}

#[test]
fn text_tail_lines_escape_control_characters_in_names() {
    use tracesync_core::control::{MachineFilter, PacketFormatter};
    let packet = out_packet(1_000, 9, Some("vm\n1\u{1b}[31m"), 3, Role::Data);
    let mut formatter = PacketFormatter::new(TailFormat::Text, MachineFilter::new(&[]));
    let mut out = Vec::new();
    assert!(formatter.write(&packet, &mut out));
    let text = String::from_utf8(out).expect("utf-8");
    assert_eq!(text.lines().count(), 1, "{text:?}");
    assert!(text.contains(" vm\\n1\\u{1b}[31m "), "{text:?}");
    assert!(
        text.ends_with("  vm\\n1\\u{1b}[31m/synthetic\n"),
        "{text:?}"
    );
}

#[tokio::test]
async fn text_tail_shows_wall_clock_time_by_default() {
    let f = start(64).await;
    let s = f.request("{\"cmd\":\"tail\"}\n").await;
    f.subscribers(1).await;
    let boot = i64::try_from(tracesync_common::clock::boottime_ns()).expect("boot");
    f.publish(out_packet(boot, 0, None, 1, Role::Data));
    let lines = read_lines(s, 1).await;
    // The daemon's own REALTIME - BOOTTIME: within a second of now.
    let field = lines[0].split(' ').next().expect("field");
    let wall = time::OffsetDateTime::parse(field, &time::format_description::well_known::Rfc3339)
        .expect("RFC 3339");
    let now = time::OffsetDateTime::now_utc();
    assert!((now - wall).abs() < time::Duration::SECOND, "{}", lines[0]);
    assert!(field.ends_with("+00:00") && field.len() == 32, "{field}");
    f.stop().await;
}
