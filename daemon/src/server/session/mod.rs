//! One relay connection: Hello, its checks ([`admission`], no IO), Welcome,
//! then frames to the ingest loop and acks back, until the peer leaves, a
//! frame is bad, or the daemon stops. A refusal of the session's own names
//! its counter ([`Counter`]), which gives its `Refused.code` too; what the
//! core refuses or closes carries the core's code.
//!
//! Before the Hello is accepted the connection is unauthenticated: its
//! frame limit is `MAX_HELLO_FRAME_BYTES` (so no buffer larger than that
//! is sized by what the peer announces), it holds no `max-relays` slot,
//! and handshake and Hello share the hello timeout. Once accepted it takes
//! a slot and its frame limit becomes `limits.max-frame-bytes`; from then
//! on a frame that has begun must arrive whole within
//! `limits.frame-timeout-ms` ([`FrameClock`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracesync_protocol::relay::RefusalCode;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot, watch};
use tokio::time::{timeout, timeout_at};
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tracesync_protocol::relay::{MAX_BATCH_PACKETS, MAX_HELLO_FRAME_BYTES, PROTOCOL_VERSION, v1};
use tracesync_protocol::text::Escaped;
use tracesync_protocol::trigger::RelayMode;
use tracing::{debug, info, warn};

use super::engine::{ProbeRegistry, Slot};
use super::events::{Feedback, IngestEvent, Welcomed};
use super::fault_log::PEER_FAULTS;
use super::preauth::PreAuth;
use super::{Counter, Failed, Refused, Shared};
use crate::tls::{Bindings, CertSession, DataStream, RawIdRule};
use peer_bytes::{Account, PEER_BYTES};

pub mod admission;
mod frames;
mod tls_relay;
pub use tls_relay::refuse_tls_relay;
pub mod peer_bytes;
pub(super) use frames::refuse;
use frames::{
    FrameClock, IdleClock, Stalled, batch_packet_count, decode, decode_frame, kind, next_counted,
    next_frame, read_failed, refuse_counted, send,
};

/// Plain TCP or TLS ([`DataStream`]).
type Link<S> = Framed<S, LengthDelimitedCodec>;

/// How long a write to a relay may take before the connection is dropped
/// (a relay that stops reading must not pin a session forever).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The framing both sides use (big-endian u32 length prefix).
pub fn codec(max_frame_bytes: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(max_frame_bytes)
        .new_codec()
}

/// Writes the identity bindings (blocking, off the runtime's workers). A
/// failure is logged and counted; the binding still holds in memory and
/// the next new binding writes the whole table again.
async fn save_bindings(bindings: Arc<Bindings>, machine: &str) {
    let saved = tokio::task::spawn_blocking(move || {
        let path = bindings.path().map(|p| p.display().to_string());
        bindings.save().map_err(|e| (path.unwrap_or_default(), e))
    })
    .await;
    let error = match saved {
        Ok(Ok(())) => return,
        Ok(Err((path, e))) => format!("cannot write {path}: {e}"),
        Err(e) => format!("the writer panicked: {e}"),
    };
    crate::metrics::Event::IdentityBindingsSaveError.record();
    warn!(
        %machine,
        "identity bindings: {error}; the new binding holds until the daemon restarts (free \
         space or fix permissions in the output directory)"
    );
}

/// Runs one session to its end: `pre` is the connection's place among the
/// unauthenticated, given up for a `max-relays` slot once the Hello passes;
/// `account` its share of the peers' byte budget (its socket counts in it).
pub async fn run<P: ProbeRegistry, S: DataStream>(
    stream: S,
    peer: SocketAddr,
    events: mpsc::Sender<IngestEvent>,
    shared: Arc<Shared<P>>,
    pre: PreAuth,
    account: Arc<Account>,
) {
    let mut link = Framed::new(stream, codec(MAX_HELLO_FRAME_BYTES));
    let session_id = new_session_id();
    let welcomed = tokio::select! {
        w = welcome(&mut link, peer, session_id, &events, &shared, pre, &account) => w,
        () = shared.shutdown.cancelled() => None,
    };
    let Some(Hello {
        welcomed: Welcomed { admitted, feedback },
        machine,
        machine_raw_id,
        probe_key,
        slot: _slot,
        _certificate_session,
    }) = welcomed
    else {
        return;
    };
    let slot = admitted.slot;
    shared
        .probes
        .register(session_id, slot, machine_raw_id, probe_key);
    let _registration = Unregister {
        probes: shared.probes.clone(),
        session_id,
    };
    shared.counters.bump(Counter::SessionsWelcomed);
    info!(
        %peer, slot, session_id, acked_through = admitted.acked_through_batch,
        "relay {} (raw id {machine_raw_id}) connected",
        Escaped(&machine)
    );
    account.authenticated();
    let clock = FrameClock::new(shared.settings.frame_timeout, &link);
    let session = Session {
        link,
        clock,
        account,
        peer,
        machine,
        slot,
        session_id,
        feedback,
        last_acked: admitted.acked_through_batch,
        shared: &shared,
    };
    session.serve(events).await;
}

/// A relay welcomed: what the core answered, the raw id and probe key of
/// its probe registration, and its `max-relays` slot (held until the
/// session ends).
struct Hello {
    welcomed: Welcomed,
    /// The name the relay announced (as sent; escaped when logged).
    machine: String,
    machine_raw_id: u32,
    probe_key: [u8; 32],
    slot: OwnedSemaphorePermit,
    /// Its place among its certificate's sessions, held until it ends.
    _certificate_session: Option<CertSession>,
}

/// Reads Hello, admits it ([`admission::admit`]), takes a `max-relays`
/// slot, asks the core, sends Welcome. None: refused or gone (already
/// answered), or closed for a newer connection at the unauthenticated limit
/// (counted by the accept loop).
async fn welcome<P: ProbeRegistry, S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    session_id: u64,
    events: &mpsc::Sender<IngestEvent>,
    shared: &Shared<P>,
    pre: PreAuth,
    account: &Account,
) -> Option<Hello> {
    let mut hello = read_hello(link, peer, shared, &pre, account).await?;
    let token = shared.token();
    let allow_machines = shared.allow_machines();
    let tls = shared.settings.tls.as_ref();
    let context = admission::Context {
        token: token.as_deref(),
        allow_machines: &allow_machines,
        peer_certificate: link.get_ref().peer_certificate(),
        bindings: &shared.bindings,
        raw_id_rule: tls.map_or(RawIdRule::default(), |t| t.policy.raw_id_rule),
    };
    let passed = match admission::admit(&hello, &context) {
        Ok(passed) => passed,
        Err(refusal) => {
            refuse_counted(link, peer, shared, refusal.why, &refusal.reason).await;
            return None;
        }
    };
    // One certificate may not take every slot: its sessions are counted
    // before it gets one.
    let certificate_session = match (tls, link.get_ref().peer_certificate()) {
        (Some(tls), Some(der)) => {
            let limit = tls.policy.max_sessions_per_certificate;
            let Some(session) = tls.sessions.open(der, limit) else {
                let reason = format!(
                    "the certificate of machine {} has {limit} sessions open \
                     (tls.max-sessions-per-certificate); close one, or raise the limit",
                    Escaped(&hello.machine_name)
                );
                refuse_counted(link, peer, shared, Refused::CertificateSessions, &reason).await;
                return None;
            };
            Some(session)
        }
        _ => None,
    };
    if passed.raw_id != hello.machine_raw_id {
        warn!(
            %peer,
            "relay {}: raw id {} is held by another machine's certificate; welcomed under \
             raw id {} instead",
            Escaped(&hello.machine_name),
            hello.machine_raw_id,
            passed.raw_id
        );
        hello.machine_raw_id = passed.raw_id;
    }
    // A new binding is on disk before the relay is welcomed, so a restart
    // right after cannot hand it to another certificate.
    if passed.new_binding && shared.bindings.is_persistent() {
        save_bindings(shared.bindings.clone(), &hello.machine_name).await;
    }
    // Authenticated: a max-relays slot now (never for a connection that
    // has not passed TLS and the Hello checks), and the full frame limit.
    let Some(slot) = pre.authenticated() else {
        let max_relays = shared.settings.max_relays;
        let reason = format!("daemon at max-relays={max_relays}; raise limits.max-relays");
        refuse_counted(link, peer, shared, Refused::MaxRelays, &reason).await;
        return None;
    };
    link.codec_mut()
        .set_max_frame_length(shared.settings.max_frame_bytes);
    // The session's probe key: signs its probe datagrams (Welcome carries it).
    let Ok(probe_key) = tracesync_protocol::probe::new_probe_key() else {
        refuse(
            link,
            peer,
            RefusalCode::InternalError,
            "the daemon cannot draw a probe key from the OS random source; retry later",
        )
        .await;
        return None;
    };
    let machine = hello.machine_name.clone();
    let machine_raw_id = hello.machine_raw_id;
    let welcomed = join(link, peer, session_id, events, shared, hello, probe_key).await?;
    Some(Hello {
        welcomed,
        machine,
        machine_raw_id,
        probe_key,
        slot,
        _certificate_session: certificate_session,
    })
}

/// The first frame, which must be a Hello within the hello timeout. None:
/// refused (already answered), gone, or evicted.
async fn read_hello<P, S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    shared: &Shared<P>,
    pre: &PreAuth,
    account: &Account,
) -> Option<v1::Hello> {
    let first = tokio::select! {
        first = timeout_at(pre.deadline, next_counted(link, account)) => first,
        () = pre.ticket.evicted() => return None,
        () = account.closed() => {
            shared.counters.bump(Counter::Failed(Failed::PeerBytes));
            return None;
        }
    };
    let (why, reason) = match first {
        Ok(Some(Ok(bytes))) => match decode(&bytes) {
            Ok(v1::frame::Body::Hello(hello)) => return Some(hello),
            Ok(other) => (
                Failed::UnexpectedFrame,
                format!("expected Hello as the first frame, got {}", kind(&other)),
            ),
            Err(reason) => (Failed::MalformedFrame, reason),
        },
        Err(_) => {
            let limit = shared.settings.hello_timeout.as_millis();
            let reason = format!("no Hello within {limit} ms of connecting");
            (Failed::HelloTimeout, reason)
        }
        Ok(None) => return None,
        Ok(Some(Err(_))) if account.is_closed() => {
            shared.counters.bump(Counter::Failed(Failed::PeerBytes));
            return None;
        }
        Ok(Some(Err(e))) => {
            read_failed(link, peer, e, shared, true).await;
            return None;
        }
    };
    refuse_counted(link, peer, shared, why, &reason).await;
    None
}

/// Hands the admitted Hello to the core and, if it takes the relay, sends
/// Welcome. None: refused by the core (already answered) or gone.
async fn join<P, S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    session_id: u64,
    events: &mpsc::Sender<IngestEvent>,
    shared: &Shared<P>,
    hello: v1::Hello,
    probe_key: [u8; 32],
) -> Option<Welcomed> {
    let (reply, answer) = oneshot::channel();
    let name = hello.machine_name.clone();
    // A ring relay is told its windows are taken (admission checked the mode).
    let takes_windows = RelayMode::from_hello(&hello.mode) == Some(RelayMode::Ring);
    let connect = IngestEvent::Connect {
        session_id,
        hello,
        reply,
    };
    if events.send(connect).await.is_err() {
        return None; // ingest loop gone: the daemon is stopping
    }
    let welcomed = match answer.await {
        Ok(Ok(welcomed)) => welcomed,
        Ok(Err(refused)) => {
            shared.counters.bump(Counter::Refused(Refused::Core));
            refuse(link, peer, refused.code, &refused.reason).await;
            return None;
        }
        Err(_) => return None,
    };
    let welcome = v1::frame::Body::Welcome(v1::Welcome {
        protocol_version: PROTOCOL_VERSION,
        acked_through_batch: welcomed.admitted.acked_through_batch,
        session_id,
        sync_udp_port: u32::from(shared.settings.sync_udp_port),
        probe_key: probe_key.to_vec().into(),
        takes_windows,
    });
    if let Err(e) = send(link, welcome).await {
        debug!(%peer, machine = %Escaped(&name), "cannot send Welcome: {e}");
        let slot = welcomed.admitted.slot;
        let _ = events
            .send(IngestEvent::Disconnected { slot, session_id })
            .await;
        return None;
    }
    Some(welcomed)
}

struct Session<'a, P, S> {
    link: Link<S>,
    clock: FrameClock,
    /// The bytes of its partial frame, in the peers' budget.
    account: Arc<Account>,
    peer: SocketAddr,
    /// The relay's machine name (Hello), for the log.
    machine: String,
    slot: Slot,
    session_id: u64,
    feedback: watch::Receiver<Feedback>,
    last_acked: u64,
    shared: &'a Shared<P>,
}

/// Why the main loop ended.
enum End {
    /// The peer closed or the socket failed: nothing more to say.
    Gone,
    /// Count why, tell the relay (its Refused code and the reason), then
    /// close.
    Refuse(Failed, String),
    /// The core closed the session: tell the relay its code and reason,
    /// then close.
    Closed(RefusalCode, String),
    /// Daemon shutdown: stop reading, forward the final acks, close.
    Shutdown,
    /// The ingest loop is gone or closed this session without a reason.
    Dropped,
}

impl<P: ProbeRegistry, S: DataStream> Session<'_, P, S> {
    async fn serve(mut self, events: mpsc::Sender<IngestEvent>) {
        let end = self.main_loop(&events).await;
        let (slot, session_id) = (self.slot, self.session_id);
        match end {
            End::Shutdown => {
                // Dropping our sender lets the ingest loop see every session
                // has stopped reading; it then commits and sends final acks.
                drop(events);
                self.final_acks().await;
            }
            End::Refuse(why, reason) => {
                refuse_counted(&mut self.link, self.peer, self.shared, why, &reason).await;
                let _ = events
                    .send(IngestEvent::Disconnected { slot, session_id })
                    .await;
            }
            End::Closed(code, reason) => {
                refuse(&mut self.link, self.peer, code, &reason).await;
                let _ = events
                    .send(IngestEvent::Disconnected { slot, session_id })
                    .await;
            }
            End::Gone | End::Dropped => {
                let _ = events
                    .send(IngestEvent::Disconnected { slot, session_id })
                    .await;
            }
        }
        info!(
            peer = %self.peer, slot,
            "relay {} disconnected",
            Escaped(&self.machine)
        );
    }

    async fn main_loop(&mut self, events: &mpsc::Sender<IngestEvent>) -> End {
        let mut paused = false;
        let mut idle = IdleClock::new(self.shared.settings.idle_timeout, &self.link);
        loop {
            tokio::select! {
                () = self.shared.shutdown.cancelled() => return End::Shutdown,
                // Time not spent reading (paused) is not the relay's.
                () = idle.elapsed(), if !paused => {
                    if let Err(reason) = idle.check(&self.link) {
                        return End::Refuse(Failed::IdleTimeout, reason);
                    }
                }
                changed = self.feedback.changed() => {
                    if changed.is_err() {
                        return End::Dropped;
                    }
                    let feedback = self.feedback.borrow_and_update().clone();
                    if let Some(close) = feedback.close {
                        if close.code == RefusalCode::ClosedByCore {
                            self.shared.counters.bump(Counter::Failed(Failed::ClosedByCore));
                        }
                        return End::Closed(close.code, close.reason.to_string());
                    }
                    if paused != feedback.paused {
                        // Time not spent reading is not the relay's.
                        self.clock.restart(&self.link);
                        idle.restart(&self.link);
                    }
                    paused = feedback.paused;
                    if let Err(end) = self.ack(feedback.acked_through_batch).await {
                        return end;
                    }
                }
                // Held back: TCP pushes back to the relay's spool.
                () = self.account.closed() => {
                    return End::Refuse(Failed::PeerBytes, peer_bytes_reason());
                }
                frame = next_frame(&mut self.link, &mut self.clock, &self.account), if !paused => {
                    let bytes = match frame {
                        Err(Stalled) => {
                            let limit = self.clock.limit.as_millis();
                            return End::Refuse(Failed::FrameTimeout, format!(
                                "a frame did not arrive whole within {limit} ms of its first \
                                 byte (limits.frame-timeout-ms): the link is too slow or the \
                                 relay stalled"
                            ));
                        }
                        Ok(None) => return End::Gone,
                        Ok(Some(Err(_))) if self.account.is_closed() => {
                            return End::Refuse(Failed::PeerBytes, peer_bytes_reason());
                        }
                        Ok(Some(Err(e))) => {
                            read_failed(&mut self.link, self.peer, e, self.shared, false).await;
                            return End::Gone;
                        }
                        Ok(Some(Ok(bytes))) => bytes,
                    };
                    // Counted before decoding: a frame of tiny packets
                    // would cost far more memory decoded than its size.
                    let packets = batch_packet_count(&bytes);
                    if packets > MAX_BATCH_PACKETS {
                        return End::Refuse(Failed::BatchTooLarge, format!(
                            "batch of more than {MAX_BATCH_PACKETS} packets; \
                             relay and daemon versions must match"
                        ));
                    }
                    // Bytes held until the ingest loop is done with the
                    // frame: the frame itself and the decoded packet list.
                    let held = bytes.len() + packets * std::mem::size_of::<Bytes>();
                    // Waits while the channel holds its byte budget:
                    // back-pressure through TCP, never a growing queue.
                    let Some(credit) = self.shared.ingest_bytes.acquire(held).await else {
                        return End::Dropped;
                    };
                    // Decoded from the frame's own buffer: packets are
                    // slices of it, not copies.
                    let event = match decode_frame(bytes.freeze()) {
                        Ok(v1::frame::Body::Batch(batch)) => IngestEvent::Batch {
                            slot: self.slot,
                            session_id: self.session_id,
                            batch,
                            credit,
                        },
                        Ok(v1::frame::Body::Heartbeat(heartbeat)) => IngestEvent::Heartbeat {
                            slot: self.slot,
                            session_id: self.session_id,
                            heartbeat,
                        },
                        Ok(other) => {
                            return End::Refuse(Failed::UnexpectedFrame, format!(
                                "unexpected {} frame after Hello; a relay sends only Batch and Heartbeat",
                                kind(&other)
                            ));
                        }
                        Err(reason) => return End::Refuse(Failed::MalformedFrame, reason),
                    };
                    // Waits while the ingest loop is behind: back-pressure.
                    if events.send(event).await.is_err() {
                        return End::Dropped;
                    }
                }
            }
        }
    }

    async fn ack(&mut self, through: u64) -> Result<(), End> {
        if through <= self.last_acked {
            return Ok(());
        }
        self.last_acked = through;
        let ack = v1::frame::Body::Ack(v1::Ack {
            through_batch: through,
        });
        send(&mut self.link, ack).await.map_err(|e| {
            debug!(peer = %self.peer, "cannot send Ack: {e}");
            End::Gone
        })
    }

    /// After shutdown: forward acks until the ingest loop closes the
    /// feedback (final commit done), bounded in time.
    async fn final_acks(&mut self) {
        let limit = self.shared.settings.final_ack_timeout;
        let forward = async {
            loop {
                let through = self.feedback.borrow_and_update().acked_through_batch;
                if self.ack(through).await.is_err() {
                    return;
                }
                if self.feedback.changed().await.is_err() {
                    // Closed: the value may have changed right before.
                    let through = self.feedback.borrow().acked_through_batch;
                    let _ = self.ack(through).await;
                    return;
                }
            }
        };
        if timeout(limit, forward).await.is_err() {
            warn!(peer = %self.peer, "no final ack within {} ms; closing", limit.as_millis());
        }
    }
}

fn peer_bytes_reason() -> String {
    format!(
        "partial frames of all peers over {} MiB; this session held the most",
        PEER_BYTES >> 20
    )
}

/// Unregisters the session from the prober when the session ends, however
/// it ends.
struct Unregister<P: ProbeRegistry> {
    probes: P,
    session_id: u64,
}

impl<P: ProbeRegistry> Drop for Unregister<P> {
    fn drop(&mut self) {
        self.probes.unregister(self.session_id);
    }
}

/// A random non-zero session id (std's per-process random hash keys mixed
/// with a counter and the clock; not a secret, only unique).
fn new_session_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
    hasher.write_u64(tracesync_common::clock::boottime_ns());
    hasher.finish().max(1)
}

#[cfg(test)]
mod tests;
