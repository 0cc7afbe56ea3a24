//! The flight recorder on the ingest thread: triggers from the control
//! socket fired through core's trigger table (limit per name, ids,
//! remembered for relays that connect later), and each ring relay sent its
//! Trigger once its clock estimate maps the window. The decisions are
//! core's ([`Triggers`], [`RingRelays`]); this module only moves frames.
//!
//! Invariants: a Trigger frame is handed to a session's bounded outgoing
//! channel without waiting; one that does not fit stays owed and is tried
//! again at the next host tick or sync update.

use std::collections::{HashMap, VecDeque};
use std::time::SystemTime;

use tokio::sync::mpsc::error::TrySendError;
use tracesync_capture::names::SnapshotName;
use tracesync_core::control::TriggerAnswer;
use tracesync_core::sync::SyncEstimate;
use tracesync_core::trigger::{Decision, Fired, RingRelays, TriggerConfig, Triggers};
use tracesync_protocol::relay::v1;
use tracing::{info, warn};

use super::SessionEntry;
use crate::control::TriggerAsk;
use crate::server::engine::Slot;

/// A fired trigger's wall-clock time, for its snapshot's name.
#[derive(Clone, Debug)]
#[allow(dead_code, reason = "read by the snapshot writer, which comes next")]
pub(super) struct FiredAt {
    pub fired: Fired,
    pub wall: SystemTime,
}

pub(super) struct Flight {
    triggers: Triggers,
    ring: RingRelays,
    /// The fired triggers still remembered, with their wall-clock times.
    fired: VecDeque<FiredAt>,
}

impl Flight {
    pub fn new(config: TriggerConfig) -> Self {
        let max_owed = config.max_remembered;
        Self {
            triggers: Triggers::new(config, random_seed()),
            ring: RingRelays::new(max_owed),
            fired: VecDeque::new(),
        }
    }

    /// A trigger from the control socket, at host BOOTTIME `now_ns`: fired
    /// (every ring relay owes it) or refused; the asker is answered.
    pub fn ask(&mut self, ask: TriggerAsk, now_ns: u64) -> Option<FiredAt> {
        let name = ask.request.name.clone();
        let fired = match self.triggers.fire(ask.request, now_ns) {
            Decision::Fired(fired) => fired,
            Decision::Refused(reason) => {
                crate::metrics::Event::TriggerRefused.record();
                warn!("{reason}");
                let _ = ask.reply.send(Err(reason));
                return None;
            }
        };
        crate::metrics::Event::TriggerFired.record();
        let wall = SystemTime::now();
        let snapshot = SnapshotName::new(wall, &name).map_or_else(String::new, |n| n.to_string());
        self.ring.fired(&fired);
        let answer = TriggerAnswer {
            id: fired.id,
            name,
            host_time_ns: fired.host_time_ns,
            before_ns: fired.before_ns,
            after_ns: fired.after_ns,
            ring_relays: self.ring.slots().len(),
            snapshot,
        };
        info!(
            id = fired.id,
            ring_relays = answer.ring_relays,
            "trigger {} fired at host time {} ns: window {} ns before, {} ns after",
            answer.name,
            fired.host_time_ns,
            fired.before_ns,
            fired.after_ns
        );
        // The asker may have gone: the trigger fired all the same.
        let _ = ask.reply.send(Ok(answer));
        let at = FiredAt { fired, wall };
        let max = self.triggers.config().max_remembered;
        if self.fired.len() >= max {
            self.fired.pop_front();
        }
        self.fired.push_back(at.clone());
        Some(at)
    }

    /// A relay was welcomed on `slot` at `now_ns`; a ring relay owes the
    /// triggers still remembered.
    pub fn connected(&mut self, slot: Slot, ring: bool, now_ns: u64) {
        if ring {
            let remembered = self.triggers.for_new_relay(now_ns);
            self.ring.connect(slot, remembered);
        }
    }

    pub fn disconnected(&mut self, slot: Slot) {
        self.ring.disconnect(slot);
    }

    pub fn is_ring(&self, slot: Slot) -> bool {
        self.ring.is_ring(slot)
    }

    /// The wall-clock time trigger `id` fired at, while remembered.
    #[allow(dead_code, reason = "read by the snapshot writer, which comes next")]
    pub fn fired_at(&self, id: u64) -> Option<&FiredAt> {
        self.fired.iter().find(|f| f.fired.id == id)
    }

    /// Sends every ring relay the Triggers its estimate can map now.
    pub fn send_due(
        &mut self,
        sessions: &HashMap<Slot, SessionEntry>,
        estimate: impl Fn(Slot) -> Option<SyncEstimate>,
    ) {
        for slot in self.ring.slots() {
            let Some(entry) = sessions.get(&slot) else {
                continue;
            };
            let estimate = estimate(slot);
            for trigger in self.ring.due(slot, estimate.as_ref()) {
                let frame = v1::frame::Body::Trigger(trigger.clone());
                match entry.outgoing.try_send(frame) {
                    Ok(()) => info!(
                        slot,
                        id = trigger.id,
                        "trigger {} sent: relay window [{}, {}] ns",
                        trigger.name,
                        trigger.relay_from_ns,
                        trigger.relay_to_ns
                    ),
                    Err(TrySendError::Full(_)) => self.ring.unsend(slot, &trigger),
                    // The session is ending: its Disconnected follows.
                    Err(TrySendError::Closed(_)) => {}
                }
            }
        }
    }
}

/// A seed for trigger ids that differs between daemon runs (std's
/// per-process random hash keys, mixed with the clock).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(tracesync_common::clock::boottime_ns());
    hasher.write_u64(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    hasher.finish()
}
