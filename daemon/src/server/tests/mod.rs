//! The server over loopback, with an in-test relay and in-memory core and
//! writer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use tokio::net::TcpStream;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::timeout;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::{MAX_FRAME_BYTES, PROTOCOL_VERSION, v1};

use super::ingest::IngestSettings;
use super::run::{Parts, Running, start};
use super::*;
use tracesync_core::live::{OutPacket, Role};
use tracesync_core::status::MachineStatus;

mod before_auth;
mod relay_sessions;
mod tls_relays;

// ---- in-memory core and writer ----

/// Each batch's packets are output at once; a batch is committed when its
/// packets were drained before a commit.
#[derive(Default)]
struct FakeCore {
    next_slot: Slot,
    held: Vec<(Slot, u64, Bytes)>,
    drained_through: BTreeMap<Slot, u64>,
    last_batch: BTreeMap<Slot, u64>,
}

/// Why [`FakeCore`] refuses a Hello.
#[derive(Debug, thiserror::Error)]
enum FakeRefusal {
    #[error("machine name refused by the core")]
    MachineName,
}

impl Core for FakeCore {
    type SyncUpdate = ();
    type CommitPoint = ();
    type Refusal = FakeRefusal;
    /// It takes every frame.
    type SessionError = std::convert::Infallible;

    fn connect(&mut self, hello: &v1::Hello, _: u64) -> Result<Admitted, FakeRefusal> {
        if hello.machine_name == "refuse-me" {
            return Err(FakeRefusal::MachineName);
        }
        self.next_slot += 1;
        Ok(Admitted {
            slot: self.next_slot,
            acked_through_batch: 0,
            replaced: None,
        })
    }

    fn batch(&mut self, slot: Slot, batch: v1::Batch, _: u64) -> Result<(), Self::SessionError> {
        self.last_batch.insert(slot, batch.seq);
        for packet in batch.packets {
            self.held.push((slot, batch.seq, packet));
        }
        Ok(())
    }

    fn heartbeat(&mut self, _: Slot, _: &v1::Heartbeat, _: u64) -> Result<(), Self::SessionError> {
        Ok(())
    }

    fn sync(&mut self, (): &()) {}

    fn disconnect(&mut self, slot: Slot) {
        self.drained_through.remove(&slot);
    }

    fn host_tick(&mut self, _: u64) {}

    fn drain(&mut self, _: u64, out: &mut Vec<OutPacket>) {
        for (slot, seq, bytes) in self.held.drain(..) {
            self.drained_through.insert(slot, seq);
            out.push(packet(slot, bytes));
        }
        // Batches without packets are done once seen.
        for (slot, seq) in &self.last_batch {
            let through = self.drained_through.entry(*slot).or_default();
            *through = (*through).max(*seq);
        }
    }

    fn flush_all(&mut self, out: &mut Vec<OutPacket>) {
        self.drain(0, out);
    }

    fn commit_point(&mut self) {}

    fn committed_through(&mut self, (): ()) -> Vec<(Slot, u64)> {
        self.drained_through.iter().map(|(s, t)| (*s, *t)).collect()
    }

    fn status(&self) -> Vec<MachineStatus> {
        Vec::new()
    }
}

fn packet(slot: Slot, bytes: Bytes) -> OutPacket {
    OutPacket {
        ts: 0,
        machine_raw_id: slot,
        machine_name: None,
        seq: slot,
        clock: 6,
        clock_ts: 0,
        err_ns: 0,
        data_field: None,
        src: Arc::from("test"),
        role: Role::Data,
        origin: None,
        bytes: bytes.into(),
    }
}

#[derive(Default)]
struct Output {
    written: Vec<Bytes>,
    committed: usize,
    closed: bool,
    limits: Option<crate::reload::OutputLimits>,
}

#[derive(Clone, Default)]
struct FakeWriter {
    output: Arc<Mutex<Output>>,
    fail: Arc<AtomicBool>,
}

impl FakeWriter {
    fn check(&self) -> std::io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            Err(std::io::Error::other("No space left on device"))
        } else {
            Ok(())
        }
    }

    fn committed(&self) -> Vec<Bytes> {
        let output = self.output.lock().unwrap();
        output.written[..output.committed].to_vec()
    }
}

impl Writer<()> for FakeWriter {
    fn write(&mut self, packet: &OutPacket, _: std::time::SystemTime) -> std::io::Result<()> {
        self.check()?;
        self.output
            .lock()
            .unwrap()
            .written
            .push(packet.bytes.to_bytes());
        Ok(())
    }

    fn commit(&mut self) -> std::io::Result<()> {
        self.check()?;
        let mut output = self.output.lock().unwrap();
        output.committed = output.written.len();
        Ok(())
    }

    fn write_sync_samples(&mut self, (): &()) -> std::io::Result<()> {
        Ok(())
    }

    fn current_path(&self) -> Option<std::path::PathBuf> {
        None
    }

    fn set_limits(&mut self, limits: &crate::reload::OutputLimits) {
        self.output.lock().unwrap().limits = Some(*limits);
    }

    fn close(mut self) -> std::io::Result<()> {
        self.commit()?;
        self.output.lock().unwrap().closed = true;
        Ok(())
    }
}

// ---- harness ----

struct TestServer {
    running: Running<NoProbes>,
    shutdown: CancellationToken,
    writer: FakeWriter,
    _sync_updates: mpsc::Sender<()>,
}

fn settings(max_relays: usize) -> SessionSettings {
    SessionSettings {
        max_relays,
        hello_timeout: Duration::from_millis(300),
        max_frame_bytes: MAX_FRAME_BYTES,
        frame_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(60),
        sync_udp_port: 7411,
        final_ack_timeout: Duration::from_secs(5),
        tls: None,
    }
}

async fn serve(max_relays: usize, token: Option<&str>) -> TestServer {
    serve_with(settings(max_relays), token, None).await
}

async fn serve_with(
    session_settings: SessionSettings,
    token: Option<&str>,
    limits: Option<watch::Receiver<crate::reload::OutputLimits>>,
) -> TestServer {
    let mut ingest = IngestSettings::new(Duration::from_millis(20));
    ingest.drain_every = Duration::from_millis(5);
    ingest.limits = limits;
    serve_ingest(session_settings, token, ingest).await
}

async fn serve_ingest(
    session_settings: SessionSettings,
    token: Option<&str>,
    ingest: IngestSettings,
) -> TestServer {
    let listener = listener::bind_data("127.0.0.1:0".parse().unwrap()).unwrap();
    let writer = FakeWriter::default();
    let (sync_tx, sync_updates) = mpsc::channel(4);
    let parts = Parts {
        core: FakeCore::default(),
        writer: writer.clone(),
        probes: NoProbes,
        sync_updates,
        packets: broadcast::channel(16).0,
        status: watch::channel(Arc::default()).0,
        preamble_requests: None,
        trigger_requests: None,
    };
    let shutdown = CancellationToken::new();
    let running = start(
        listener,
        session_settings,
        token,
        ingest,
        parts,
        shutdown.clone(),
    )
    .unwrap();
    TestServer {
        running,
        shutdown,
        writer,
        _sync_updates: sync_tx,
    }
}

type Relay = Framed<TcpStream, LengthDelimitedCodec>;

async fn dial(server: &TestServer) -> Relay {
    let stream = TcpStream::connect(server.running.data_addr).await.unwrap();
    Framed::new(stream, session::codec(MAX_FRAME_BYTES))
}

fn hello(token: &str, name: &str) -> v1::frame::Body {
    v1::frame::Body::Hello(v1::Hello {
        protocol_version: PROTOCOL_VERSION,
        token: token.into(),
        relay_instance_id: 42,
        boot_id: "boot".into(),
        machine_name: name.into(),
        machine_raw_id: 7,
        oldest_unacked_batch: 1,
        clocks: None,
        mode: String::new(),
    })
}

fn batch(seq: u64, packets: &[&'static [u8]]) -> v1::frame::Body {
    v1::frame::Body::Batch(v1::Batch {
        seq,
        first_packet_index: 0,
        packets: packets.iter().map(|p| Bytes::from_static(p)).collect(),
        clocks: None,
    })
}

async fn send(relay: &mut Relay, body: v1::frame::Body) {
    let bytes = v1::Frame { body: Some(body) }.encode_to_vec();
    relay.send(Bytes::from(bytes)).await.unwrap();
}

/// Next frame, or None when the daemon closed the connection.
async fn recv(relay: &mut Relay) -> Option<v1::frame::Body> {
    let frame = timeout(Duration::from_secs(5), relay.next())
        .await
        .expect("the daemon answers within 5 s")?;
    let bytes = frame.ok()?;
    v1::Frame::decode(bytes).unwrap().body
}

async fn refused_reason(relay: &mut Relay) -> String {
    match recv(relay).await {
        Some(v1::frame::Body::Refused(r)) => {
            assert!(recv(relay).await.is_none(), "closed after Refused");
            r.reason
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

async fn welcomed(server: &TestServer, token: &str) -> (Relay, v1::Welcome) {
    let mut relay = dial(server).await;
    send(&mut relay, hello(token, "relay")).await;
    match recv(&mut relay).await {
        Some(v1::frame::Body::Welcome(w)) => (relay, w),
        other => panic!("expected Welcome, got {other:?}"),
    }
}

async fn ack(relay: &mut Relay) -> u64 {
    match recv(relay).await {
        Some(v1::frame::Body::Ack(a)) => a.through_batch,
        other => panic!("expected Ack, got {other:?}"),
    }
}

async fn ack_through(relay: &mut Relay, seq: u64) {
    while ack(relay).await < seq {}
}

// ---- mutual TLS relays (daemon/src/tls/) ----

/// A lab PKI in `dir` (the daemon's certificate for 127.0.0.1 and one per
/// name in `relays`) and the daemon's mutual-TLS settings from it.
fn required_tls(dir: &std::path::Path, relays: &[&str]) -> Option<crate::tls::DataTls> {
    crate::tls::pki::init(dir, &["127.0.0.1".into()]).unwrap();
    for name in relays {
        crate::tls::pki::issue(dir, name, None).unwrap();
    }
    let at = |f: &str| toml::Spanned::new(0..0, dir.join(f));
    crate::tls::TlsConfig {
        mode: crate::tls::TlsMode::Required,
        cert: at("daemon.crt"),
        key: at("daemon.key"),
        client_ca: at("ca.crt"),
        // The tests' fake relays pick raw ids freely.
        raw_id_rule: crate::tls::RawIdRule::FirstCome,
        ..crate::tls::TlsConfig::default()
    }
    .load()
    .unwrap()
}

/// A TLS relay presenting `<dir>/<cert>.crt` (None: no certificate).
async fn dial_tls(
    server: &TestServer,
    dir: &std::path::Path,
    cert: Option<&str>,
) -> std::io::Result<Framed<tokio_rustls::client::TlsStream<TcpStream>, LengthDelimitedCodec>> {
    use crate::tls::{TlsKey, read_certs, read_key};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for ca in read_certs(&dir.join("ca.crt"), TlsKey::ClientCa).unwrap() {
        roots.add(ca).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match cert {
        Some(c) => builder
            .with_client_auth_cert(
                read_certs(&dir.join(format!("{c}.crt")), TlsKey::Cert).unwrap(),
                read_key(&dir.join(format!("{c}.key")), TlsKey::Key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = TcpStream::connect(server.running.data_addr).await?;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let stream = connector.connect(name, stream).await?;
    Ok(Framed::new(stream, session::codec(MAX_FRAME_BYTES)))
}

async fn send_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    link: &mut Framed<S, LengthDelimitedCodec>,
    body: v1::frame::Body,
) -> std::io::Result<()> {
    let bytes = v1::Frame { body: Some(body) }.encode_to_vec();
    link.send(Bytes::from(bytes)).await
}

async fn next_on<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    link: &mut Framed<S, LengthDelimitedCodec>,
) -> Result<Option<v1::frame::Body>, String> {
    match timeout(Duration::from_secs(5), link.next()).await {
        Err(_) => Err("no answer within 5 s".into()),
        Ok(None) => Ok(None),
        Ok(Some(Err(e))) => Err(e.to_string()),
        Ok(Some(Ok(bytes))) => Ok(v1::Frame::decode(bytes).unwrap().body),
    }
}

async fn counted(server: &TestServer, counter: Counter, n: u64) {
    for _ in 0..500 {
        if server.running.shared.counters.get(counter) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{:?} stayed at {}",
        counter,
        server.running.shared.counters.get(counter)
    );
}
