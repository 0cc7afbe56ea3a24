//! Messages between relay sessions and the ingest loop.

use std::sync::Arc;
use tracesync_protocol::relay::RefusalCode;

use tokio::sync::mpsc::error::SendError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tracesync_core::shard::InstanceShards;
use tracesync_protocol::relay::v1;

use super::engine::{Admitted, Slot};

/// Session -> ingest loop, on one bounded channel shared by all sessions:
/// a session waits while it is full, so a busy ingest loop slows relays
/// down through TCP instead of growing a queue.
#[derive(Debug)]
pub enum IngestEvent {
    /// A relay passed version and token checks; the core decides the rest.
    Connect {
        session_id: u64,
        hello: v1::Hello,
        /// Welcomed, or refused by the core (how to refuse the relay).
        reply: oneshot::Sender<Result<Welcomed, Close>>,
    },
    Batch {
        slot: Slot,
        session_id: u64,
        batch: v1::Batch,
        /// The frame's share of the channel's byte budget, given back when
        /// the ingest loop drops the event (the batch is done).
        credit: Credit,
    },
    Heartbeat {
        slot: Slot,
        session_id: u64,
        heartbeat: v1::Heartbeat,
    },
    /// Part of a trigger's window, from a relay in ring mode.
    Window {
        slot: Slot,
        session_id: u64,
        window: v1::Window,
        /// As a Batch's: given back once the part is staged.
        credit: Credit,
    },
    /// A trigger fired on the relay's machine; its TriggerResult goes
    /// back on the session's outgoing frames.
    TriggerRequest {
        slot: Slot,
        session_id: u64,
        request: v1::TriggerRequest,
    },
    /// The connection ended (peer closed, error, refusal). Not sent on
    /// daemon shutdown: then the ingest loop sends final acks first.
    Disconnected { slot: Slot, session_id: u64 },
}

/// Where sessions send their events: the one ingest loop, or with sharded
/// ingest the loop of the event's shard, directly (no hop through a router
/// thread; a full shard makes only the sessions sending to it wait). A
/// Connect goes to the shard of its Hello's machine raw id
/// ([`tracesync_core::shard::shard_of`]: a reconnect and the state the
/// output recovered for it land on the same shard), or, for a relay
/// instance seen before under another raw id (renamed), to the shard that
/// holds its state ([`InstanceShards`]); the other events by
/// slot, as a shard's slots are `inner * N + shard`. A ring relay's
/// Connect goes to shard 0, the flight shard, which holds the flight
/// recorder and so needs every ring relay's estimate and windows (a ring
/// relay sends no batches: no output state of its machine is split from
/// it). Each shard has its own byte budget too, so frames queued for a
/// shard that fell behind hold only its budget.
///
/// The ingest loops see their channel close once every clone is dropped
/// (the accept loop's and every session's).
#[derive(Clone, Debug)]
pub struct EventSender {
    shards: Arc<[mpsc::Sender<IngestEvent>]>,
    budgets: Arc<[ByteBudget]>,
    /// Sharded: which shard holds each relay instance (a renamed relay
    /// stays where its state is).
    instances: Option<Arc<std::sync::Mutex<InstanceShards>>>,
}

impl EventSender {
    /// One ingest loop, its frames bounded by `budget`.
    pub fn one(tx: mpsc::Sender<IngestEvent>, budget: ByteBudget) -> Self {
        Self {
            shards: Arc::from(vec![tx]),
            budgets: Arc::from(vec![budget]),
            instances: None,
        }
    }

    /// One channel and budget per shard, shard k's at index k (at least
    /// one).
    pub fn sharded(
        shards: Vec<(mpsc::Sender<IngestEvent>, ByteBudget)>,
        instances: InstanceShards,
    ) -> Self {
        let (shards, budgets): (Vec<_>, Vec<_>) = shards.into_iter().unzip();
        Self {
            shards: Arc::from(shards),
            budgets: Arc::from(budgets),
            instances: Some(Arc::new(std::sync::Mutex::new(instances))),
        }
    }

    /// The byte budget of the shard of `slot` (taken before a frame's
    /// event is sent). None without any shard.
    pub fn budget(&self, slot: Slot) -> Option<&ByteBudget> {
        let k = usize::try_from(slot).unwrap_or(0) % self.budgets.len().max(1);
        self.budgets.get(k)
    }

    /// Sends `event` to its shard's loop, waiting while that channel is
    /// full. Fails once that loop is gone (or without any loop).
    pub async fn send(&self, event: IngestEvent) -> Result<(), SendError<IngestEvent>> {
        let k = match (&event, &self.instances) {
            (IngestEvent::Connect { hello, .. }, Some(_)) if is_ring(hello) => FLIGHT_SHARD,
            (IngestEvent::Connect { hello, .. }, Some(instances)) => {
                let mut instances = instances
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                instances.shard_of_relay(hello.machine_raw_id, hello.relay_instance_id)
            }
            _ => shard_of_event(&event, self.shards.len()),
        };
        match self.shards.get(k) {
            Some(tx) => tx.send(event).await,
            None => Err(SendError(event)),
        }
    }
}

/// The shard that owns the flight recorder at N > 1 shards: the control
/// socket's triggers, every ring relay, and the relays' TriggerRequests
/// (forwarded by the other shards).
pub const FLIGHT_SHARD: usize = 0;

/// A Hello of a relay in ring mode.
fn is_ring(hello: &v1::Hello) -> bool {
    tracesync_protocol::trigger::RelayMode::from_hello(&hello.mode)
        == Some(tracesync_protocol::trigger::RelayMode::Ring)
}

/// The shard of an event among `shards` (see [`EventSender`]; a Connect
/// by its machine alone, without the instances' memory).
pub fn shard_of_event(event: &IngestEvent, shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    let slot = match event {
        IngestEvent::Connect { hello, .. } if is_ring(hello) => return FLIGHT_SHARD,
        IngestEvent::Connect { hello, .. } => {
            return tracesync_core::shard::shard_of(hello.machine_raw_id, shards);
        }
        IngestEvent::Batch { slot, .. }
        | IngestEvent::Heartbeat { slot, .. }
        | IngestEvent::Window { slot, .. }
        | IngestEvent::TriggerRequest { slot, .. }
        | IngestEvent::Disconnected { slot, .. } => *slot,
    };
    usize::try_from(slot).unwrap_or(0) % shards
}

/// The ingest loop's answer to a Connect.
#[derive(Debug)]
pub struct Welcomed {
    pub admitted: Admitted,
    /// Acks and close orders for this session; closed by the ingest loop
    /// when it is done with the session (after the final acks on shutdown).
    pub feedback: watch::Receiver<Feedback>,
    /// Frames for the relay (Trigger, WindowAck), in order; bounded, the
    /// ingest loop never waits on it (a frame that does not fit is sent
    /// later).
    pub outgoing: mpsc::Receiver<v1::frame::Body>,
}

/// Latest state the ingest loop holds for one session. A watch, not a
/// queue: acks are cumulative, so only the newest matters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Feedback {
    /// Every batch <= this is durable: send Ack when it grows.
    pub acked_through_batch: u64,
    /// Close the connection with this Refused code and reason.
    pub close: Option<Close>,
    /// Stop reading frames for now (acks still go out): the core holds
    /// this relay back ([`super::engine::Core::held_back`]).
    pub paused: bool,
}

/// Why the ingest loop refuses or closes a session (sent to the relay as
/// Refused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    /// `Refused.code`: "refused_by_core" (the core refused the Hello),
    /// "closed_by_core" (the relay broke a limit, counted) or "replaced" (a
    /// newer connection of the same relay instance).
    pub code: RefusalCode,
    /// `Refused.reason`: one line (the core's error's Display).
    pub reason: Arc<str>,
}

/// The byte budget of the session -> ingest channel, shared by all
/// sessions: a session takes a frame's bytes before sending it and the
/// ingest loop gives them back when it is done with the frame, so the
/// frames in flight never hold more than the budget (a session waits, and
/// TCP pushes back to the relay's spool).
#[derive(Clone, Debug)]
pub struct ByteBudget {
    permits: Arc<Semaphore>,
    total: usize,
}

/// Bytes of a [`ByteBudget`] held by one event.
#[derive(Debug)]
pub struct Credit {
    _permit: Option<OwnedSemaphorePermit>,
}

impl ByteBudget {
    /// A budget of `total` bytes (at most `u32::MAX`).
    pub fn new(total: usize) -> Self {
        let total = total.clamp(1, u32::MAX as usize);
        Self {
            permits: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Waits until `bytes` are free and takes them. A frame larger than
    /// the whole budget takes all of it (it then passes alone). None once
    /// the budget is closed.
    pub async fn acquire(&self, bytes: usize) -> Option<Credit> {
        let n = u32::try_from(bytes.min(self.total)).unwrap_or(u32::MAX);
        if n == 0 {
            return Some(Credit::default());
        }
        let permit = self.permits.clone().acquire_many_owned(n).await.ok()?;
        Some(Credit {
            _permit: Some(permit),
        })
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    pub fn total(&self) -> usize {
        self.total
    }
}

/// A credit for tests and events built outside a session.
impl Default for Credit {
    fn default() -> Self {
        Credit { _permit: None }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_budget_blocks_until_credits_come_back() {
        let budget = ByteBudget::new(1_000);
        let a = budget.acquire(600).await.expect("open");
        let b = budget.acquire(400).await.expect("open");
        assert_eq!(budget.available(), 0);
        // Full: the next frame waits...
        let waiting = tokio::time::timeout(Duration::from_millis(50), budget.acquire(1)).await;
        assert!(waiting.is_err(), "a full budget must make the sender wait");
        // ...until an ingested frame gives its bytes back.
        drop(a);
        let c = budget.acquire(500).await.expect("open");
        assert_eq!(budget.available(), 100);
        drop((b, c));
        assert_eq!(budget.available(), 1_000);
    }

    #[test]
    fn a_ring_relay_goes_to_the_flight_shard_whatever_its_machine() {
        let connect = |raw_id: u32, mode: &str| IngestEvent::Connect {
            session_id: 1,
            hello: v1::Hello {
                machine_raw_id: raw_id,
                mode: mode.into(),
                ..v1::Hello::default()
            },
            reply: oneshot::channel().0,
        };
        let on_1 = (0..1000u32)
            .find(|&id| tracesync_core::shard::shard_of(id, 2) == 1)
            .expect("a machine of shard 1");
        assert_eq!(shard_of_event(&connect(on_1, ""), 2), 1);
        assert_eq!(shard_of_event(&connect(on_1, "stream"), 2), 1);
        assert_eq!(shard_of_event(&connect(on_1, "ring"), 2), FLIGHT_SHARD);
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_budget_passes_alone() {
        let budget = ByteBudget::new(1_000);
        let big = budget.acquire(5_000).await.expect("open");
        assert_eq!(budget.available(), 0);
        drop(big);
        assert_eq!(budget.available(), budget.total());
        let empty = budget.acquire(0).await.expect("open");
        assert_eq!(budget.available(), 1_000);
        drop(empty);
    }
}
