//! Sharded ingest (`merge.ingest-shards` > 1): N shard threads, each the
//! usual ingest loop (`super::ingest`) with its own live core and the
//! relays of its machines, and one writer thread merging their runs into
//! the rolling output.
//!
//! Threads and channels:
//! - a router task (on the sessions' runtime) takes the sessions' events
//!   from the one bounded event channel and forwards each to its shard's
//!   bounded channel: a Connect by its Hello's machine raw id
//!   (`tracesync_core::shard::shard_of`, so a reconnect and its recovered
//!   state land on the same shard), the others by slot (a shard's slots
//!   are `inner * N + shard`). A full shard channel makes the router, and
//!   so the sessions, wait (today's policy). Sync updates go the same way;
//! - shard k runs `ingest::spawn` with [`link::ShardCore`] (its live core,
//!   allocating output sequence ids from its residue class; only shard 0
//!   writes the host's own packets), a [`link::ShardSink`] as its writer
//!   (written packets form a run; a commit ships it) and a
//!   [`link::ShipFanout`] (each drain round's run is shipped at once);
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
use tracesync_core::shard::{Run, shard_of, split_recovered};
use tracesync_core::status::StatusReport;
use tracesync_core::sync::{ProbeSample, SyncUpdate};

use super::engine::{Fanout, ProbeRegistry, Writer};
use super::events::IngestEvent;
use super::ingest::{self, IngestIo, IngestSettings};
use super::run::{Parts, Running};
use super::{INGEST_QUEUE, SessionSettings, Shared, listener};

mod link;
mod writer;

/// Shard -> writer thread.
pub(super) enum ToWriter {
    Run(Run<OutPacket>),
    SyncSamples(Vec<ProbeSample>),
    /// The shard finished (shutdown): its last run was shipped.
    Done,
}

/// Runs queued for the writer thread at most (each a drain round: a few
/// MiB at most); a shard waits while it is full.
const RUNS_QUEUE: usize = 64;

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
    let (events, events_rx) = mpsc::channel(INGEST_QUEUE);
    let shared = Arc::new(Shared::new(session, token, parts.probes, shutdown));
    let (runs_tx, runs_rx) = sync_channel(RUNS_QUEUE);
    let mut ports = Vec::new();
    let mut shard_status = Vec::new();
    let mut shard_events = Vec::new();
    let mut shard_syncs = Vec::new();
    let mut threads = Vec::new();
    let commit_every = ingest_settings.commit_every;
    for (k, recovered) in split_recovered(setup.recovered, shards)
        .into_iter()
        .enumerate()
    {
        let live = LiveConfig {
            ids: ShardIds::new(k, shards),
            ..setup.live.clone()
        };
        let link = link::Link::new(k, runs_tx.clone());
        let port = link::Port::new();
        let core = link::ShardCore {
            core: LiveCore::new(live, recovered),
            shard: u32::try_from(k).unwrap_or(0),
            shards: n,
            link: link.clone(),
        };
        let sink = link::ShardSink {
            link: link.clone(),
            port: port.clone(),
            reported: link::NONE,
        };
        let (events_tx, events_rx) = mpsc::channel(INGEST_QUEUE);
        let (sync_tx, sync_rx) = mpsc::channel(INGEST_QUEUE);
        let (status_tx, status_rx) = watch::channel(Arc::new(StatusReport::default()));
        let io = IngestIo {
            events: events_rx,
            sync_updates: sync_rx,
            packets: link::ShipFanout { link },
            status: status_tx,
            preamble_requests: None,
            trigger_requests: None,
        };
        let mut settings = ingest_settings.clone();
        settings.server_counters = Some(shared.counters.clone());
        // As the control socket's (`refuse_triggers`).
        settings.relay_triggers = false;
        // The writer thread applies reloaded limits.
        settings.limits = None;
        threads.push(ingest::spawn(core, sink, settings, io)?);
        ports.push(port);
        shard_status.push(status_rx);
        shard_events.push(events_tx);
        shard_syncs.push(sync_tx);
    }
    drop(runs_tx);
    let writer_parts = writer::WriterParts {
        writer: parts.writer,
        runs: runs_rx,
        ports,
        packets: parts.packets,
        status: parts.status,
        shard_status,
        preamble_requests: parts.preamble_requests,
        limits: ingest_settings.limits.clone(),
        queue_max_bytes: setup.live.queue_max_bytes as u64,
        commit_every,
    };
    let writer = std::thread::Builder::new()
        .name("tracesync-merge".into())
        .spawn(move || writer::run(writer_parts))?;
    tokio::spawn(route_events(events_rx, shard_events));
    tokio::spawn(route_syncs(parts.sync_updates, shard_syncs));
    if let Some(asks) = parts.trigger_requests {
        tokio::spawn(refuse_triggers(asks));
    }
    // One handle for `Running`: the shards end first (their senders go),
    // then the writer; its summary is the daemon's.
    let joined = std::thread::Builder::new()
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
        })?;
    let tracker = TaskTracker::new();
    let accept = tokio::spawn(listener::accept_loop(
        listener,
        events,
        shared.clone(),
        tracker.clone(),
    ));
    Ok(Running::from_parts(
        data_addr, shared, accept, tracker, joined,
    ))
}

/// The shard of an event: a Connect by its machine, the others by slot.
fn shard_of_event(event: &IngestEvent, shards: usize) -> usize {
    let slot = match event {
        IngestEvent::Connect { hello, .. } => return shard_of(hello.machine_raw_id, shards),
        IngestEvent::Batch { slot, .. }
        | IngestEvent::Heartbeat { slot, .. }
        | IngestEvent::Window { slot, .. }
        | IngestEvent::TriggerRequest { slot, .. }
        | IngestEvent::Disconnected { slot, .. } => *slot,
    };
    usize::try_from(slot).unwrap_or(0) % shards.max(1)
}

async fn route_events(mut rx: mpsc::Receiver<IngestEvent>, shards: Vec<mpsc::Sender<IngestEvent>>) {
    let mut batch = Vec::with_capacity(64);
    while rx.recv_many(&mut batch, 64).await > 0 {
        for event in batch.drain(..) {
            let k = shard_of_event(&event, shards.len());
            if let Some(tx) = shards.get(k) {
                // A shard gone (shutdown) drops the event.
                let _ = tx.send(event).await;
            }
        }
    }
}

/// The flight recorder's fan-out needs every ring relay's estimate in one
/// place, which one shard of several does not have: at N > 1 a trigger is
/// refused in a line that says how to take it.
async fn refuse_triggers(mut asks: mpsc::Receiver<crate::control::TriggerAsk>) {
    while let Some(ask) = asks.recv().await {
        let _ = ask.reply.send(Err(super::ingest::SHARDED_TRIGGERS.into()));
    }
}

async fn route_syncs(mut rx: mpsc::Receiver<SyncUpdate>, shards: Vec<mpsc::Sender<SyncUpdate>>) {
    while let Some(update) = rx.recv().await {
        let k = usize::try_from(update.slot).unwrap_or(0) % shards.len().max(1);
        if let Some(tx) = shards.get(k) {
            let _ = tx.send(update).await;
        }
    }
}
