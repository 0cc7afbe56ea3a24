//! Trace sources: each turns some producer's output into TracePacket bytes
//! for the spool.
//!
//! Every source emits [`SourceBatch`]es of packets without Trace framing,
//! each stamped with a relay sequence id (from the shared
//! [`SequenceAllocator`]) and stripped of producer-written trusted fields
//! ([`pipeline`]), plus the [`Cursor`] the spool persists so a restarted
//! relay resumes where its spooled data ends.
//!
//! - [`spec`]: parsing `--source` values.
//! - [`pipeline`]: the sans-IO byte -> packet path shared by file, unix
//!   and stdin sources.
//! - [`mod@file`]: following a trace file being written.
//! - [`stream`]: unix socket producers and stdin.
//! - [`synthetic`]: the built-in generator.

pub mod file;
pub mod pipeline;
pub mod spec;
pub mod stream;
pub mod synthetic;
pub mod triggers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clocks::SharedClock;
use crate::sequences::SequenceAllocator;

pub use spec::{SourceSpec, SyntheticSpec};

/// Packets of one source, in order, ready for the spool.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceBatch {
    /// 0 = the relay itself (own packets); 1.. = sources in command-line order.
    pub source: u16,
    /// TracePacket bodies (no Trace framing).
    pub packets: Vec<Bytes>,
    /// Where this source resumes after these packets.
    pub cursor: Cursor,
}

/// Where a source resumes after a restart (persisted by the spool with each
/// batch).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cursor {
    /// Not resumable (sockets, stdin, own packets): start afresh.
    #[default]
    None,
    /// Byte offset just past the last packet emitted from this file, valid
    /// only while the path still names the same (dev, ino).
    File { dev: u64, ino: u64, offset: u64 },
    /// The `tracesync_n` of the next synthetic packet.
    Synthetic { next_counter: u64 },
}

/// What every source task is handed.
#[derive(Clone)]
pub struct SourceContext {
    pub clock: SharedClock,
    pub sequences: Arc<SequenceAllocator>,
    pub machine_name: Arc<str>,
    pub shutdown: CancellationToken,
    pub stats: Arc<SourceStats>,
    /// Shared by every source of the relay.
    pub budget: SourceBudget,
    /// `trigger-on`: Perfetto triggers in the packets that fire (None:
    /// none configured).
    pub triggers: Option<triggers::PacketTriggers>,
}

/// Bytes of source batches on their way to the spool, at most (a batch
/// larger than this passes alone): past it sources wait, as for a full
/// spool. A bound in batches would let 512 KiB batches pile up.
pub const SOURCE_QUEUE_BYTES: usize = 8 << 20;

/// The byte budget of the channel from the sources to the uplink: a source
/// takes a batch's bytes before sending it, the uplink gives them back once
/// the spool holds the batch. The relay's own packets (source 0, a few per
/// second) do not take part.
#[derive(Clone, Debug)]
pub struct SourceBudget {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl SourceBudget {
    pub fn new(limit: usize) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    fn share(&self, batch: &SourceBatch) -> u32 {
        let bytes: usize = batch.packets.iter().map(Bytes::len).sum();
        u32::try_from(bytes.clamp(1, self.limit)).unwrap_or(u32::MAX)
    }

    /// Waits until `batch` fits.
    async fn take(&self, batch: &SourceBatch) {
        if let Ok(permit) = self.permits.acquire_many(self.share(batch)).await {
            permit.forget();
        }
    }

    /// The spool took `batch`: its bytes are free again.
    pub fn give_back(&self, batch: &SourceBatch) {
        if batch.source != 0 {
            self.permits.add_permits(self.share(batch) as usize);
        }
    }
}

impl std::fmt::Debug for SourceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceContext")
            .field("machine_name", &self.machine_name)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Counters of one source (shared with status and metrics).
#[derive(Debug, Default)]
pub struct SourceStats {
    /// Packets handed to the spool.
    pub packets: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Packets dropped because their bytes did not parse (framing intact).
    pub malformed_packets: AtomicU64,
    /// Streams stopped by bad framing (a file waits for a rewrite, a
    /// connection is closed).
    pub stream_errors: AtomicU64,
    /// Packets dropped for being too large for one uplink frame.
    pub oversized_packets: AtomicU64,
    /// Packets dropped because a stream used more producer sequences than
    /// the relay maps.
    pub sequence_overflow: AtomicU64,
    /// Perfetto triggers of `trigger-on` dropped: more than a batch holds,
    /// or the relay's trigger queue full.
    pub triggers_dropped: AtomicU64,
    /// File restarts: truncated or replaced.
    pub restarts: AtomicU64,
    /// Resumes of a file whose producers' incremental state could not be
    /// replayed whole (unreadable prefix, or per sequence over the bounds).
    pub replay_failures: AtomicU64,
    /// Producer connections accepted (unix).
    pub connections: AtomicU64,
    /// Producer connections refused (over the limit).
    pub connections_refused: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// How it is doing, for the daemon's status (Heartbeat).
    state: Mutex<SourceState>,
}

/// How a source is doing: what `tracesync status` shows of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceState {
    pub condition: Condition,
    /// What a person needs to know, in a line.
    pub detail: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Condition {
    /// Reading its input, or ready to (a listener, a generator).
    #[default]
    Reading,
    /// Waiting for its input to appear (a file not there yet).
    Waiting,
    /// Its input ended (standard input closed).
    Ended,
    /// Stopped by an error.
    Failed,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Reading => "reading",
            Condition::Waiting => "waiting",
            Condition::Ended => "ended",
            Condition::Failed => "failed",
        }
    }
}

/// A copy of [`SourceStats`] at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SourceStatsSnapshot {
    pub packets: u64,
    pub bytes: u64,
    pub malformed_packets: u64,
    pub oversized_packets: u64,
    pub stream_errors: u64,
    pub sequence_overflow: u64,
    pub restarts: u64,
    pub replay_failures: u64,
    pub connections: u64,
    pub connections_refused: u64,
    pub last_error: Option<String>,
}

impl SourceStats {
    pub fn snapshot(&self) -> SourceStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SourceStatsSnapshot {
            packets: get(&self.packets),
            bytes: get(&self.bytes),
            malformed_packets: get(&self.malformed_packets),
            oversized_packets: get(&self.oversized_packets),
            stream_errors: get(&self.stream_errors),
            sequence_overflow: get(&self.sequence_overflow),
            restarts: get(&self.restarts),
            replay_failures: get(&self.replay_failures),
            connections: get(&self.connections),
            connections_refused: get(&self.connections_refused),
            last_error: self.last_error(),
        }
    }

    /// The last error line, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().map_or(None, |e| e.clone())
    }

    /// How the source is doing now.
    pub fn state(&self) -> SourceState {
        self.state
            .lock()
            .map_or_else(|_| SourceState::default(), |s| s.clone())
    }

    /// Sets how the source is doing (`detail`: a line for a person).
    pub fn set_state(&self, condition: Condition, detail: impl Into<String>) {
        if let Ok(mut state) = self.state.lock() {
            *state = SourceState {
                condition,
                detail: detail.into(),
            };
        }
    }

    /// Logs `line` as a warning and keeps it as the last error.
    pub fn report(&self, line: String) {
        tracing::warn!("{line}");
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(line);
        }
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Sends one batch, giving up on shutdown. False when the source must stop
/// (shutdown, or the spool is gone).
pub async fn send_batch(
    tx: &mpsc::Sender<SourceBatch>,
    ctx: &SourceContext,
    batch: SourceBatch,
) -> bool {
    let (shutdown, stats) = (&ctx.shutdown, &ctx.stats);
    let count = batch.packets.len();
    let bytes: u64 = batch.packets.iter().map(|p| p.len() as u64).sum();
    tokio::select! {
        biased;
        () = shutdown.cancelled() => return false,
        () = ctx.budget.take(&batch) => {}
    }
    tokio::select! {
        biased;
        () = shutdown.cancelled() => false,
        sent = tx.send(batch) => {
            if sent.is_ok() {
                SourceStats::add(&stats.packets, count as u64);
                SourceStats::add(&stats.bytes, bytes);
            }
            sent.is_ok()
        }
    }
}

/// Starts source `index` (1.., command-line order) from `resume`. The task
/// ends on `ctx.shutdown`, when the spool's receiver is dropped, or when a
/// finite source (stdin) ends.
pub fn spawn(
    spec: SourceSpec,
    index: u16,
    ctx: SourceContext,
    resume: Cursor,
    tx: mpsc::Sender<SourceBatch>,
) -> JoinHandle<()> {
    let label = spec.label();
    match spec {
        SourceSpec::File(path) => tokio::spawn(file::run(path, label, index, ctx, resume, tx)),
        SourceSpec::Unix(path) => tokio::spawn(stream::run_unix(path, label, index, ctx, tx)),
        SourceSpec::Stdin => tokio::spawn(stream::run_stdin(label, index, ctx, tx)),
        SourceSpec::Synthetic(s) => tokio::spawn(synthetic::run(s, index, ctx, resume, tx)),
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers shared by the source tests.

    use super::*;
    use crate::clocks::SystemClock;
    use tracesync_protocol::perfetto::{TracePacket, trace_packet};
    use tracesync_protocol::scan;
    use tracesync_protocol::wire;

    pub fn context() -> SourceContext {
        SourceContext {
            clock: Arc::new(SystemClock::default()),
            sequences: Arc::new(SequenceAllocator::new()),
            machine_name: Arc::from("testbox"),
            shutdown: CancellationToken::new(),
            stats: Arc::new(SourceStats::default()),
            budget: SourceBudget::new(SOURCE_QUEUE_BYTES),
            triggers: None,
        }
    }

    /// Trace-framed producer packets with timestamps `tss` on sequence `seq`.
    pub fn framed(tss: impl IntoIterator<Item = u64>, seq: Option<u32>) -> Vec<u8> {
        let mut out = Vec::new();
        for ts in tss {
            let p = TracePacket {
                timestamp: Some(ts),
                optional_trusted_packet_sequence_id: seq
                    .map(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId),
                trusted_pid: Some(5),
                ..Default::default()
            };
            wire::put_trace_packet(&mut out, &prost::Message::encode_to_vec(&p));
        }
        out
    }

    /// (timestamp, relay sequence) of an emitted packet.
    pub fn ts_seq(p: &Bytes) -> (u64, u32) {
        let f = scan::scan_packet(p).expect("emitted packets scan");
        assert!(!f.has_trusted_pid && !f.has_trusted_uid && f.machine_id.is_none());
        (
            f.timestamp.unwrap_or(0),
            f.trusted_packet_sequence_id.unwrap_or(0),
        )
    }

    /// Receives batches until `n` packets arrived (panics after 5 s).
    pub async fn receive(
        rx: &mut mpsc::Receiver<SourceBatch>,
        n: usize,
    ) -> (Vec<(u64, u32)>, Cursor) {
        let mut got = Vec::new();
        let mut cursor = Cursor::None;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < n {
            let batch = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out with {} of {n} packets", got.len()))
                .expect("source alive");
            got.extend(batch.packets.iter().map(ts_seq));
            cursor = batch.cursor;
        }
        (got, cursor)
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    fn batch(source: u16, bytes: usize) -> SourceBatch {
        SourceBatch {
            source,
            packets: vec![Bytes::from(vec![0u8; bytes])],
            cursor: Cursor::None,
        }
    }

    #[tokio::test]
    async fn sources_wait_for_the_spool_past_the_byte_budget() {
        let (tx, mut rx) = mpsc::channel(64);
        let mut ctx = test_support::context();
        ctx.budget = SourceBudget::new(1000);
        assert!(send_batch(&tx, &ctx, batch(1, 600)).await);
        // 600 + 600 > 1000: the second waits until the first is given back.
        let second = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            send_batch(&tx, &ctx, batch(1, 600)),
        )
        .await;
        assert!(second.is_err(), "sent past the budget");
        let first = rx.recv().await.unwrap();
        ctx.budget.give_back(&first);
        assert!(send_batch(&tx, &ctx, batch(1, 600)).await);
        // A batch larger than the whole budget passes alone.
        let second = rx.recv().await.unwrap();
        ctx.budget.give_back(&second);
        assert!(send_batch(&tx, &ctx, batch(1, 5000)).await);
        // The relay's own packets never took a share: none is given back.
        ctx.budget.give_back(&batch(0, 600));
        assert_eq!(ctx.budget.permits.available_permits(), 0);
    }
}
