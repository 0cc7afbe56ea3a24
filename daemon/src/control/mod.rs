//! The control socket: `tracesync status` and `tracesync tail` talk to the
//! daemon here.
//!
//! Protocol: the client sends one JSON line, [`Request`](tracesync_core::control::Request); the daemon answers
//! `{"cmd":"status"}` with one JSON line (a [`StatusReport`]) and
//! `{"cmd":"tail",...}` with a stream (text or jsonl lines, or a raw Perfetto
//! Trace byte stream). A refused request gets one `{"error":"..."}` line.
//!
//! Ingest never waits for a tail client: packets go out on a
//! `tokio::sync::broadcast` channel, whose sender never blocks. A client
//! that falls behind by more than the channel's capacity loses packets:
//! text and jsonl streams get a notice and go on, a perfetto stream is ended
//! (a gap cannot be spliced into a trace honestly), see [`server`].

pub mod history;
pub mod server;
pub mod trigger;
pub mod waiting;

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tracesync_core::live::OutPacket;
use tracesync_core::status::StatusReport;

pub use history::{HISTORY_BYTES, History};
pub use server::{MAX_CLIENTS, bind_unix, serve, serve_tcp};
pub use trigger::TriggerAsk;

/// Broadcast capacity [`ControlHub::new`] is usually given: a subscriber
/// may fall this many packets behind before it lags. The channel keeps at
/// most this many packets alive for a slow subscriber.
pub const DEFAULT_TAIL_CAPACITY: usize = 8192;

/// A preamble packet, with its machine's raw id (a tail filtered by machine
/// sends only those).
pub type PreamblePacket = (u32, Bytes);

/// What a new perfetto tail starts with: its preamble and its subscription.
pub type Subscription = (Vec<PreamblePacket>, broadcast::Receiver<Arc<OutPacket>>);

/// A perfetto tail's request for its first packets. The ingest loop answers
/// it between two drains with the rolling writer's preamble state (what the
/// next file would start with) and a new subscription, taken at the same
/// point of the stream: every preamble-role packet reaches the tail exactly
/// once, in its preamble or in its stream, and there is one preamble
/// tracker in the daemon, not two.
#[derive(Debug)]
pub struct PreambleRequest {
    packets: broadcast::Sender<Arc<OutPacket>>,
    reply: oneshot::Sender<Subscription>,
}

impl PreambleRequest {
    /// Subscribes and sends `preamble` back. Call it only where every
    /// packet written so far has been published.
    pub fn answer(self, preamble: Vec<PreamblePacket>) {
        let rx = self.packets.subscribe();
        // The tail may have gone meanwhile.
        let _ = self.reply.send((preamble, rx));
    }
}

/// What the ingest loop shares with the control socket.
#[derive(Clone, Debug)]
pub struct ControlHub {
    /// Every packet of the merged output, in output order, while someone
    /// tails.
    pub packets: broadcast::Sender<Arc<OutPacket>>,
    /// The latest status report.
    pub status: watch::Receiver<Arc<StatusReport>>,
    /// Perfetto tails' preamble requests, to the ingest loop (bounded by
    /// the control socket's client limit).
    preamble_requests: mpsc::Sender<PreambleRequest>,
    /// The last packets written, for `tail -n` / `--since` (see [`history`]).
    history: Arc<Mutex<History>>,
    /// Triggers, to the ingest loop (None: not wired, a trigger is refused).
    triggers: Option<mpsc::Sender<TriggerAsk>>,
}

impl ControlHub {
    /// A hub whose subscribers may fall `capacity` packets behind, and the
    /// receiver of its preamble requests (for the ingest loop).
    pub fn new(
        capacity: usize,
        status: watch::Receiver<Arc<StatusReport>>,
    ) -> (Self, mpsc::Receiver<PreambleRequest>) {
        let (packets, _) = broadcast::channel(capacity.max(1));
        let (preamble_requests, requests) = mpsc::channel(MAX_CLIENTS);
        let hub = Self {
            packets,
            status,
            preamble_requests,
            history: Arc::default(),
            triggers: None,
        };
        (hub, requests)
    }

    /// Wires triggers: the receiver is the ingest loop's.
    pub fn take_trigger_requests(&mut self) -> mpsc::Receiver<TriggerAsk> {
        let (asks, requests) = mpsc::channel(trigger::TRIGGER_QUEUE);
        self.triggers = Some(asks);
        requests
    }

    /// Where triggers go (None: not wired).
    pub fn trigger_sender(&self) -> Option<&mpsc::Sender<TriggerAsk>> {
        self.triggers.as_ref()
    }

    /// Sends one packet to every tail subscriber; never blocks on them.
    pub fn publish(&self, packet: Arc<OutPacket>) {
        // No subscribers is not an error: nobody is tailing.
        let _ = self.packets.send(packet);
    }

    /// Keeps one drain's packets as history and sends them to every
    /// subscriber, under the history's lock (see [`Self::subscribe_with_history`]).
    pub fn publish_drain(&self, packets: &[OutPacket]) {
        let mut history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        history.extend(packets);
        // The subscriber count takes the channel's lock: once per drain.
        if self.packets.receiver_count() == 0 {
            return;
        }
        for packet in packets {
            ControlHub::publish(self, Arc::new(packet.clone()));
        }
    }

    /// The packets held as history and a new subscription, taken together:
    /// every packet is in one of them, once.
    pub fn subscribe_with_history(
        &self,
    ) -> (Vec<Arc<OutPacket>>, broadcast::Receiver<Arc<OutPacket>>) {
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        (history.snapshot(), self.packets.subscribe())
    }

    /// A new subscriber and the preamble packets it should start with; None
    /// when the ingest loop has stopped.
    pub async fn subscribe_with_preamble(&self) -> Option<Subscription> {
        let (reply, answer) = oneshot::channel();
        let request = PreambleRequest {
            packets: self.packets.clone(),
            reply,
        };
        self.preamble_requests.send(request).await.ok()?;
        answer.await.ok()
    }
}

#[cfg(test)]
mod tests;
