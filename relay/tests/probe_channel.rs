//! The probe channel with real sockets on loopback: the daemon's prober
//! (library entry point `spawn_prober`) against the relay's responder
//! (`run_probe_responder`), with an on-path proxy in between.
//!
//! (a) An attacker on the path sees every probe and reply. Replies it forges
//!     for outstanding probes (without the key) and genuine replies it
//!     replays change nothing: no sync update, the accepted count stays,
//!     and the bad-MAC / replay counters move.
//! (b) With UDP going nowhere (as over `adb reverse`), the relay's `auto`
//!     transport falls back to its own TCP connection to the sync port and
//!     the daemon gets an estimate from it; `tcp` works alone too.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;
use tracesync_core::sync::{ProberStats, Registration, SyncUpdate};
use tracesync_daemon::sync::{ProbeSessions, SyncSockets, spawn_prober};
use tracesync_protocol::probe::{self, ProbeKey};
use tracesync_protocol::relay::v1::{ProbeReply, probe_body::Kind};
use tracesync_relay::clocks::{Clock, SharedClock, SimulatedClock};
use tracesync_relay::probe::{
    ProbeTarget, ResponderStats, SyncConfig, SyncTransport, run_probe_responder_with_stats,
};

const SESSION: u64 = 0x0bad_cafe_0000_0001;
const SLOT: u32 = 1;
const KEY: [u8; 32] = [0x42; 32];
const RELAY_AHEAD_NS: i64 = 2_000_000_000;

/// True host BOOTTIME for a relay BOOTTIME (see sync_loopback.rs).
fn truth_host(clock: &SimulatedClock, relay_ns: u64) -> i64 {
    clock.truth_host_boottime(relay_ns) as i64 + clock.inner.timens_boottime_offset
}

/// The daemon side: prober thread with one registered session.
struct Daemon {
    sync_addr: SocketAddr,
    sessions: ProbeSessions,
    updates: mpsc::Receiver<SyncUpdate>,
    prober: JoinHandle<()>,
    shutdown: CancellationToken,
}

impl Daemon {
    async fn start() -> Self {
        // UDP and TCP on one port number, as the daemon binds them.
        let sockets = SyncSockets::bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind sync");
        assert!(sockets.tcp.is_some(), "no port free for UDP and TCP");
        let sync_addr = sockets.udp.local_addr().expect("addr");
        let sessions = ProbeSessions::new();
        sessions.register(
            SESSION,
            Registration {
                slot: SLOT,
                machine_raw_id: 7,
                probe_key: KEY,
            },
        );
        let (tx, updates) = mpsc::channel(256);
        let shutdown = CancellationToken::new();
        let prober = spawn_prober(sockets, sessions.clone(), tx, shutdown.clone());
        Self {
            sync_addr,
            sessions,
            updates,
            prober,
            shutdown,
        }
    }

    /// Collects updates until `done(stats, updates so far)` or 20 s.
    async fn collect(
        &mut self,
        mut done: impl FnMut(&ProberStats, usize) -> bool,
    ) -> Vec<SyncUpdate> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while !done(&self.sessions.stats(), got.len()) {
            // Stats move without updates too: look again every 20 ms.
            match timeout(Duration::from_millis(20), self.updates.recv()).await {
                Ok(Some(update)) => got.push(update),
                Ok(None) => panic!("prober stopped"),
                Err(_) => assert!(
                    Instant::now() < deadline,
                    "timed out after {} updates; stats {:?}",
                    got.len(),
                    self.sessions.stats()
                ),
            }
        }
        got
    }

    async fn stop(self) {
        self.shutdown.cancel();
        timeout(Duration::from_secs(5), self.prober)
            .await
            .expect("prober stops")
            .expect("no panic");
    }
}

fn start_relay(
    daemon: SocketAddr,
    transport: SyncTransport,
) -> (
    SimulatedClock,
    Arc<ResponderStats>,
    CancellationToken,
    JoinHandle<()>,
) {
    let simulated = SimulatedClock::new(RELAY_AHEAD_NS, 20.0);
    let clock: SharedClock = Arc::new(simulated);
    let stats = Arc::new(ResponderStats::default());
    let stop = CancellationToken::new();
    let task = tokio::spawn(run_probe_responder_with_stats(
        clock,
        ProbeTarget {
            daemon,
            session_id: SESSION,
            probe_key: KEY.to_vec(),
        },
        SyncConfig {
            transport,
            ..SyncConfig::default()
        },
        stop.clone(),
        stats.clone(),
    ));
    (simulated, stats, stop, task)
}

/// Checks the estimate of the last update against the simulated truth.
fn assert_close(clock: &SimulatedClock, update: &SyncUpdate) {
    let estimate = update.estimate;
    let at = estimate.ref_relay_ns;
    let error = (estimate.to_host(at) - truth_host(clock, at)).unsigned_abs();
    let allowed = estimate.error_bound_ns.max(100_000);
    eprintln!("error {error} ns, allowed {allowed} ns: {estimate:?}");
    assert!(
        error <= allowed,
        "error {error} ns > {allowed} ns: {estimate:?}"
    );
}

/// What the on-path proxy saw.
#[derive(Default)]
struct Seen {
    /// Nonces of probes daemon -> relay.
    probe_nonces: Vec<u64>,
    /// Reply datagrams relay -> daemon, as sent.
    replies: Vec<Vec<u8>>,
}

/// A UDP proxy on the path: the relay talks to it as if it were the daemon;
/// it forwards both ways and records what passes.
async fn udp_proxy(
    daemon: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: CancellationToken,
) -> (SocketAddr, Arc<UdpSocket>, JoinHandle<()>) {
    let front = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let front_addr = front.local_addr().expect("addr");
    let back = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
    let back_task = back.clone();
    let task = tokio::spawn(async move {
        let mut relay: Option<SocketAddr> = None;
        let mut a = [0u8; 512];
        let mut b = [0u8; 512];
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                got = front.recv_from(&mut a) => {
                    let Ok((n, from)) = got else { continue };
                    relay = Some(from);
                    let bytes = &a[..n];
                    if let Ok(d) = probe::envelope(bytes)
                        && let Ok(body) = prost::Message::decode(&d.body[..])
                    {
                        let body: tracesync_protocol::relay::v1::ProbeBody = body;
                        if let Some(Kind::Reply(_)) = body.kind {
                            seen.lock().expect("lock").replies.push(bytes.to_vec());
                        }
                    }
                    let _ = back_task.send_to(bytes, daemon).await;
                }
                got = back_task.recv_from(&mut b) => {
                    let Ok((n, _)) = got else { continue };
                    let bytes = &b[..n];
                    // The probe's nonce is readable by anyone on the path.
                    if let Ok(d) = probe::envelope(bytes)
                        && let Ok(body) = prost::Message::decode(&d.body[..])
                    {
                        let body: tracesync_protocol::relay::v1::ProbeBody = body;
                        if let Some(Kind::Probe(p)) = body.kind {
                            seen.lock().expect("lock").probe_nonces.push(p.nonce);
                        }
                    }
                    if let Some(relay) = relay {
                        let _ = front.send_to(bytes, relay).await;
                    }
                }
            }
        }
    });
    (front_addr, back, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_replayed_replies_change_nothing() {
    let mut daemon = Daemon::start().await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let proxy_stop = CancellationToken::new();
    let (front, back, proxy) = udp_proxy(daemon.sync_addr, seen.clone(), proxy_stop.clone()).await;
    let (clock, _stats, relay_stop, relay) = start_relay(front, SyncTransport::Udp);

    // Genuine exchanges through the proxy: the burst and some steady probes.
    let updates = daemon.collect(|s, _| s.replies_accepted >= 12).await;
    assert_close(&clock, updates.last().expect("updates"));

    // The relay goes away; the daemon keeps probing through the proxy, so
    // probes stay outstanding, and the attacker sees their nonces.
    relay_stop.cancel();
    timeout(Duration::from_secs(5), relay)
        .await
        .expect("relay stops")
        .expect("no panic");
    let sent_at_stop = daemon.sessions.stats().probes_sent;
    daemon
        .collect(|s, _| s.probes_sent >= sent_at_stop + 3)
        .await;
    // Quiet now: nothing genuine is in flight.
    while daemon.updates.try_recv().is_ok() {}
    let before = daemon.sessions.stats();
    let nonces = seen.lock().expect("lock").probe_nonces.clone();

    // Forged replies for every probe seen (the latest are outstanding),
    // 50 ms off, without the key.
    let forger = ProbeKey::new(&[0x66; 32]).expect("key");
    for &nonce in &nonces {
        let bytes = probe::seal(
            &forger,
            SESSION,
            Kind::Reply(ProbeReply {
                nonce,
                t2_ns: 50_000_000,
                t3_ns: 50_000_100,
                boottime_minus_monotonic_ns: 0,
            }),
        );
        back.send_to(&bytes, daemon.sync_addr).await.expect("send");
    }
    let forged = nonces.len() as u64;
    // Genuine replies replayed from the relay's own (proxied) address.
    let replies = seen.lock().expect("lock").replies.clone();
    assert!(replies.len() >= 12);
    for bytes in &replies {
        back.send_to(bytes, daemon.sync_addr).await.expect("send");
    }
    let replayed = replies.len() as u64;
    daemon
        .collect(|s, _| {
            s.bad_mac >= before.bad_mac + forged
                && s.replayed + s.nonce_mismatch
                    >= before.replayed + before.nonce_mismatch + replayed
        })
        .await;
    // Give stragglers a moment; nothing may come of them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = daemon.sessions.stats();
    eprintln!("before {before:?}\nafter {after:?}");
    assert_eq!(after.bad_mac - before.bad_mac, forged);
    // Replies within the 64-probe replay window are recognised as replays;
    // older ones count as nonce mismatches. None is accepted.
    assert_eq!(
        after.replayed - before.replayed + after.nonce_mismatch - before.nonce_mismatch,
        replayed
    );
    if replies.len() <= 60 {
        assert_eq!(after.replayed - before.replayed, replayed);
    }
    assert_eq!(
        after.replies_accepted, before.replies_accepted,
        "nothing accepted"
    );
    assert!(
        daemon.updates.try_recv().is_err(),
        "no sync update from forged or replayed replies"
    );

    proxy_stop.cancel();
    let _ = timeout(Duration::from_secs(5), proxy).await;
    daemon.stop().await;
}

/// A TCP-only link (as `adb forward`/`adb reverse`): TCP connections to
/// `front` are piped to the daemon's sync port; UDP to `front` goes nowhere.
async fn tcp_only_link(
    daemon: SocketAddr,
    stop: CancellationToken,
) -> (SocketAddr, UdpSocket, JoinHandle<()>) {
    // Hold the UDP port so datagrams to it are swallowed, not refused; the
    // kernel picks the TCP port alone, so its UDP twin may be taken.
    let mut pair = None;
    for _ in 0..32 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let front = listener.local_addr().expect("addr");
        if let Ok(black_hole) = UdpSocket::bind(front).await {
            pair = Some((listener, front, black_hole));
            break;
        }
    }
    let (listener, front, black_hole) = pair.expect("a port free for TCP and UDP");
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((mut inbound, _)) = accepted else {
                continue;
            };
            let stop = stop.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = TcpStream::connect(daemon).await else {
                    return;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                tokio::select! {
                    () = stop.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                }
            });
        }
    });
    (front, black_hole, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_tcp_when_only_tcp_passes() {
    let mut daemon = Daemon::start().await;
    let link_stop = CancellationToken::new();
    let (front, _black_hole, link) = tcp_only_link(daemon.sync_addr, link_stop.clone()).await;
    let (clock, stats, relay_stop, relay) = start_relay(front, SyncTransport::Auto);

    let updates = daemon.collect(|_, n| n >= 12).await;
    let last = updates.last().expect("updates");
    assert_close(&clock, last);
    let daemon_stats = daemon.sessions.stats();
    assert!(daemon_stats.tcp_connections >= 1, "{daemon_stats:?}");
    assert_eq!(
        daemon_stats.bad_mac + daemon_stats.malformed,
        0,
        "{daemon_stats:?}"
    );
    assert_eq!(
        stats
            .transport_switches
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "UDP first, then TCP"
    );

    relay_stop.cancel();
    let _ = timeout(Duration::from_secs(5), relay).await;
    link_stop.cancel();
    let _ = timeout(Duration::from_secs(5), link).await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_transport_alone_gives_an_estimate() {
    let mut daemon = Daemon::start().await;
    let (clock, stats, relay_stop, relay) = start_relay(daemon.sync_addr, SyncTransport::Tcp);
    let updates = daemon.collect(|_, n| n >= 12).await;
    assert_close(&clock, updates.last().expect("updates"));
    assert_eq!(
        daemon.sessions.stats().registers_accepted,
        1,
        "one TCP register, no UDP"
    );
    assert_eq!(
        stats
            .tcp_connects
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    relay_stop.cancel();
    let _ = timeout(Duration::from_secs(5), relay).await;
    daemon.stop().await;
}
