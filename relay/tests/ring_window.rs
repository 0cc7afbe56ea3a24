//! The real `tracesync-relay` binary in ring mode against an in-test
//! daemon: nothing but heartbeats until a Trigger, then exactly the
//! window's packets (and the state before them) in Window frames; the
//! window is shipped again after a reconnect and after a kill -9, and is
//! gone once acknowledged.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use tracesync_protocol::relay::PROTOCOL_VERSION;
use tracesync_protocol::relay::v1::{self, Frame, frame::Body};
use tracesync_protocol::scan::scan_packet;
use tracesync_protocol::wire;
use tracesync_relay::uplink::FrameCodec;

type Conn = Framed<TcpStream, FrameCodec>;

const MARK: &[u8] = b"tracesync-ring-test";

fn append_packets(path: &Path, range: std::ops::Range<u64>) {
    let mut out = Vec::new();
    for n in range {
        let mut body = Vec::new();
        wire::put_varint_field(&mut body, 8, 1_000_000 + n);
        wire::put_varint_field(&mut body, 10, 1);
        wire::put_len_field(&mut body, 11, MARK);
        wire::put_trace_packet(&mut out, &body);
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(&out).unwrap();
}

struct RelayProc(Child);

impl Drop for RelayProc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn start_relay(host: &str, dir: &Path) -> RelayProc {
    RelayProc(
        Command::new(env!("CARGO_BIN_EXE_tracesync-relay"))
            .args(["--host", host, "--name", "ring-test", "--linger-ms", "5"])
            .args(["--tls", "off", "--mode", "ring", "--ring-seconds", "60"])
            .args(["--ring-bytes", "16777216"])
            .arg("--spool")
            .arg(dir.join("spool"))
            .arg("--source")
            .arg(format!("file:{}", dir.join("trace.pftrace").display()))
            .env("TRACESYNC_TOKEN", "secret")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

async fn next(conn: &mut Conn) -> Option<Body> {
    let frame = tokio::time::timeout(Duration::from_secs(10), conn.next())
        .await
        .expect("relay went quiet")?;
    frame.ok()?.body
}

async fn accept(listener: &TcpListener) -> Conn {
    let (stream, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .expect("relay did not connect")
        .unwrap();
    let mut conn = Framed::new(stream, FrameCodec::default());
    let Some(Body::Hello(hello)) = next(&mut conn).await else {
        panic!("no Hello");
    };
    assert_eq!(hello.mode, "ring");
    conn.send(Frame {
        body: Some(Body::Welcome(v1::Welcome {
            protocol_version: PROTOCOL_VERSION,
            acked_through_batch: 0,
            session_id: 1,
            sync_udp_port: 0,
            probe_key: Default::default(),
            takes_windows: true,
            takes_trigger_requests: false,
        })),
    })
    .await
    .unwrap();
    conn
}

/// Waits for the relay's next heartbeat; no Batch ever comes.
async fn heartbeat(conn: &mut Conn) {
    for _ in 0..1000 {
        match next(conn).await {
            Some(Body::Heartbeat(_)) => return,
            Some(Body::Batch(_)) => panic!("a relay in ring mode sent a Batch"),
            Some(_) => {}
            None => panic!("relay closed"),
        }
    }
    panic!("no heartbeat among 1000 frames");
}

/// Receives one whole window: its test packets' numbers and its preamble.
async fn receive_window(conn: &mut Conn, id: u64) -> (Vec<u64>, usize) {
    let mut numbers = Vec::new();
    let mut preamble = 0;
    let mut expected_part = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no whole window within 20 s"
        );
        match next(conn).await {
            Some(Body::Window(window)) => {
                assert_eq!(window.trigger_id, id);
                assert_eq!(window.part, expected_part);
                if expected_part == 0 {
                    assert_eq!(
                        window.trigger.as_ref().map(|t| t.name.as_str()),
                        Some("crash")
                    );
                    preamble = window.preamble.len();
                }
                expected_part += 1;
                for packet in &window.packets {
                    if packet.windows(MARK.len()).any(|w| w == MARK) {
                        let fields = scan_packet(packet).unwrap();
                        numbers.push(fields.timestamp.unwrap_or(0) - 1_000_000);
                    }
                }
                if window.last {
                    return (numbers, preamble);
                }
            }
            Some(Body::Batch(_)) => panic!("a relay in ring mode sent a Batch"),
            Some(_) => {}
            None => panic!("relay closed"),
        }
    }
}

#[tokio::test]
async fn ring_mode_ships_the_window_only_and_keeps_it_until_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.pftrace");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();

    append_packets(&trace, 0..100);
    let mut relay = start_relay(&host, dir.path());
    let mut conn = accept(&listener).await;
    heartbeat(&mut conn).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The relay shares this test's kernel: its BOOTTIME is ours.
    let from = tracesync_common::clock::boottime_ns();
    append_packets(&trace, 100..200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let to = tracesync_common::clock::boottime_ns();
    let trigger = v1::Trigger {
        id: 0x42,
        name: "crash".into(),
        host_time_ns: 0,
        before_ns: 0,
        after_ns: 0,
        relay_from_ns: from,
        relay_to_ns: to,
    };
    conn.send(Frame {
        body: Some(Body::Trigger(trigger.clone())),
    })
    .await
    .unwrap();
    // Once the window is collected (its end plus the 2 s source lag),
    // later packets are outside it.
    let (numbers, preamble) = receive_window(&mut conn, 0x42).await;
    append_packets(&trace, 200..300);
    assert_eq!(numbers, (100..200).collect::<Vec<_>>());
    assert!(preamble >= 1, "the relay's own state before the window");

    // A new connection: the window again, from its first part.
    drop(conn);
    let mut conn = accept(&listener).await;
    let (again, _) = receive_window(&mut conn, 0x42).await;
    assert_eq!(again, numbers);

    // Killed before the daemon acknowledged: shipped after the restart.
    relay.0.kill().unwrap();
    relay.0.wait().unwrap();
    drop(conn);
    let _relay = start_relay(&host, dir.path());
    let mut conn = accept(&listener).await;
    let (after_restart, _) = receive_window(&mut conn, 0x42).await;
    assert_eq!(after_restart, numbers);
    conn.send(Frame {
        body: Some(Body::WindowAck(v1::WindowAck { trigger_id: 0x42 })),
    })
    .await
    .unwrap();
    // Acknowledged: the window's file goes.
    let windows = dir.path().join("spool").join("windows");
    for _ in 0..100 {
        heartbeat(&mut conn).await;
        let left = std::fs::read_dir(&windows).map_or(0, |d| d.count());
        if left == 0 {
            return;
        }
    }
    panic!("the acknowledged window's file stayed");
}

#[tokio::test]
async fn a_relay_killed_before_the_window_is_whole_still_ships_it_after_its_restart() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.pftrace");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();

    append_packets(&trace, 0..100);
    let mut relay = start_relay(&host, dir.path());
    let mut conn = accept(&listener).await;
    heartbeat(&mut conn).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let from = tracesync_common::clock::boottime_ns();
    append_packets(&trace, 100..200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let to = tracesync_common::clock::boottime_ns();
    conn.send(Frame {
        body: Some(Body::Trigger(v1::Trigger {
            id: 0x43,
            name: "crash".into(),
            relay_from_ns: from,
            relay_to_ns: to,
            ..v1::Trigger::default()
        })),
    })
    .await
    .unwrap();
    heartbeat(&mut conn).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Killed inside the window's 2 s of source lag: the trigger and the
    // batches' times are on disk, the window is not collected yet.
    relay.0.kill().unwrap();
    relay.0.wait().unwrap();
    drop(conn);
    let _relay = start_relay(&host, dir.path());
    let mut conn = accept(&listener).await;
    let (numbers, preamble) = receive_window(&mut conn, 0x43).await;
    assert_eq!(numbers, (100..200).collect::<Vec<_>>());
    assert!(preamble >= 1);
}
