//! The responder: what it answers, what it ignores, and both transports.

use super::*;
use crate::clocks::SimulatedClock;
use futures_util::SinkExt;
use tokio::net::TcpListener;
use tokio_util::codec::Framed;
use tracesync_protocol::relay::v1::Probe;

const SESSION: u64 = 0x5e55_1010;
const KEY: [u8; 32] = [3; 32];

fn key() -> ProbeKey {
    ProbeKey::new(&KEY).expect("key")
}

fn probe_bytes(key: &ProbeKey, session_id: u64, nonce: u64) -> Vec<u8> {
    probe::seal(key, session_id, Kind::Probe(Probe { nonce }))
}

fn open_reply(bytes: &[u8]) -> ProbeReply {
    let datagram = probe::envelope(bytes).expect("decodes");
    assert_eq!(datagram.session_id, SESSION);
    match probe::open(&key(), &datagram).expect("signed with the session key") {
        Kind::Reply(reply) => reply,
        other => panic!("expected a reply, got {other:?}"),
    }
}

fn open_register(bytes: &[u8]) -> u64 {
    let datagram = probe::envelope(bytes).expect("decodes");
    match probe::open(&key(), &datagram).expect("signed") {
        Kind::Register(register) => register.nonce,
        other => panic!("expected a register, got {other:?}"),
    }
}

#[test]
fn classify_answers_fresh_authentic_probes_only() {
    let mut responder = Responder::new(SESSION, &KEY).expect("key");
    assert!(Responder::new(SESSION, &[]).is_none(), "no key, no probes");
    assert_eq!(
        responder.classify(&probe_bytes(&key(), SESSION, 3)),
        Incoming::Probe(3)
    );
    assert_eq!(
        responder.classify(&probe_bytes(&key(), SESSION, 3)),
        Incoming::Replayed
    );
    // Reordered inside the window: fine once.
    assert_eq!(
        responder.classify(&probe_bytes(&key(), SESSION, 2)),
        Incoming::Probe(2)
    );
    let forger = ProbeKey::new(&[4; 32]).expect("key");
    assert_eq!(
        responder.classify(&probe_bytes(&forger, SESSION, 9)),
        Incoming::BadMac
    );
    assert_eq!(
        responder.classify(&probe_bytes(&key(), SESSION + 1, 9)),
        Incoming::OtherSession
    );
    // The forged nonce 9 was not recorded: the genuine one is answered.
    assert_eq!(
        responder.classify(&probe_bytes(&key(), SESSION, 9)),
        Incoming::Probe(9)
    );
    let register = responder.register();
    assert_eq!(responder.classify(&register), Incoming::Malformed);
    assert_eq!(responder.classify(&[0xff; 8]), Incoming::Malformed);
    assert_eq!(responder.classify(&[0; 300]), Incoming::Malformed);
    assert_eq!(open_register(&register), 1);
    assert_eq!(open_register(&responder.register()), 2);
}

#[test]
fn reply_is_signed_and_echoes_the_nonce() {
    let responder = Responder::new(SESSION, &KEY).expect("key");
    let bytes = responder.reply(77, 5_000, 5_200, -42);
    assert!(bytes.len() <= MAX_PROBE_DATAGRAM_BYTES);
    assert_eq!(
        open_reply(&bytes),
        ProbeReply {
            nonce: 77,
            t2_ns: 5_000,
            t3_ns: 5_200,
            boottime_minus_monotonic_ns: -42,
        }
    );
}

#[test]
fn transports_parse() {
    assert_eq!(SyncTransport::parse("auto"), Ok(SyncTransport::Auto));
    assert_eq!(SyncTransport::parse("udp"), Ok(SyncTransport::Udp));
    assert_eq!(SyncTransport::parse("tcp"), Ok(SyncTransport::Tcp));
    assert!(SyncTransport::parse("quic").is_err());
}

fn target(daemon: SocketAddr) -> ProbeTarget {
    ProbeTarget {
        daemon,
        session_id: SESSION,
        probe_key: KEY.to_vec(),
    }
}

async fn recv(socket: &UdpSocket, buffer: &mut [u8]) -> (usize, SocketAddr) {
    tokio::time::timeout(Duration::from_secs(5), socket.recv_from(buffer))
        .await
        .expect("datagram within 5 s")
        .expect("recv")
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn udp_registers_then_answers_its_own_authentic_probes_only() {
    let daemon = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let daemon_addr = daemon.local_addr().expect("addr");
    let clock: SharedClock = Arc::new(SimulatedClock::new(7_000_000_000, 0.0));
    let stats = Arc::new(ResponderStats::default());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run_probe_responder_with_stats(
        clock.clone(),
        target(daemon_addr),
        SyncConfig {
            transport: SyncTransport::Udp,
            ..SyncConfig::default()
        },
        shutdown.clone(),
        stats.clone(),
    ));
    let mut buffer = [0u8; 512];
    let (length, relay) = recv(&daemon, &mut buffer).await;
    assert_eq!(open_register(&buffer[..length]), 1);

    let forger = ProbeKey::new(&[4; 32]).expect("key");
    daemon.send_to(&[0xff, 0x01], relay).await.expect("send");
    daemon
        .send_to(&probe_bytes(&key(), SESSION + 1, 1), relay)
        .await
        .expect("send");
    daemon
        .send_to(&probe_bytes(&forger, SESSION, 2), relay)
        .await
        .expect("send");
    let before = clock.boottime();
    let genuine = probe_bytes(&key(), SESSION, 2);
    daemon.send_to(&genuine, relay).await.expect("send");
    let (length, _) = recv(&daemon, &mut buffer).await;
    let after = clock.boottime();
    let reply = open_reply(&buffer[..length]);
    assert_eq!(reply.nonce, 2);
    assert!(before <= reply.t2_ns && reply.t2_ns <= reply.t3_ns && reply.t3_ns <= after);
    // A replay of the genuine probe is not answered.
    daemon.send_to(&genuine, relay).await.expect("send");
    let counts = || {
        [
            stats.probes_answered.load(Ordering::Relaxed),
            stats.other_sessions.load(Ordering::Relaxed),
            stats.malformed.load(Ordering::Relaxed),
            stats.bad_mac.load(Ordering::Relaxed),
            stats.replayed.load(Ordering::Relaxed),
        ]
    };
    wait_for("counts", || counts() == [1, 1, 1, 1, 1]).await;
    // Every datagram got a receive stamp: the kernel's (mapped onto the
    // simulated clock, inside [before, after] above) unless switched off.
    let kernel = stats.kernel_rx_stamps.load(Ordering::Relaxed);
    let fallbacks = stats.rx_stamp_fallbacks.load(Ordering::Relaxed);
    if tracesync_common::rx_stamp::kernel_rx_timestamps_from_env() == Ok(true) {
        // A preempted paired read may make one fall back; not all of them.
        assert_eq!(kernel + fallbacks, 5);
        assert!(kernel >= 1, "no kernel-stamped t2 ({fallbacks} fallbacks)");
    } else {
        assert_eq!((kernel, fallbacks), (0, 0));
    }
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops on shutdown")
        .expect("no panic");
}

/// A daemon's TCP side: accepts one connection, checks the register, sends
/// a probe, returns the reply.
async fn tcp_exchange(listener: &TcpListener) -> ProbeReply {
    let (stream, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .expect("the relay connects")
        .expect("accept");
    let mut link = Framed::new(stream, tcp_codec());
    let register = link.next().await.expect("a frame").expect("ok");
    assert!(open_register(&register) >= 1);
    link.send(Bytes::from(probe_bytes(&key(), SESSION, 1)))
        .await
        .expect("send");
    let reply = tokio::time::timeout(Duration::from_secs(5), link.next())
        .await
        .expect("reply within 5 s")
        .expect("a frame")
        .expect("ok");
    open_reply(&reply)
}

#[tokio::test]
async fn tcp_transport_answers_on_its_own_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let clock: SharedClock = Arc::new(SimulatedClock::new(7_000_000_000, 0.0));
    let stats = Arc::new(ResponderStats::default());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run_probe_responder_with_stats(
        clock,
        target(addr),
        SyncConfig {
            transport: SyncTransport::Tcp,
            ..SyncConfig::default()
        },
        shutdown.clone(),
        stats.clone(),
    ));
    let reply = tcp_exchange(&listener).await;
    assert_eq!(reply.nonce, 1);
    assert!(reply.t2_ns <= reply.t3_ns);
    assert_eq!(stats.tcp_connects.load(Ordering::Relaxed), 1);
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops on shutdown")
        .expect("no panic");
}

#[tokio::test]
async fn auto_falls_back_to_tcp_when_udp_brings_no_probes() {
    // A daemon whose UDP port swallows everything (as over adb, where UDP
    // goes nowhere) but whose TCP port answers.
    let udp = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let addr = udp.local_addr().expect("addr");
    let Ok(listener) = TcpListener::bind(addr).await else {
        eprintln!("skipped: TCP port {} is taken", addr.port());
        return;
    };
    let clock: SharedClock = Arc::new(SimulatedClock::new(7_000_000_000, 0.0));
    let stats = Arc::new(ResponderStats::default());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run_probe_responder_with_stats(
        clock,
        target(addr),
        SyncConfig {
            transport: SyncTransport::Auto,
            ..SyncConfig::default()
        },
        shutdown.clone(),
        stats.clone(),
    ));
    let reply = tcp_exchange(&listener).await;
    assert_eq!(reply.nonce, 1);
    // At least the switch to TCP; on a loaded box the responder may also
    // have tried UDP again before this exchange (auto keeps probing both).
    assert!(stats.transport_switches.load(Ordering::Relaxed) >= 1);
    assert!(
        stats.registers_sent.load(Ordering::Relaxed) >= 2,
        "UDP tried first"
    );
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops on shutdown")
        .expect("no panic");
}
