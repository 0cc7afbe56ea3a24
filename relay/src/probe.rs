//! The relay's side of clock sync: announce the session on the daemon's
//! UDP sync socket, answer each probe at once with the relay's BOOTTIME at
//! receive (t2) and at reply (t3) and its BOOTTIME-MONOTONIC (suspends).
//!
//! Nothing runs between reading t2 and reading t3 but decoding the probe and
//! one clock snapshot: the daemon takes the whole hold time t3 - t2 out of
//! the round trip, but work after t3 or before t2 would count as network
//! delay.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prost::Message;
use tokio::net::UdpSocket;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::MAX_PROBE_DATAGRAM_BYTES;
use tracesync_protocol::relay::v1::{
    Probe, ProbeDatagram, ProbeRegister, ProbeReply, probe_datagram::Body,
};

use crate::clocks::SharedClock;

/// ProbeRegister spacing until the daemon's first probe arrives.
pub const REGISTER_INTERVAL_UNPROBED: Duration = Duration::from_secs(1);
/// ProbeRegister spacing once probed: keeps a NAT mapping fresh and lets
/// the daemon learn a changed address.
pub const REGISTER_INTERVAL_PROBED: Duration = Duration::from_secs(10);

/// Counters of one responder (shared so the uplink or status can read them).
#[derive(Debug, Default)]
pub struct ResponderStats {
    pub registers_sent: AtomicU64,
    pub probes_answered: AtomicU64,
    /// Probes naming another session (an older connection's daemon state).
    pub other_sessions: AtomicU64,
    /// Datagrams that do not decode or are not probes.
    pub malformed: AtomicU64,
    pub send_errors: AtomicU64,
    pub recv_errors: AtomicU64,
}

impl ResponderStats {
    fn bump(counter: &AtomicU64) -> u64 {
        counter.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// What a received datagram is to a responder of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incoming {
    Probe(Probe),
    OtherSession,
    Malformed,
}

/// Classifies one received datagram for session `session_id`.
pub fn classify(bytes: &[u8], session_id: u64) -> Incoming {
    if bytes.len() > MAX_PROBE_DATAGRAM_BYTES {
        return Incoming::Malformed;
    }
    match ProbeDatagram::decode(bytes).ok().and_then(|d| d.body) {
        Some(Body::Probe(probe)) if probe.session_id == session_id => Incoming::Probe(probe),
        Some(Body::Probe(_)) => Incoming::OtherSession,
        _ => Incoming::Malformed,
    }
}

/// The reply to `probe` with relay BOOTTIME `t2` (receive) and `t3` (send).
pub fn reply_datagram(
    probe: &Probe,
    t2: u64,
    t3: u64,
    boottime_minus_monotonic_ns: i64,
) -> Vec<u8> {
    ProbeDatagram {
        body: Some(Body::Reply(ProbeReply {
            session_id: probe.session_id,
            probe_id: probe.probe_id,
            t1_ns: probe.t1_ns,
            t2_ns: t2,
            t3_ns: t3,
            boottime_minus_monotonic_ns,
        })),
    }
    .encode_to_vec()
}

/// The ProbeRegister datagram of a session.
pub fn register_datagram(session_id: u64) -> Vec<u8> {
    ProbeDatagram {
        body: Some(Body::Register(ProbeRegister { session_id })),
    }
    .encode_to_vec()
}

/// Answers the daemon's probes for `session_id` until `shutdown`.
pub async fn run_probe_responder(
    clock: SharedClock,
    daemon: SocketAddr,
    session_id: u64,
    shutdown: CancellationToken,
) {
    let stats = Arc::new(ResponderStats::default());
    run_probe_responder_with_stats(clock, daemon, session_id, shutdown, stats).await;
}

/// As [`run_probe_responder`], counting into `stats`.
pub async fn run_probe_responder_with_stats(
    clock: SharedClock,
    daemon: SocketAddr,
    session_id: u64,
    shutdown: CancellationToken,
    stats: Arc<ResponderStats>,
) {
    let Some(socket) = bind_for(daemon, &shutdown).await else {
        return;
    };
    let register = register_datagram(session_id);
    let mut probed = false;
    let mut next_register = Instant::now();
    // One byte more than the limit: a truncated read shows as oversized.
    let mut buffer = [0u8; MAX_PROBE_DATAGRAM_BYTES + 1];
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            received = socket.recv_from(&mut buffer) => {
                let t2 = clock.boottime();
                let (length, from) = match received {
                    Ok(received) => received,
                    Err(error) => {
                        let count = ResponderStats::bump(&stats.recv_errors);
                        if count.is_power_of_two() {
                            tracing::warn!(%error, %daemon, count, "probe responder: receive failed; retrying");
                        }
                        // Persistent errors must not spin the task.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let bytes = buffer.get(..length).unwrap_or_default();
                match classify(bytes, session_id) {
                    Incoming::Probe(probe) => {
                        let suspend_offset = clock.now().suspend_offset();
                        let t3 = clock.boottime();
                        let reply = reply_datagram(&probe, t2, t3, suspend_offset);
                        // try_send_to: a wait here would sit after t3.
                        match socket.try_send_to(&reply, from) {
                            Ok(_) => {
                                ResponderStats::bump(&stats.probes_answered);
                            }
                            Err(error) => {
                                let count = ResponderStats::bump(&stats.send_errors);
                                if count.is_power_of_two() {
                                    tracing::warn!(%error, peer = %from, count, "probe responder: reply send failed");
                                }
                            }
                        }
                        if !probed {
                            probed = true;
                            next_register = Instant::now() + REGISTER_INTERVAL_PROBED;
                        }
                    }
                    Incoming::OtherSession => {
                        ResponderStats::bump(&stats.other_sessions);
                    }
                    Incoming::Malformed => {
                        ResponderStats::bump(&stats.malformed);
                    }
                }
            }
            () = tokio::time::sleep_until(next_register) => {
                match socket.try_send_to(&register, daemon) {
                    Ok(_) => {
                        ResponderStats::bump(&stats.registers_sent);
                    }
                    Err(error) => {
                        let count = ResponderStats::bump(&stats.send_errors);
                        if count.is_power_of_two() {
                            tracing::warn!(%error, %daemon, count, "probe responder: ProbeRegister send failed; check the daemon's sync address");
                        }
                    }
                }
                let interval = if probed { REGISTER_INTERVAL_PROBED } else { REGISTER_INTERVAL_UNPROBED };
                next_register = Instant::now() + interval;
            }
        }
    }
}

/// Binds an ephemeral UDP port of the daemon's address family, retrying
/// each second until it works or `shutdown`.
async fn bind_for(daemon: SocketAddr, shutdown: &CancellationToken) -> Option<UdpSocket> {
    let local: SocketAddr = if daemon.is_ipv6() {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    };
    loop {
        match UdpSocket::bind(local).await {
            Ok(socket) => return Some(socket),
            Err(error) => {
                tracing::warn!(%error, %local, "probe responder: cannot bind a UDP socket; retrying in 1 s");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clocks::SimulatedClock;

    const SESSION: u64 = 0x5e55_1010;

    fn probe_bytes(session_id: u64, probe_id: u64, t1_ns: u64) -> Vec<u8> {
        ProbeDatagram {
            body: Some(Body::Probe(Probe {
                session_id,
                probe_id,
                t1_ns,
            })),
        }
        .encode_to_vec()
    }

    #[test]
    fn classify_sorts_datagrams() {
        let probe = Probe {
            session_id: SESSION,
            probe_id: 3,
            t1_ns: 9,
        };
        assert_eq!(
            classify(&probe_bytes(SESSION, 3, 9), SESSION),
            Incoming::Probe(probe)
        );
        assert_eq!(
            classify(&probe_bytes(SESSION + 1, 3, 9), SESSION),
            Incoming::OtherSession
        );
        assert_eq!(
            classify(&register_datagram(SESSION), SESSION),
            Incoming::Malformed
        );
        assert_eq!(classify(&[0xff; 8], SESSION), Incoming::Malformed);
        assert_eq!(classify(&[], SESSION), Incoming::Malformed);
        assert_eq!(classify(&[0; 300], SESSION), Incoming::Malformed);
    }

    #[test]
    fn reply_echoes_the_probe() {
        let probe = Probe {
            session_id: SESSION,
            probe_id: 77,
            t1_ns: 1_000,
        };
        let bytes = reply_datagram(&probe, 5_000, 5_200, -42);
        assert!(bytes.len() <= MAX_PROBE_DATAGRAM_BYTES);
        let Some(Body::Reply(reply)) = ProbeDatagram::decode(&bytes[..]).expect("decodes").body
        else {
            panic!("not a reply");
        };
        assert_eq!(
            reply,
            ProbeReply {
                session_id: SESSION,
                probe_id: 77,
                t1_ns: 1_000,
                t2_ns: 5_000,
                t3_ns: 5_200,
                boottime_minus_monotonic_ns: -42,
            }
        );
    }

    async fn recv(socket: &UdpSocket, buffer: &mut [u8]) -> (usize, SocketAddr) {
        tokio::time::timeout(Duration::from_secs(5), socket.recv_from(buffer))
            .await
            .expect("datagram within 5 s")
            .expect("recv")
    }

    #[tokio::test]
    async fn registers_then_answers_its_own_probes_only() {
        let daemon = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let daemon_addr = daemon.local_addr().expect("addr");
        let clock: SharedClock = Arc::new(SimulatedClock::new(7_000_000_000, 0.0));
        let stats = Arc::new(ResponderStats::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run_probe_responder_with_stats(
            clock.clone(),
            daemon_addr,
            SESSION,
            shutdown.clone(),
            stats.clone(),
        ));
        let mut buffer = [0u8; 512];
        let (length, relay) = recv(&daemon, &mut buffer).await;
        assert_eq!(&buffer[..length], &register_datagram(SESSION)[..]);

        daemon.send_to(&[0xff, 0x01], relay).await.expect("send");
        daemon
            .send_to(&probe_bytes(SESSION + 1, 1, 5), relay)
            .await
            .expect("send");
        let before = clock.boottime();
        daemon
            .send_to(&probe_bytes(SESSION, 2, 123), relay)
            .await
            .expect("send");
        let (length, _) = recv(&daemon, &mut buffer).await;
        let after = clock.boottime();
        let Some(Body::Reply(reply)) = ProbeDatagram::decode(&buffer[..length])
            .expect("decodes")
            .body
        else {
            panic!("expected a reply");
        };
        assert_eq!(
            (reply.session_id, reply.probe_id, reply.t1_ns),
            (SESSION, 2, 123)
        );
        assert!(before <= reply.t2_ns && reply.t2_ns <= reply.t3_ns && reply.t3_ns <= after);
        assert_eq!(stats.probes_answered.load(Ordering::Relaxed), 1);
        assert_eq!(stats.other_sessions.load(Ordering::Relaxed), 1);
        assert_eq!(stats.malformed.load(Ordering::Relaxed), 1);
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops on shutdown")
            .expect("no panic");
    }
}
