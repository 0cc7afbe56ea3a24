//! Sharded ingest (`merge.ingest-shards` > 1): N shard threads, each the
//! usual ingest loop (`super::ingest`) with its own live core and the
//! relays of its machines, and one writer thread merging their runs into
//! the rolling output.
//!
//! Threads and channels:
//! - sessions send their events straight to their shard's bounded channel
//!   ([`super::events::EventSender`]): a Connect by its Hello's machine
//!   raw id (`tracesync_core::shard::shard_of`, so a reconnect and its
//!   recovered state land on the same shard), the others by slot (a
//!   shard's slots are `inner * N + shard`). A full shard channel makes
//!   only the sessions of that shard wait. Sync updates go through a
//!   router task by slot (a few per second per relay);
//! - shard k runs `ingest::spawn` with `link::ShardCore` (its live core,
//!   allocating output sequence ids from its residue class; only shard 0
//!   writes the host's own packets), a `link::ShardSink` as its writer
//!   (written packets form a run; a commit ships it) and a
//!   `link::ShipFanout` (each drain round's run is shipped at once);
//! - shard 0 is also the flight shard ([`FLIGHT_SHARD`]): it holds the
//!   flight recorder, takes the control socket's triggers and every ring
//!   relay (the sessions send it their Connect), so it has every ring
//!   relay's estimate and windows. Another shard places a relay's
//!   TriggerRequest on the host's clock with that relay's estimate and
//!   forwards it over a bounded channel ([`ingest::FORWARDED_TRIGGERS`],
//!   never waited on: a full one refuses the trigger at once); the flight
//!   shard answers on the relay's session's outgoing frames. A snapshot
//!   is due once shard 0's runs through the window's end are durable:
//!   the writer writes a packet only after every shard's watermark passed
//!   it, so the whole output is durable that far. Its index line goes to
//!   the writer thread with the runs;
//! - runs go over one bounded channel to the writer thread
//!   (`writer.rs`), which writes a packet once every shard's watermark
//!   passed it, publishes to the tails, commits, and after each durable
//!   commit tells each shard the last run it covers: the shard acks its
//!   relays only then.
//!
//! At one shard the daemon does not come here (`super::run::start`).

use std::io;
use std::sync::Arc;
use std::sync::mpsc::sync_channel;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracesync_core::live::{LiveConfig, LiveCore, OutPacket, Recovered, ShardIds};
use tracesync_core::shard::{InstanceShards, Run, split_recovered};
use tracesync_core::status::StatusReport;
use tracesync_core::sync::{ProbeSample, SyncUpdate};

use super::engine::{Fanout, ProbeRegistry, Writer};
use super::events::{EventSender, FLIGHT_SHARD};
use super::ingest::{self, IngestIo, IngestSettings, IngestSummary};
use super::run::{Parts, Running};
use super::{ByteBudget, INGEST_QUEUE, INGEST_QUEUE_BYTES, SessionSettings, Shared, listener};

mod budget;
mod link;
mod writer;

/// Shard -> writer thread.
pub(super) enum ToWriter {
    Run(Run<OutPacket>),
    SyncSamples(Vec<ProbeSample>),
    /// A snapshot's index line (from the flight shard).
    Index(Box<tracesync_capture::index::IndexEntry>),
    /// The shard finished (shutdown): its last run was shipped.
    Done,
}

/// Messages queued for the writer thread at most; the runs' bytes are
/// bounded by [`budget::RUNS_QUEUE_BYTES`] first (a shard waits for both).
const RUNS_QUEUE: usize = 1024;

/// A shard's share of the frames' byte budget at least: a few frames of
/// the largest a relay cuts (1 MiB).
const MIN_SHARD_INGEST_BYTES: usize = 2 << 20;

/// The writer's merge holds this share of `merge.queue-bytes`; the runs
/// in flight take [`budget::RUNS_QUEUE_BYTES`]; the shards' ordering
/// queues share the rest, so the daemon's ordering memory is the same
/// bound at any shard count (a run waits in the merge for the slowest
/// shard's watermark: a drain round or two, ~10 ms).
const MERGE_SHARE_DIVISOR: usize = 8;

/// (each shard's ordering queue bound, the writer's merge bound) out of
/// `queue_bytes` for `shards` shards.
fn split_queue_bytes(queue_bytes: usize, shards: usize) -> (usize, u64) {
    let merge = queue_bytes / MERGE_SHARE_DIVISOR;
    let runs = usize::try_from(budget::RUNS_QUEUE_BYTES).unwrap_or(0);
    let rest = queue_bytes.saturating_sub(merge).saturating_sub(runs);
    let per_shard = (rest / shards.max(1)).max(queue_bytes / 4 / shards.max(1));
    (per_shard.max(1), merge.max(1) as u64)
}

/// How the shards are made: the live core's config and what the output
/// recovered (split by machine).
pub struct ShardSetup {
    pub shards: usize,
    pub live: LiveConfig,
    pub recovered: Recovered,
}

/// Starts the shard threads, the writer thread and the accept loop, like
/// [`super::run::start`] does for one shard. `parts.core` is unused (each
/// shard makes its own from `setup`).
pub fn start<W, P, F>(
    listener: TcpListener,
    session: SessionSettings,
    token: Option<&str>,
    ingest_settings: IngestSettings,
    parts: Parts<LiveCore, W, P, F>,
    setup: ShardSetup,
    shutdown: CancellationToken,
) -> io::Result<Running<P>>
where
    W: Writer<SyncUpdate>,
    P: ProbeRegistry,
    F: Fanout,
{
    let shards = setup.shards.max(1);
    let n = u32::try_from(shards).unwrap_or(1);
    let data_addr = listener.local_addr()?;
    let shared = Arc::new(Shared::new(session, token, parts.probes, shutdown));
    let (runs_tx, runs_rx) = sync_channel(RUNS_QUEUE);
    // Frames queued for the shards: the one-loop budget, shared out.
    let shard_ingest_bytes = (INGEST_QUEUE_BYTES / shards).max(MIN_SHARD_INGEST_BYTES);
    let budget = Arc::new(budget::RunBudget::new(budget::RUNS_QUEUE_BYTES));
    let (shard_queue_bytes, merge_queue_bytes) =
        split_queue_bytes(setup.live.queue_max_bytes, shards);
    let mut ports = Vec::new();
    let mut shard_status = Vec::new();
    let mut shard_events = Vec::new();
    let mut shard_syncs = Vec::new();
    let mut threads = Vec::new();
    let commit_every = ingest_settings.commit_every;
    let instances = InstanceShards::new(&setup.recovered, shards);
    // The rolling output's file, for the flight shard's snapshots (the
    // writer thread keeps it current).
    let output_path = link::OutputPath::new(parts.writer.current_path());
    let (flight_tx, flight_rx) = mpsc::channel(ingest::FORWARDED_TRIGGERS);
    let mut flight_rx = Some(flight_rx);
    let mut asks = parts.trigger_requests;
    for (k, recovered) in split_recovered(setup.recovered, shards)
        .into_iter()
        .enumerate()
    {
        let live = LiveConfig {
            ids: ShardIds::new(k, shards),
            queue_max_bytes: shard_queue_bytes,
            ..setup.live.clone()
        };
        let link = link::Link::new(k, runs_tx.clone(), budget.clone());
        let port = link::Port::new();
        let core = link::ShardCore {
            core: LiveCore::new(live, recovered),
            shard: u32::try_from(k).unwrap_or(0),
            shards: n,
            link: link.clone(),
            port: port.clone(),
        };
        let sink = link::ShardSink {
            link: link.clone(),
            port: port.clone(),
            reported: link::NONE,
            output: output_path.clone(),
        };
        let flight = k == FLIGHT_SHARD;
        let (events_tx, events_rx) = mpsc::channel(INGEST_QUEUE);
        let (sync_tx, sync_rx) = mpsc::channel(INGEST_QUEUE);
        let (status_tx, status_rx) = watch::channel(Arc::new(StatusReport::default()));
        let io = IngestIo {
            events: events_rx,
            sync_updates: sync_rx,
            packets: link::ShipFanout { link },
            status: status_tx,
            preamble_requests: None,
            trigger_requests: if flight { asks.take() } else { None },
            forwarded_triggers: if flight { flight_rx.take() } else { None },
        };
        let mut settings = ingest_settings.clone();
        settings.server_counters = Some(shared.counters.clone());
        settings.flight_shard = (!flight).then(|| flight_tx.clone());
        // The writer thread applies reloaded limits.
        settings.limits = None;
        threads.push(ingest::spawn(core, sink, settings, io)?);
        ports.push(port);
        shard_status.push(status_rx);
        shard_events.push((events_tx, ByteBudget::new(shard_ingest_bytes)));
        shard_syncs.push(sync_tx);
    }
    drop(runs_tx);
    drop(flight_tx);
    let writer_parts = writer::WriterParts {
        writer: parts.writer,
        runs: runs_rx,
        ports,
        packets: parts.packets,
        status: parts.status,
        shard_status,
        preamble_requests: parts.preamble_requests,
        limits: ingest_settings.limits.clone(),
        queue_max_bytes: merge_queue_bytes,
        budget,
        counters: shared.counters.clone(),
        commit_every,
        output_path,
    };
    let writer = std::thread::Builder::new()
        .name("tracesync-merge".into())
        .spawn(move || writer::run(writer_parts))?;
    tokio::spawn(route_syncs(parts.sync_updates, shard_syncs));
    let joined = join_all(threads, writer)?;
    let tracker = TaskTracker::new();
    let accept = tokio::spawn(listener::accept_loop(
        listener,
        EventSender::sharded(shard_events, instances),
        shared.clone(),
        tracker.clone(),
    ));
    Ok(Running::from_parts(
        data_addr, shared, accept, tracker, joined,
    ))
}

/// One handle for `Running`: the shards end first (their senders go),
/// then the writer; its summary is the daemon's.
fn join_all(
    threads: Vec<std::thread::JoinHandle<io::Result<IngestSummary>>>,
    writer: std::thread::JoinHandle<io::Result<IngestSummary>>,
) -> io::Result<std::thread::JoinHandle<io::Result<IngestSummary>>> {
    std::thread::Builder::new()
        .name("tracesync-join".into())
        .spawn(move || {
            for thread in threads {
                match thread.join() {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::warn!("an ingest shard ended with an error: {e}"),
                    Err(_) => tracing::error!("an ingest shard panicked"),
                }
            }
            writer
                .join()
                .map_err(|_| io::Error::other("the writer thread panicked"))?
        })
}

async fn route_syncs(mut rx: mpsc::Receiver<SyncUpdate>, shards: Vec<mpsc::Sender<SyncUpdate>>) {
    while let Some(update) = rx.recv().await {
        let k = usize::try_from(update.slot).unwrap_or(0) % shards.len().max(1);
        if let Some(tx) = shards.get(k) {
            let _ = tx.send(update).await;
        }
    }
}
