//! The uplink: one task that owns the spool and the daemon connection. It
//! takes sources' packets into the spool, runs the [`Session`] state
//! machine, and executes its actions on the connection.
//!
//! Shutdown: when `shutdown` is cancelled the uplink keeps taking packets
//! until the sources close their senders (or a short grace passes), writes
//! the last batch, syncs the spool, and waits for acks up to the drain
//! timeout. What is still unacked then stays in the spool for next time.

mod connection;
pub mod misconfig;

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tracesync_protocol::relay::RefusalCode;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::PROTOCOL_VERSION;
use tracesync_protocol::relay::v1::{self, frame::Body};
use tracesync_protocol::text::Escaped;

pub use connection::{Connection, ConnectionEvent, FrameCodec, OutFrame, Written};

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
    /// How long one configuration fault ([`misconfig::Misconfig`]) may
    /// last with no session before the uplink gives up; None: never.
    pub give_up_after: Option<Duration>,
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
            give_up_after: Some(Duration::from_secs(
                crate::config::DEFAULT_GIVE_UP_AFTER_SECONDS,
            )),
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
    /// One configuration fault lasted `give_up_after` with no session.
    Misconfigured {
        fault: misconfig::Misconfig,
        reason: String,
        attempts: u32,
        seconds: u64,
    },
}

/// A configuration fault seen on every attempt since `since`.
struct FaultRun {
    fault: misconfig::Misconfig,
    reason: String,
    since: Instant,
    attempts: u32,
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
    convert: impl Fn(M) -> Incoming + Send,
    start_probe: ProbeStarter,
    shutdown: CancellationToken,
) -> (UplinkExit, Spool) {
    let seed = spool.instance_id() ^ clock.boottime();
    // What an earlier run spooled (and may have sent) bounds what a daemon
    // may acknowledge, with what this run sends.
    let session = Session::new(config.session.clone(), now(), seed, spool.last_seq());
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
        fault: None,
        metrics: crate::metrics::UplinkMetrics::default(),
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
    fault: Option<FaultRun>,
    metrics: crate::metrics::UplinkMetrics,
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
        convert: impl Fn(M) -> Incoming,
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
            self.drive(now);
            self.metrics.tick(now, &self.spool, &self.session);
            if self.session.has_exited() {
                return UplinkExit::Refused {
                    reason: self.refusal.clone().unwrap_or_default(),
                };
            }
            if let (Some(run), Some(limit)) = (&self.fault, self.config.give_up_after)
                && now >= run.since + limit
            {
                return UplinkExit::Misconfigured {
                    fault: run.fault,
                    reason: run.reason.clone(),
                    attempts: run.attempts,
                    seconds: limit.as_secs(),
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
                self.fault
                    .as_ref()
                    .zip(self.config.give_up_after)
                    .map(|(run, limit)| run.since + limit),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(1))
            // Never spin on a deadline that is already due.
            .max(now + Duration::from_millis(1));
            let draining = drain.is_some();
            let take = intake_open && (draining || self.spool.accepts());
            let written = self
                .connection
                .as_ref()
                .filter(|c| c.is_full())
                .map(Connection::written);
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
                // Frames written: the next drive sends more if the link had
                // been full.
                () = link_drained(written.as_ref()) => {}
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
        loop {
            let full = self.connection.as_ref().is_some_and(Connection::is_full);
            self.session.set_link_full(full);
            let Some(action) =
                self.session
                    .poll(now, self.spool.oldest_unacked(), self.spool.last_seq())
            else {
                break;
            };
            self.execute(action, now);
        }
    }

    fn execute(&mut self, action: Action, now: Instant) {
        match action {
            Action::Connect => {
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
                    clocks: Some(self.clocks()),
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
                // The spool's wire-form packets go out as they are.
                let frame =
                    OutFrame::batch(seq, batch.first_packet_index, batch.wire, &self.clocks());
                if self.send_out(frame, now) {
                    self.session.sent(seq, bytes, now);
                    crate::metrics::batch_sent(bytes);
                }
            }
            Action::SendHeartbeat { last_batch_sent } => {
                let frame = Body::Heartbeat(v1::Heartbeat {
                    clocks: Some(self.clocks()),
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
                let acked = through
                    .saturating_add(1)
                    .saturating_sub(self.spool.oldest_unacked());
                crate::metrics::batches_acked(acked);
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
                    tracing::warn!(
                        "daemon {}: {}; reconnecting",
                        self.config.host,
                        Escaped(&reason)
                    );
                }
                self.connection = None;
            }
            Action::Reject { reason } => {
                tracing::error!(
                    "daemon {}: {reason}; closing the connection, keeping the spool and \
                     retrying later",
                    self.config.host
                );
                self.connection = None;
            }
            Action::Exit { reason } => {
                tracing::error!(
                    "daemon {} refused this relay: {}",
                    self.config.host,
                    Escaped(&reason)
                );
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
        if !sent && self.connection.as_ref().is_some_and(Connection::is_closed) {
            // The writer ended: the reader's Lost event says why (a
            // certificate the daemon refused, a peer that is no daemon),
            // and reconnects then. The frame stays unacknowledged.
            return false;
        }
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
                // Said at info once the daemon welcomes us.
                tracing::debug!("connected to daemon {peer}");
                self.peer = Some(peer);
                self.session.connected(now)
            }
            ConnectionEvent::Lost {
                reason,
                misconfig: Some(fault),
            } => {
                self.misconfigured(fault, reason, now);
                self.connection = None;
                self.session.connection_lost(now);
                Vec::new()
            }
            ConnectionEvent::Lost {
                reason,
                misconfig: None,
            } => {
                tracing::warn!("{reason}; reconnecting");
                self.connection = None;
                self.session.connection_lost(now);
                Vec::new()
            }
            ConnectionEvent::Frame(frame) => match frame.body {
                Some(Body::Welcome(welcome)) => {
                    let actions = self.session.welcome(
                        welcome.acked_through_batch,
                        welcome.session_id,
                        welcome.sync_udp_port,
                        &welcome.probe_key,
                        self.spool.oldest_unacked(),
                        now,
                    );
                    if self.session.is_streaming() {
                        if let Some(run) = self.fault.take() {
                            tracing::info!(
                                "daemon {}: {} fixed after {} attempts",
                                self.config.host,
                                run.fault.label(),
                                run.attempts
                            );
                        }
                        tracing::info!(
                            "daemon {} welcomed relay instance {:016x}: acked through batch {}, resending from {}",
                            self.config.host,
                            self.spool.instance_id(),
                            welcome.acked_through_batch,
                            welcome
                                .acked_through_batch
                                .saturating_add(1)
                                .max(self.spool.oldest_unacked())
                        );
                    }
                    actions
                }
                Some(Body::Refused(refused)) => {
                    self.session
                        .refused(RefusalCode::parse(&refused.code), &refused.reason, now)
                }
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

    fn clocks(&self) -> v1::RelayClocks {
        let now = self.clock.now();
        v1::RelayClocks {
            boottime_ns: now.boottime,
            monotonic_ns: now.monotonic,
            realtime_ns: now.realtime,
            monotonic_raw_ns: now.monotonic_raw,
        }
    }

    /// A configuration fault: said once (with its fix) when it starts,
    /// counted while it repeats; the session backs off meanwhile.
    fn misconfigured(&mut self, fault: misconfig::Misconfig, reason: String, now: Instant) {
        if let Some(run) = &mut self.fault
            && run.fault == fault
        {
            run.attempts += 1;
            tracing::debug!("{reason}; attempt {}", run.attempts);
            return;
        }
        let until = match self.config.give_up_after {
            Some(limit) => format!(
                "retrying with backoff, exiting {} in {} s unless fixed",
                fault.exit_code(),
                limit.as_secs()
            ),
            None => "retrying with backoff (--keep-retrying)".to_owned(),
        };
        tracing::error!("{reason}; {until}");
        self.fault = Some(FaultRun {
            fault,
            reason,
            since: now,
            attempts: 1,
        });
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

/// Completes when a full link's writer wrote frames; never without one.
async fn link_drained(full: Option<&Written>) {
    match full {
        Some(written) => written.wait().await,
        None => std::future::pending().await,
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
                misconfig: None,
            }),
        None => std::future::pending().await,
    }
}
