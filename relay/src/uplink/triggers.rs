//! Triggers fired on this machine (the control socket, Perfetto triggers
//! in the packets) carried to the daemon: each goes out as a
//! TriggerRequest while a session is up with a daemon that takes them,
//! and its TriggerResult is the answer. Offline, a trigger is refused at
//! once and said so: a relay fires nothing it cannot reach the host with.
//!
//! Invariants: at most [`MAX_WAITING`] requests wait for an answer; each
//! is answered exactly once: by its TriggerResult, or "no answer" when
//! its connection ends or [`ANSWER_TIMEOUT`] passes (it may have fired).

use std::collections::BTreeMap;
use std::time::Instant;

use tokio::sync::oneshot;
use tracesync_protocol::relay::v1;

use super::Uplink;
use super::connection::OutFrame;
use crate::control::{ANSWER_TIMEOUT, Answer, Fired, NotFired, Origin, TriggerAsk};

/// Requests waiting for the daemon's answer at most.
pub const MAX_WAITING: usize = 64;

struct Waiting {
    name: String,
    before_ns: u64,
    after_ns: u64,
    origin: Origin,
    reply: Option<oneshot::Sender<Answer>>,
    /// The session's reconnect count when it was sent: another means
    /// its connection ended.
    connection: u64,
    deadline: Instant,
}

/// Requests sent and not answered yet.
#[derive(Default)]
pub(super) struct Pending {
    next_id: u64,
    waiting: BTreeMap<u64, Waiting>,
    /// The daemon of the current session takes TriggerRequest.
    pub(super) daemon_takes_triggers: bool,
}

impl Pending {
    /// When the oldest waiting request times out.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.waiting.values().map(|w| w.deadline).min()
    }
}

impl Uplink {
    /// A trigger fired on this machine: sent to the daemon, or answered
    /// at once (offline, an old daemon, too many waiting).
    pub(super) fn on_trigger_ask(&mut self, ask: TriggerAsk, now: Instant) {
        let refusal = if !self.session.is_streaming() {
            let since = self
                .outage_seconds(now)
                .map_or_else(String::new, |s| format!(" (unreachable for {s} s)"));
            Some((
                NotFired::Offline,
                format!(
                    "this relay is not connected to its daemon {}{since}; a relay fires no \
                     trigger while offline (fire it on the host: tracesync trigger {})",
                    self.config.host, ask.name
                ),
            ))
        } else if !self.triggers.daemon_takes_triggers {
            Some((
                NotFired::Unsupported,
                format!(
                    "the daemon {} takes no triggers from relays (it predates them); fire it \
                     on the host: tracesync trigger {}",
                    self.config.host, ask.name
                ),
            ))
        } else if self.triggers.waiting.len() >= MAX_WAITING {
            Some((
                NotFired::Busy,
                format!("{MAX_WAITING} triggers wait for the daemon's answer already"),
            ))
        } else {
            None
        };
        if let Some((why, reason)) = refusal {
            answer(
                ask.name.as_str(),
                ask.origin,
                ask.reply,
                Answer::not_fired(why, reason),
            );
            return;
        }
        self.triggers.next_id += 1;
        let request_id = self.triggers.next_id;
        let frame = OutFrame::encode(&v1::Frame {
            body: Some(v1::frame::Body::TriggerRequest(v1::TriggerRequest {
                request_id,
                name: ask.name.clone(),
                before_ns: ask.before_ns,
                after_ns: ask.after_ns,
                relay_time_ns: ask.relay_time_ns,
                origin: ask.origin.as_str().to_owned(),
            })),
        });
        let sent = match (&self.connection, frame) {
            (Some(connection), Ok(frame)) => connection.send(frame),
            _ => false,
        };
        if !sent {
            let reason = "the connection to the daemon is going; no trigger fired, retry";
            let refused = Answer::not_fired(NotFired::Offline, reason);
            answer(ask.name.as_str(), ask.origin, ask.reply, refused);
            return;
        }
        tracing::info!(
            "trigger {} ({}) sent to the daemon {}",
            ask.name,
            ask.origin.as_str(),
            self.config.host
        );
        self.triggers.waiting.insert(
            request_id,
            Waiting {
                name: ask.name,
                before_ns: ask.before_ns,
                after_ns: ask.after_ns,
                origin: ask.origin,
                reply: ask.reply,
                connection: self.session.reconnects(),
                deadline: now + ANSWER_TIMEOUT,
            },
        );
    }

    /// The daemon's answer to one of this relay's requests.
    pub(super) fn on_trigger_result(&mut self, result: &v1::TriggerResult) {
        let Some(waiting) = self.triggers.waiting.remove(&result.request_id) else {
            tracing::debug!(
                "an answer to trigger request {} nobody waits for",
                result.request_id
            );
            return;
        };
        let reply = if result.fired {
            Answer::fired(Fired {
                id: result.id,
                name: waiting.name.clone(),
                host_time_ns: result.host_time_ns,
                before_ns: waiting.before_ns,
                after_ns: waiting.after_ns,
                mapped_by: result.mapped_by.clone(),
                ring_relays: result.ring_relays,
                snapshot: result.snapshot.clone(),
            })
        } else {
            let reason = tracesync_protocol::text::Escaped(&result.reason).to_string();
            Answer::not_fired(NotFired::Refused, reason)
        };
        answer(&waiting.name, waiting.origin, waiting.reply, reply);
    }

    /// Answers "no answer" to the requests whose connection ended or
    /// whose time is up.
    pub(super) fn expire_triggers(&mut self, now: Instant) {
        let connection = self.session.reconnects();
        let streaming = self.session.is_streaming();
        let gone: Vec<u64> = self
            .triggers
            .waiting
            .iter()
            .filter(|(_, w)| !streaming || w.connection != connection || now >= w.deadline)
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            if let Some(w) = self.triggers.waiting.remove(&id) {
                let reason = format!(
                    "no answer from the daemon {} (the connection ended, or {} s passed); the \
                     trigger may have fired: the daemon's log says",
                    self.config.host,
                    ANSWER_TIMEOUT.as_secs()
                );
                answer(
                    &w.name,
                    w.origin,
                    w.reply,
                    Answer::not_fired(NotFired::NoAnswer, reason),
                );
            }
        }
    }
}

/// Sends `reply` to whoever waits (a packet's trigger: nobody) and logs it.
fn answer(name: &str, origin: Origin, reply: Option<oneshot::Sender<Answer>>, answer: Answer) {
    crate::metrics::trigger_asked(answer.outcome());
    match &answer.fired {
        Some(fired) => tracing::info!(
            "trigger {name} ({}) fired by the daemon: id {:016x}, host time {} ns (placed by {}); \
             snapshot {}",
            origin.as_str(),
            fired.id,
            fired.host_time_ns,
            fired.mapped_by,
            fired.snapshot
        ),
        None => tracing::warn!(
            "trigger {name} ({}) not fired: {}",
            origin.as_str(),
            answer.error
        ),
    }
    if let Some(reply) = reply {
        // The asker may have gone.
        let _ = reply.send(answer);
    }
}
