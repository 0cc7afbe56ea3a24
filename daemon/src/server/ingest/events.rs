//! Session events into core calls: a Hello admitted (or refused) and its
//! session's feedback and outgoing frames made, batches and heartbeats
//! handed to the core, window parts to the flight recorder, a session
//! ended; events of a replaced or closed session are dropped as stale.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tracesync_core::sync::SyncEstimate;
use tracesync_protocol::relay::{RefusalCode, v1};
use tracesync_protocol::trigger::RelayMode;
use tracing::debug;

use super::{Ingest, OUTGOING_FRAMES, SessionEntry, close};
use crate::server::engine::{Core, Slot, Writer};
use crate::server::events::{Close, Feedback, IngestEvent, Welcomed};

/// A relay's TriggerRequest from a shard that is not the flight shard:
/// the relay's estimate as its shard holds it, when it was received (host
/// BOOTTIME), and the relay's session's outgoing frames for the answer.
#[derive(Debug)]
pub struct ForwardedTrigger {
    slot: Slot,
    request: v1::TriggerRequest,
    estimate: Option<SyncEstimate>,
    received_ns: u64,
    outgoing: mpsc::Sender<v1::frame::Body>,
}

/// Hands the relay on `slot` its TriggerResult without waiting.
fn answer(outgoing: &mpsc::Sender<v1::frame::Body>, slot: Slot, result: v1::TriggerResult) {
    if outgoing
        .try_send(v1::frame::Body::TriggerResult(result))
        .is_err()
    {
        debug!(
            slot,
            "a TriggerResult did not fit the session's frames: dropped"
        );
    }
}

impl<C, W> Ingest<C, W>
where
    C: Core,
    W: Writer<C::SyncUpdate>,
{
    /// Returns how many packets it handed to the core.
    pub(super) fn on_event(&mut self, event: IngestEvent, now: u64) -> usize {
        match event {
            IngestEvent::Connect {
                session_id,
                hello,
                reply,
            } => {
                self.on_connect(session_id, &hello, reply, now);
                0
            }
            IngestEvent::Batch {
                slot,
                session_id,
                batch,
                credit,
            } => {
                let packets = batch.packets.len();
                if !self.is_current(slot, session_id) {
                    return 0;
                }
                if let Err(error) = self.core.batch(slot, batch, now) {
                    self.close_slot(slot, &error);
                }
                // The frame is ingested: its bytes go back to the budget.
                drop(credit);
                packets
            }
            IngestEvent::Heartbeat {
                slot,
                session_id,
                heartbeat,
            } => {
                if self.is_current(slot, session_id)
                    && let Err(error) = self.core.heartbeat(slot, &heartbeat, now)
                {
                    self.close_slot(slot, &error);
                }
                0
            }
            IngestEvent::Window {
                slot,
                session_id,
                window,
                credit,
            } => {
                if self.is_current(slot, session_id) {
                    self.on_window(slot, &window);
                }
                drop(credit);
                0
            }
            IngestEvent::TriggerRequest {
                slot,
                session_id,
                request,
            } => {
                if self.is_current(slot, session_id) {
                    self.on_trigger_request(slot, request, now);
                }
                0
            }
            IngestEvent::Disconnected { slot, session_id } => {
                if self.is_current(slot, session_id) {
                    self.sessions.remove(&slot);
                    let estimate = self.core.estimate(slot);
                    self.core.disconnect(slot);
                    self.flight.disconnected(slot, estimate);
                }
                0
            }
        }
    }

    /// A part of a ring relay's window.
    fn on_window(&mut self, slot: Slot, window: &v1::Window) {
        if !self.flight.is_ring(slot) {
            return;
        }
        debug!(
            slot,
            trigger = window.trigger_id,
            part = window.part,
            "window part"
        );
        let estimate = self.core.estimate(slot);
        let dir = self.output_dir();
        self.flight
            .on_window(slot, window, estimate, dir.as_deref(), &self.sessions);
    }

    /// A relay's TriggerRequest: fired through the trigger table at the
    /// relay's moment mapped to host time (or refused), answered, and sent
    /// on to the ring relays; on a shard that is not the flight shard,
    /// forwarded to it with the relay's estimate (this shard holds it).
    fn on_trigger_request(&mut self, slot: Slot, request: v1::TriggerRequest, now: u64) {
        let estimate = self.core.estimate(slot);
        let Some(flight_shard) = &self.settings.flight_shard else {
            let result = self
                .flight
                .relay_ask(slot, &request, estimate.as_ref(), now);
            if let Some(entry) = self.sessions.get(&slot) {
                answer(&entry.outgoing, slot, result);
            }
            self.send_triggers();
            return;
        };
        let Some(entry) = self.sessions.get(&slot) else {
            return;
        };
        let forwarded = ForwardedTrigger {
            slot,
            request,
            estimate,
            received_ns: now,
            outgoing: entry.outgoing.clone(),
        };
        if let Err(e) = flight_shard.try_send(forwarded) {
            // Full (or the flight shard is gone at shutdown): the relay
            // hears at once rather than waiting out its 10 s.
            let forwarded = e.into_inner();
            crate::metrics::Event::TriggerRefused.record();
            debug!(
                slot,
                "a relay's trigger did not fit the flight shard's queue: refused"
            );
            let result = super::flight::refusal(&forwarded.request, super::FLIGHT_BUSY);
            answer(&entry.outgoing, slot, result);
        }
    }

    /// The flight shard's turn for a TriggerRequest another shard placed.
    pub(super) fn on_forwarded_trigger(&mut self, f: ForwardedTrigger) {
        let result = self
            .flight
            .relay_ask(f.slot, &f.request, f.estimate.as_ref(), f.received_ns);
        answer(&f.outgoing, f.slot, result);
        self.send_triggers();
    }

    /// The output directory (where snapshots and their staging go).
    pub(super) fn output_dir(&self) -> Option<std::path::PathBuf> {
        self.writer
            .current_path()
            .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
    }

    /// The flight recorder's turn at each host tick: snapshots written
    /// are listed in the index, due ones started.
    pub(super) fn flight_tick(&mut self, now: u64) {
        let dir = self.output_dir();
        let core = &self.core;
        let writer = &mut self.writer;
        // Host time the output is durable through (none written: nothing).
        let output_ns = u64::try_from(self.durable_ts).unwrap_or(0);
        self.flight.tick(
            now,
            output_ns,
            dir.as_deref(),
            &self.sessions,
            |slot| core.estimate(slot),
            |entry| writer.add_index_entry(entry),
        );
    }

    /// Sends each ring relay the triggers its estimate maps now.
    pub(super) fn send_triggers(&mut self) {
        let core = &self.core;
        self.flight
            .send_due(&self.sessions, |slot| core.estimate(slot));
    }

    /// A relay's Hello: the core admits it (or refuses it), its session
    /// gets its feedback and outgoing frames.
    fn on_connect(
        &mut self,
        session_id: u64,
        hello: &v1::Hello,
        reply: oneshot::Sender<Result<Welcomed, Close>>,
        now: u64,
    ) {
        let admitted = match self.core.connect(hello, now) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                let refused = Close {
                    code: RefusalCode::RefusedByCore,
                    reason: Arc::from(refusal.to_string()),
                };
                let _ = reply.send(Err(refused));
                return;
            }
        };
        if let Some(old) = admitted.replaced
            && let Some(entry) = self.sessions.remove(&old)
        {
            // The core already forgot the old slot: only close it. The
            // instance's estimate is still the old connection's.
            self.flight
                .disconnected(old, self.core.estimate(admitted.slot));
            close(
                &entry,
                RefusalCode::Replaced,
                "replaced by a newer connection of the same relay instance",
            );
        }
        let (feedback, receiver) = watch::channel(Feedback {
            acked_through_batch: admitted.acked_through_batch,
            close: None,
            paused: false,
        });
        let (outgoing, frames) = mpsc::channel(OUTGOING_FRAMES);
        let welcomed = Welcomed {
            admitted,
            feedback: receiver,
            outgoing: frames,
        };
        let ring = (RelayMode::from_hello(&hello.mode) == Some(RelayMode::Ring)).then(|| {
            crate::snapshot::RelayInfo {
                instance: hello.relay_instance_id,
                raw_id: hello.machine_raw_id,
                name: hello.machine_name.clone(),
                boot_id: hello.boot_id.clone(),
            }
        });
        if reply.send(Ok(welcomed)).is_err() {
            // The session went away while we decided.
            self.core.disconnect(admitted.slot);
            return;
        }
        let entry = SessionEntry {
            session_id,
            feedback,
            outgoing,
        };
        self.sessions.insert(admitted.slot, entry);
        self.flight.connected(admitted.slot, ring, now);
    }

    /// Events of a replaced or closed session are stale.
    fn is_current(&self, slot: Slot, session_id: u64) -> bool {
        self.sessions
            .get(&slot)
            .is_some_and(|entry| entry.session_id == session_id)
    }

    /// Asks the session to refuse and close with the core's `error`; its
    /// Disconnected event then releases the slot in the core.
    fn close_slot(&mut self, slot: Slot, error: &C::SessionError) {
        if let Some(entry) = self.sessions.get(&slot) {
            close(entry, RefusalCode::ClosedByCore, &error.to_string());
        }
    }
}
