//! One shard's side of sharded ingest: its live core behind the server's
//! `Core` trait (slots in the shard's class, its watermark noted after each
//! drain), and the `Writer` and `Fanout` its ingest loop writes to, which
//! hand runs to the writer thread and report back what is durable.
//!
//! All three share one [`Link`] on the shard's thread (the mutex is never
//! contended). A run holds the packets written since the last one, in the
//! shard's output order, and the watermark the core drained through: the
//! shard hands out no more packets dated at or before it but late ones.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tracesync_core::live::{self, LiveCore, LiveStats, OutPacket};
use tracesync_core::shard::Run;
use tracesync_core::status::MachineStatus;
use tracesync_core::sync::SyncUpdate;
use tracesync_protocol::relay::v1;

use super::ToWriter;
use super::budget::{RunBudget, run_bytes};
use crate::server::engine::{Admitted, CommitWaker, Core, Fanout, Slot, Writer};

/// What a shard shares with the writer thread: the last run position a
/// durable commit covered (`NONE` before any), its loop's waker, and its
/// core's counters at its last status tick (the writer records their sum:
/// one shard's values must not overwrite another's).
pub(super) struct Port {
    pub durable: AtomicU64,
    pub waker: Mutex<Option<CommitWaker>>,
    pub live: Mutex<(LiveStats, usize)>,
}

pub(super) const NONE: u64 = u64::MAX;

impl Port {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            durable: AtomicU64::new(NONE),
            waker: Mutex::new(None),
            live: Mutex::new((LiveStats::default(), 0)),
        })
    }

    /// Runs through `position` are durable: wakes the shard's loop.
    pub fn durable_through(&self, position: u64) {
        self.durable.store(position, Ordering::Release);
        if let Ok(waker) = self.waker.lock()
            && let Some(waker) = waker.as_ref()
        {
            waker();
        }
    }
}

/// The rolling output's current file, kept by the writer thread, for the
/// flight shard's snapshots (staged and written in its directory).
#[derive(Clone, Debug)]
pub(super) struct OutputPath(Arc<Mutex<Option<PathBuf>>>);

impl OutputPath {
    pub fn new(path: Option<PathBuf>) -> Self {
        Self(Arc::new(Mutex::new(path)))
    }

    pub fn set(&self, path: Option<PathBuf>) {
        if path.is_some() {
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = path;
        }
    }

    pub fn get(&self) -> Option<PathBuf> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The run being built and where it goes.
pub(super) struct Link {
    shard: usize,
    packets: Vec<OutPacket>,
    /// The core's watermark at its latest drain, and whether that drain
    /// handed out everything through it.
    watermark: i64,
    complete: bool,
    /// The watermark of the last complete run shipped.
    shipped_watermark: i64,
    /// Position of the last run shipped.
    shipped: Option<u64>,
    runs: SyncSender<(usize, ToWriter)>,
    budget: Arc<RunBudget>,
}

impl Link {
    pub fn new(
        shard: usize,
        runs: SyncSender<(usize, ToWriter)>,
        budget: Arc<RunBudget>,
    ) -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Self {
            shard,
            packets: Vec::new(),
            watermark: i64::MIN,
            complete: false,
            shipped_watermark: i64::MIN,
            shipped: None,
            runs,
            budget,
        }))
    }

    /// Hands the writer what was written since the last run, if anything
    /// (packets, or a higher watermark). Waits while the runs in flight
    /// hold their byte bound or the writer's queue is full: the shard's
    /// sessions wait with it. False once the writer is gone.
    fn ship(&mut self) -> bool {
        let news = self.complete && self.watermark > self.shipped_watermark;
        if self.packets.is_empty() && !news {
            return true;
        }
        if !self.budget.take(run_bytes(&self.packets)) {
            return false;
        }
        let position = self.shipped.map_or(0, |p| p + 1);
        let run = Run {
            packets: std::mem::take(&mut self.packets),
            watermark: self.watermark,
            complete: self.complete,
            position,
        };
        if self.runs.send((self.shard, ToWriter::Run(run))).is_err() {
            return false;
        }
        self.shipped = Some(position);
        if self.complete {
            self.shipped_watermark = self.watermark;
        }
        true
    }
}

fn lock(link: &Mutex<Link>) -> MutexGuard<'_, Link> {
    // A poisoned lock means a panic on this shard's thread already.
    link.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn gone() -> io::Error {
    io::Error::other("the writer thread has stopped")
}

/// The shard's live core: its slots are `inner * shards + shard`, so the
/// sessions' slots name their shard; only shard 0 writes the host's own
/// packets.
pub(super) struct ShardCore {
    pub core: LiveCore,
    pub shard: u32,
    pub shards: u32,
    pub link: Arc<Mutex<Link>>,
    pub port: Arc<Port>,
}

impl ShardCore {
    fn outer(&self, slot: Slot) -> Slot {
        slot.saturating_mul(self.shards).saturating_add(self.shard)
    }

    fn inner(&self, slot: Slot) -> Slot {
        slot / self.shards
    }
}

impl Core for ShardCore {
    type SyncUpdate = SyncUpdate;
    type CommitPoint = live::CommitPoint;
    type Refusal = live::Refusal;
    type SessionError = live::SessionError;

    fn connect(&mut self, hello: &v1::Hello, now_ns: u64) -> Result<Admitted, live::Refusal> {
        let admitted = Core::connect(&mut self.core, hello, now_ns)?;
        Ok(Admitted {
            slot: self.outer(admitted.slot),
            acked_through_batch: admitted.acked_through_batch,
            replaced: admitted.replaced.map(|s| self.outer(s)),
        })
    }

    fn batch(&mut self, slot: Slot, batch: v1::Batch, now: u64) -> Result<(), Self::SessionError> {
        let inner = self.inner(slot);
        Core::batch(&mut self.core, inner, batch, now)
    }

    fn heartbeat(
        &mut self,
        slot: Slot,
        heartbeat: &v1::Heartbeat,
        now_ns: u64,
    ) -> Result<(), Self::SessionError> {
        let inner = self.inner(slot);
        Core::heartbeat(&mut self.core, inner, heartbeat, now_ns)
    }

    fn sync(&mut self, update: &SyncUpdate) {
        // Stale slots are ignored by the core.
        let mut update = update.clone();
        update.slot = self.inner(update.slot);
        Core::sync(&mut self.core, &update);
    }

    fn disconnect(&mut self, slot: Slot) {
        let inner = self.inner(slot);
        LiveCore::disconnect(&mut self.core, inner);
    }

    fn host_tick(&mut self, now_ns: u64) {
        if self.shard == 0 {
            Core::host_tick(&mut self.core, now_ns);
        }
    }

    fn drain(&mut self, now_ns: u64, out: &mut Vec<OutPacket>) {
        let watermark = self.core.watermark(now_ns);
        let before = out.len();
        LiveCore::drain(&mut self.core, now_ns, out);
        let mut link = lock(&self.link);
        if link.watermark == i64::MAX {
            return; // flushed: shutting down
        }
        link.watermark = link.watermark.max(watermark);
        // Nothing more: everything the watermark passed is out (a drain
        // hands out a few MiB at most), the writer may go that far.
        link.complete = out.len() == before;
        if link.complete && link.packets.is_empty() {
            link.ship();
        }
    }

    fn flush_all(&mut self, out: &mut Vec<OutPacket>) {
        LiveCore::flush_all(&mut self.core, out);
        // Shutdown: nothing more comes from this shard.
        let mut link = lock(&self.link);
        link.watermark = i64::MAX;
        link.complete = true;
    }

    fn held_back(&mut self, now_ns: u64) -> Vec<Slot> {
        let held = LiveCore::held_back(&mut self.core, now_ns);
        held.into_iter().map(|s| self.outer(s)).collect()
    }

    fn commit_point(&mut self) -> live::CommitPoint {
        LiveCore::commit_point(&mut self.core)
    }

    fn committed_through(&mut self, point: live::CommitPoint) -> Vec<(Slot, u64)> {
        let acks = LiveCore::committed_through(&mut self.core, point);
        acks.into_iter().map(|(s, n)| (self.outer(s), n)).collect()
    }

    fn status(&self) -> Vec<MachineStatus> {
        Core::status(&self.core)
    }

    fn estimate(&self, slot: Slot) -> Option<tracesync_core::sync::SyncEstimate> {
        // The flight recorder maps trigger windows with it.
        Core::estimate(&self.core, self.inner(slot))
    }

    fn record_metrics(&self) {
        let live = (self.core.stats(), self.core.queued());
        match self.port.live.lock() {
            Ok(mut slot) => *slot = live,
            Err(poisoned) => *poisoned.into_inner() = live,
        }
    }
}

/// The shard loop's writer: packets join the run being built; a commit
/// ships it and is durable once the writer thread says so.
pub(super) struct ShardSink {
    pub link: Arc<Mutex<Link>>,
    pub port: Arc<Port>,
    /// The last position `poll_commits` reported.
    pub reported: u64,
    pub output: OutputPath,
}

impl ShardSink {
    fn durable(&self) -> Option<u64> {
        let durable = self.port.durable.load(Ordering::Acquire);
        (durable != NONE).then_some(durable)
    }
}

impl Writer<SyncUpdate> for ShardSink {
    fn write(&mut self, packet: &OutPacket, _now: SystemTime) -> io::Result<()> {
        lock(&self.link).packets.push(packet.clone());
        Ok(())
    }

    fn commit(&mut self) -> io::Result<()> {
        self.request_commit().map(|_| ())
    }

    fn request_commit(&mut self) -> io::Result<Option<u64>> {
        let mut link = lock(&self.link);
        if !link.ship() {
            return Err(gone());
        }
        // Nothing ever shipped: nothing was written, durable now.
        Ok(link.shipped)
    }

    fn poll_commits(&mut self) -> io::Result<Option<u64>> {
        match self.durable() {
            Some(d) if self.reported == NONE || d > self.reported => {
                self.reported = d;
                Ok(Some(d))
            }
            _ => Ok(None),
        }
    }

    fn wait_commits(&mut self) -> io::Result<Option<u64>> {
        let shipped = lock(&self.link).shipped;
        let until = Instant::now() + FINAL_WAIT;
        while let Some(shipped) = shipped
            && self.durable().is_none_or(|d| d < shipped)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.poll_commits()
    }

    fn set_commit_waker(&mut self, waker: CommitWaker) {
        if let Ok(mut slot) = self.port.waker.lock() {
            *slot = Some(waker);
        }
    }

    fn write_sync_samples(&mut self, update: &SyncUpdate) -> io::Result<()> {
        if update.samples.is_empty() {
            return Ok(());
        }
        let link = lock(&self.link);
        let samples = ToWriter::SyncSamples(update.samples.clone());
        link.runs.send((link.shard, samples)).map_err(|_| gone())
    }

    fn current_path(&self) -> Option<PathBuf> {
        self.output.get()
    }

    fn add_index_entry(&mut self, entry: tracesync_capture::index::IndexEntry) {
        let link = lock(&self.link);
        let index = ToWriter::Index(Box::new(entry));
        // Rare (one per snapshot); only a gone writer (shutdown) loses it.
        if link.runs.send((link.shard, index)).is_err() {
            tracing::debug!("a snapshot's index line: the writer thread has stopped");
        }
    }

    fn close(self) -> io::Result<()> {
        let link = lock(&self.link);
        link.runs
            .send((link.shard, ToWriter::Done))
            .map_err(|_| gone())
    }
}

/// How long a shard waits at shutdown for its last run to be durable.
const FINAL_WAIT: Duration = Duration::from_secs(10);

/// The shard loop's fan-out: after each drain round it wrote, the run goes
/// to the writer thread (which publishes to the tails what it writes).
pub(super) struct ShipFanout {
    pub link: Arc<Mutex<Link>>,
}

impl Fanout for ShipFanout {
    fn publish(&self, _packet: &OutPacket) {}

    fn publish_all(&self, _packets: &[OutPacket]) {
        // A gone writer shows at the next commit request.
        lock(&self.link).ship();
    }
}
