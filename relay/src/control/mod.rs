//! The relay's control socket: `tracesync-relay trigger NAME` on the
//! relay's machine reaches the running relay here, and the relay carries
//! the trigger to its daemon (a TriggerRequest on the data connection).
//!
//! One JSON line in (`{"cmd":"trigger","name":...,"before_ns":...,
//! "after_ns":...}`), one JSON line out ([`Answer`]), then the relay
//! closes. The moment the trigger fires is the relay's BOOTTIME when the
//! request line was read: the daemon maps it to host time with its
//! estimate of this relay's clock.
//!
//! Invariants: the socket is a unix socket only (no network listener),
//! mode 0660 whatever the umask (the relay's group may trigger); a live
//! socket of another relay at the path is never replaced; at most
//! [`MAX_CLIENTS`] clients are served at once and each must send its line
//! (at most [`MAX_REQUEST_BYTES`]) within [`REQUEST_TIMEOUT`]; every
//! request is answered within [`ANSWER_TIMEOUT`]. A socket that cannot be
//! bound is logged and the relay runs on without it (capture matters more).

pub mod client;
mod serve;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

pub use serve::{bind, serve};

/// Where the relay listens when neither `control-socket` nor
/// `--control-socket` says (systemd's `RuntimeDirectory=tracesync-relay`
/// makes the directory).
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/tracesync-relay/control.sock";

/// Longest request line read.
pub const MAX_REQUEST_BYTES: usize = 4096;
/// Clients served at once; one more is answered `busy`.
pub const MAX_CLIENTS: usize = 16;
/// How long a client may take to send its line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a trigger waits for the daemon's answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Triggers queued for the uplink at most (from the socket and from
/// packets); one more is refused `busy`, counted.
pub const TRIGGER_QUEUE: usize = 64;

/// A request line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Trigger {
        name: String,
        before_ns: u64,
        after_ns: u64,
    },
}

/// Where a trigger came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `tracesync-relay trigger NAME` on this machine.
    Command,
    /// A Perfetto trigger (TracePacket.trigger) in this relay's packets.
    Packet,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::Packet => "packet",
        }
    }
}

/// A trigger on its way to the uplink, which carries it to the daemon.
#[derive(Debug)]
pub struct TriggerAsk {
    pub name: String,
    pub before_ns: u64,
    pub after_ns: u64,
    /// When it fired, on this relay's BOOTTIME.
    pub relay_time_ns: u64,
    pub origin: Origin,
    /// Where the answer goes (None: nobody waits; it is logged).
    pub reply: Option<oneshot::Sender<Answer>>,
}

/// Why a trigger did not fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotFired {
    /// The daemon refused it (over the name's limit, ...): retry later.
    Refused,
    /// The relay is not connected to its daemon now.
    Offline,
    /// The daemon takes no triggers from relays (it predates them).
    Unsupported,
    /// Sent, but no answer came (the connection went, or the daemon is
    /// slow): it may have fired.
    NoAnswer,
    /// A bad name or span, or a bad request line.
    BadRequest,
    /// Too many triggers waiting at once.
    Busy,
}

/// A trigger that fired, as the daemon answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fired {
    pub id: u64,
    pub name: String,
    /// Host time T it fires at (the daemon's trace clock).
    pub host_time_ns: u64,
    pub before_ns: u64,
    pub after_ns: u64,
    /// "estimate" or "receipt" (the daemon had no estimate of this
    /// relay's clock yet: T is when the request reached it).
    pub mapped_by: String,
    pub ring_relays: u32,
    pub snapshot: String,
}

/// The answer line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired: Option<Fired>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_fired: Option<NotFired>,
    /// Not fired: one line saying why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl Answer {
    /// Its outcome, as the relay's metrics count it.
    pub fn outcome(&self) -> &'static str {
        match (&self.fired, self.not_fired) {
            (Some(_), _) => "fired",
            (None, Some(NotFired::Refused) | None) => "refused",
            (None, Some(NotFired::Offline)) => "offline",
            (None, Some(NotFired::Unsupported)) => "unsupported",
            (None, Some(NotFired::NoAnswer)) => "no_answer",
            (None, Some(NotFired::BadRequest)) => "bad_request",
            (None, Some(NotFired::Busy)) => "busy",
        }
    }

    pub fn fired(fired: Fired) -> Self {
        Self {
            fired: Some(fired),
            not_fired: None,
            error: String::new(),
        }
    }

    pub fn not_fired(why: NotFired, error: impl Into<String>) -> Self {
        Self {
            fired: None,
            not_fired: Some(why),
            error: error.into(),
        }
    }

    /// The JSON line (with its newline).
    pub fn line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_else(|_| {
            "{\"not_fired\":\"bad_request\",\"error\":\"unencodable answer\"}".into()
        });
        line.push('\n');
        line
    }
}

/// The uplink's end of the trigger queue, handed over once through the
/// uplink's configuration (which is cloned; the receiver is not).
#[derive(Clone, Debug, Default)]
pub struct TriggerInbox(Arc<Mutex<Option<mpsc::Receiver<TriggerAsk>>>>);

impl TriggerInbox {
    /// The queue's two ends: the senders for the socket and the sources,
    /// the inbox for the uplink.
    pub fn channel() -> (mpsc::Sender<TriggerAsk>, Self) {
        let (tx, rx) = mpsc::channel(TRIGGER_QUEUE);
        (tx, Self(Arc::new(Mutex::new(Some(rx)))))
    }

    /// The receiver, the first time.
    pub fn take(&self) -> Option<mpsc::Receiver<TriggerAsk>> {
        self.0.lock().ok().and_then(|mut rx| rx.take())
    }
}

#[cfg(test)]
mod tests;
