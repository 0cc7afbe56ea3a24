//! Tests of the prober edge: held updates, probing registered sessions,
//! the TCP fallback.

use super::*;
use tracesync_core::sync::{ProbeSample, SyncEstimate};

fn update(session_id: u64, offset_ns: i64, samples: usize) -> SyncUpdate {
    SyncUpdate {
        slot: 1,
        session_id,
        estimate: SyncEstimate {
            offset_ns,
            ..SyncEstimate::default()
        },
        samples: vec![ProbeSample::default(); samples],
    }
}

#[tokio::test]
async fn held_updates_merge_while_the_channel_is_full() {
    let (tx, mut rx) = mpsc::channel(1);
    let mut held = HeldUpdates::default();
    held.push(update(5, 1, 1));
    assert!(held.flush(&tx).is_ok());
    held.push(update(5, 2, 1000));
    held.push(update(5, 3, 100));
    assert!(held.flush(&tx).is_ok(), "full is not an error");
    assert_eq!(held.samples_dropped, 76);
    assert_eq!(rx.recv().await.map(|u| u.estimate.offset_ns), Some(1));
    assert!(held.flush(&tx).is_ok());
    let merged = rx.recv().await.expect("merged update");
    assert_eq!(merged.estimate.offset_ns, 3);
    assert_eq!(merged.samples.len(), MAX_HELD_SAMPLES);
    assert!(held.is_empty());
    drop(rx);
    held.push(update(5, 4, 1));
    assert!(held.flush(&tx).is_err());
}

const KEY: [u8; 32] = [5; 32];

fn register_bytes(session_id: u64, nonce: u64) -> Vec<u8> {
    use tracesync_protocol::probe::{ProbeKey, seal};
    use tracesync_protocol::relay::v1::{ProbeRegister, probe_body::Kind};
    let key = ProbeKey::new(&KEY).expect("key");
    seal(&key, session_id, Kind::Register(ProbeRegister { nonce }))
}

fn registration() -> tracesync_core::sync::Registration {
    tracesync_core::sync::Registration {
        slot: 0,
        machine_raw_id: 0,
        probe_key: KEY,
    }
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
async fn probes_registered_sessions_only_and_stops_when_updates_close() {
    let sockets = SyncSockets::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let sync_addr = sockets.udp.local_addr().expect("addr");
    let relay = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let sessions = ProbeSessions::new();
    let (tx, rx) = mpsc::channel(8);
    let prober = spawn_prober(sockets, sessions.clone(), tx, CancellationToken::new());

    relay
        .send_to(&register_bytes(9, 1), sync_addr)
        .await
        .expect("send");
    wait_for("unknown session counted", || {
        sessions.stats().unknown_session == 1
    })
    .await;

    sessions.register(9, registration());
    // The registry is picked up within one idle tick; resend as a relay does.
    let mut buffer = [0u8; 512];
    let mut nonce = 1;
    let probe = loop {
        nonce += 1;
        relay
            .send_to(&register_bytes(9, nonce), sync_addr)
            .await
            .expect("send");
        if let Ok(received) =
            tokio::time::timeout(Duration::from_millis(200), relay.recv_from(&mut buffer)).await
        {
            break received.expect("recv");
        }
    };
    assert_eq!(probe.1, sync_addr);
    wait_for("probe counted", || sessions.stats().probes_sent >= 1).await;

    drop(rx);
    sessions.unregister(9);
    tokio::time::timeout(Duration::from_secs(5), prober)
        .await
        .expect("prober ends once nobody takes updates")
        .expect("no panic");
}

#[tokio::test]
async fn tcp_fallback_probes_an_authenticated_connection_and_drops_others() {
    use futures_util::SinkExt;
    use tokio_util::codec::Framed;
    let sockets = SyncSockets::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let sync_addr = sockets.udp.local_addr().expect("addr");
    let sessions = ProbeSessions::new();
    sessions.register(9, registration());
    let (tx, _rx) = mpsc::channel(8);
    let shutdown = CancellationToken::new();
    let prober = spawn_prober(sockets, sessions.clone(), tx, shutdown.clone());

    // A connection whose first frame is not signed with the key is closed.
    let stranger = TcpStream::connect(sync_addr).await.expect("connect");
    let mut stranger = Framed::new(stranger, tcp_codec());
    stranger
        .send(Bytes::from_static(&[0x0a, 0x01, 0x00]))
        .await
        .expect("send");
    let closed = tokio::time::timeout(Duration::from_secs(5), stranger.next())
        .await
        .expect("closed within 5 s");
    assert!(closed.is_none_or(|frame| frame.is_err()));

    let relay = TcpStream::connect(sync_addr).await.expect("connect");
    let mut relay = Framed::new(relay, tcp_codec());
    relay
        .send(Bytes::from(register_bytes(9, 1)))
        .await
        .expect("send");
    let probe = tokio::time::timeout(Duration::from_secs(5), relay.next())
        .await
        .expect("a probe within 5 s")
        .expect("open")
        .expect("frame");
    let datagram = tracesync_protocol::probe::envelope(&probe).expect("decodes");
    assert_eq!(datagram.session_id, 9);
    wait_for("tcp counted", || {
        let stats = sessions.stats();
        stats.tcp_connections == 2 && stats.tcp_refused == 1 && stats.probes_sent >= 1
    })
    .await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), prober)
        .await
        .expect("stops")
        .expect("no panic");
}
