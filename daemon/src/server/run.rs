//! Starting the server's tasks and stopping them in order.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::engine::{Core, Fanout, ProbeRegistry, Writer};
use super::ingest::{self, IngestIo, IngestSettings, IngestSummary};
use super::{INGEST_QUEUE, SessionSettings, Shared, listener};
use crate::control::PreambleRequest;
use tracesync_core::status::StatusReport;

/// What the server drives, and where its outputs go.
pub struct Parts<C: Core, W, P, F> {
    pub core: C,
    pub writer: W,
    pub probes: P,
    /// From the sync prober.
    pub sync_updates: mpsc::Receiver<C::SyncUpdate>,
    /// To tail subscribers (the control hub).
    pub packets: F,
    /// To `tracesync status` (the control hub).
    pub status: watch::Sender<Arc<StatusReport>>,
    /// From perfetto tails (the control hub), answered with the writer's
    /// preamble.
    pub preamble_requests: Option<mpsc::Receiver<PreambleRequest>>,
    /// Triggers from the control socket (`tracesync trigger`).
    pub trigger_requests: Option<mpsc::Receiver<crate::control::TriggerAsk>>,
}

/// A started server; stop it by cancelling its shutdown token, then await
/// [`Running::stopped`].
pub struct Running<P> {
    pub data_addr: SocketAddr,
    pub shared: Arc<Shared<P>>,
    accept: tokio::task::JoinHandle<()>,
    tracker: TaskTracker,
    ingest: std::thread::JoinHandle<io::Result<IngestSummary>>,
}

/// Starts the ingest thread and the accept loop. Needs a tokio runtime.
pub fn start<C, W, P, F>(
    listener: TcpListener,
    session: SessionSettings,
    token: Option<&str>,
    ingest_settings: IngestSettings,
    parts: Parts<C, W, P, F>,
    shutdown: CancellationToken,
) -> io::Result<Running<P>>
where
    C: Core,
    W: Writer<C::SyncUpdate>,
    P: ProbeRegistry,
    F: Fanout,
{
    let data_addr = listener.local_addr()?;
    let (events, events_rx) = mpsc::channel(INGEST_QUEUE);
    let io = IngestIo {
        events: events_rx,
        sync_updates: parts.sync_updates,
        packets: parts.packets,
        status: parts.status,
        preamble_requests: parts.preamble_requests,
        trigger_requests: parts.trigger_requests,
        forwarded_triggers: None,
    };
    let shared = Arc::new(Shared::new(session, token, parts.probes, shutdown));
    let mut ingest_settings = ingest_settings;
    ingest_settings.server_counters = Some(shared.counters.clone());
    let ingest = ingest::spawn(parts.core, parts.writer, ingest_settings, io)?;
    let tracker = TaskTracker::new();
    let accept = tokio::spawn(listener::accept_loop(
        listener,
        super::events::EventSender::one(events, shared.ingest_bytes.clone()),
        shared.clone(),
        tracker.clone(),
    ));
    Ok(Running {
        data_addr,
        shared,
        accept,
        tracker,
        ingest,
    })
}

impl<P> Running<P> {
    /// A server started another way (sharded ingest, `super::shards`):
    /// `ingest` ends when the output is closed.
    pub(super) fn from_parts(
        data_addr: SocketAddr,
        shared: Arc<Shared<P>>,
        accept: tokio::task::JoinHandle<()>,
        tracker: TaskTracker,
        ingest: std::thread::JoinHandle<io::Result<IngestSummary>>,
    ) -> Self {
        Self {
            data_addr,
            shared,
            accept,
            tracker,
            ingest,
        }
    }

    /// Waits for shutdown to be requested and for everything to wind down:
    /// the accept loop stops, sessions stop reading, the ingest loop
    /// flushes, commits, acks and closes the writer, sessions forward the
    /// final acks and close.
    pub async fn stopped(self) -> io::Result<IngestSummary> {
        self.shared.shutdown.cancelled().await;
        // A panicked accept loop has dropped its sender all the same.
        let _ = self.accept.await;
        self.tracker.close();
        let ingest = self.ingest;
        let summary = tokio::task::spawn_blocking(move || ingest.join())
            .await
            .map_err(io::Error::other)?
            .map_err(|_| io::Error::other("the ingest thread panicked"))?;
        self.tracker.wait().await;
        summary
    }
}
