//! The daemon's tokio side: relay connections in, the ingest loop in the
//! middle, acks back.
//!
//! Tasks and channels:
//! - accept loop ([`listener::accept_loop`]): one per data listener; at
//!   most [`preauth::MAX_UNAUTHENTICATED`] connections in TLS handshake or
//!   Hello at once, fewer per source (one more closes the one of its source,
//!   or of the heaviest source, that has sent the least), each within the
//!   hello timeout; a connection takes one of the `limits.max-relays`
//!   slots (a [`tokio::sync::Semaphore`]) only once its Hello is accepted,
//!   and is refused with a reason when none is free.
//! - session ([`session::run`]): one per connection; Hello (at most 64 KiB),
//!   checks, Welcome, then frames become [`IngestEvent`]s on one bounded `mpsc`
//!   (a full channel stops the session reading: back-pressure to the relay
//!   through TCP); acks come back on a per-session `watch` ([`Feedback`]).
//!   A session that receives nothing for `limits.idle-timeout-ms` is
//!   closed.
//! - ingest loop ([`ingest`]): a dedicated thread, because the rolling
//!   writer blocks (write, fdatasync). It owns the live core and the
//!   writer, drains every 10 ms, commits every `output.commit-interval-ms`
//!   and then acks, feeds sync updates, ticks the host clock, publishes the
//!   status every 250 ms and fans packets out to tail subscribers.
//! - shutdown: one [`CancellationToken`]. The accept loop stops; sessions
//!   finish the frame in hand and drop their event sender; when the last
//!   sender is gone the ingest loop flushes everything, commits, sends the
//!   final acks and closes the writer; sessions forward those acks and close.

pub mod daemon;
pub mod engine;
pub mod events;
pub mod fault_log;
pub mod handshake;
pub mod ingest;
pub mod listener;
pub mod preauth;
pub mod run;
pub mod session;
pub mod shards;
mod signals;
pub mod wiring;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use crate::metrics::{Counter, Failed, Refused};
pub use engine::{Admitted, Core, Fanout, NoProbes, ProbeRegistry, Slot, Writer};
pub use events::{ByteBudget, Credit, EventSender, Feedback, IngestEvent, Welcomed};

/// Capacity of the session -> ingest channel, in events. A batch is one
/// frame (relays cut at 1 MiB, the limit is `limits.max-frame-bytes`), so
/// this holds about 32 MiB of batches, 128 MiB at worst with 4 MiB frames.
pub const INGEST_QUEUE: usize = 32;

/// Byte budget of the session -> ingest channel (frames taken from relays
/// and not yet ingested, with their decoded packet lists): with small
/// packets the frame count alone would let far more memory queue up.
/// Ingested, a small packet takes about three times its share of the
/// frame (its queue entry), so 8 MiB here is about 25 MiB in the core.
/// 8 MiB (was 16) is ~30 ms of 4 KiB packets at 250 MB/s, more than a
/// turn of the ingest loop needs: peak RSS went down, the rate did not
/// (docs/performance.md, "Memory budget of the daemon").
pub const INGEST_QUEUE_BYTES: usize = 8 << 20;

/// Session limits, from the config.
#[derive(Clone, Debug)]
pub struct SessionSettings {
    pub max_relays: usize,
    pub hello_timeout: Duration,
    pub max_frame_bytes: usize,
    /// After Hello, a frame that has begun must be whole within this.
    pub frame_timeout: Duration,
    /// After Hello, a session that receives nothing (not a byte) for this
    /// long is closed (`idle_timeout`).
    pub idle_timeout: Duration,
    /// Sent in Welcome (0: no UDP probes).
    pub sync_udp_port: u16,
    /// On shutdown, how long a session waits for the final ack.
    pub final_ack_timeout: Duration,
    /// Mutual TLS on the data connection (None: plaintext).
    pub tls: Option<crate::tls::DataTls>,
}

/// State every session and the accept loop share.
pub struct Shared<P> {
    pub settings: SessionSettings,
    pub probes: P,
    /// Shared with the ingest loop, which reports the refusals in status.
    pub counters: Arc<Counters>,
    pub shutdown: CancellationToken,
    /// Raw ids and relay instances bound to certificate names (the TLS
    /// settings' table: persistent in the daemon, in memory in tests).
    pub bindings: Arc<crate::tls::Bindings>,
    /// Bytes the session -> ingest channel may hold ([`INGEST_QUEUE_BYTES`]).
    pub ingest_bytes: ByteBudget,
    /// Bytes of partial frames all sessions may hold
    /// ([`session::peer_bytes::PEER_BYTES`]).
    pub peer_bytes: Arc<session::peer_bytes::PeerBytes>,
    /// Replaced on reload (SIGHUP).
    token: RwLock<Option<Arc<str>>>,
    /// Machine names allowed to connect (empty: all); replaced on reload.
    allow_machines: RwLock<Arc<[String]>>,
}

impl<P> Shared<P> {
    pub fn new(
        settings: SessionSettings,
        token: Option<&str>,
        probes: P,
        shutdown: CancellationToken,
    ) -> Self {
        let bindings = settings
            .tls
            .as_ref()
            .map_or_else(Arc::default, |tls| tls.bindings.clone());
        Self {
            settings,
            probes,
            counters: Arc::default(),
            shutdown,
            bindings,
            ingest_bytes: ByteBudget::new(INGEST_QUEUE_BYTES),
            peer_bytes: session::peer_bytes::PeerBytes::new(session::peer_bytes::PEER_BYTES),
            token: RwLock::new(token.map(Arc::from)),
            allow_machines: RwLock::new(Arc::from(Vec::new())),
        }
    }

    /// The token relays must present (None: any relay is accepted).
    pub fn token(&self) -> Option<Arc<str>> {
        match self.token.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn set_token(&self, token: Option<&str>) {
        let token = token.map(Arc::from);
        match self.token.write() {
            Ok(mut guard) => *guard = token,
            Err(poisoned) => *poisoned.into_inner() = token,
        }
    }

    /// The machine names allowed to connect (empty: all).
    pub fn allow_machines(&self) -> Arc<[String]> {
        match self.allow_machines.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn set_allow_machines(&self, machines: &[String]) {
        let list: Arc<[String]> = Arc::from(machines.to_vec());
        match self.allow_machines.write() {
            Ok(mut guard) => *guard = list,
            Err(poisoned) => *poisoned.into_inner() = list,
        }
    }
}

/// The relay-connection counters (also exported as metrics: each
/// [`Counter`] names its series), for the status report.
#[derive(Debug, Default)]
pub struct Counters {
    /// By [`Counter::index`].
    values: [AtomicU64; Counter::COUNT],
    /// Failed TLS handshakes by [`handshake::HandshakeFailure`].
    handshakes: [AtomicU64; handshake::HandshakeFailure::ALL.len()],
}

impl Counters {
    pub fn bump(&self, counter: Counter) {
        self.values[counter.index()].fetch_add(1, Ordering::Relaxed);
        counter.add(1);
    }

    pub fn bump_handshake(&self, reason: handshake::HandshakeFailure) {
        self.handshakes[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Failed TLS handshakes by reason (non-zero ones), for the status
    /// report.
    pub fn handshake_failures(&self) -> std::collections::BTreeMap<String, u64> {
        handshake::HandshakeFailure::ALL
            .iter()
            .map(|&r| {
                let n = self.handshakes[r as usize].load(Ordering::Relaxed);
                (r.as_str().to_owned(), n)
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    pub fn get(&self, counter: Counter) -> u64 {
        self.values[counter.index()].load(Ordering::Relaxed)
    }

    /// Refused or closed relay connections by `Refused.code` (non-zero
    /// ones), for the status report.
    pub fn refusals(&self) -> std::collections::BTreeMap<String, u64> {
        Counter::all()
            .filter_map(|c| Some((c.report_key()?.to_owned(), self.get(c))))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_live;
