//! The control socket: `tracesync status` and `tracesync tail` talk to the
//! daemon here.
//!
//! Protocol: the client sends one JSON line, [`Request`]; the daemon answers
//! `{"cmd":"status"}` with one JSON line (a [`StatusReport`]) and
//! `{"cmd":"tail",...}` with a stream (text or jsonl lines, or a raw Perfetto
//! Trace byte stream). A refused request gets one `{"error":"..."}` line.
//!
//! Ingest never waits for a tail client: packets go out on a
//! `tokio::sync::broadcast` channel, whose sender never blocks. A client
//! that falls behind by more than the channel's capacity loses packets:
//! text and jsonl streams get a notice and go on, a perfetto stream is ended
//! (a gap cannot be spliced into a trace honestly), see [`server`].

pub mod format;
pub mod request;
pub mod server;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{broadcast, watch};

use bytes::Bytes;
use tracesync_core::live::{OutPacket, Role};
use tracesync_core::preamble::{PreambleLimits, PreambleState};
use tracesync_core::status::StatusReport;

pub use format::{MachineFilter, PacketFormatter};
pub use request::{NOTICE_FIELD, Request, TailFormat};
pub use server::{MAX_CLIENTS, bind_unix, serve, serve_tcp};

/// Broadcast capacity [`ControlHub::new`] is usually given: a subscriber
/// may fall this many packets behind before it lags. The channel keeps at
/// most this many packets alive for a slow subscriber.
pub const DEFAULT_TAIL_CAPACITY: usize = 8192;

/// What the ingest loop shares with the control socket.
#[derive(Clone, Debug)]
pub struct ControlHub {
    /// Every packet of the merged output, in output order. Publish with
    /// [`ControlHub::publish`] so perfetto tails get a preamble.
    pub packets: broadcast::Sender<Arc<OutPacket>>,
    /// The latest status report.
    pub status: watch::Receiver<Arc<StatusReport>>,
    /// The packets a perfetto stream opens with (latest SystemInfo,
    /// ClockSnapshot and sync point per machine, incremental state per
    /// sequence: what a rolled file starts with), kept in step with
    /// `packets` under this lock.
    preamble: Arc<Mutex<PreambleState>>,
    /// The preamble tracks incremental clocks: data packets must be
    /// observed too (else they skip the lock).
    observe_data: Arc<AtomicBool>,
}

impl ControlHub {
    /// A hub whose subscribers may fall `capacity` packets behind.
    pub fn new(capacity: usize, status: watch::Receiver<Arc<StatusReport>>) -> Self {
        let (packets, _) = broadcast::channel(capacity.max(1));
        Self {
            packets,
            status,
            preamble: Arc::new(Mutex::new(PreambleState::new(PreambleLimits::default()))),
            observe_data: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Sends one packet to every tail subscriber; never blocks on them.
    ///
    /// Packets with a preamble role are recorded and sent under one lock, so
    /// a perfetto subscriber sees each of them exactly once: in its preamble
    /// or in its stream. Data packets skip the lock unless a sequence has
    /// incremental clocks (they advance them).
    pub fn publish(&self, packet: Arc<OutPacket>) {
        if packet.role == Role::Data && !self.observe_data.load(Ordering::Relaxed) {
            // No subscribers is not an error: nobody is tailing.
            let _ = self.packets.send(packet);
            return;
        }
        let mut preamble = lock(&self.preamble);
        preamble.observe_packet(
            packet.role,
            packet.machine_raw_id,
            packet.seq,
            &packet.bytes,
        );
        self.observe_data
            .store(preamble.tracks_incremental_clocks(), Ordering::Relaxed);
        let _ = self.packets.send(packet);
    }

    /// A new subscriber and the preamble packets it should start with,
    /// each with its machine's raw id.
    pub fn subscribe_with_preamble(
        &self,
    ) -> (Vec<(u32, Bytes)>, broadcast::Receiver<Arc<OutPacket>>) {
        let preamble = lock(&self.preamble);
        let rx = self.packets.subscribe();
        (preamble.packets_by_machine(), rx)
    }
}

/// The state stays consistent even if a holder panicked (each observation
/// is a few inserts), so a poisoned lock is taken over.
fn lock(m: &Mutex<PreambleState>) -> std::sync::MutexGuard<'_, PreambleState> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
