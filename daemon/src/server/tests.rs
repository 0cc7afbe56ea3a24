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
    };
    let shutdown = CancellationToken::new();
    let mut ingest = IngestSettings::new(Duration::from_millis(20));
    ingest.drain_every = Duration::from_millis(5);
    ingest.limits = limits;
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

// ---- tests ----

#[tokio::test]
async fn welcome_carries_version_session_and_sync_port() {
    let server = serve(4, Some("s3cret")).await;
    let (_relay, welcome) = welcomed(&server, "s3cret").await;
    assert_eq!(welcome.protocol_version, PROTOCOL_VERSION);
    assert_eq!(welcome.acked_through_batch, 0);
    assert_eq!(welcome.sync_udp_port, 7411);
    assert_ne!(welcome.session_id, 0);
}

#[tokio::test]
async fn bad_token_is_refused_with_the_reason() {
    let server = serve(4, Some("s3cret")).await;
    let mut relay = dial(&server).await;
    send(&mut relay, hello("guess", "relay")).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.starts_with("bad token"), "{reason}");
    assert!(!reason.contains("s3cret"), "never echo the token: {reason}");
    assert_eq!(server.running.shared.counters.get(Counter::RefusedToken), 1);
}

#[tokio::test]
async fn allow_machines_refuses_other_names_and_a_reload_applies_to_the_next_connection() {
    let server = serve(4, None).await;
    server
        .running
        .shared
        .set_allow_machines(&["vm-1".to_owned()]);
    let mut relay = dial(&server).await;
    send(&mut relay, hello("", "phone")).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.contains("\"phone\""), "{reason}");
    assert!(reason.contains("allow-machines"), "{reason}");
    assert_eq!(
        server.running.shared.counters.get(Counter::RefusedMachine),
        1
    );
    // An empty list (the default) allows every machine again.
    server.running.shared.set_allow_machines(&[]);
    let mut relay = dial(&server).await;
    send(&mut relay, hello("", "phone")).await;
    assert!(matches!(
        recv(&mut relay).await,
        Some(v1::frame::Body::Welcome(_))
    ));
}

#[tokio::test]
async fn reloaded_output_limits_reach_the_writer() {
    let config = crate::config::DaemonConfig::default();
    let first = crate::reload::OutputLimits::from_config(&config);
    let (limits, rx) = watch::channel(first);
    let server = serve_with(settings(4), None, Some(rx)).await;
    let mut reloaded = config.clone();
    reloaded.output.retain_bytes = 1 << 20;
    reloaded.output.rotate_seconds = 0;
    let second = crate::reload::OutputLimits::from_config(&reloaded);
    limits.send_replace(second);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while server.writer.output.lock().unwrap().limits != Some(second) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ingest loop never passed the new limits to the writer"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(second.retain_bytes, 1 << 20);
    assert_eq!(second.max_file_age, Duration::MAX);
}

#[tokio::test]
async fn no_token_configured_accepts_any() {
    let server = serve(4, None).await;
    let (_relay, welcome) = welcomed(&server, "whatever").await;
    assert_eq!(welcome.protocol_version, PROTOCOL_VERSION);
}

#[tokio::test]
async fn version_mismatch_is_refused() {
    let server = serve(4, None).await;
    let mut relay = dial(&server).await;
    let mut body = hello("", "relay");
    if let v1::frame::Body::Hello(h) = &mut body {
        h.protocol_version = PROTOCOL_VERSION + 1;
    }
    send(&mut relay, body).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.contains("protocol version 2"), "{reason}");
}

#[tokio::test]
async fn core_refusal_is_passed_on() {
    let server = serve(4, None).await;
    let mut relay = dial(&server).await;
    send(&mut relay, hello("", "refuse-me")).await;
    let reason = refused_reason(&mut relay).await;
    assert_eq!(reason, "machine name refused by the core");
}

#[tokio::test]
async fn hello_timeout_is_refused() {
    let server = serve(4, None).await;
    let mut relay = dial(&server).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.contains("no Hello within 300 ms"), "{reason}");
}

#[tokio::test]
async fn max_relays_is_enforced_and_a_freed_place_is_reused() {
    let server = serve(1, None).await;
    let (first, _) = welcomed(&server, "").await;
    let mut second = dial(&server).await;
    // The slot is checked once the Hello passed, not at accept.
    send(&mut second, hello("", "second")).await;
    let reason = refused_reason(&mut second).await;
    assert_eq!(reason, "daemon at max-relays=1; raise limits.max-relays");
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::RefusedMaxRelays),
        1
    );
    drop(first);
    // The place frees once the session has noticed the close.
    let mut tries = 0;
    loop {
        let mut relay = dial(&server).await;
        send(&mut relay, hello("", "relay")).await;
        match recv(&mut relay).await {
            Some(v1::frame::Body::Welcome(_)) => break,
            _ if tries < 50 => tries += 1,
            other => panic!("place never freed: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn malformed_frame_is_refused_without_hurting_another_session() {
    let server = serve(4, None).await;
    let (mut good, _) = welcomed(&server, "").await;
    let (mut bad, _) = welcomed(&server, "").await;
    bad.send(Bytes::from_static(&[0xff, 0xff, 0xff]))
        .await
        .unwrap();
    let reason = refused_reason(&mut bad).await;
    assert!(reason.starts_with("malformed frame"), "{reason}");
    assert_eq!(
        server.running.shared.counters.get(Counter::MalformedFrames),
        1
    );
    send(&mut good, batch(1, &[b"packet"])).await;
    ack_through(&mut good, 1).await;
}

#[tokio::test]
async fn unexpected_frame_kind_is_refused() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    send(&mut relay, hello("", "again")).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.contains("unexpected Hello frame"), "{reason}");
}

#[tokio::test]
async fn batches_are_acked_after_commit() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    send(&mut relay, batch(1, &[b"a", b"b"])).await;
    send(&mut relay, batch(2, &[b"c"])).await;
    send(
        &mut relay,
        v1::frame::Body::Heartbeat(v1::Heartbeat {
            clocks: None,
            last_batch_sent: 2,
        }),
    )
    .await;
    ack_through(&mut relay, 2).await;
    // Acked means committed.
    assert_eq!(server.writer.committed(), [&b"a"[..], b"b", b"c"]);
}

#[tokio::test]
async fn failing_writer_stops_acks_until_it_recovers() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    server.writer.fail.store(true, Ordering::SeqCst);
    send(&mut relay, batch(1, &[b"a"])).await;
    let early = timeout(Duration::from_millis(300), relay.next()).await;
    assert!(early.is_err(), "no ack while the writer fails: {early:?}");
    server.writer.fail.store(false, Ordering::SeqCst);
    ack_through(&mut relay, 1).await;
    assert_eq!(server.writer.committed(), [&b"a"[..]]);
}

#[tokio::test]
async fn shutdown_commits_sends_final_acks_and_closes_the_writer() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    send(&mut relay, batch(1, &[b"x"])).await;
    send(&mut relay, batch(2, &[b"y"])).await;
    // Make sure both frames are in before stopping (the ack proves it).
    ack_through(&mut relay, 2).await;
    send(&mut relay, batch(3, &[b"z"])).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.shutdown.cancel();
    let TestServer {
        running, writer, ..
    } = server;
    let stopped = tokio::spawn(running.stopped());
    ack_through(&mut relay, 3).await;
    assert!(
        recv(&mut relay).await.is_none(),
        "closed after the final ack"
    );
    let summary = stopped.await.unwrap().unwrap();
    assert_eq!(summary.packets_written, 3);
    let output = writer.output.lock().unwrap();
    assert!(output.closed);
    assert_eq!(output.committed, 3);
}

#[tokio::test]
async fn shutdown_with_no_relays_is_prompt() {
    let server = serve(4, None).await;
    server.shutdown.cancel();
    let summary = timeout(Duration::from_secs(5), server.running.stopped())
        .await
        .expect("stops within 5 s")
        .unwrap();
    assert_eq!(summary.packets_written, 0);
    assert!(server.writer.output.lock().unwrap().closed);
}

// ---- mutual TLS (daemon/src/tls.rs) ----

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

#[tokio::test]
async fn tls_refuses_unauthenticated_relays_and_binds_identities() {
    let dir = tempfile::tempdir().unwrap();
    crate::tls::pki::init(dir.path(), &["127.0.0.1".into()]).unwrap();
    for name in ["relay", "other"] {
        crate::tls::pki::issue(dir.path(), name, None).unwrap();
    }
    let at = |f: &str| toml::Spanned::new(0..0, dir.path().join(f));
    let tls = crate::tls::TlsConfig {
        mode: crate::tls::TlsMode::Required,
        cert: at("daemon.crt"),
        key: at("daemon.key"),
        client_ca: at("ca.crt"),
        crl: None,
    }
    .load()
    .unwrap();
    assert!(tls.is_some());
    let server = serve_with(SessionSettings { tls, ..settings(4) }, Some("s3cret"), None).await;

    // Plaintext: the handshake fails; no frame comes back.
    let mut plain = dial(&server).await;
    let _ = send_on(&mut plain, hello("s3cret", "relay")).await;
    assert!(recv(&mut plain).await.is_none());
    counted(&server, Counter::TlsHandshakeFailures, 1).await;

    // No certificate: our half of the TLS 1.3 handshake completes, then the
    // daemon's alert ends the connection before any frame.
    let mut anonymous = dial_tls(&server, dir.path(), None).await.unwrap();
    let _ = send_on(&mut anonymous, hello("s3cret", "relay")).await;
    let answer = next_on(&mut anonymous).await;
    assert!(
        matches!(answer, Ok(None) | Err(_)) && !matches!(&answer, Err(e) if e.contains("5 s")),
        "{answer:?}"
    );
    counted(&server, Counter::TlsHandshakeFailures, 2).await;

    // A valid certificate for "other" claiming "relay": refused, counted.
    let mut impostor = dial_tls(&server, dir.path(), Some("other")).await.unwrap();
    send_on(&mut impostor, hello("s3cret", "relay"))
        .await
        .unwrap();
    match next_on(&mut impostor).await {
        Ok(Some(v1::frame::Body::Refused(r))) => {
            assert!(
                r.reason.starts_with("certificate-identity-mismatch: "),
                "{}",
                r.reason
            );
            assert!(r.reason.contains("\"relay\"") && r.reason.contains("\"other\""));
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    assert_eq!(
        server.running.shared.counters.get(Counter::RefusedIdentity),
        1
    );

    // The right certificate with the right token is welcomed; with a wrong
    // token it is still refused.
    let mut wrong_token = dial_tls(&server, dir.path(), Some("relay")).await.unwrap();
    send_on(&mut wrong_token, hello("guess", "relay"))
        .await
        .unwrap();
    assert!(matches!(
        next_on(&mut wrong_token).await,
        Ok(Some(v1::frame::Body::Refused(r))) if r.reason.starts_with("bad token")
    ));
    let mut relay = dial_tls(&server, dir.path(), Some("relay")).await.unwrap();
    send_on(&mut relay, hello("s3cret", "relay")).await.unwrap();
    assert!(matches!(
        next_on(&mut relay).await,
        Ok(Some(v1::frame::Body::Welcome(_)))
    ));

    // "other" cannot take over the raw id (7) "relay" now holds, even
    // under its own name.
    let mut squatter = dial_tls(&server, dir.path(), Some("other")).await.unwrap();
    let v1::frame::Body::Hello(mut h) = hello("s3cret", "other") else {
        unreachable!()
    };
    h.relay_instance_id = 43;
    send_on(&mut squatter, v1::frame::Body::Hello(h))
        .await
        .unwrap();
    match next_on(&mut squatter).await {
        Ok(Some(v1::frame::Body::Refused(r))) => {
            assert!(
                r.reason
                    .contains("raw machine id 7 belongs to machine \"relay\""),
                "{}",
                r.reason
            );
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    assert_eq!(
        server.running.shared.counters.get(Counter::RefusedIdentity),
        2
    );
    server.shutdown.cancel();
}

// ---- before authentication (server/preauth.rs, session.rs) ----

/// A raw TCP connection (no framing) to the server.
async fn raw(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.running.data_addr).await.unwrap()
}

/// Reads until the daemon closes; the frames it sent on the way.
async fn frames_until_closed<R: tokio::io::AsyncRead + Unpin>(
    stream: &mut R,
    within: Duration,
) -> Vec<v1::frame::Body> {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    timeout(within, stream.read_to_end(&mut answer))
        .await
        .expect("the daemon closes the connection in time")
        .ok();
    let mut out = Vec::new();
    let mut rest = &answer[..];
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(body) = rest.get(4..4 + len) else {
            break;
        };
        if let Some(b) = v1::Frame::decode(body).unwrap().body {
            out.push(b);
        }
        rest = &rest[4 + len..];
    }
    out
}

fn refused_code(frames: &[v1::frame::Body]) -> Option<(String, String)> {
    frames.iter().find_map(|f| match f {
        v1::frame::Body::Refused(r) => Some((r.code.clone(), r.reason.clone())),
        _ => None,
    })
}

#[tokio::test]
async fn a_first_frame_over_the_hello_limit_is_refused_before_its_body_is_read() {
    use tokio::io::AsyncWriteExt;
    use tracesync_protocol::relay::MAX_HELLO_FRAME_BYTES;
    let server = serve(4, Some("s3cret")).await;
    // Only the prefix of a 4 MiB frame: refused at once, nothing sized by it.
    let mut stream = raw(&server).await;
    stream
        .write_all(&(MAX_FRAME_BYTES as u32).to_be_bytes())
        .await
        .unwrap();
    let frames = frames_until_closed(&mut stream, Duration::from_secs(2)).await;
    let (code, reason) = refused_code(&frames).expect("a Refused frame");
    assert_eq!(code, "hello_too_large");
    assert!(
        reason.starts_with("first frame larger than 65536 bytes"),
        "{reason}"
    );
    // One byte over the limit is refused too (on its prefix alone); at the
    // limit it is read (and is not a Hello here, so it is a bad frame).
    for (len, want) in [
        (MAX_HELLO_FRAME_BYTES + 1, "hello_too_large"),
        (MAX_HELLO_FRAME_BYTES, "bad_frame"),
    ] {
        let mut stream = raw(&server).await;
        let mut bytes = (len as u32).to_be_bytes().to_vec();
        if len <= MAX_HELLO_FRAME_BYTES {
            bytes.resize(4 + len, 0xff);
        }
        stream.write_all(&bytes).await.unwrap();
        let frames = frames_until_closed(&mut stream, Duration::from_secs(2)).await;
        assert_eq!(
            refused_code(&frames).map(|c| c.0).as_deref(),
            Some(want),
            "{len}"
        );
    }
    let counters = &server.running.shared.counters;
    assert_eq!(counters.get(Counter::RefusedHelloTooLarge), 2);
    assert_eq!(counters.get(Counter::FramesTooLarge), 0);
    assert_eq!(
        counters.refusals().get("hello_too_large").copied(),
        Some(2),
        "in the status report's relays_refused"
    );
}

#[tokio::test]
async fn hello_strings_over_their_limits_are_refused_with_hello_too_large() {
    use tracesync_protocol::relay::{MAX_BOOT_ID_BYTES, MAX_MACHINE_NAME_BYTES, MAX_TOKEN_BYTES};
    let server = serve(4, Some("s3cret")).await;
    let over = |edit: &dyn Fn(&mut v1::Hello)| {
        let v1::frame::Body::Hello(mut h) = hello("s3cret", "relay") else {
            unreachable!()
        };
        edit(&mut h);
        v1::frame::Body::Hello(h)
    };
    let cases: [(&str, v1::frame::Body); 4] = [
        (
            "Hello.machine_name of 256 bytes",
            over(&|h| h.machine_name = "n".repeat(MAX_MACHINE_NAME_BYTES + 1)),
        ),
        (
            "Hello.machine_name of 60000 bytes",
            over(&|h| h.machine_name = "\n".repeat(60_000)),
        ),
        (
            "Hello.boot_id of 129 bytes",
            over(&|h| h.boot_id = "b".repeat(MAX_BOOT_ID_BYTES + 1)),
        ),
        (
            // Checked before the token: no secret is compared or logged.
            "Hello.token of 1025 bytes",
            over(&|h| h.token = "t".repeat(MAX_TOKEN_BYTES + 1)),
        ),
    ];
    for (n, (want, body)) in cases.into_iter().enumerate() {
        let mut relay = dial(&server).await;
        send(&mut relay, body).await;
        let reason = refused_reason(&mut relay).await;
        assert!(reason.starts_with(want), "{reason}");
        assert!(
            reason.len() < 200,
            "the text itself is never echoed: {reason}"
        );
        assert_eq!(
            server
                .running
                .shared
                .counters
                .get(Counter::RefusedHelloTooLarge),
            n as u64 + 1
        );
    }
    assert_eq!(server.running.shared.counters.get(Counter::RefusedToken), 0);
    // At every limit: welcomed.
    let mut relay = dial(&server).await;
    send(
        &mut relay,
        over(&|h| {
            h.machine_name = "é".repeat(MAX_MACHINE_NAME_BYTES / 2);
            h.boot_id = "b".repeat(MAX_BOOT_ID_BYTES);
        }),
    )
    .await;
    assert!(matches!(
        recv(&mut relay).await,
        Some(v1::frame::Body::Welcome(_))
    ));
}

#[tokio::test]
async fn the_frame_limit_is_raised_once_the_hello_is_accepted() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    // A 1 MiB batch (a full relay batch): far over the Hello limit.
    static BIG: [u8; 1 << 20] = [7; 1 << 20];
    send(&mut relay, batch(1, &[&BIG])).await;
    ack_through(&mut relay, 1).await;
    assert_eq!(server.writer.committed()[0].len(), 1 << 20);
}

#[tokio::test]
async fn idle_connections_hold_no_relay_slot() {
    let server = serve(2, None).await;
    // More idle TCP connections than max-relays: none holds a slot.
    let mut idle = Vec::new();
    for _ in 0..5 {
        idle.push(raw(&server).await);
    }
    let (_a, _) = welcomed(&server, "").await;
    let (_b, _) = welcomed(&server, "").await;
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::RefusedMaxRelays),
        0
    );
    // The third Hello finds both slots taken.
    let mut third = dial(&server).await;
    send(&mut third, hello("", "third")).await;
    let reason = refused_reason(&mut third).await;
    assert!(reason.starts_with("daemon at max-relays=2"), "{reason}");
}

#[tokio::test]
async fn past_the_unauthenticated_limit_the_oldest_is_closed_and_a_relay_gets_in() {
    use super::preauth::MAX_UNAUTHENTICATED;
    let server = serve_with(
        SessionSettings {
            hello_timeout: Duration::from_secs(30),
            ..settings(4)
        },
        None,
        None,
    )
    .await;
    let extra = 20;
    let mut idle = Vec::new();
    for _ in 0..MAX_UNAUTHENTICATED + extra {
        idle.push(raw(&server).await);
    }
    counted(&server, Counter::UnauthenticatedEvicted, extra as u64).await;
    // The oldest were closed (no frame: they never said Hello).
    for stream in &mut idle[..extra] {
        let frames = frames_until_closed(stream, Duration::from_secs(5)).await;
        assert!(frames.is_empty(), "{frames:?}");
    }
    // A relay now: its connection closes the oldest idle one, and it is
    // welcomed at its first attempt (long before the idle ones time out).
    let started = std::time::Instant::now();
    let (_relay, _) = welcomed(&server, "").await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::UnauthenticatedEvicted),
        extra as u64 + 1
    );
    assert_eq!(
        server.running.shared.counters.get(Counter::HelloTimeouts),
        0
    );
}

#[tokio::test]
async fn hello_timeout_covers_a_partial_hello() {
    use tokio::io::AsyncWriteExt;
    let server = serve(4, None).await;
    // A Hello that never completes (1 KiB announced, 10 bytes sent).
    let mut stream = raw(&server).await;
    stream.write_all(&1024u32.to_be_bytes()).await.unwrap();
    stream.write_all(&[0; 10]).await.unwrap();
    let frames = frames_until_closed(&mut stream, Duration::from_secs(3)).await;
    assert_eq!(
        refused_code(&frames).map(|c| c.0).as_deref(),
        Some("no_hello")
    );
}

/// Settings with a short frame timeout.
fn trickle_settings() -> SessionSettings {
    SessionSettings {
        frame_timeout: Duration::from_millis(400),
        ..settings(4)
    }
}

#[tokio::test]
async fn a_trickled_frame_is_closed_at_the_frame_timeout() {
    use tokio::io::AsyncWriteExt;
    let server = serve_with(trickle_settings(), None, None).await;
    let (relay, _) = welcomed(&server, "").await;
    let (mut rd, mut wr) = relay.into_inner().into_split();
    // The prefix of a 100-byte frame, then one byte every 100 ms.
    let started = std::time::Instant::now();
    let trickle = tokio::spawn(async move {
        wr.write_all(&100u32.to_be_bytes()).await?;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            wr.write_all(&[0x22]).await?;
        }
        #[allow(unreachable_code)]
        std::io::Result::Ok(())
    });
    let frames = frames_until_closed(&mut rd, Duration::from_secs(3)).await;
    let took = started.elapsed();
    trickle.abort();
    let (code, reason) = refused_code(&frames).expect("a Refused frame");
    assert_eq!(code, "frame_timeout");
    assert!(reason.contains("within 400 ms"), "{reason}");
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(1500),
        "closed after {took:?}"
    );
    assert_eq!(
        server.running.shared.counters.get(Counter::FrameTimeouts),
        1
    );
    assert_eq!(
        server
            .running
            .shared
            .counters
            .refusals()
            .get("frame_timeout"),
        Some(&1)
    );
}

#[tokio::test]
async fn whole_frames_and_silence_are_not_a_frame_timeout() {
    let server = serve_with(trickle_settings(), None, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    // Silence longer than the frame timeout: no frame has begun.
    tokio::time::sleep(Duration::from_millis(900)).await;
    // Whole frames, each sent at once, spaced wider than the timeout.
    for seq in 1..=3 {
        send(&mut relay, batch(seq, &[b"p"])).await;
        ack_through(&mut relay, seq).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A frame sent in two halves within the bound.
    let bytes = v1::Frame {
        body: Some(batch(4, &[b"q"])),
    }
    .encode_to_vec();
    {
        use tokio::io::AsyncWriteExt;
        let stream = relay.get_mut();
        stream
            .write_all(&(bytes.len() as u32).to_be_bytes())
            .await
            .unwrap();
        stream.write_all(&bytes[..3]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(&bytes[3..]).await.unwrap();
    }
    ack_through(&mut relay, 4).await;
    assert_eq!(
        server.running.shared.counters.get(Counter::FrameTimeouts),
        0
    );
}

#[tokio::test]
async fn tls_handshakes_in_progress_hold_no_slot() {
    let dir = tempfile::tempdir().unwrap();
    crate::tls::pki::init(dir.path(), &["127.0.0.1".into()]).unwrap();
    crate::tls::pki::issue(dir.path(), "relay", None).unwrap();
    let at = |f: &str| toml::Spanned::new(0..0, dir.path().join(f));
    let tls = crate::tls::TlsConfig {
        mode: crate::tls::TlsMode::Required,
        cert: at("daemon.crt"),
        key: at("daemon.key"),
        client_ca: at("ca.crt"),
        crl: None,
    }
    .load()
    .unwrap();
    let server = serve_with(SessionSettings { tls, ..settings(1) }, None, None).await;
    // Connections that never start their handshake, and one that finished
    // it but sends no Hello: none takes the single slot.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(raw(&server).await);
    }
    let _silent = dial_tls(&server, dir.path(), Some("relay")).await.unwrap();
    let mut relay = dial_tls(&server, dir.path(), Some("relay")).await.unwrap();
    send_on(&mut relay, hello("", "relay")).await.unwrap();
    assert!(matches!(
        next_on(&mut relay).await,
        Ok(Some(v1::frame::Body::Welcome(_)))
    ));
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::RefusedMaxRelays),
        0
    );
    server.shutdown.cancel();
}
