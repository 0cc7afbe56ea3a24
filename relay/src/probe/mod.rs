//! The relay's side of clock sync: announce the session on the daemon's
//! sync port, answer each probe at once with the relay's BOOTTIME at
//! receive (t2) and at reply (t3) and its BOOTTIME-MONOTONIC (suspends).
//!
//! Every datagram is signed with the session's probe key (Welcome.probe_key,
//! HMAC-SHA256, `tracesync_protocol::probe`). A probe with a bad MAC, of
//! another session, or replayed (its nonce seen before, or older than the
//! replay window) is counted and not answered.
//!
//! Transports ([`SyncTransport`]): UDP datagrams to the daemon's sync port,
//! or, for links that carry only TCP (adb forward/reverse), frames on the
//! relay's own TCP connection to the same port number (TCP_NODELAY,
//! length-delimited). `auto` starts with UDP and falls back to TCP when no
//! probe arrives within [`UNPROBED_GIVE_UP`], and back to UDP when TCP
//! fails or goes silent.
//!
//! t2 on UDP is the kernel's receive timestamp (`SO_TIMESTAMPNS`,
//! CLOCK_REALTIME) mapped onto the relay's clock by
//! `tracesync_common::rx_stamp::RxStampMapper` with paired reads
//! ([`Clock::realtime_pair`](crate::clocks::Clock::realtime_pair))
//! before the wait and right after the receive; when the mapper cannot vouch
//! for it (or `TRACESYNC_KERNEL_RX_TIMESTAMPS=off`), the clock read right
//! after the receive. TCP frames are stamped in userspace.
//!
//! Between reading t2 and reading t3 run only the MAC check, the decode and
//! one clock snapshot: the daemon takes the whole hold time t3 - t2 out of
//! the round trip. After t3 come only signing the reply (encode + one HMAC
//! over ~40 bytes: 0.5 µs, `cargo bench -p tracesync-protocol --bench
//! probe_mac`) and the send: work there counts as network delay on the
//! return leg.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;
use tokio_util::codec::{Encoder, FramedRead, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracesync_common::rx_stamp::{Received, RxStamps};
use tracesync_protocol::probe::{self, NonceRejected, OpenError, ProbeKey, ReplayWindow};
use tracesync_protocol::relay::MAX_PROBE_DATAGRAM_BYTES;
use tracesync_protocol::relay::v1::{ProbeRegister, ProbeReply, probe_body::Kind};

use crate::clocks::SharedClock;

/// ProbeRegister spacing until the daemon's first probe arrives.
pub const REGISTER_INTERVAL_UNPROBED: Duration = Duration::from_secs(1);
/// ProbeRegister spacing once probed: keeps a NAT mapping fresh and lets
/// the daemon learn a changed address.
pub const REGISTER_INTERVAL_PROBED: Duration = Duration::from_secs(10);
/// `auto`: a transport that brings no probe for this long after it starts
/// is given up for the other one.
pub const UNPROBED_GIVE_UP: Duration = Duration::from_secs(3);
/// `auto`: a transport that was probed and then stays silent this long (the
/// daemon probes at least once a second) is given up for the other one.
pub const SILENCE_GIVE_UP: Duration = Duration::from_secs(5);
/// Pause before retrying after a TCP connection failed.
const TCP_RETRY: Duration = Duration::from_secs(1);

/// The relay's `[sync]` section.
#[derive(serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SyncConfig {
    /// How probes reach this relay (`--sync-transport` overrides it).
    pub transport: SyncTransport,
    /// Stamp probes with the kernel's receive time (t2), mapped onto the
    /// relay's clock, instead of the clock read after the receive.
    pub kernel_rx_timestamps: bool,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            transport: SyncTransport::default(),
            kernel_rx_timestamps: tracesync_common::rx_stamp::KERNEL_RX_TIMESTAMPS_DEFAULT,
        }
    }
}

/// How probes reach this relay (`[sync] transport`, `--sync-transport`).
#[derive(serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SyncTransport {
    /// UDP, falling back to TCP when no probe arrives.
    #[default]
    Auto,
    Udp,
    Tcp,
}

impl SyncTransport {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Self::Auto),
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            other => Err(format!(
                "unknown sync transport {other:?}; use auto, udp or tcp"
            )),
        }
    }
}

/// What the uplink learned from Welcome for the responder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The daemon's sync port (UDP, and TCP for the fallback).
    pub daemon: SocketAddr,
    pub session_id: u64,
    /// Welcome.probe_key.
    pub probe_key: Vec<u8>,
}

/// Counters of one responder (shared so the uplink or status can read them).
#[derive(Debug, Default)]
pub struct ResponderStats {
    pub registers_sent: AtomicU64,
    pub probes_answered: AtomicU64,
    /// Probes naming another session (an older connection's daemon state).
    pub other_sessions: AtomicU64,
    /// Probes whose MAC does not check with the session's key.
    pub bad_mac: AtomicU64,
    /// Probes whose nonce was seen before or is older than the window.
    pub replayed: AtomicU64,
    /// Datagrams that do not decode or are not probes.
    pub malformed: AtomicU64,
    pub send_errors: AtomicU64,
    pub recv_errors: AtomicU64,
    /// TCP probe connections opened.
    pub tcp_connects: AtomicU64,
    /// `auto` changes of transport.
    pub transport_switches: AtomicU64,
    /// UDP probes whose t2 is the kernel's receive timestamp.
    pub kernel_rx_stamps: AtomicU64,
    /// UDP probes stamped after the receive although kernel timestamps were
    /// on (none given, or not verifiable: `RxStampMapper`).
    pub rx_stamp_fallbacks: AtomicU64,
}

impl ResponderStats {
    fn bump(counter: &AtomicU64) -> u64 {
        counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn count(&self, incoming: Incoming) {
        let counter = match incoming {
            Incoming::Probe(_) => return,
            Incoming::OtherSession => &self.other_sessions,
            Incoming::BadMac => &self.bad_mac,
            Incoming::Replayed => &self.replayed,
            Incoming::Malformed => &self.malformed,
        };
        Self::bump(counter);
    }
}

/// What a received datagram is to the responder of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A fresh, authentic probe: its nonce.
    Probe(u64),
    OtherSession,
    BadMac,
    Replayed,
    Malformed,
}

/// One session's signing and replay state (sans-IO).
#[derive(Debug)]
pub struct Responder {
    session_id: u64,
    key: ProbeKey,
    window: ReplayWindow,
    register_nonce: u64,
}

impl Responder {
    /// None when the key is not 32 bytes (a daemon without probe keys).
    pub fn new(session_id: u64, probe_key: &[u8]) -> Option<Self> {
        Some(Self {
            session_id,
            key: ProbeKey::new(probe_key)?,
            window: ReplayWindow::default(),
            register_nonce: 0,
        })
    }

    /// The next signed ProbeRegister (nonces 1, 2, 3, ... over transports).
    pub fn register(&mut self) -> Vec<u8> {
        self.register_nonce += 1;
        probe::seal(
            &self.key,
            self.session_id,
            Kind::Register(ProbeRegister {
                nonce: self.register_nonce,
            }),
        )
    }

    /// Checks one received datagram; a fresh probe's nonce is recorded.
    pub fn classify(&mut self, bytes: &[u8]) -> Incoming {
        let Ok(datagram) = probe::envelope(bytes) else {
            return Incoming::Malformed;
        };
        if datagram.session_id != self.session_id {
            return Incoming::OtherSession;
        }
        match probe::open(&self.key, &datagram) {
            Ok(Kind::Probe(probe)) => match self.window.accept(probe.nonce) {
                Ok(()) => Incoming::Probe(probe.nonce),
                Err(NonceRejected::Replay | NonceRejected::TooOld) => Incoming::Replayed,
            },
            Ok(_) | Err(OpenError::Malformed) => Incoming::Malformed,
            Err(OpenError::BadMac | OpenError::SessionMismatch) => Incoming::BadMac,
        }
    }

    /// The signed reply to probe `nonce`.
    pub fn reply(&self, nonce: u64, t2: u64, t3: u64, boottime_minus_monotonic_ns: i64) -> Vec<u8> {
        probe::seal(
            &self.key,
            self.session_id,
            Kind::Reply(ProbeReply {
                nonce,
                t2_ns: t2,
                t3_ns: t3,
                boottime_minus_monotonic_ns,
            }),
        )
    }
}

/// The framing of the TCP fallback (as the daemon's).
pub fn tcp_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_PROBE_DATAGRAM_BYTES)
        .new_codec()
}

/// Answers the daemon's probes for `target` until `shutdown`.
pub async fn run_probe_responder(
    clock: SharedClock,
    target: ProbeTarget,
    sync: SyncConfig,
    shutdown: CancellationToken,
) {
    let stats = Arc::new(ResponderStats::default());
    run_probe_responder_with_stats(clock, target, sync, shutdown, stats).await;
}

/// As [`run_probe_responder`], counting into `stats`.
///
/// The responder runs on its own thread with a single-threaded runtime, so
/// t2 and t3 are not delayed by trace sources busy on the shared workers.
/// Dropping the returned future stops the thread.
pub async fn run_probe_responder_with_stats(
    clock: SharedClock,
    target: ProbeTarget,
    sync: SyncConfig,
    shutdown: CancellationToken,
    stats: Arc<ResponderStats>,
) {
    let Some(responder) = Responder::new(target.session_id, &target.probe_key) else {
        tracing::warn!(
            daemon = %target.daemon,
            "the daemon sent no usable probe key (older daemon?); clock sync is off for this session"
        );
        return;
    };
    let daemon = target.daemon;
    tracesync_common::thread::spawn_on_own_thread(
        "tracesync-probe",
        "the probe responder",
        &shutdown,
        move |stop| respond(clock, daemon, responder, sync, stop, stats),
    )
    .await;
}

/// How one transport's run ended.
enum Ended {
    Shutdown,
    /// Failed or silent: try again (the other transport under `auto`).
    Failed,
}

/// Everything a transport run needs.
struct Ctx {
    clock: SharedClock,
    daemon: SocketAddr,
    responder: Responder,
    stats: Arc<ResponderStats>,
    shutdown: CancellationToken,
    /// Give up a silent transport (`auto` only).
    give_up: bool,
    /// `[sync] kernel-rx-timestamps`.
    kernel_rx_timestamps: bool,
}

async fn respond(
    clock: SharedClock,
    daemon: SocketAddr,
    responder: Responder,
    sync: SyncConfig,
    shutdown: CancellationToken,
    stats: Arc<ResponderStats>,
) {
    let mode = sync.transport;
    let mut ctx = Ctx {
        clock,
        daemon,
        responder,
        stats,
        shutdown,
        give_up: mode == SyncTransport::Auto,
        kernel_rx_timestamps: sync.kernel_rx_timestamps,
    };
    let mut tcp = mode == SyncTransport::Tcp;
    loop {
        let was_tcp = tcp;
        let ended = if tcp {
            run_tcp(&mut ctx).await
        } else {
            run_udp(&mut ctx).await
        };
        match ended {
            Ended::Shutdown => return,
            Ended::Failed if ctx.give_up => {
                tcp = !tcp;
                ResponderStats::bump(&ctx.stats.transport_switches);
                let (from, to) = if tcp { ("UDP", "TCP") } else { ("TCP", "UDP") };
                tracing::info!(%daemon, "probe responder: no probes over {from}; trying {to}");
            }
            Ended::Failed => {}
        }
        if was_tcp {
            tokio::select! {
                () = ctx.shutdown.cancelled() => return,
                () = tokio::time::sleep(TCP_RETRY) => {}
            }
        }
    }
}

/// When a silent transport is given up (`auto`), or never.
fn give_up_at(ctx: &Ctx, started: Instant, last_probe: Option<Instant>) -> Option<Instant> {
    ctx.give_up.then(|| match last_probe {
        Some(at) => at + SILENCE_GIVE_UP,
        None => started + UNPROBED_GIVE_UP,
    })
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn run_udp(ctx: &mut Ctx) -> Ended {
    let Some(socket) = bind_for(ctx.daemon, &ctx.shutdown).await else {
        return Ended::Shutdown;
    };
    let started = Instant::now();
    let mut last_probe: Option<Instant> = None;
    let mut next_register = Instant::now();
    // One byte more than the limit: a truncated read shows as oversized.
    let mut buffer = [0u8; MAX_PROBE_DATAGRAM_BYTES + 1];
    let mut rx = RxStamps::new(&socket, ctx.kernel_rx_timestamps, "probe responder");
    loop {
        rx.before_wait(&*ctx.clock);
        tokio::select! {
            biased;
            () = ctx.shutdown.cancelled() => return Ended::Shutdown,
            received = rx.recv(&socket, &mut buffer, &*ctx.clock) => {
                let Received { len: length, from, stamp: t2, kernel } = match received {
                    Ok(received) => received,
                    Err(error) => {
                        let count = ResponderStats::bump(&ctx.stats.recv_errors);
                        if count.is_power_of_two() {
                            tracing::warn!(%error, daemon = %ctx.daemon, count, "probe responder: receive failed; retrying");
                        }
                        // Persistent errors must not spin the task.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if kernel {
                    ResponderStats::bump(&ctx.stats.kernel_rx_stamps);
                } else if rx.stats().is_some() {
                    ResponderStats::bump(&ctx.stats.rx_stamp_fallbacks);
                }
                let bytes = buffer.get(..length).unwrap_or_default();
                match ctx.responder.classify(bytes) {
                    Incoming::Probe(nonce) => {
                        let suspend_offset = ctx.clock.now().suspend_offset();
                        let t3 = ctx.clock.boottime();
                        let reply = ctx.responder.reply(nonce, t2, t3, suspend_offset);
                        // try_send_to: a wait here would sit after t3.
                        match socket.try_send_to(&reply, from) {
                            Ok(_) => {
                                ResponderStats::bump(&ctx.stats.probes_answered);
                            }
                            Err(error) => {
                                let count = ResponderStats::bump(&ctx.stats.send_errors);
                                if count.is_power_of_two() {
                                    tracing::warn!(%error, peer = %from, count, "probe responder: reply send failed");
                                }
                            }
                        }
                        if last_probe.is_none() {
                            next_register = Instant::now() + REGISTER_INTERVAL_PROBED;
                        }
                        last_probe = Some(Instant::now());
                    }
                    other => ctx.stats.count(other),
                }
            }
            () = tokio::time::sleep_until(next_register) => {
                let register = ctx.responder.register();
                match socket.try_send_to(&register, ctx.daemon) {
                    Ok(_) => {
                        ResponderStats::bump(&ctx.stats.registers_sent);
                    }
                    Err(error) => {
                        let count = ResponderStats::bump(&ctx.stats.send_errors);
                        if count.is_power_of_two() {
                            tracing::warn!(%error, daemon = %ctx.daemon, count, "probe responder: ProbeRegister send failed; check the daemon's sync address");
                        }
                    }
                }
                let interval = if last_probe.is_some() { REGISTER_INTERVAL_PROBED } else { REGISTER_INTERVAL_UNPROBED };
                next_register = Instant::now() + interval;
            }
            () = sleep_until_or_forever(give_up_at(ctx, started, last_probe)) => return Ended::Failed,
        }
    }
}

async fn run_tcp(ctx: &mut Ctx) -> Ended {
    let started = Instant::now();
    let connect = tokio::time::timeout(UNPROBED_GIVE_UP, TcpStream::connect(ctx.daemon));
    let stream = tokio::select! {
        () = ctx.shutdown.cancelled() => return Ended::Shutdown,
        connected = connect => match connected {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                tracing::debug!(%error, daemon = %ctx.daemon, "probe responder: TCP connect failed");
                return Ended::Failed;
            }
            Err(_) => return Ended::Failed,
        },
    };
    ResponderStats::bump(&ctx.stats.tcp_connects);
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "probe responder: TCP_NODELAY failed");
    }
    let (read, mut write) = stream.into_split();
    let mut frames = FramedRead::new(read, tcp_codec());
    let mut codec = tcp_codec();
    let mut frame = BytesMut::new();
    let register = ctx.responder.register();
    if write_frame(&mut codec, &mut frame, &mut write, register)
        .await
        .is_err()
    {
        return Ended::Failed;
    }
    ResponderStats::bump(&ctx.stats.registers_sent);
    let mut last_probe: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            () = ctx.shutdown.cancelled() => return Ended::Shutdown,
            received = frames.next() => {
                let t2 = ctx.clock.boottime();
                let bytes = match received {
                    Some(Ok(bytes)) => bytes,
                    Some(Err(error)) => {
                        tracing::debug!(%error, daemon = %ctx.daemon, "probe responder: TCP probe connection failed");
                        return Ended::Failed;
                    }
                    None => return Ended::Failed,
                };
                match ctx.responder.classify(&bytes) {
                    Incoming::Probe(nonce) => {
                        let suspend_offset = ctx.clock.now().suspend_offset();
                        let t3 = ctx.clock.boottime();
                        let reply = ctx.responder.reply(nonce, t2, t3, suspend_offset);
                        if write_frame(&mut codec, &mut frame, &mut write, reply).await.is_err() {
                            ResponderStats::bump(&ctx.stats.send_errors);
                            return Ended::Failed;
                        }
                        ResponderStats::bump(&ctx.stats.probes_answered);
                        last_probe = Some(Instant::now());
                    }
                    other => ctx.stats.count(other),
                }
            }
            () = sleep_until_or_forever(give_up_at(ctx, started, last_probe)) => return Ended::Failed,
        }
    }
}

/// Writes one length-delimited frame (one write call on an idle socket).
async fn write_frame(
    codec: &mut LengthDelimitedCodec,
    frame: &mut BytesMut,
    write: &mut tokio::net::tcp::OwnedWriteHalf,
    bytes: Vec<u8>,
) -> std::io::Result<()> {
    frame.clear();
    codec.encode(Bytes::from(bytes), frame)?;
    write.write_all(frame).await
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
mod tests;
