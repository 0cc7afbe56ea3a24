//! Hostile relays against the daemon's real session code, live core and
//! rolling writer.
//!
//! - `relay_frames_session` (fuzz target, see `tracesync_tests::fuzz`):
//!   each case is one loopback connection to an in-process server that
//!   sends an arbitrary sequence of frames (valid-ish Hello/Batch/Heartbeat
//!   with edge fields, frames a relay must not send, undecodable frames,
//!   huge length prefixes, raw garbage). The daemon must answer only with
//!   well-formed frames, give every refusal a code and a reason, close the
//!   connection, and keep serving: after all cases a good relay is welcomed
//!   and acked, and the server shuts down cleanly (no panicked task or
//!   ingest thread).
//! - limit tests (limits.rs): a batch of too many packets, a sequence flood.
//! - `bad_relay_is_refused_while_a_good_relay_loses_nothing` (real_binaries.rs):
//!   the real binaries; a raw TCP client sends garbage after a valid Hello while a
//!   synthetic relay streams.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream as StdTcpStream};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::timeout;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracesync_core::live::{LiveConfig, LiveCore, OutPacket};
use tracesync_core::status::StatusReport;
use tracesync_core::sync::SyncUpdate;
use tracesync_daemon::rolling::{RollingConfig, RollingWriter};
use tracesync_daemon::server::ingest::IngestSettings;
use tracesync_daemon::server::run::{Parts, Running, start};
use tracesync_daemon::server::{NoProbes, SessionSettings, listener};
use tracesync_protocol::relay::{MAX_BATCH_PACKETS, MAX_FRAME_BYTES, PROTOCOL_VERSION, v1};
use tracesync_tests::fuzz::{self, Node, encode, message, mutate, mutations, plausible_packet};

mod limits;
mod real_binaries;

const BIN: &str = "fuzz_session";

// ---- an in-process daemon ----

struct Server {
    running: Running<NoProbes>,
    shutdown: CancellationToken,
    status: watch::Receiver<Arc<StatusReport>>,
    _sync: mpsc::Sender<SyncUpdate>,
    _dir: tempfile::TempDir,
}

async fn serve(config: LiveConfig) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let (writer, recovered) =
        RollingWriter::open(RollingConfig::new(dir.path())).expect("rolling writer");
    let core = LiveCore::new(config, recovered);
    let (sync, sync_updates) = mpsc::channel(4);
    let (status_tx, status) = watch::channel(Arc::new(StatusReport::default()));
    let parts = Parts {
        core,
        writer,
        probes: NoProbes,
        sync_updates,
        packets: broadcast::channel::<Arc<OutPacket>>(16).0,
        status: status_tx,
        preamble_requests: None,
        trigger_requests: None,
    };
    let shutdown = CancellationToken::new();
    let settings = SessionSettings {
        max_relays: 64,
        hello_timeout: Duration::from_secs(2),
        max_frame_bytes: MAX_FRAME_BYTES,
        frame_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(60),
        sync_udp_port: 0,
        final_ack_timeout: Duration::from_secs(2),
        tls: None,
    };
    let listener = listener::bind_data("127.0.0.1:0".parse().expect("address")).expect("bind");
    let mut ingest = IngestSettings::new(Duration::from_millis(10));
    ingest.status_every = Duration::from_millis(20);
    let running = start(listener, settings, None, ingest, parts, shutdown.clone()).expect("start");
    Server {
        running,
        shutdown,
        status,
        _sync: sync,
        _dir: dir,
    }
}

impl Server {
    async fn stop(self) {
        self.shutdown.cancel();
        let summary = self.running.stopped().await;
        assert!(summary.is_ok(), "server did not stop cleanly: {summary:?}");
    }

    /// The latest status with `code` counted at least `n` times.
    async fn wait_refused(&mut self, code: &str, n: u64) -> StatusReport {
        for _ in 0..500 {
            let report = self.status.borrow_and_update().clone();
            if report.relays_refused.get(code).copied().unwrap_or(0) >= n {
                return (*report).clone();
            }
            let _ = timeout(Duration::from_millis(20), self.status.changed()).await;
        }
        panic!(
            "status never counted {n} x {code}: {:?}",
            self.status.borrow().relays_refused
        );
    }
}

fn hello(instance: u64, raw_id: u32, name: &str) -> v1::frame::Body {
    v1::frame::Body::Hello(v1::Hello {
        protocol_version: PROTOCOL_VERSION,
        token: String::new(),
        relay_instance_id: instance,
        boot_id: "boot".into(),
        machine_name: name.into(),
        machine_raw_id: raw_id,
        oldest_unacked_batch: 1,
        clocks: None,
        mode: String::new(),
    })
}

fn frame(body: v1::frame::Body) -> Bytes {
    Bytes::from(v1::Frame { body: Some(body) }.encode_to_vec())
}

type Link = Framed<TcpStream, LengthDelimitedCodec>;

async fn dial(addr: SocketAddr) -> Link {
    let stream = TcpStream::connect(addr).await.expect("connect");
    Framed::new(
        stream,
        LengthDelimitedCodec::builder()
            .max_frame_length(MAX_FRAME_BYTES)
            .new_codec(),
    )
}

async fn recv(link: &mut Link) -> Option<v1::frame::Body> {
    let bytes = timeout(Duration::from_secs(10), link.next())
        .await
        .expect("daemon answers within 10 s")?
        .ok()?;
    v1::Frame::decode(bytes).expect("daemon frames decode").body
}

/// The Refused frame that ends the connection, then EOF.
async fn refused(link: &mut Link) -> v1::Refused {
    loop {
        match recv(link).await {
            Some(v1::frame::Body::Refused(r)) => {
                assert!(
                    recv(link).await.is_none(),
                    "connection closed after Refused"
                );
                return r;
            }
            Some(v1::frame::Body::Ack(_)) => {}
            other => panic!("expected Refused, got {other:?}"),
        }
    }
}

/// Hello, Welcome, an empty batch 1, its Ack: the server still serves.
async fn good_relay_is_served(addr: SocketAddr, instance: u64) {
    let mut link = dial(addr).await;
    link.send(frame(hello(instance, 0x600d, "good")))
        .await
        .expect("send");
    let Some(v1::frame::Body::Welcome(_)) = recv(&mut link).await else {
        panic!("a good relay is not welcomed after the fuzz cases");
    };
    let batch = v1::frame::Body::Batch(v1::Batch {
        seq: 1,
        first_packet_index: 0,
        packets: Vec::new(),
        clocks: None,
    });
    link.send(frame(batch)).await.expect("send");
    match recv(&mut link).await {
        Some(v1::frame::Body::Ack(a)) => assert!(a.through_batch >= 1),
        other => panic!("a good relay's batch is not acked: {other:?}"),
    }
}

// ---- the fuzz target ----

/// What one case writes on the connection, in order.
#[derive(Clone, Debug)]
enum Chunk {
    /// A frame (length prefix + body).
    Frame(Vec<u8>),
    /// A length prefix with fewer bytes after it (or far over the limit).
    Prefix(u32, Vec<u8>),
    /// Bytes with no framing at all.
    Raw(Vec<u8>),
}

/// Source states as a relay (or a liar) could report them: many, long,
/// not UTF-8 clean after a cut.
fn sources() -> impl Strategy<Value = Vec<v1::SourceState>> {
    prop::collection::vec(
        (".{0,600}", ".{0,20}", ".{0,600}").prop_map(|(spec, state, detail)| v1::SourceState {
            spec,
            state,
            detail,
        }),
        0..80,
    )
}

fn clocks() -> impl Strategy<Value = Option<v1::RelayClocks>> {
    prop::option::of(
        (
            fuzz::edge_u64(),
            fuzz::edge_u64(),
            fuzz::edge_u64(),
            fuzz::edge_u64(),
        )
            .prop_map(|(b, m, r, raw)| v1::RelayClocks {
                boottime_ns: b,
                monotonic_ns: m,
                realtime_ns: r,
                monotonic_raw_ns: raw,
            }),
    )
}

fn packet() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        4 => plausible_packet(),
        1 => (message(fuzz::packet_field_number()), mutations()).prop_map(|(n, m)| mutate(encode(&n), &m)),
    ]
    .prop_map(Bytes::from)
}

fn body() -> impl Strategy<Value = v1::frame::Body> {
    use v1::frame::Body;
    prop_oneof![
        3 => (
            prop_oneof![Just(PROTOCOL_VERSION), any::<u32>()],
            0u64..4,
            prop_oneof![1u32..6, Just(0), any::<u32>()],
            "[a-z]{0,8}",
            fuzz::edge_u64(),
            clocks(),
        )
            .prop_map(|(version, instance, raw_id, name, oldest, clocks)| Body::Hello(v1::Hello {
                protocol_version: version,
                token: String::new(),
                relay_instance_id: instance,
                boot_id: "b".into(),
                machine_name: name,
                machine_raw_id: raw_id,
                oldest_unacked_batch: oldest,
                clocks,
                mode: String::new(),
            })),
        6 => (
            prop_oneof![1u64..5, fuzz::edge_u64()],
            fuzz::edge_u64(),
            prop::collection::vec(packet(), 0..6),
            clocks(),
        )
            .prop_map(|(seq, first, packets, clocks)| Body::Batch(v1::Batch {
                seq,
                first_packet_index: first,
                packets,
                clocks,
            })),
        2 => (clocks(), fuzz::edge_u64(), sources()).prop_map(|(clocks, last, sources)| {
            Body::Heartbeat(v1::Heartbeat {
                clocks,
                last_batch_sent: last,
                sources,
                // A ring fill of edge values now and then (no limit, the
                // oldest time beyond any clock).
                ring: last.is_multiple_of(2).then_some(v1::RingFill {
                    bytes_held: last,
                    packets_held: last,
                    bytes_limit: last / 2,
                    seconds_limit: last,
                    oldest_relay_ns: last,
                    windows_owed: u32::MAX,
                }),
            })
        }),
        // A trigger from the relay's machine: any name, span and time.
        1 => ("[ -~]{0,8}", fuzz::edge_u64(), fuzz::edge_u64()).prop_map(|(name, span, t)| {
            Body::TriggerRequest(v1::TriggerRequest {
                request_id: t,
                name,
                before_ns: span,
                after_ns: span,
                relay_time_ns: t,
                origin: "packet".into(),
            })
        }),
        1 => fuzz::edge_u64().prop_map(|t| Body::Ack(v1::Ack { through_batch: t })),
        1 => Just(Body::Welcome(v1::Welcome::default())),
        1 => "[ -~]{0,8}".prop_map(|r| Body::Refused(v1::Refused { reason: r, code: String::new() })),
    ]
}

fn chunk() -> impl Strategy<Value = Chunk> {
    prop_oneof![
        8 => (body(), mutations()).prop_map(|(b, m)| {
            Chunk::Frame(mutate(v1::Frame { body: Some(b) }.encode_to_vec(), &m))
        }),
        1 => Just(Chunk::Frame(Vec::new())),
        1 => message(prop_oneof![1u32..7, any::<u32>()]).prop_map(|n| Chunk::Frame(encode(&n))),
        1 => (
            prop_oneof![Just(u32::MAX), Just(MAX_FRAME_BYTES as u32 + 1), 1u32..64],
            prop::collection::vec(any::<u8>(), 0..16),
        )
            .prop_map(|(len, rest)| Chunk::Prefix(len, rest)),
        1 => prop::collection::vec(any::<u8>(), 1..32).prop_map(Chunk::Raw),
        1 => Just(Chunk::Frame(encode(&[Node::DeepNest(4, 2_000)]))),
    ]
}

fn case() -> impl Strategy<Value = Vec<Chunk>> {
    prop::collection::vec(chunk(), 1..8)
}

/// Sends the chunks, closes the write side, reads every answer.
async fn run_case(addr: SocketAddr, chunks: &[Chunk]) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for c in chunks {
        match c {
            Chunk::Frame(body) => {
                out.extend_from_slice(&(body.len() as u32).to_be_bytes());
                out.extend_from_slice(body);
            }
            Chunk::Prefix(len, rest) => {
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(rest);
            }
            Chunk::Raw(b) => out.extend_from_slice(b),
        }
    }
    // The daemon may close first (after a refusal): a failed write is fine.
    let _ = stream.write_all(&out).await;
    let _ = stream.shutdown().await;
    let mut answer = Vec::new();
    // A reset (the daemon closed with input unread) is fine: the answer so
    // far counts.
    let read = timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    if read.is_err() {
        return Err("the daemon kept the connection open after EOF".into());
    }
    let mut rest = &answer[..];
    let mut refusals = 0;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if rest.len() < 4 + len {
            return Err(format!(
                "a torn frame from the daemon: {len} bytes announced"
            ));
        }
        let f = v1::Frame::decode(&rest[4..4 + len]).map_err(|e| format!("daemon frame: {e}"))?;
        match f.body {
            Some(v1::frame::Body::Welcome(_) | v1::frame::Body::Ack(_)) => {}
            // The answer to a TriggerRequest: fired, or a one-line reason.
            Some(v1::frame::Body::TriggerResult(r)) => {
                if !r.fired && (r.reason.is_empty() || r.reason.contains('\n')) {
                    return Err(format!(
                        "a trigger refused without a one-line reason: {r:?}"
                    ));
                }
            }
            Some(v1::frame::Body::Refused(r)) => {
                refusals += 1;
                if r.reason.is_empty() || r.code.is_empty() || r.reason.contains('\n') {
                    return Err(format!(
                        "Refused without a one-line reason and a code: {r:?}"
                    ));
                }
            }
            other => return Err(format!("unexpected frame from the daemon: {other:?}")),
        }
        rest = &rest[4 + len..];
    }
    if !rest.is_empty() {
        return Err(format!("{} stray bytes from the daemon", rest.len()));
    }
    if refusals > 1 {
        return Err("more than one Refused on a connection".into());
    }
    Ok(())
}

#[test]
fn relay_frames_session() {
    fuzz::with_big_stack(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let server = runtime.block_on(serve(LiveConfig {
            merge_window_ns: 10_000_000,
            ..LiveConfig::default()
        }));
        let addr = server.running.data_addr;
        fuzz::run(BIN, "relay_frames_session", 1_500, case(), |chunks| {
            runtime
                .block_on(run_case(addr, &chunks))
                .map_err(TestCaseError::fail)
        });
        runtime.block_on(async {
            good_relay_is_served(addr, 0xfeed).await;
            let refused = server.status.borrow().relays_refused.clone();
            let line = format!("relay_frames_session: refusals by code {refused:?}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            server.stop().await;
        });
    });
}
