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
//! `limits.frame-timeout-ms` (`FrameClock`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracesync_protocol::relay::RefusalCode;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::time::timeout;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tracesync_protocol::relay::{MAX_HELLO_FRAME_BYTES, v1};
use tracesync_protocol::text::Escaped;
use tracing::{debug, info, warn};

use super::engine::{ProbeRegistry, Slot};
use super::events::{Credit, EventSender, Feedback, IngestEvent, Welcomed};
use super::fault_log::PEER_FAULTS;
use super::preauth::PreAuth;
use super::{Counter, Failed, Shared};
use crate::tls::DataStream;
use peer_bytes::{Account, PEER_BYTES};
use welcome::{Hello, welcome};

pub mod admission;
mod frames;
mod tls_relay;
mod welcome;
pub use tls_relay::refuse_tls_relay;
pub mod peer_bytes;
pub(super) use frames::refuse;
use frames::{
    FrameClock, IdleClock, Stalled, batch_packet_count, decode_frame, kind, next_frame,
    read_failed, refuse_counted, send,
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

/// Runs one session to its end: `pre` is the connection's place among the
/// unauthenticated, given up for a `max-relays` slot once the Hello passes;
/// `account` its share of the peers' byte budget (its socket counts in it).
pub async fn run<P: ProbeRegistry, S: DataStream>(
    stream: S,
    peer: SocketAddr,
    events: EventSender,
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
        welcomed:
            Welcomed {
                admitted,
                feedback,
                outgoing,
            },
        machine,
        machine_raw_id,
        probe_key,
        ring,
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
        outgoing: Some(outgoing),
        ring,
        last_acked: admitted.acked_through_batch,
        shared: &shared,
    };
    session.serve(events).await;
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
    /// Frames the ingest loop sends the relay (Trigger, WindowAck); None
    /// once the ingest loop dropped its end.
    outgoing: Option<mpsc::Receiver<v1::frame::Body>>,
    /// The relay is in ring mode: it may send Window frames.
    ring: bool,
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
    async fn serve(mut self, events: EventSender) {
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

    async fn main_loop(&mut self, events: &EventSender) -> End {
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
                frame = next_outgoing(&mut self.outgoing) => match frame {
                    Some(frame) => {
                        if let Err(e) = send(&mut self.link, frame).await {
                            debug!(peer = %self.peer, "cannot send a frame: {e}");
                            return End::Gone;
                        }
                    }
                    None => self.outgoing = None,
                },
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
                    let (packets, limit) = batch_packet_count(&bytes);
                    if packets > limit {
                        return End::Refuse(Failed::BatchTooLarge, format!(
                            "batch or window part of more than {limit} packets; \
                             relay and daemon versions must match"
                        ));
                    }
                    // Bytes held until the ingest loop is done with the
                    // frame: the frame itself and the decoded packet list.
                    let held = bytes.len() + packets * std::mem::size_of::<Bytes>();
                    // Waits while the channel holds its byte budget:
                    // back-pressure through TCP, never a growing queue.
                    let Some(budget) = events.budget(self.slot) else {
                        return End::Dropped;
                    };
                    let Some(credit) = budget.acquire(held).await else {
                        return End::Dropped;
                    };
                    let event = match self.event_of(bytes.freeze(), credit) {
                        Ok(event) => event,
                        Err(end) => return end,
                    };
                    // Waits while the ingest loop is behind: back-pressure.
                    if events.send(event).await.is_err() {
                        return End::Dropped;
                    }
                }
            }
        }
    }

    /// The ingest event of a frame after Hello (decoded from the frame's
    /// own buffer: packets are slices of it, not copies); a frame a relay
    /// must not send ends the session.
    fn event_of(&self, frame: Bytes, credit: Credit) -> Result<IngestEvent, End> {
        let (slot, session_id) = (self.slot, self.session_id);
        match decode_frame(frame) {
            Ok(v1::frame::Body::Batch(batch)) => Ok(IngestEvent::Batch {
                slot,
                session_id,
                batch,
                credit,
            }),
            Ok(v1::frame::Body::Heartbeat(heartbeat)) => Ok(IngestEvent::Heartbeat {
                slot,
                session_id,
                heartbeat,
            }),
            Ok(v1::frame::Body::Window(window)) if self.ring => Ok(IngestEvent::Window {
                slot,
                session_id,
                window,
                credit,
            }),
            // Any mode: a trigger fired on the relay's machine.
            Ok(v1::frame::Body::TriggerRequest(request)) => Ok(IngestEvent::TriggerRequest {
                slot,
                session_id,
                request,
            }),
            Ok(other) => Err(End::Refuse(
                Failed::UnexpectedFrame,
                format!(
                    "unexpected {} frame after Hello; a relay sends only Batch, Heartbeat, \
                     TriggerRequest and (in ring mode) Window",
                    kind(&other)
                ),
            )),
            Err(reason) => Err(End::Refuse(Failed::MalformedFrame, reason)),
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

/// The next frame the ingest loop sends; pending forever once it is gone.
async fn next_outgoing(
    outgoing: &mut Option<mpsc::Receiver<v1::frame::Body>>,
) -> Option<v1::frame::Body> {
    match outgoing {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
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
