//! The prober's tokio edge: one thread owns the daemon's sync socket (UDP)
//! and the TCP listener of the fallback on the same port number, stamps t1
//! right before each send and t4 right after each receive, and hands
//! updates to the ingest loop without ever waiting on it.
//!
//! Kernel receive timestamps: unless switched off
//! (`TRACESYNC_KERNEL_RX_TIMESTAMPS=off`), the UDP socket asks for
//! `SO_TIMESTAMPNS` and t4 is the kernel's receive time (CLOCK_REALTIME),
//! mapped onto BOOTTIME by [`tracesync_common::rx_stamp::RxStampMapper`] with paired REALTIME/BOOTTIME
//! reads before the wait and right after the receive; a stamp it cannot
//! vouch for falls back to the BOOTTIME read after the receive (counted,
//! logged). TCP frames are always stamped in userspace.
//!
//! TCP fallback: a relay whose link carries only TCP (adb forward/reverse)
//! opens its own connection to the sync port (TCP_NODELAY), framed with
//! LengthDelimitedCodec, one `ProbeDatagram` per frame. The connection must
//! authenticate (a signed ProbeRegister) as its first frame, within
//! [`TCP_REGISTER_TIMEOUT`]; any frame that does not authenticate closes it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::JoinHandle;
use tokio_util::codec::{Encoder, FramedRead, LengthDelimitedCodec};
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::MAX_PROBE_DATAGRAM_BYTES;

use super::ProbeSessions;
use super::sockets::SyncSockets;
use tracesync_common::clock::{SystemClock, boottime_ns};
use tracesync_common::rx_stamp::{KERNEL_RX_TIMESTAMPS_DEFAULT, Received, RxStamps};
use tracesync_core::sync::{ProbeDue, ProberConfig, ProberCore, Route, SyncUpdate};

/// Receive buffer asked for: bursts from many relays must not be dropped
/// while the task is busy.
const RECV_BUFFER_BYTES: usize = 1 << 20;

/// Datagrams taken from the sync socket in one turn of the prober's loop
/// at most (then probes due are sent, updates handed on).
const RECV_BATCH: usize = 256;

/// Longest sleep between registry checks (a newly registered session waits
/// at most this for its first ProbeRegister to be answered).
const IDLE_TICK: Duration = Duration::from_millis(50);

/// Retry interval for updates the ingest loop had no room for.
const RETRY_TICK: Duration = Duration::from_millis(10);

/// Samples held per session while the update channel is full.
const MAX_HELD_SAMPLES: usize = 1024;

/// Most TCP probe connections at once; more are closed at accept.
pub const MAX_TCP_CONNECTIONS: usize = 1024;

/// A TCP probe connection must authenticate within this.
pub const TCP_REGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// Frames received on TCP probe connections waiting for the main loop.
const TCP_EVENT_QUEUE: usize = 1024;

/// The framing of the TCP fallback (big-endian u32 length prefix).
pub fn tcp_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_PROBE_DATAGRAM_BYTES)
        .new_codec()
}

/// Starts the prober on the sync port's `sockets` (bind them with
/// [`SyncSockets::bind`], which keeps UDP and TCP on one port number) with
/// the default schedule. It stops on `shutdown` or when `updates` is closed.
pub fn spawn_prober(
    sockets: SyncSockets,
    sessions: ProbeSessions,
    updates: mpsc::Sender<SyncUpdate>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    spawn_prober_with(
        sockets,
        sessions,
        updates,
        shutdown,
        ProberConfig::default(),
        KERNEL_RX_TIMESTAMPS_DEFAULT,
    )
}

/// As [`spawn_prober`] with an explicit schedule and estimator tuning;
/// `kernel_rx_timestamps`: ask the UDP socket for kernel receive stamps (t4).
///
/// The prober runs on its own thread with a single-threaded runtime: t1
/// and t4 must not wait behind ingest work on a shared worker (that delay
/// would land on one leg only). The returned task ends with the thread;
/// aborting it stops the thread.
pub fn spawn_prober_with(
    sockets: SyncSockets,
    sessions: ProbeSessions,
    updates: mpsc::Sender<SyncUpdate>,
    shutdown: CancellationToken,
    config: ProberConfig,
    kernel_rx_timestamps: bool,
) -> JoinHandle<()> {
    let SyncSockets { udp: socket, tcp } = sockets;
    let socket = match socket.into_std() {
        Ok(socket) => socket,
        Err(error) => {
            tracing::error!(%error, "sync: cannot move the sync socket to the prober thread; clock sync is off");
            return tokio::spawn(async {});
        }
    };
    tokio::spawn(tracesync_common::thread::spawn_on_own_thread(
        "tracesync-sync",
        "clock sync",
        &shutdown,
        move |stop| {
            run(
                socket,
                tcp,
                sessions,
                updates,
                stop,
                config,
                kernel_rx_timestamps,
            )
        },
    ))
}

enum TcpEvent {
    Frame { conn: u64, bytes: Bytes, t4: u64 },
    Closed { conn: u64 },
}

struct TcpConn {
    writer: OwnedWriteHalf,
    reader: JoinHandle<()>,
    opened: Instant,
    /// The session the connection authenticated for.
    session: Option<u64>,
}

/// The TCP probe connections of the edge.
struct TcpConns {
    next_id: u64,
    conns: HashMap<u64, TcpConn>,
    events: mpsc::Sender<TcpEvent>,
    codec: LengthDelimitedCodec,
}

impl TcpConns {
    fn accept(&mut self, stream: TcpStream, core: &mut ProberCore) {
        if self.conns.len() >= MAX_TCP_CONNECTIONS {
            core.stats_mut().tcp_refused += 1;
            return;
        }
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "sync: TCP_NODELAY failed on a probe connection");
        }
        self.next_id += 1;
        let conn = self.next_id;
        let (read, writer) = stream.into_split();
        let events = self.events.clone();
        let reader = tokio::spawn(async move {
            let mut frames = FramedRead::new(read, tcp_codec());
            while let Some(Ok(frame)) = frames.next().await {
                let t4 = boottime_ns();
                let bytes = frame.freeze();
                if events
                    .send(TcpEvent::Frame { conn, bytes, t4 })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            let _ = events.send(TcpEvent::Closed { conn }).await;
        });
        core.stats_mut().tcp_connections += 1;
        self.conns.insert(
            conn,
            TcpConn {
                writer,
                reader,
                opened: Instant::now(),
                session: None,
            },
        );
    }

    fn close(&mut self, conn: u64, core: &mut ProberCore) {
        if let Some(closed) = self.conns.remove(&conn) {
            closed.reader.abort();
            core.route_closed(Route::Tcp(conn));
        }
    }

    fn on_frame(
        &mut self,
        conn: u64,
        bytes: &[u8],
        t4: u64,
        core: &mut ProberCore,
    ) -> Option<SyncUpdate> {
        let bound = self.conns.get(&conn)?.session;
        let (session, update) = core.on_datagram(bytes, Route::Tcp(conn), t4);
        match (session, bound) {
            (Some(session), None) => {
                if let Some(entry) = self.conns.get_mut(&conn) {
                    entry.session = Some(session);
                }
            }
            (Some(session), Some(bound)) if session == bound => {}
            // Unauthenticated, or another session's frame: a stream peer
            // that sends either is not a relay of ours.
            _ => {
                core.stats_mut().tcp_refused += 1;
                self.close(conn, core);
            }
        }
        update
    }

    /// Closes connections that did not authenticate in time.
    fn expire(&mut self, core: &mut ProberCore) {
        let late: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.session.is_none() && c.opened.elapsed() > TCP_REGISTER_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        for conn in late {
            core.stats_mut().tcp_refused += 1;
            self.close(conn, core);
        }
    }

    /// Sends one framed probe; a connection that cannot take a tiny frame
    /// at once is closed (the relay reconnects). Returns t1 when sent.
    fn send(&mut self, conn: u64, bytes: &[u8], core: &mut ProberCore) -> Option<u64> {
        let mut frame = BytesMut::with_capacity(bytes.len() + 4);
        if self
            .codec
            .encode(Bytes::copy_from_slice(bytes), &mut frame)
            .is_err()
        {
            return None;
        }
        let entry = self.conns.get(&conn)?;
        let t1 = boottime_ns();
        match entry.writer.try_write(&frame) {
            Ok(written) if written == frame.len() => Some(t1),
            _ => {
                core.stats_mut().send_errors += 1;
                self.close(conn, core);
                None
            }
        }
    }
}

async fn run(
    socket: std::net::UdpSocket,
    tcp: Option<std::net::TcpListener>,
    sessions: ProbeSessions,
    updates: mpsc::Sender<SyncUpdate>,
    shutdown: CancellationToken,
    config: ProberConfig,
    kernel_rx_timestamps: bool,
) {
    let socket = match UdpSocket::from_std(socket) {
        Ok(socket) => socket,
        Err(error) => {
            tracing::error!(%error, "sync: cannot register the sync socket; clock sync is off");
            return;
        }
    };
    if let Err(error) = socket2::SockRef::from(&socket).set_recv_buffer_size(RECV_BUFFER_BYTES) {
        tracing::debug!(%error, "sync socket: could not raise the receive buffer; keeping the default");
    }
    let listener = tcp.and_then(|listener| match TcpListener::from_std(listener) {
        Ok(listener) => Some(listener),
        Err(error) => {
            tracing::warn!(%error, "sync: cannot register the TCP probe listener; TCP fallback is off");
            None
        }
    });
    let (tcp_tx, mut tcp_events) = mpsc::channel(TCP_EVENT_QUEUE);
    let mut conns = TcpConns {
        next_id: 0,
        conns: HashMap::new(),
        events: tcp_tx,
        codec: tcp_codec(),
    };
    let mut rx = RxStamps::new(&socket, kernel_rx_timestamps, "sync socket");
    let host = SystemClock::default();
    let mut core = ProberCore::new(config);
    let mut held = HeldUpdates::default();
    let mut seen_generation = 0;
    let mut due: Vec<ProbeDue> = Vec::new();
    // One byte more than the limit: a truncated read shows as oversized.
    let mut buffer = [0u8; MAX_PROBE_DATAGRAM_BYTES + 1];
    loop {
        refresh(&sessions, &mut seen_generation, &mut held, &mut core);
        conns.expire(&mut core);
        send_due_probes(&socket, &mut conns, &mut core, &mut due);
        if updates.is_closed() || held.flush(&updates).is_err() {
            tracing::debug!("sync: update channel closed; prober stops");
            break;
        }
        core.stats_mut().samples_dropped = held.samples_dropped;
        sessions.publish_stats(core.stats());

        let now = boottime_ns();
        let mut sleep = core
            .next_wakeup_ns()
            .map_or(IDLE_TICK, |at| Duration::from_nanos(at.saturating_sub(now)))
            .min(IDLE_TICK);
        if !held.is_empty() {
            sleep = sleep.min(RETRY_TICK);
        }
        rx.before_wait(&host);
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            received = rx.recv(&socket, &mut buffer, &host) => {
                match received {
                    Ok(first) => take_batch(first, &mut rx, &socket, &mut buffer, &host, |judged| {
                        judge(judged, &sessions, &mut seen_generation, &mut held, &mut core);
                    }),
                    Err(error) => {
                        let errors = &mut core.stats_mut().recv_errors;
                        *errors += 1;
                        if errors.is_power_of_two() {
                            tracing::warn!(%error, count = *errors, "sync socket: receive failed; probes continue");
                        }
                    }
                }
            }
            Some(event) = tcp_events.recv() => match event {
                TcpEvent::Frame { conn, bytes, t4 } => {
                    refresh(&sessions, &mut seen_generation, &mut held, &mut core);
                    if let Some(update) = conns.on_frame(conn, &bytes, t4, &mut core) {
                        held.push(update);
                    }
                }
                TcpEvent::Closed { conn } => conns.close(conn, &mut core),
            },
            accepted = accept(listener.as_ref()) => match accepted {
                Ok((stream, _)) => conns.accept(stream, &mut core),
                Err(error) => {
                    let errors = &mut core.stats_mut().recv_errors;
                    *errors += 1;
                    if errors.is_power_of_two() {
                        tracing::warn!(%error, count = *errors, "sync: TCP probe accept failed");
                    }
                    // Out of descriptors and the like: do not spin.
                    tokio::time::sleep(RETRY_TICK).await;
                }
            },
            () = tokio::time::sleep(sleep) => {}
        }
    }
    sessions.publish_stats(core.stats());
}

/// Takes the registered sessions if they changed since `seen`: at the top
/// of every turn, and before every datagram or frame is judged, so the
/// first ProbeRegister of a session registered a moment ago is not counted
/// as `unknown_session` (a lock and a comparison when nothing changed).
fn refresh(
    sessions: &ProbeSessions,
    seen: &mut u64,
    held: &mut HeldUpdates,
    core: &mut ProberCore,
) {
    if let Some((generation, registered)) = sessions.changed_since(*seen) {
        *seen = generation;
        held.retain_sessions(|id| registered.contains_key(&id));
        core.set_registered(registered);
    }
}

/// Judges `first` and then each datagram already queued behind it, up to
/// [`RECV_BATCH`] in all, without a turn of the prober's loop (timers,
/// stats, flushes) each: under a flood of junk the relays' replies must
/// not wait in the socket's buffer, or overflow it, behind the junk.
fn take_batch(
    first: Received,
    rx: &mut RxStamps,
    socket: &UdpSocket,
    buffer: &mut [u8],
    host: &SystemClock,
    mut judge: impl FnMut((&[u8], Route, u64)),
) {
    let mut next = Some(first);
    let mut taken = 0;
    while let Some(Received {
        len,
        from,
        stamp: t4,
        ..
    }) = next
    {
        judge((buffer.get(..len).unwrap_or_default(), Route::Udp(from), t4));
        taken += 1;
        // An error (none waiting) ends the batch; the wait reports others.
        next = (taken < RECV_BATCH)
            .then(|| rx.try_recv(socket, buffer, host).ok())
            .flatten();
    }
}

/// One datagram (bytes, route, t4) judged by the prober core; its update
/// held for the ingest loop. A relay registers right after its Welcome:
/// the registry may have its session since the last look.
fn judge(
    (bytes, route, t4): (&[u8], Route, u64),
    sessions: &ProbeSessions,
    seen: &mut u64,
    held: &mut HeldUpdates,
    core: &mut ProberCore,
) {
    refresh(sessions, seen, held, core);
    if let (_, Some(update)) = core.on_datagram(bytes, route, t4) {
        held.push(update);
    }
}

/// Accepts on the fallback listener; pending forever without one.
async fn accept(
    listener: Option<&TcpListener>,
) -> std::io::Result<(TcpStream, std::net::SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

fn send_due_probes(
    socket: &UdpSocket,
    conns: &mut TcpConns,
    core: &mut ProberCore,
    due: &mut Vec<ProbeDue>,
) {
    due.clear();
    core.poll(boottime_ns(), due);
    for probe in due.iter() {
        let Some(prepared) = core.prepare_probe(probe.session_id) else {
            continue;
        };
        let sent = match prepared.route {
            Route::Udp(addr) => {
                let t1 = boottime_ns();
                // try_send_to: a UDP socket is writable nearly always, and
                // waiting here would put the wait between t1 and the wire.
                match socket.try_send_to(&prepared.bytes, addr) {
                    Ok(_) => Some(t1),
                    Err(error) => {
                        let errors = &mut core.stats_mut().send_errors;
                        *errors += 1;
                        if errors.is_power_of_two() {
                            tracing::warn!(%error, peer = %addr, count = *errors, "sync socket: probe send failed; check the relay's reachability");
                        }
                        None
                    }
                }
            }
            Route::Tcp(conn) => conns.send(conn, &prepared.bytes, core),
        };
        if let Some(t1) = sent {
            core.probe_sent(prepared.session_id, prepared.nonce, t1);
        }
    }
}

/// Updates waiting for room in the channel, merged per session: the latest
/// estimate and every sample since the last delivered update (bounded).
#[derive(Debug, Default)]
struct HeldUpdates {
    by_session: HashMap<u64, SyncUpdate>,
    samples_dropped: u64,
}

struct ChannelClosed;

impl HeldUpdates {
    fn is_empty(&self) -> bool {
        self.by_session.is_empty()
    }

    fn push(&mut self, update: SyncUpdate) {
        match self.by_session.get_mut(&update.session_id) {
            Some(held) => {
                held.slot = update.slot;
                held.estimate = update.estimate;
                held.samples.extend(update.samples);
                let excess = held.samples.len().saturating_sub(MAX_HELD_SAMPLES);
                if excess > 0 {
                    held.samples.drain(..excess);
                    self.samples_dropped += excess as u64;
                }
            }
            None => {
                self.by_session.insert(update.session_id, update);
            }
        }
    }

    fn retain_sessions(&mut self, keep: impl Fn(u64) -> bool) {
        self.by_session.retain(|id, _| keep(*id));
    }

    fn flush(&mut self, updates: &mpsc::Sender<SyncUpdate>) -> Result<(), ChannelClosed> {
        let sessions: Vec<u64> = self.by_session.keys().copied().collect();
        for session_id in sessions {
            let Some(update) = self.by_session.remove(&session_id) else {
                continue;
            };
            match updates.try_send(update) {
                Ok(()) => {}
                Err(TrySendError::Full(update)) => {
                    self.by_session.insert(session_id, update);
                }
                Err(TrySendError::Closed(_)) => return Err(ChannelClosed),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
