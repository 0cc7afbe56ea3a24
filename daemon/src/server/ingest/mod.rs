//! The ingest loop: owns the live core and the rolling writer, turns
//! session events into core calls, drained packets into file writes, and
//! commits into acks.
//!
//! It runs on a dedicated thread with its own current-thread runtime: the
//! writer blocks (write, fdatasync) and must not stall the sessions'
//! runtime; channels and timers work across runtimes.
//!
//! Acks follow durability: a relay's batch is acknowledged only after a
//! commit that covers every packet the core drained up to then. The
//! commit's fdatasyncs run on the writer's sync thread: at each commit tick
//! the loop takes a commit point, requests a commit and goes on ingesting;
//! when the writer reports that commit durable (it wakes the loop), the
//! points it covers are acknowledged (`ingest_acks.rs`). When the writer
//! fails (disk full), the loop logs once per episode, stops taking events
//! (sessions wait, relays keep their spools), retries at every commit tick,
//! and acks again once a commit succeeds.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tracesync_protocol::relay::RefusalCode;

use tokio::sync::{Notify, mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior, interval};
use tracing::{debug, info, warn};

use super::engine::{Core, Fanout, Slot, Writer};
use super::events::{Close, Feedback, IngestEvent};
use crate::control::{PreambleRequest, TriggerAsk};
use crate::reload::OutputLimits;
use acks::AckGate;
use tracesync_core::live::OutPacket;
use tracesync_core::status::{OutputStatus, StatusReport};

mod acks;
mod commit;
mod events;
mod flight;
mod status;

/// Timers of the ingest loop.
#[derive(Clone, Debug)]
pub struct IngestSettings {
    pub drain_every: Duration,
    pub commit_every: Duration,
    pub host_tick_every: Duration,
    pub status_every: Duration,
    /// Bound addresses, for the status report.
    pub data_addr: Option<String>,
    pub sync_addr: Option<String>,
    /// The prober's registry, for its counters in the status report.
    pub probes: Option<crate::sync::ProbeSessions>,
    /// New output rotation/retention limits (SIGHUP reloads), if wired.
    pub limits: Option<watch::Receiver<OutputLimits>>,
    /// The server's counters, for the status report's refusals.
    pub server_counters: Option<Arc<super::Counters>>,
    /// Distinct `machine` labels of the metrics (the host and max relays).
    pub metrics_machines: usize,
    /// The flight recorder's trigger limits (`[trigger]`).
    pub triggers: tracesync_core::trigger::TriggerConfig,
    /// None: this loop holds the flight recorder and fires relays'
    /// TriggerRequests itself. Some (a shard of several that is not the
    /// flight shard): each is placed on the host's clock with its relay's
    /// estimate here and forwarded to the flight shard, which answers the
    /// relay on its session's outgoing frames.
    pub flight_shard: Option<mpsc::Sender<ForwardedTrigger>>,
}

pub use events::ForwardedTrigger;

/// Relays' TriggerRequests queued for the flight shard at most; one that
/// does not fit is refused at once with [`FLIGHT_BUSY`].
pub const FORWARDED_TRIGGERS: usize = 64;

/// Why a relay's trigger is refused when the flight shard's queue is full.
pub const FLIGHT_BUSY: &str = "the daemon's flight recorder has too many triggers queued; \
     try again";

impl IngestSettings {
    pub fn new(commit_every: Duration) -> Self {
        Self {
            drain_every: Duration::from_millis(10),
            commit_every,
            host_tick_every: Duration::from_millis(100),
            status_every: Duration::from_millis(250),
            data_addr: None,
            sync_addr: None,
            probes: None,
            limits: None,
            server_counters: None,
            metrics_machines: 257,
            triggers: tracesync_core::trigger::TriggerConfig::default(),
            flight_shard: None,
        }
    }
}

/// The loop's channels.
pub struct IngestIo<U, F> {
    pub events: mpsc::Receiver<IngestEvent>,
    pub sync_updates: mpsc::Receiver<U>,
    /// Fan-out to tail subscribers (lagging receivers lose packets, never
    /// slow the loop).
    pub packets: F,
    pub status: watch::Sender<Arc<StatusReport>>,
    /// Perfetto tails asking for their preamble (answered from the writer
    /// between drains); None: no control hub.
    pub preamble_requests: Option<mpsc::Receiver<PreambleRequest>>,
    /// Triggers from the control socket (None: no control hub, or not
    /// the flight shard).
    pub trigger_requests: Option<mpsc::Receiver<TriggerAsk>>,
    /// Relays' TriggerRequests forwarded by the other shards (the flight
    /// shard of several only).
    pub forwarded_triggers: Option<mpsc::Receiver<ForwardedTrigger>>,
}

/// The next value of a watch; None once its sender is gone. Pending forever
/// without a watch.
async fn changed<T: Copy>(watch: &mut Option<watch::Receiver<T>>) -> Option<T> {
    match watch {
        Some(rx) => match rx.changed().await {
            Ok(()) => Some(*rx.borrow_and_update()),
            Err(_) => None,
        },
        None => std::future::pending().await,
    }
}

/// The next preamble request; pending forever without a hub.
async fn next_request(
    requests: &mut Option<mpsc::Receiver<PreambleRequest>>,
) -> Option<PreambleRequest> {
    match requests {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The next message of an optional channel; pending forever without one
/// (no hub, or not the flight shard).
async fn next_of<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Frames queued per session for its relay (Trigger, WindowAck): the
/// ingest loop never waits on a session; what does not fit is sent later.
const OUTGOING_FRAMES: usize = 16;

/// What a finished loop did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngestSummary {
    pub packets_written: u64,
    pub commits: u64,
    pub write_errors: u64,
}

/// Starts the loop on its own thread; the thread ends when every session
/// and the accept loop have dropped their event senders.
pub fn spawn<C, W, F>(
    core: C,
    writer: W,
    settings: IngestSettings,
    io: IngestIo<C::SyncUpdate, F>,
) -> io::Result<std::thread::JoinHandle<io::Result<IngestSummary>>>
where
    C: Core,
    W: Writer<C::SyncUpdate>,
    F: Fanout,
{
    std::thread::Builder::new()
        .name("tracesync-ingest".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()?;
            runtime.block_on(Ingest::new(core, writer, settings).run(io))
        })
}

struct SessionEntry {
    session_id: u64,
    feedback: watch::Sender<Feedback>,
    /// Frames for the relay (see [`OUTGOING_FRAMES`]).
    outgoing: mpsc::Sender<tracesync_protocol::relay::v1::frame::Body>,
}

struct Ingest<C: Core, W> {
    core: C,
    writer: W,
    settings: IngestSettings,
    sessions: HashMap<Slot, SessionEntry>,
    /// Drained packets not yet written (non-empty only while the writer fails).
    unwritten: Vec<OutPacket>,
    written_of_unwritten: usize,
    /// Written since the last commit request (or a commit failed).
    dirty: bool,
    /// Commit points waiting for their commit to be durable.
    acks: AckGate<C::CommitPoint>,
    /// Host time of the last packet written, and the same gate for it: a
    /// snapshot reads the output back once it is durable past its window.
    written_ts: i64,
    output_ts: AckGate<i64>,
    durable_ts: i64,
    /// The writer failed and has not recovered yet.
    failing: bool,
    /// Counted failures, for the status report.
    output: OutputStatus,
    /// Sidecar writes are failing (logged once per episode).
    sidecar_failing: bool,
    summary: IngestSummary,
    metrics: crate::metrics::IngestMetrics,
    /// Triggers and ring relays ([`flight`]).
    flight: flight::Flight,
}

impl<C, W> Ingest<C, W>
where
    C: Core,
    W: Writer<C::SyncUpdate>,
{
    fn new(core: C, writer: W, settings: IngestSettings) -> Self {
        let flight = flight::Flight::new(settings.triggers.clone());
        let metrics = crate::metrics::IngestMetrics::new(settings.metrics_machines);
        Self {
            core,
            writer,
            settings,
            sessions: HashMap::new(),
            unwritten: Vec::new(),
            written_of_unwritten: 0,
            dirty: false,
            acks: AckGate::new(),
            written_ts: i64::MIN,
            output_ts: AckGate::new(),
            durable_ts: i64::MIN,
            failing: false,
            output: OutputStatus::default(),
            sidecar_failing: false,
            summary: IngestSummary::default(),
            metrics,
            flight,
        }
    }

    async fn run<F: Fanout>(
        mut self,
        mut io: IngestIo<C::SyncUpdate, F>,
    ) -> io::Result<IngestSummary> {
        let mut drain = ticker(self.settings.drain_every);
        let mut commit = ticker(self.settings.commit_every);
        let mut host = ticker(self.settings.host_tick_every);
        let mut status = ticker(self.settings.status_every);
        let mut batch = Vec::with_capacity(64);
        let mut sync_open = true;
        let mut limits = self.settings.limits.take();
        // The writer's sync thread wakes the loop when a commit finished.
        let durable = Arc::new(Notify::new());
        let wake = Arc::clone(&durable);
        self.writer
            .set_commit_waker(Arc::new(move || wake.notify_one()));
        // Events received and not ingested yet, and packets handed to the
        // core since the last drain.
        let mut queued = VecDeque::new();
        let mut ingested = 0;
        loop {
            // Biased: the periodic work first (commits and acks, status,
            // host packets, the drain), then frames. Frames are ingested
            // in slices of about `SLICE` (the rest waits in `queued`), so
            // none of them waits behind a backlog of frames for more than
            // a slice; with an unbiased select each ready branch had the
            // same odds per turn, and under a backlog of small packets
            // (turns of half a second) the status and the commits (acks)
            // went unserved for seconds.
            tokio::select! {
                biased;
                () = durable.notified() => self.take_durable(),
                _ = commit.tick() => self.commit(&io.packets),
                _ = status.tick() => self.publish_status(&io.status, &io.packets),
                _ = host.tick() => {
                    let now = tracesync_common::clock::boottime_ns();
                    self.core.host_tick(now);
                    self.send_triggers();
                    self.flight_tick(now);
                }
                update = io.sync_updates.recv(), if sync_open => match update {
                    Some(update) => {
                        self.on_sync(&update);
                        self.send_triggers();
                    }
                    None => sync_open = false,
                },
                ask = next_of(&mut io.trigger_requests) => match ask {
                    Some(ask) => {
                        self.flight.ask(ask, tracesync_common::clock::boottime_ns());
                        self.send_triggers();
                    }
                    None => io.trigger_requests = None,
                },
                forwarded = next_of(&mut io.forwarded_triggers) => match forwarded {
                    Some(forwarded) => self.on_forwarded_trigger(forwarded),
                    None => io.forwarded_triggers = None,
                },
                request = next_request(&mut io.preamble_requests) => match request {
                    // Between drains: everything written was published.
                    Some(request) => request.answer(self.writer.preamble()),
                    None => io.preamble_requests = None,
                },
                changed = changed(&mut limits) => match changed {
                    Some(new) => self.writer.set_limits(&new),
                    None => limits = None,
                },
                _ = drain.tick(), if !self.failing => {
                    ingested = 0;
                    self.drain(&io.packets);
                }
                n = io.events.recv_many(&mut batch, 64), if !self.failing && queued.is_empty() => {
                    if n == 0 {
                        break; // every sender gone: shutdown
                    }
                    queued.extend(batch.drain(..));
                    self.ingest_slice(&mut queued, &mut ingested, &io.packets);
                }
                // Yields to the runtime first, so its timers fire (the
                // ticks above) before the next slice.
                () = tokio::task::yield_now(), if !self.failing && !queued.is_empty() => {
                    self.ingest_slice(&mut queued, &mut ingested, &io.packets);
                }
            }
        }
        self.finish(&io.packets, &io.status).await
    }

    /// Ingests events from the front of `queued` for about [`SLICE`] (one
    /// at least), draining after every [`DRAIN_AFTER_PACKETS`] packets.
    fn ingest_slice(
        &mut self,
        queued: &mut VecDeque<IngestEvent>,
        ingested: &mut usize,
        packets: &impl Fanout,
    ) {
        let until = std::time::Instant::now() + SLICE;
        let now = tracesync_common::clock::boottime_ns();
        while let Some(event) = queued.pop_front() {
            *ingested += self.on_event(event, now);
            // Many frames of small packets at once would pile up in the
            // core (each queued packet costs far more than its bytes in
            // the frame) before the next drain tick: drain in between.
            if *ingested >= DRAIN_AFTER_PACKETS && !self.failing {
                *ingested = 0;
                self.drain(packets);
            }
            if self.failing || std::time::Instant::now() >= until {
                return;
            }
        }
    }

    fn on_sync(&mut self, update: &C::SyncUpdate) {
        self.core.sync(update);
        match self.writer.write_sync_samples(update) {
            Ok(()) => {
                self.dirty = true;
                if self.sidecar_failing {
                    self.sidecar_failing = false;
                    info!("clock-sync samples are written again");
                }
            }
            // Losing sidecar samples loses no trace data: log once, go on.
            Err(e) if !self.sidecar_failing => {
                self.sidecar_failing = true;
                warn!("cannot write clock-sync samples: {e}; dropping them until it works");
            }
            Err(e) => debug!("cannot write clock-sync samples: {e}"),
        }
    }

    /// Drains and writes in rounds (the core hands out a few MiB per
    /// round), so drained packets not yet written stay bounded.
    fn drain(&mut self, packets: &impl Fanout) {
        self.hold_back();
        // Not sliced: what the watermark passed goes out now, so the
        // ordering queue stays short (sliced, it sat near its bound with
        // 4 KiB packets: +50-60 MiB of peak RSS in scripts/bench-live.sh).
        for _ in 0..DRAIN_ROUNDS {
            if self.unwritten.is_empty() {
                self.core
                    .drain(tracesync_common::clock::boottime_ns(), &mut self.unwritten);
            }
            if self.unwritten.is_empty() || !self.write_unwritten(packets) {
                return;
            }
        }
    }

    /// Pauses the sessions the core holds back and resumes the others.
    fn hold_back(&mut self) {
        let held = self.core.held_back(tracesync_common::clock::boottime_ns());
        for (slot, entry) in &self.sessions {
            let paused = held.contains(slot);
            entry.feedback.send_if_modified(|feedback| {
                let changed = feedback.paused != paused;
                feedback.paused = paused;
                changed
            });
        }
    }

    /// Writes the drained packets in order; false when the writer failed
    /// (the rest stay for the next try).
    fn write_unwritten(&mut self, packets: &impl Fanout) -> bool {
        let now = SystemTime::now();
        let first = self.written_of_unwritten;
        while let Some(packet) = self.unwritten.get(self.written_of_unwritten) {
            if let Err(e) = self.writer.write(packet, now) {
                packets.publish_all(&self.unwritten[first..self.written_of_unwritten]);
                self.failed("write", &e);
                return false;
            }
            self.written_of_unwritten += 1;
            self.written_ts = self.written_ts.max(packet.ts);
            self.summary.packets_written += 1;
            self.dirty = true;
        }
        // Tail subscribers get what was written, in order, in one call.
        packets.publish_all(&self.unwritten[first..]);
        self.unwritten.clear();
        // A burst (packets forced out past the queue's bound) does not keep
        // its room: the usual drain round needs far less.
        if self.unwritten.capacity() > UNWRITTEN_KEEP {
            self.unwritten.shrink_to(UNWRITTEN_KEEP);
        }
        self.written_of_unwritten = 0;
        true
    }

    /// Shutdown: everything held goes out, one final commit, final acks,
    /// then the sessions' feedback closes and the writer is closed.
    async fn finish(
        mut self,
        packets: &impl Fanout,
        status: &watch::Sender<Arc<StatusReport>>,
    ) -> io::Result<IngestSummary> {
        if self.unwritten.is_empty() {
            self.core.flush_all(&mut self.unwritten);
        }
        // A failing writer gets a few more chances, then the data stays in
        // the relays' spools (they were not acknowledged).
        let deadline = Instant::now() + FINAL_COMMIT_PATIENCE;
        loop {
            self.commit(packets);
            // Waits for the commit just requested.
            let waited = self.writer.wait_commits();
            self.on_commits(waited);
            if !self.failing {
                break;
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "the output {} could not be committed at shutdown; unacknowledged data \
                     stays in the relays' spools",
                    self.current_file().unwrap_or_default()
                )));
            }
            tokio::time::sleep(self.settings.commit_every).await;
            if self.unwritten.is_empty() {
                self.core.flush_all(&mut self.unwritten);
            }
        }
        self.publish_status(status, packets);
        let Self {
            writer,
            sessions,
            summary,
            ..
        } = self;
        // Closing the watches tells sessions the final acks are out.
        drop(sessions);
        writer.close()?;
        info!(
            packets = summary.packets_written,
            commits = summary.commits,
            "output closed"
        );
        Ok(summary)
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Drain rounds per drain tick at most (the next tick goes on).
const DRAIN_ROUNDS: usize = 64;

/// About how long one turn of the loop ingests frames before the other
/// branches are served again (a frame begun is finished).
const SLICE: Duration = Duration::from_millis(20);

/// Packets ingested between two drains at most (about 8 MiB of queue with
/// small packets), besides the drain tick.
const DRAIN_AFTER_PACKETS: usize = 32_768;

/// Drained packets whose room is kept between drain rounds: a round's list
/// takes at most about `DRAIN_MAX_BYTES` with small packets.
const UNWRITTEN_KEEP: usize =
    tracesync_core::live::DRAIN_MAX_BYTES as usize / std::mem::size_of::<OutPacket>();

/// How long shutdown retries a failing final commit.
const FINAL_COMMIT_PATIENCE: Duration = Duration::from_secs(5);

fn close(entry: &SessionEntry, code: RefusalCode, reason: &str) {
    let close = Close {
        code,
        reason: Arc::from(reason),
    };
    entry
        .feedback
        .send_modify(|feedback| feedback.close = Some(close));
}

fn ticker(every: Duration) -> tokio::time::Interval {
    let mut ticker = interval(every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}
