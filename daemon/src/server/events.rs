//! Messages between relay sessions and the ingest loop.

use std::sync::Arc;

use tokio::sync::{oneshot, watch};
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
        reply: oneshot::Sender<Result<Welcomed, String>>,
    },
    Batch {
        slot: Slot,
        session_id: u64,
        batch: v1::Batch,
    },
    Heartbeat {
        slot: Slot,
        session_id: u64,
        heartbeat: v1::Heartbeat,
    },
    /// The connection ended (peer closed, error, refusal). Not sent on
    /// daemon shutdown: then the ingest loop sends final acks first.
    Disconnected { slot: Slot, session_id: u64 },
}

/// The ingest loop's answer to a Connect.
#[derive(Debug)]
pub struct Welcomed {
    pub admitted: Admitted,
    /// Acks and close orders for this session; closed by the ingest loop
    /// when it is done with the session (after the final acks on shutdown).
    pub feedback: watch::Receiver<Feedback>,
}

/// Latest state the ingest loop holds for one session. A watch, not a
/// queue: acks are cumulative, so only the newest matters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Feedback {
    /// Every batch <= this is durable: send Ack when it grows.
    pub acked_through_batch: u64,
    /// Close the connection with this Refused code and reason.
    pub close: Option<Close>,
}

/// Why the ingest loop closes a session (sent to the relay as Refused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    /// `Refused.code`: "closed_by_core" (the relay broke a limit, counted)
    /// or "replaced" (a newer connection of the same relay instance).
    pub code: &'static str,
    pub reason: Arc<str>,
}
