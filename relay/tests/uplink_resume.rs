//! The uplink against a tiny in-test daemon on loopback: Hello fields,
//! contiguous batches, acks, a dropped connection and a relay restart,
//! with nothing lost and nothing twice.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::PROTOCOL_VERSION;
use tracesync_protocol::relay::v1::{self, Frame, frame::Body};
use tracesync_protocol::scan::scan_packet;
use tracesync_protocol::wire;
use tracesync_relay::clocks::{SharedClock, SystemClock};
use tracesync_relay::session::SessionConfig;
use tracesync_relay::spool::{Incoming, Spool, SpoolConfig, WhenFull};
use tracesync_relay::uplink::{self, FrameCodec, HelloInfo, UplinkConfig, UplinkExit};

type Conn = Framed<TcpStream, FrameCodec>;

fn packet(n: u64) -> Bytes {
    let mut out = Vec::new();
    wire::put_varint_field(&mut out, 10, 2 + n % 3);
    wire::put_varint_field(&mut out, 8, n);
    wire::put_len_field(&mut out, 11, &[0x5a; 100]);
    out.into()
}

fn counter_of(packet: &[u8]) -> u64 {
    scan_packet(packet).unwrap().timestamp.unwrap()
}

fn spool_config(dir: &std::path::Path) -> SpoolConfig {
    let mut config = SpoolConfig::new(dir.to_path_buf(), 8 << 20, 64 << 20, WhenFull::Block);
    config.batch_bytes = 2048; // many small batches
    config.linger = Duration::from_millis(2);
    config
}

fn uplink_config(host: String) -> UplinkConfig {
    let hello = HelloInfo {
        token: "secret".into(),
        boot_id: "boot-1".into(),
        machine_name: "vm-a".into(),
        machine_raw_id: 77,
    };
    let mut config = UplinkConfig::new(host, hello);
    config.session = SessionConfig {
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(50),
        window_batches: 8,
        ..SessionConfig::default()
    };
    config.drain_timeout = Duration::from_secs(3);
    config.intake_grace = Duration::from_millis(200);
    config
}

struct Relay {
    tx: mpsc::Sender<Incoming>,
    stop: CancellationToken,
    task: JoinHandle<(UplinkExit, Spool)>,
}

fn start_relay(dir: &std::path::Path, host: String) -> Relay {
    let (spool, issues) = Spool::open(spool_config(dir)).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    let (tx, rx) = mpsc::channel(16);
    let stop = CancellationToken::new();
    let clock: SharedClock = Arc::new(SystemClock::new());
    let task = tokio::spawn(uplink::run(
        uplink_config(host),
        clock,
        spool,
        rx,
        |m: Incoming| m,
        Box::new(|_, _| {}),
        stop.clone(),
    ));
    Relay { tx, stop, task }
}

/// Sends packets `from..to` in groups of 7, cursor = the next counter.
async fn produce(tx: &mpsc::Sender<Incoming>, from: u64, to: u64) {
    let mut n = from;
    while n < to {
        let end = (n + 7).min(to);
        let packets = (n..end).map(packet).collect();
        tx.send(Incoming {
            source: 1,
            packets,
            cursor: end.to_string().into(),
        })
        .await
        .unwrap();
        n = end;
        if n.is_multiple_of(70) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

async fn next_frame(conn: &mut Conn) -> Body {
    let frame = tokio::time::timeout(Duration::from_secs(10), conn.next())
        .await
        .expect("relay went quiet")
        .expect("relay closed")
        .expect("bad frame");
    frame.body.expect("empty frame")
}

async fn send(conn: &mut Conn, body: Body) {
    conn.send(Frame { body: Some(body) }).await.unwrap();
}

/// The in-test daemon's durable output: packets of acked batches.
#[derive(Default)]
struct Daemon {
    acked_through: u64,
    next_index: u64,
    /// (seq, first index, packets) received but not yet acked.
    unacked: Vec<v1::Batch>,
    written: Vec<u64>,
}

impl Daemon {
    async fn accept(
        &self,
        listener: &TcpListener,
        expect_instance: Option<u64>,
    ) -> (Conn, v1::Hello) {
        let (stream, _) = listener.accept().await.unwrap();
        let mut conn = Framed::new(stream, FrameCodec::default());
        let Body::Hello(hello) = next_frame(&mut conn).await else {
            panic!("first frame is not Hello");
        };
        assert_eq!(hello.protocol_version, PROTOCOL_VERSION);
        assert_eq!(hello.token, "secret");
        assert_eq!(hello.boot_id, "boot-1");
        assert_eq!(hello.machine_name, "vm-a");
        assert_eq!(hello.machine_raw_id, 77);
        assert_ne!(hello.relay_instance_id, 0);
        assert!(hello.clocks.is_some_and(|c| c.boottime_ns > 0));
        if let Some(id) = expect_instance {
            assert_eq!(hello.relay_instance_id, id);
        }
        assert!(hello.oldest_unacked_batch <= self.acked_through + 1);
        send(
            &mut conn,
            Body::Welcome(v1::Welcome {
                protocol_version: PROTOCOL_VERSION,
                acked_through_batch: self.acked_through,
                session_id: 9,
                sync_udp_port: 0,
                probe_key: Default::default(),
                takes_windows: false,
                takes_trigger_requests: false,
            }),
        )
        .await;
        (conn, hello)
    }

    /// Receives until `count` batches arrived (heartbeats are skipped).
    async fn receive(&mut self, conn: &mut Conn, count: usize, ack_every: usize) {
        let mut expected_seq = self
            .unacked
            .last()
            .map_or(self.acked_through + 1, |b| b.seq + 1);
        for received in 1..=count {
            let batch = loop {
                match next_frame(conn).await {
                    Body::Batch(batch) => break batch,
                    Body::Heartbeat(_) => continue,
                    other => panic!("unexpected {other:?}"),
                }
            };
            assert_eq!(batch.seq, expected_seq, "batch seqs are contiguous");
            assert!(batch.clocks.is_some());
            expected_seq += 1;
            let first = self.unacked.last().map_or(self.next_index, |b| {
                b.first_packet_index + b.packets.len() as u64
            });
            assert_eq!(
                batch.first_packet_index, first,
                "packet indices are contiguous"
            );
            self.unacked.push(batch);
            if received % ack_every == 0 {
                self.ack(conn).await;
            }
        }
    }

    async fn ack(&mut self, conn: &mut Conn) {
        for batch in self.unacked.drain(..) {
            self.written
                .extend(batch.packets.iter().map(|p| counter_of(p)));
            self.acked_through = batch.seq;
            self.next_index = batch.first_packet_index + batch.packets.len() as u64;
        }
        send(
            conn,
            Body::Ack(v1::Ack {
                through_batch: self.acked_through,
            }),
        )
        .await;
    }

    /// A crash: what was received but not acked is gone.
    fn forget_unacked(&mut self) {
        self.unacked.clear();
    }

    fn assert_exactly(&self, total: u64) {
        assert_eq!(self.written.len() as u64, total, "count");
        for (i, n) in self.written.iter().enumerate() {
            assert_eq!(*n, i as u64, "packet {i} lost, repeated or out of order");
        }
    }
}

#[tokio::test]
async fn resumes_after_a_dropped_connection_with_nothing_lost_or_twice() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let relay = start_relay(dir.path(), host);
    let mut daemon = Daemon::default();
    let producer = {
        let tx = relay.tx.clone();
        tokio::spawn(async move { produce(&tx, 0, 3000).await })
    };

    let (mut conn, hello) = daemon.accept(&listener, None).await;
    assert_eq!(hello.oldest_unacked_batch, 1);
    let instance = hello.relay_instance_id;
    daemon.receive(&mut conn, 20, 4).await;
    daemon.receive(&mut conn, 3, 100).await; // received, never acked
    drop(conn);
    daemon.forget_unacked();

    let (mut conn, hello) = daemon.accept(&listener, Some(instance)).await;
    assert!(hello.oldest_unacked_batch >= 1);
    producer.await.unwrap();
    // The rest: until every packet is acked.
    while daemon.written.len() < 3000 {
        daemon.receive(&mut conn, 1, 1).await;
    }
    daemon.assert_exactly(3000);

    // Idle: heartbeats with the last batch sent.
    let Body::Heartbeat(heartbeat) = next_frame(&mut conn).await else {
        panic!("expected a heartbeat when idle");
    };
    assert_eq!(heartbeat.last_batch_sent, daemon.acked_through);

    relay.stop.cancel();
    drop(relay.tx);
    let (exit, spool) = relay.task.await.unwrap();
    assert_eq!(exit, UplinkExit::Drained);
    assert_eq!(spool.oldest_unacked(), daemon.acked_through + 1);
}

#[tokio::test]
async fn a_restarted_relay_resends_what_was_not_acked() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::default();

    let relay = start_relay(dir.path(), host.clone());
    produce(&relay.tx, 0, 1000).await;
    let (mut conn, hello) = daemon.accept(&listener, None).await;
    let instance = hello.relay_instance_id;
    daemon.receive(&mut conn, 10, 5).await;
    daemon.receive(&mut conn, 2, 100).await;
    // Shut the relay down while the daemon stops acking.
    relay.stop.cancel();
    drop(relay.tx);
    let reader = tokio::spawn(async move { while conn.next().await.is_some() {} });
    let (exit, spool) = relay.task.await.unwrap();
    assert!(matches!(exit, UplinkExit::DrainTimedOut { .. }), "{exit:?}");
    let cursor = spool.resume_cursor(1).unwrap();
    assert_eq!(cursor, "1000", "all produced packets were spooled");
    drop(spool);
    reader.await.unwrap();
    daemon.forget_unacked();

    // Same spool, new process: same instance, resumes after the last ack.
    let relay = start_relay(dir.path(), host);
    // Acks are not persisted by the relay: Hello may start earlier than the
    // daemon's ack point (accept() checks it is not later), and the
    // Welcome's acked_through decides where sending resumes.
    let (mut conn, _) = daemon.accept(&listener, Some(instance)).await;
    produce(&relay.tx, 1000, 1500).await;
    while daemon.written.len() < 1500 {
        daemon.receive(&mut conn, 1, 1).await;
    }
    daemon.assert_exactly(1500);
    relay.stop.cancel();
    drop(relay.tx);
    let (exit, _) = relay.task.await.unwrap();
    assert_eq!(exit, UplinkExit::Drained);
}

#[tokio::test]
async fn an_auth_refusal_ends_the_uplink() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let relay = start_relay(dir.path(), host);
    let (stream, _) = listener.accept().await.unwrap();
    let mut conn = Framed::new(stream, FrameCodec::default());
    assert!(matches!(next_frame(&mut conn).await, Body::Hello(_)));
    send(
        &mut conn,
        Body::Refused(v1::Refused {
            reason: "bad token; set the relay's --token to the daemon's".into(),
            code: "bad_token".into(),
        }),
    )
    .await;
    let (exit, _) = tokio::time::timeout(Duration::from_secs(5), relay.task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(exit, UplinkExit::Refused { ref reason } if reason.contains("bad token")),
        "{exit:?}"
    );
}

#[tokio::test]
async fn reconnects_after_a_busy_refusal() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let relay = start_relay(dir.path(), host);
    let (stream, _) = listener.accept().await.unwrap();
    let mut conn = Framed::new(stream, FrameCodec::default());
    assert!(matches!(next_frame(&mut conn).await, Body::Hello(_)));
    send(
        &mut conn,
        Body::Refused(v1::Refused {
            reason: "too many relays (32); try later".into(),
            code: "max_relays".into(),
        }),
    )
    .await;
    drop(conn);
    let daemon = Daemon::default();
    let (_conn, _) = tokio::time::timeout(Duration::from_secs(5), daemon.accept(&listener, None))
        .await
        .expect("no reconnect");
    relay.stop.cancel();
}
