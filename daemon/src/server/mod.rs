//! The daemon's tokio side: relay connections in, the ingest loop in the
//! middle, acks back.
//!
//! Tasks and channels:
//! - accept loop ([`listener::accept_loop`]): one per data listener; admits
//!   at most `limits.max-relays` sessions (a [`tokio::sync::Semaphore`]),
//!   refuses the rest with a reason.
//! - session ([`session::run`]): one per connection; Hello, checks,
//!   Welcome, then frames become [`IngestEvent`]s on one bounded `mpsc`
//!   (a full channel stops the session reading: back-pressure to the relay
//!   through TCP); acks come back on a per-session `watch` ([`Feedback`]).
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
pub mod ingest;
pub mod listener;
pub mod run;
pub mod session;
pub mod wiring;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use engine::{Admitted, Core, Fanout, NoProbes, ProbeRegistry, Slot, Writer};
pub use events::{Feedback, IngestEvent, Welcomed};

/// Capacity of the session -> ingest channel, in events. A batch is one
/// frame (relays cut at 1 MiB, the limit is `limits.max-frame-bytes`), so
/// this holds about 32 MiB of batches, 128 MiB at worst with 4 MiB frames.
pub const INGEST_QUEUE: usize = 32;

/// Session limits, from the config.
#[derive(Clone, Debug)]
pub struct SessionSettings {
    pub max_relays: usize,
    pub hello_timeout: Duration,
    pub max_frame_bytes: usize,
    /// Sent in Welcome (0: no UDP probes).
    pub sync_udp_port: u16,
    /// On shutdown, how long a session waits for the final ack.
    pub final_ack_timeout: Duration,
}

/// State every session and the accept loop share.
pub struct Shared<P> {
    pub settings: SessionSettings,
    pub probes: P,
    pub counters: Counters,
    pub shutdown: CancellationToken,
    /// Replaced on reload (SIGHUP).
    token: RwLock<Option<Arc<str>>>,
}

impl<P> Shared<P> {
    pub fn new(
        settings: SessionSettings,
        token: Option<&str>,
        probes: P,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            settings,
            probes,
            counters: Counters::default(),
            shutdown,
            token: RwLock::new(token.map(Arc::from)),
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
}

/// Server events worth counting (also exported as metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    ConnectionsAccepted,
    SessionsWelcomed,
    RefusedMaxRelays,
    RefusedVersion,
    RefusedToken,
    RefusedByCore,
    HelloTimeouts,
    MalformedFrames,
    AcceptErrors,
}

impl Counter {
    pub const ALL: [Counter; 9] = [
        Counter::ConnectionsAccepted,
        Counter::SessionsWelcomed,
        Counter::RefusedMaxRelays,
        Counter::RefusedVersion,
        Counter::RefusedToken,
        Counter::RefusedByCore,
        Counter::HelloTimeouts,
        Counter::MalformedFrames,
        Counter::AcceptErrors,
    ];

    /// The metric (see [`crate::metrics::names`]) and its `reason` label.
    pub fn metric(self) -> (&'static str, Option<&'static str>) {
        use crate::metrics::names::*;
        match self {
            Counter::ConnectionsAccepted => (CONNECTIONS_ACCEPTED, None),
            Counter::SessionsWelcomed => (SESSIONS_WELCOMED, None),
            Counter::RefusedMaxRelays => (CONNECTIONS_REFUSED, Some("max_relays")),
            Counter::RefusedVersion => (CONNECTIONS_REFUSED, Some("version")),
            Counter::RefusedToken => (CONNECTIONS_REFUSED, Some("token")),
            Counter::RefusedByCore => (CONNECTIONS_REFUSED, Some("core")),
            Counter::HelloTimeouts => (CONNECTIONS_FAILED, Some("hello_timeout")),
            Counter::MalformedFrames => (CONNECTIONS_FAILED, Some("malformed_frame")),
            Counter::AcceptErrors => (ACCEPT_ERRORS, None),
        }
    }
}

#[derive(Debug, Default)]
pub struct Counters {
    values: [AtomicU64; Counter::ALL.len()],
}

impl Counters {
    pub fn bump(&self, counter: Counter) {
        self.values[counter as usize].fetch_add(1, Ordering::Relaxed);
        match counter.metric() {
            (name, Some(reason)) => metrics::counter!(name, "reason" => reason).increment(1),
            (name, None) => metrics::counter!(name).increment(1),
        }
    }

    pub fn get(&self, counter: Counter) -> u64 {
        self.values[counter as usize].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_live;
