//! What the server needs from the live core, the rolling writer and the
//! sync prober's session registry, as three small traits.
//!
//! This file is the one place where the server depends on those modules:
//! the accept loop, sessions and ingest loop are written against these
//! traits, and the real types implement them (`server::wiring`). Tests drive the server with in-memory stand-ins.

use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use tracesync_protocol::relay::v1;

use tracesync_core::live::OutPacket;
use tracesync_core::status::{MachineStatus, OutputStatus};
use tracesync_core::sync::SyncEstimate;

/// Index of a connected relay in the live core; stable for one connection.
pub type Slot = u32;

/// A relay the core accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub slot: Slot,
    /// Welcome.acked_through_batch: every batch <= this is durable.
    pub acked_through_batch: u64,
    /// A stale connection of the same relay instance the core forgot: the
    /// server closes it.
    pub replaced: Option<Slot>,
}

/// The live core (sans-IO), as the ingest loop drives it. `now_ns` is host
/// BOOTTIME. Errors are typed by the core; their Display is one line for
/// the relay (sent as Refused, then the connection closes).
pub trait Core: Send + 'static {
    /// What the sync prober reports about one relay.
    type SyncUpdate: Send + 'static;
    /// Marks "everything drained so far", for acks after a commit.
    type CommitPoint: Copy + Send + 'static;
    /// Why it refuses a relay's Hello: Refused `refused_by_core`.
    type Refusal: std::error::Error + Send + 'static;
    /// Why it takes no more frames of a session: Refused `closed_by_core`.
    type SessionError: std::error::Error + Send + 'static;

    fn connect(&mut self, hello: &v1::Hello, now_ns: u64) -> Result<Admitted, Self::Refusal>;
    fn batch(
        &mut self,
        slot: Slot,
        batch: v1::Batch,
        now_ns: u64,
    ) -> Result<(), Self::SessionError>;
    fn heartbeat(
        &mut self,
        slot: Slot,
        heartbeat: &v1::Heartbeat,
        now_ns: u64,
    ) -> Result<(), Self::SessionError>;
    /// A new clock mapping for a relay (stale slots are the core's to ignore).
    fn sync(&mut self, update: &Self::SyncUpdate);
    fn disconnect(&mut self, slot: Slot);
    /// Host ClockSnapshot / SystemInfo when due; called every 100 ms.
    fn host_tick(&mut self, now_ns: u64);
    /// Appends packets ready for output, in output order.
    fn drain(&mut self, now_ns: u64, out: &mut Vec<OutPacket>);
    /// Appends every packet still held (shutdown).
    fn flush_all(&mut self, out: &mut Vec<OutPacket>);
    /// Connections that should stop reading for now (back-pressure to
    /// their relays); the rest read. Called before every drain (the core
    /// notes which relays it holds back: their stall grace stops).
    fn held_back(&mut self, _now_ns: u64) -> Vec<Slot> {
        Vec::new()
    }
    /// The point covering everything drained so far.
    fn commit_point(&mut self) -> Self::CommitPoint;
    /// After the writer made everything up to `point` durable: the highest
    /// batch each connected relay may be acknowledged through.
    fn committed_through(&mut self, point: Self::CommitPoint) -> Vec<(Slot, u64)>;
    fn status(&self) -> Vec<MachineStatus>;
    /// The latest clock estimate of the relay on `slot` (a trigger's window
    /// is mapped onto the relay's clock with it); None: not synced yet.
    fn estimate(&self, _slot: Slot) -> Option<SyncEstimate> {
        None
    }
    /// Copies the core's own counters into the metrics recorder (once per
    /// status tick; see [`crate::metrics`]).
    fn record_metrics(&self) {}
}

/// Wakes the ingest loop when a commit finished (see `Writer::request_commit`).
pub type CommitWaker = std::sync::Arc<dyn Fn() + Send + Sync>;

/// The rolling writer (blocking but for commits), as the ingest loop drives it.
pub trait Writer<U>: Send + 'static {
    fn write(&mut self, packet: &OutPacket, now: SystemTime) -> io::Result<()>;
    /// After it returns Ok, everything written is durable.
    fn commit(&mut self) -> io::Result<()>;
    /// Starts making everything written so far durable without waiting for
    /// the disk: `Some(n)`: durable once `poll_commits` reports `n` or more;
    /// `None`: durable already. The default commits in place.
    fn request_commit(&mut self) -> io::Result<Option<u64>> {
        self.commit().map(|()| None)
    }
    /// Takes finished commits without waiting: `Some(n)` when every commit
    /// through `n` became durable since the last report; an error when one
    /// failed (nothing it covered is durable: request again).
    fn poll_commits(&mut self) -> io::Result<Option<u64>> {
        Ok(None)
    }
    /// Like `poll_commits`, but first waits until no commit runs.
    fn wait_commits(&mut self) -> io::Result<Option<u64>> {
        Ok(None)
    }
    /// Called (from another thread) whenever a requested commit finished,
    /// so the owner polls.
    fn set_commit_waker(&mut self, _waker: CommitWaker) {}
    /// Raw probe samples of an update, for the `.sync.jsonl` sidecar.
    fn write_sync_samples(&mut self, update: &U) -> io::Result<()>;
    fn current_path(&self) -> Option<PathBuf>;
    /// New rotation and retention limits (SIGHUP); they apply from the next
    /// write or rotation.
    fn set_limits(&mut self, _limits: &crate::reload::OutputLimits) {}
    /// Final commit and marks the last file complete.
    fn close(self) -> io::Result<()>;
    /// Copies the writer's counters into the metrics recorder (once per
    /// status tick; see [`crate::metrics`]).
    fn record_metrics(&self) {}
    /// The status report's output section with the writer's own counters
    /// filled in (vanished files, symbolic links refused).
    fn output_status(&self, status: OutputStatus) -> OutputStatus {
        status
    }
    /// What a trace needs before the next packet written, each packet with
    /// its machine's raw id: a new perfetto tail starts with it (the same
    /// state the next file's preamble replays).
    fn preamble(&self) -> Vec<(u32, bytes::Bytes)> {
        Vec::new()
    }
    /// Lists a file the daemon wrote beside its rolled ones (a snapshot)
    /// in index.jsonl, replacing a line of the same name, and saves the
    /// index.
    fn add_index_entry(&mut self, _entry: tracesync_capture::index::IndexEntry) {}
}

/// Where drained packets go besides the file: tail subscribers. Must never
/// block (a slow subscriber lags or is dropped).
pub trait Fanout: Send + 'static {
    fn publish(&self, packet: &OutPacket);
    /// Publishes packets in order (the ingest loop hands over what one
    /// drain wrote: per-call work such as a subscriber check runs once).
    fn publish_all(&self, packets: &[OutPacket]) {
        for packet in packets {
            self.publish(packet);
        }
    }
    /// Subscribers connected now (for metrics).
    fn subscribers(&self) -> usize {
        0
    }
}

/// A bare broadcast channel (tests; no preamble cache).
impl Fanout for tokio::sync::broadcast::Sender<std::sync::Arc<OutPacket>> {
    fn publish(&self, packet: &OutPacket) {
        if self.receiver_count() > 0 {
            // Nobody listening is fine: tail subscribers come and go.
            let _ = self.send(std::sync::Arc::new(packet.clone()));
        }
    }

    fn subscribers(&self) -> usize {
        self.receiver_count()
    }
}

/// The prober's session registry: a session registers once welcomed, so the
/// prober accepts its ProbeRegister datagrams, and unregisters on close.
pub trait ProbeRegistry: Clone + Send + Sync + 'static {
    /// `probe_key` is the session's Welcome.probe_key.
    fn register(&self, session_id: u64, slot: Slot, machine_raw_id: u32, probe_key: [u8; 32]);
    fn unregister(&self, session_id: u64);
}

/// No sync socket (tests, or probes disabled).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProbes;

impl ProbeRegistry for NoProbes {
    fn register(&self, _: u64, _: Slot, _: u32, _: [u8; 32]) {}
    fn unregister(&self, _: u64) {}
}
