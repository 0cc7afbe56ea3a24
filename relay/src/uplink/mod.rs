//! The uplink: one task that owns the spool and the daemon connection. It
//! takes sources' packets into the spool, runs the [`Session`] state
//! machine, and executes its actions on the connection.
//!
//! Shutdown: when `shutdown` is cancelled the uplink keeps taking packets
//! until the sources close their senders (or a short grace passes), writes
//! the last batch, syncs the spool, and waits for acks up to the drain
//! timeout. What is still unacked then stays in the spool for next time.

mod actions;
mod connection;
pub mod misconfig;
mod ring;
mod triggers;
pub mod unreachable;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracesync_protocol::relay::RefusalCode;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::v1::frame::Body;

pub use connection::{
    Connection, ConnectionEvent, FrameCodec, OutFrame, Written, link_drained, next_event,
};

use crate::clocks::SharedClock;
use crate::session::{Session, SessionConfig};
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
    /// The relay's sources (as given, and how each is doing), reported in
    /// every Heartbeat.
    pub sources: Vec<(String, Arc<crate::source::SourceStats>)>,
    /// Ring mode (`--mode ring`): the ring's bounds; None streams.
    pub ring: Option<crate::ring::RingConfig>,
    /// Triggers fired on this machine, carried to the daemon (taken once).
    pub triggers: crate::control::TriggerInbox,
}

impl UplinkConfig {
    /// The mode Hello announces.
    pub fn mode(&self) -> tracesync_protocol::trigger::RelayMode {
        match self.ring {
            Some(_) => tracesync_protocol::trigger::RelayMode::Ring,
            None => tracesync_protocol::trigger::RelayMode::Stream,
        }
    }
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
            sources: Vec::new(),
            ring: None,
            triggers: crate::control::TriggerInbox::default(),
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
    // What earlier runs sent bounds what a daemon may acknowledge, with
    // what this run sends; a spool of an older relay did not keep it, and
    // then what it spooled stands in.
    let mut spool = spool;
    let sent_before = match spool.sent_through() {
        Some(sent) => sent,
        None => {
            // Kept as the mark, so a later run does not take the first
            // resends of this one for everything ever sent.
            let spooled = spool.last_seq();
            if let Err(error) = spool.note_sent(spooled) {
                tracing::error!("{error}");
            }
            spooled
        }
    };
    let mut session_config = config.session.clone();
    session_config.ships_batches = config.ring.is_none();
    let session = Session::new(session_config, now(), seed, sent_before);
    let ring = match &config.ring {
        Some(ring_config) => {
            let boot_id = config.hello.boot_id.clone();
            match ring::RingDriver::open(
                ring_config.clone(),
                &mut spool,
                &boot_id,
                clock.boottime(),
            ) {
                Ok(driver) => Some(driver),
                Err(error) => {
                    tracing::error!("{error}; ring mode cannot start");
                    return (
                        UplinkExit::Refused {
                            reason: error.to_string(),
                        },
                        spool,
                    );
                }
            }
        }
        None => None,
    };
    let asks = config.triggers.take();
    let mut uplink = Uplink {
        ring,
        asks,
        triggers: triggers::Pending::default(),
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
        outage: None,
        metrics: crate::metrics::UplinkMetrics::default(),
    };
    let exit = uplink.run(incoming, convert, shutdown).await;
    if let Err(error) = uplink.spool.sync() {
        tracing::error!("{error}");
    }
    (exit, uplink.spool)
}

/// The next trigger fired on this machine; pending forever without any.
async fn next_ask(
    asks: &mut Option<mpsc::Receiver<crate::control::TriggerAsk>>,
) -> Option<crate::control::TriggerAsk> {
    match asks {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

struct Uplink {
    /// Ring mode's driver (None: stream mode).
    ring: Option<ring::RingDriver>,
    /// Triggers fired on this machine (None: none wired, or closed).
    asks: Option<mpsc::Receiver<crate::control::TriggerAsk>>,
    /// Those sent to the daemon and not answered yet.
    triggers: triggers::Pending,
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
    /// The daemon could not be reached since then (said once).
    outage: Option<unreachable::Outage>,
    metrics: crate::metrics::UplinkMetrics,
}

/// Shutdown progress.
struct Drain {
    close_intake_at: Instant,
    give_up_at: Instant,
    intake_closed: bool,
    flushed: bool,
}

impl Drain {
    fn start(now: Instant, config: &UplinkConfig) -> Self {
        Self {
            close_intake_at: now + config.intake_grace,
            give_up_at: now + config.drain_timeout,
            intake_closed: false,
            flushed: false,
        }
    }
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
                self.advance_drain(drain, &mut incoming, intake_open, now);
            }
            self.drive(now);
            self.drive_ring();
            self.expire_triggers(now);
            let ring = self
                .ring
                .as_ref()
                .map(|r| (r.ring(), self.clock.boottime()));
            self.metrics.tick(now, &self.spool, &self.session, ring);
            if let Some(exit) = self.ended(drain.as_ref(), now) {
                return exit;
            }
            let deadline = self.deadline(drain.as_ref(), now);
            let draining = drain.is_some();
            let take = intake_open && (draining || self.spool.accepts());
            let written = self
                .connection
                .as_ref()
                .filter(|c| c.is_full())
                .map(Connection::written);
            tokio::select! {
                () = shutdown.cancelled(), if !draining => {
                    drain = Some(Drain::start(now, &self.config));
                }
                event = next_event(&mut self.connection) => self.on_event(event, now),
                ask = next_ask(&mut self.asks) => match ask {
                    Some(ask) => self.on_trigger_ask(ask, now),
                    None => self.asks = None,
                },
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
                            self.flush_all();
                        }
                    }
                },
                () = tokio::time::sleep_until(deadline.into()) => {}
            }
        }
    }

    /// Closes the intake once the sources' grace is over, and writes the
    /// last batch once the intake is empty.
    fn advance_drain<M>(
        &mut self,
        drain: &mut Drain,
        incoming: &mut mpsc::Receiver<M>,
        intake_open: bool,
        now: Instant,
    ) {
        if !drain.intake_closed && now >= drain.close_intake_at {
            // Sources did not all finish: take what is queued, no more.
            incoming.close();
            drain.intake_closed = true;
        }
        if !intake_open && !drain.flushed {
            self.flush_all();
            drain.flushed = true;
        }
    }

    fn flush_all(&mut self) {
        if let Err(error) = self.spool.flush_all() {
            tracing::error!("{error}");
        }
    }

    /// How the uplink ends now, if it does: refused, misconfigured too
    /// long, or (shutting down, the last batch written) drained or out of
    /// time.
    fn ended(&self, drain: Option<&Drain>, now: Instant) -> Option<UplinkExit> {
        if self.session.has_exited() {
            return Some(UplinkExit::Refused {
                reason: self.refusal.clone().unwrap_or_default(),
            });
        }
        if let (Some(run), Some(limit)) = (&self.fault, self.config.give_up_after)
            && !run.fault.can_pass()
            && now >= run.since + limit
        {
            return Some(UplinkExit::Misconfigured {
                fault: run.fault,
                reason: run.reason.clone(),
                attempts: run.attempts,
                seconds: limit.as_secs(),
            });
        }
        let drain = drain.filter(|d| d.flushed)?;
        if self.ring.is_some() {
            // The ring is meant to stay in the spool; windows stay on disk.
            return Some(UplinkExit::Drained);
        }
        let unacked = self
            .spool
            .last_seq()
            .saturating_sub(self.session.acked_through());
        if unacked == 0 {
            return Some(UplinkExit::Drained);
        }
        (now >= drain.give_up_at).then_some(UplinkExit::DrainTimedOut {
            unacked_batches: unacked,
        })
    }

    /// When the loop must wake next without an event: the session's,
    /// the spool's, the drain's or the fault's next deadline.
    fn deadline(&self, drain: Option<&Drain>, now: Instant) -> Instant {
        [
            self.session.deadline(),
            self.spool.deadline(),
            self.ring_deadline(now),
            self.triggers.deadline(),
            drain
                .filter(|d| !d.intake_closed)
                .map(|d| d.close_intake_at),
            drain.map(|d| d.give_up_at),
            self.fault
                .as_ref()
                .filter(|run| !run.fault.can_pass())
                .zip(self.config.give_up_after)
                .map(|(run, limit)| run.since + limit),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + Duration::from_secs(1))
        // Never spin on a deadline that is already due.
        .max(now + Duration::from_millis(1))
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

    fn on_event(&mut self, event: ConnectionEvent, now: Instant) {
        let actions = match event {
            ConnectionEvent::Connected { peer } => {
                // Said at info once the daemon welcomes us.
                tracing::debug!("connected to daemon {peer}");
                if let Some(outage) = self.outage.take() {
                    tracing::info!("{}", outage.over(&self.config.host, now));
                }
                self.peer = Some(peer);
                self.session.connected(now)
            }
            ConnectionEvent::Unreachable { reason } => {
                if let Some(line) = unreachable::Outage::failed(&mut self.outage, &reason, now) {
                    tracing::warn!("{line}");
                }
                self.connection = None;
                self.session.connection_lost(now);
                Vec::new()
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
                Some(Body::Welcome(welcome)) => self.on_welcome(&welcome, now),
                Some(Body::Refused(refused)) => {
                    self.session
                        .refused(RefusalCode::parse(&refused.code), &refused.reason, now)
                }
                Some(Body::Ack(ack)) => self.session.ack(ack.through_batch, now),
                Some(Body::TriggerResult(result)) => {
                    self.on_trigger_result(&result);
                    Vec::new()
                }
                Some(body @ (Body::Trigger(_) | Body::WindowAck(_))) if self.ring.is_some() => {
                    self.on_ring_frame(body);
                    Vec::new()
                }
                other => {
                    let what = match other {
                        None => "an empty frame",
                        Some(Body::Hello(_)) => "Hello",
                        Some(Body::Batch(_)) => "Batch",
                        Some(Body::Heartbeat(_)) => "Heartbeat",
                        Some(Body::Window(_)) => "Window",
                        Some(_) => "a frame for a relay in ring mode",
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
        if self.session.wants_new_instance() {
            self.renew_instance(now);
        }
    }

    /// Welcomes in a row acknowledged batches this relay never sent: the
    /// daemon's record of this instance is unusable (poisoned by a stranger
    /// who resumed it, or a daemon that lies), so the spool continues as a
    /// new instance, every batch kept.
    fn renew_instance(&mut self, now: Instant) {
        let old = crate::spool::instance_fingerprint(self.spool.instance_id());
        let renewed = self.spool.renew_instance();
        match &renewed {
            Ok(id) => tracing::error!(
                "daemon {}: {} Welcomes in a row acknowledged batches relay instance {old} never \
                 sent; continuing as relay instance {} with every unacknowledged batch (those \
                 the daemon wrote but had not acknowledged are written again)",
                self.config.host,
                crate::session::NEW_INSTANCE_AFTER,
                crate::spool::instance_fingerprint(*id)
            ),
            Err(error) => self.log_error(error, now),
        }
        // Counted afresh either way: a spool that cannot write its id
        // tries again after as many rejections.
        self.session.instance_renewed(renewed.is_ok());
    }

    /// A configuration fault: said once (with its fix) when it starts,
    /// counted while it repeats; the session backs off meanwhile. One that
    /// can pass ([`misconfig::Misconfig::can_pass`]) never ends the relay.
    fn misconfigured(&mut self, fault: misconfig::Misconfig, reason: String, now: Instant) {
        if let Some(run) = &mut self.fault
            && run.fault == fault
        {
            run.attempts += 1;
            tracing::debug!("{reason}; attempt {}", run.attempts);
            return;
        }
        let until = match self.config.give_up_after {
            // Said once per change of fault; the relay never exits for it.
            _ if fault.can_pass() => "retrying with backoff for as long as it lasts".to_owned(),
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

    /// How long the daemon has been unreachable (None: not known to be).
    fn outage_seconds(&self, now: Instant) -> Option<u64> {
        self.outage.as_ref().map(|o| o.seconds(now))
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
