//! The uplink: one task that owns the spool and the daemon connection. It
//! takes sources' packets into the spool, runs the [`Session`] state
//! machine, and executes its actions on the connection.
//!
//! Shutdown: when `shutdown` is cancelled the uplink keeps taking packets
//! until the sources close their senders (or a short grace passes), writes
//! the last batch, syncs the spool, and waits for acks up to the drain
//! timeout. What is still unacked then stays in the spool for next time.

mod claims;
mod connection;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::PROTOCOL_VERSION;
use tracesync_protocol::relay::v1::{self, frame::Body};

pub use connection::{Connection, ConnectionEvent, FrameCodec, OutFrame};

use crate::clocks::SharedClock;
use crate::session::{Action, Session, SessionConfig};
use crate::spool::{Incoming, Spool, SpoolError};

/// What the relay says about itself in Hello.
#[derive(Clone, Debug, Default)]
pub struct HelloInfo {
    pub token: String,
    pub boot_id: String,
    pub machine_name: String,
    pub machine_raw_id: u32,
}

#[derive(Clone, Debug)]
pub struct UplinkConfig {
    /// Daemon address, HOST:PORT.
    pub host: String,
    pub hello: HelloInfo,
    pub session: SessionConfig,
    pub connect_timeout: Duration,
    /// After shutdown: how long sources may take to close their senders.
    pub intake_grace: Duration,
    /// After shutdown: how long to wait for the daemon's acks.
    pub drain_timeout: Duration,
    /// Mutual TLS to the daemon (None: plaintext TCP).
    pub tls: Option<crate::tls::ClientTls>,
}

impl UplinkConfig {
    pub fn new(host: String, hello: HelloInfo) -> Self {
        Self {
            host,
            hello,
            session: SessionConfig::default(),
            connect_timeout: Duration::from_secs(5),
            intake_grace: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(5),
            tls: None,
        }
    }
}

/// How the uplink ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UplinkExit {
    /// Shut down with everything acknowledged.
    Drained,
    /// Shut down with batches still unacknowledged (kept in the spool).
    DrainTimedOut { unacked_batches: u64 },
    /// The daemon refused our credentials.
    Refused { reason: String },
}

/// Starts the clock-sync probe responder for a session: daemon sync
/// address, session id and probe key, and a token cancelled when the
/// connection ends.
pub type ProbeStarter = Box<dyn FnMut(crate::probe::ProbeTarget, CancellationToken) + Send>;

/// Runs until shutdown (drained or timed out) or an authentication refusal.
/// `incoming` carries the sources' messages, `convert` turns each into the
/// spool's [`Incoming`] (serializing the source's cursor). Returns the
/// spool, synced, for inspection.
pub async fn run<M: Send + 'static>(
    config: UplinkConfig,
    clock: SharedClock,
    spool: Spool,
    incoming: mpsc::Receiver<M>,
    convert: fn(M) -> Incoming,
    start_probe: ProbeStarter,
    shutdown: CancellationToken,
) -> (UplinkExit, Spool) {
    let seed = spool.instance_id() ^ clock.boottime();
    let session = Session::new(config.session.clone(), now(), seed);
    let start = read_clocks(&clock);
    let mut uplink = Uplink {
        config,
        clock,
        spool,
        session,
        connection: None,
        peer: None,
        start_probe,
        last_error_log: None,
        refusal: None,
        metrics: crate::metrics::UplinkMetrics::default(),
        cut_clocks: claims::CutClocks::new(start),
        last_ack_at: now(),
        ahead: Duration::ZERO,
    };
    let exit = uplink.run(incoming, convert, shutdown).await;
    if let Err(error) = uplink.spool.sync() {
        tracing::error!("{error}");
    }
    (exit, uplink.spool)
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

struct Uplink {
    config: UplinkConfig,
    clock: SharedClock,
    spool: Spool,
    session: Session,
    connection: Option<Connection>,
    peer: Option<SocketAddr>,
    start_probe: ProbeStarter,
    last_error_log: Option<Instant>,
    refusal: Option<String>,
    metrics: crate::metrics::UplinkMetrics,
    /// When each unacked batch was cut: what batches and heartbeats claim
    /// (see [`claims`]).
    cut_clocks: claims::CutClocks,
    /// The last ack (or Welcome).
    last_ack_at: Instant,
    /// How far the clocks sent run ahead of the batches after a stall
    /// (see [`claims`]; zero once the backlog is sent or on a new
    /// connection).
    ahead: Duration,
}

/// Shutdown progress.
struct Drain {
    close_intake_at: Instant,
    give_up_at: Instant,
    intake_closed: bool,
    flushed: bool,
}

impl Uplink {
    async fn run<M>(
        &mut self,
        mut incoming: mpsc::Receiver<M>,
        convert: fn(M) -> Incoming,
        shutdown: CancellationToken,
    ) -> UplinkExit {
        let mut drain: Option<Drain> = None;
        let mut intake_open = true;
        loop {
            let now = now();
            if let Err(error) = self.spool.tick(now) {
                self.log_error(&error, now);
            }
            if let Some(drain) = &mut drain {
                if !drain.intake_closed && now >= drain.close_intake_at {
                    // Sources did not all finish: take what is queued, no more.
                    incoming.close();
                    drain.intake_closed = true;
                }
                if !intake_open && !drain.flushed {
                    if let Err(error) = self.spool.flush_all() {
                        tracing::error!("{error}");
                    }
                    drain.flushed = true;
                }
            }
            self.note_cuts();
            self.drive(now);
            self.metrics.tick(now, &self.spool, &self.session);
            if self.session.has_exited() {
                return UplinkExit::Refused {
                    reason: self.refusal.clone().unwrap_or_default(),
                };
            }
            if let Some(drain) = &drain
                && drain.flushed
            {
                let unacked = self
                    .spool
                    .last_seq()
                    .saturating_sub(self.session.acked_through());
                if unacked == 0 {
                    return UplinkExit::Drained;
                }
                if now >= drain.give_up_at {
                    return UplinkExit::DrainTimedOut {
                        unacked_batches: unacked,
                    };
                }
            }
            let deadline = [
                self.session.deadline(),
                self.spool.deadline(),
                drain
                    .as_ref()
                    .filter(|d| !d.intake_closed)
                    .map(|d| d.close_intake_at),
                drain.as_ref().map(|d| d.give_up_at),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(1))
            // Never spin on a deadline that is already due.
            .max(now + Duration::from_millis(1));
            let draining = drain.is_some();
            let take = intake_open && (draining || self.spool.accepts());
            tokio::select! {
                () = shutdown.cancelled(), if !draining => {
                    drain = Some(Drain {
                        close_intake_at: now + self.config.intake_grace,
                        give_up_at: now + self.config.drain_timeout,
                        intake_closed: false,
                        flushed: false,
                    });
                }
                event = next_event(&mut self.connection) => self.on_event(event, now),
                message = incoming.recv(), if take => match message {
                    Some(message) => {
                        if let Err(error) = self.spool.push(convert(message), now) {
                            self.log_error(&error, now);
                        }
                    }
                    None => {
                        intake_open = false;
                        if drain.is_none() {
                            // Every source ended: send the rest, then keep serving acks.
                            if let Err(error) = self.spool.flush_all() {
                                tracing::error!("{error}");
                            }
                        }
                    }
                },
                () = tokio::time::sleep_until(deadline.into()) => {}
            }
        }
    }

    /// Executes what the session wants until it wants nothing more now.
    fn drive(&mut self, now: Instant) {
        while let Some(action) =
            self.session
                .poll(now, self.spool.oldest_unacked(), self.spool.last_seq())
        {
            self.execute(action, now);
        }
    }

    fn execute(&mut self, action: Action, now: Instant) {
        match action {
            Action::Connect => {
                self.ahead = Duration::ZERO;
                // The queue holds at most a window of batches plus control frames.
                let queue = self.config.session.window_batches + 8;
                self.connection = Some(Connection::open(
                    self.config.host.clone(),
                    self.config.connect_timeout,
                    self.config.tls.clone(),
                    queue,
                ));
                self.peer = None;
            }
            Action::SendHello => {
                let hello = &self.config.hello;
                let frame = Body::Hello(v1::Hello {
                    protocol_version: PROTOCOL_VERSION,
                    token: hello.token.clone(),
                    relay_instance_id: self.spool.instance_id(),
                    boot_id: hello.boot_id.clone(),
                    machine_name: hello.machine_name.clone(),
                    machine_raw_id: hello.machine_raw_id,
                    oldest_unacked_batch: self.spool.oldest_unacked(),
                    clocks: Some(self.claim(self.spool.oldest_unacked())),
                });
                self.send(frame, now);
            }
            Action::SendBatch(seq) => {
                let Some(batch) = self.spool.batch(seq) else {
                    // Dropped by the spool since: nothing to send.
                    self.session.sent(seq, 0, now);
                    return;
                };
                let bytes = batch.bytes;
                // The spool's wire-form packets go out as they are, with
                // the clocks of when the batch was cut.
                let cut = self.cut_clocks.of(seq).unwrap_or_else(|| self.claim(seq));
                let clocks = claims::advance(cut, self.ahead, self.clocks());
                let frame = OutFrame::batch(seq, batch.first_packet_index, batch.wire, &clocks);
                if self.send_out(frame, now) {
                    self.session.sent(seq, bytes, now);
                    crate::metrics::batch_sent(bytes);
                    if seq >= self.spool.last_seq() {
                        // The backlog is sent: nothing to run ahead of.
                        self.ahead = Duration::ZERO;
                    }
                }
            }
            Action::SendHeartbeat { last_batch_sent } => {
                let frame = Body::Heartbeat(v1::Heartbeat {
                    clocks: Some(self.heartbeat_claim(last_batch_sent, now)),
                    last_batch_sent,
                });
                // A full queue means the link is busy, which says as much as a
                // heartbeat; a closed one reports itself as Lost.
                if let Some(connection) = &self.connection
                    && let Ok(frame) = OutFrame::encode(&v1::Frame { body: Some(frame) })
                {
                    connection.send(frame);
                }
            }
            Action::AckSpool(through) => {
                let acked = (through + 1).saturating_sub(self.spool.oldest_unacked());
                crate::metrics::batches_acked(acked);
                // A Welcome acks too (maybe nothing new): either way the
                // daemon is moving.
                self.last_ack_at = now;
                self.cut_clocks.forget_before(through + 1);
                if let Err(error) = self.spool.ack(through) {
                    self.log_error(&error, now);
                }
            }
            Action::StartProbe {
                session_id,
                sync_udp_port,
                probe_key,
            } => {
                if let (Some(connection), Some(peer)) = (&self.connection, self.peer) {
                    let target = crate::probe::ProbeTarget {
                        daemon: SocketAddr::new(peer.ip(), sync_udp_port),
                        session_id,
                        probe_key,
                    };
                    (self.start_probe)(target, connection.token.child_token());
                }
            }
            Action::Close { reason } => {
                if !reason.is_empty() {
                    tracing::warn!("daemon {}: {reason}; reconnecting", self.config.host);
                }
                self.connection = None;
            }
            Action::Exit { reason } => {
                tracing::error!("daemon {} refused this relay: {reason}", self.config.host);
                self.connection = None;
                self.refusal = Some(reason);
            }
        }
    }

    /// Queues a frame; a full queue or a dead connection counts as lost.
    fn send(&mut self, body: Body, now: Instant) -> bool {
        self.send_out(OutFrame::encode(&v1::Frame { body: Some(body) }), now)
    }

    /// Queues an encoded frame; a frame that cannot be encoded (over the
    /// frame limit), a full queue or a dead connection counts as lost.
    fn send_out(&mut self, frame: std::io::Result<OutFrame>, now: Instant) -> bool {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                tracing::error!("daemon {}: cannot send: {e}", self.config.host);
                self.connection = None;
                self.session.connection_lost(now);
                return false;
            }
        };
        let sent = self.connection.as_ref().is_some_and(|c| c.send(frame));
        if !sent {
            tracing::warn!(
                "daemon {}: connection not writable; reconnecting",
                self.config.host
            );
            self.connection = None;
            self.session.connection_lost(now);
        }
        sent
    }

    fn on_event(&mut self, event: ConnectionEvent, now: Instant) {
        let actions = match event {
            ConnectionEvent::Connected { peer } => {
                tracing::info!("connected to daemon {peer}");
                self.peer = Some(peer);
                self.session.connected(now)
            }
            ConnectionEvent::Lost { reason } => {
                tracing::warn!("{reason}; reconnecting");
                self.connection = None;
                self.session.connection_lost(now);
                Vec::new()
            }
            ConnectionEvent::Frame(frame) => match frame.body {
                Some(Body::Welcome(welcome)) => {
                    tracing::info!(
                        "daemon {} welcomed relay instance {:016x}: acked through batch {}, resending from {}",
                        self.config.host,
                        self.spool.instance_id(),
                        welcome.acked_through_batch,
                        (welcome.acked_through_batch + 1).max(self.spool.oldest_unacked())
                    );
                    self.session.welcome(
                        welcome.acked_through_batch,
                        welcome.session_id,
                        welcome.sync_udp_port,
                        &welcome.probe_key,
                        self.spool.oldest_unacked(),
                        now,
                    )
                }
                Some(Body::Refused(refused)) => self.session.refused(&refused.reason, now),
                Some(Body::Ack(ack)) => self.session.ack(ack.through_batch, now),
                other => {
                    let what = match other {
                        None => "an empty frame",
                        Some(Body::Hello(_)) => "Hello",
                        Some(Body::Batch(_)) => "Batch",
                        Some(Body::Heartbeat(_)) => "Heartbeat",
                        Some(_) => "an unexpected frame",
                    };
                    tracing::warn!(
                        "daemon {} sent {what}, which only relays send; reconnecting",
                        self.config.host
                    );
                    self.connection = None;
                    self.session.connection_lost(now);
                    Vec::new()
                }
            },
        };
        for action in actions {
            self.execute(action, now);
        }
    }

    /// Notes the clocks now for the batches cut since the last call.
    fn note_cuts(&mut self) {
        let clock = &self.clock;
        self.cut_clocks
            .note(self.spool.oldest_unacked(), self.spool.last_seq(), || {
                read_clocks(clock)
            });
    }

    /// The clocks before which no packet of batch `next` or later was taken.
    fn claim(&self, next: u64) -> v1::RelayClocks {
        self.cut_clocks
            .claim(next, self.spool.last_seq(), self.clocks())
    }

    /// A heartbeat's clocks: see [`claims`] (run ahead of the batches
    /// once unsent ones wait too long for acks).
    fn heartbeat_claim(&mut self, last_batch_sent: u64, now: Instant) -> v1::RelayClocks {
        let next = (last_batch_sent + 1).max(self.spool.oldest_unacked());
        let clocks_now = self.clocks();
        if next > self.spool.last_seq() {
            self.ahead = Duration::ZERO;
            return clocks_now;
        }
        let waited = now.saturating_duration_since(self.last_ack_at);
        if let Some(over) = waited.checked_sub(claims::STALL_GRACE)
            && over > self.ahead
        {
            if self.ahead.is_zero() {
                tracing::info!(
                    "daemon {}: no ack for {:.1} s with batches waiting to be sent: this relay's clocks now run ahead of its batches, so the daemon's merge can move on (some packets may be written out of time order)",
                    self.config.host,
                    waited.as_secs_f64()
                );
            }
            self.ahead = over;
            crate::metrics::stalled_heartbeat();
        }
        claims::advance(self.claim(next), self.ahead, clocks_now)
    }

    fn clocks(&self) -> v1::RelayClocks {
        read_clocks(&self.clock)
    }

    /// At most one spool error line per second (a full disk repeats).
    fn log_error(&mut self, error: &SpoolError, now: Instant) {
        if self
            .last_error_log
            .is_none_or(|last| now >= last + Duration::from_secs(1))
        {
            tracing::error!("{error}");
            self.last_error_log = Some(now);
        }
    }
}

fn read_clocks(clock: &SharedClock) -> v1::RelayClocks {
    let now = clock.now();
    v1::RelayClocks {
        boottime_ns: now.boottime,
        monotonic_ns: now.monotonic,
        realtime_ns: now.realtime,
        monotonic_raw_ns: now.monotonic_raw,
    }
}

async fn next_event(connection: &mut Option<Connection>) -> ConnectionEvent {
    match connection {
        Some(connection) => connection
            .events
            .recv()
            .await
            .unwrap_or(ConnectionEvent::Lost {
                reason: "connection task ended".into(),
            }),
        None => std::future::pending().await,
    }
}
