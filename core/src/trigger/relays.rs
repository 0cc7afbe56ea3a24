//! Which fired triggers each connected ring relay still has to be sent,
//! sans-IO: a relay in ring mode owes the window of every trigger fired
//! while it is connected and of every trigger still remembered when it
//! connects ([`super::Triggers::for_new_relay`]); a trigger is sent once
//! its window can be mapped onto the relay's clock (the relay has an
//! estimate: a relay that just connected may have none for a moment).
//!
//! Invariants: per connection a trigger id is sent at most once (a relay
//! takes an id once anyway); at most `max_owed` triggers wait per relay,
//! the oldest going first; a disconnected relay owes nothing (it is owed
//! the remembered triggers again when it connects).

use std::collections::{BTreeMap, HashSet};

use tracesync_protocol::relay::v1;

use super::{Fired, relay_window};
use crate::sync::SyncEstimate;

/// One connected ring relay's triggers.
#[derive(Debug, Default)]
struct Owed {
    waiting: Vec<Fired>,
    sent: HashSet<u64>,
}

/// The ring relays connected now, by the caller's slot number.
#[derive(Debug)]
pub struct RingRelays {
    relays: BTreeMap<u32, Owed>,
    max_owed: usize,
}

impl RingRelays {
    /// At most `max_owed` unsent triggers per relay.
    pub fn new(max_owed: usize) -> Self {
        Self {
            relays: BTreeMap::new(),
            max_owed: max_owed.max(1),
        }
    }

    /// A ring relay connected on `slot`; it owes `remembered`.
    pub fn connect(&mut self, slot: u32, remembered: Vec<Fired>) {
        let mut owed = Owed::default();
        for fired in remembered {
            push_bounded(&mut owed.waiting, fired, self.max_owed);
        }
        self.relays.insert(slot, owed);
    }

    /// The connection on `slot` ended (any slot: not ring ones are ignored).
    pub fn disconnect(&mut self, slot: u32) {
        self.relays.remove(&slot);
    }

    pub fn is_ring(&self, slot: u32) -> bool {
        self.relays.contains_key(&slot)
    }

    /// The ring relays connected now.
    pub fn slots(&self) -> Vec<u32> {
        self.relays.keys().copied().collect()
    }

    /// A trigger fired: every connected ring relay owes it.
    pub fn fired(&mut self, fired: &Fired) {
        for owed in self.relays.values_mut() {
            if !owed.sent.contains(&fired.id) {
                push_bounded(&mut owed.waiting, fired.clone(), self.max_owed);
            }
        }
    }

    /// The Trigger frames `slot` can be sent now with its `estimate`, in
    /// firing order; each is marked sent. The caller puts back with
    /// [`Self::unsend`] what it could not hand to the connection.
    pub fn due(&mut self, slot: u32, estimate: Option<&SyncEstimate>) -> Vec<v1::Trigger> {
        let (Some(owed), Some(estimate)) = (self.relays.get_mut(&slot), estimate) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        owed.waiting.retain(|fired| {
            let Some((from, to)) = relay_window(fired, estimate) else {
                return true;
            };
            owed.sent.insert(fired.id);
            out.push(trigger_frame(fired, from, to));
            false
        });
        out
    }

    /// `trigger` could not be handed to `slot`'s connection: owed again.
    pub fn unsend(&mut self, slot: u32, trigger: &v1::Trigger) {
        if let Some(owed) = self.relays.get_mut(&slot) {
            owed.sent.remove(&trigger.id);
            let fired = Fired {
                id: trigger.id,
                name: trigger.name.clone(),
                host_time_ns: trigger.host_time_ns,
                before_ns: trigger.before_ns,
                after_ns: trigger.after_ns,
            };
            owed.waiting.insert(0, fired);
            owed.waiting.truncate(self.max_owed);
        }
    }

    /// Triggers waiting for `slot` (not sent yet).
    pub fn waiting(&self, slot: u32) -> usize {
        self.relays.get(&slot).map_or(0, |o| o.waiting.len())
    }
}

fn push_bounded(waiting: &mut Vec<Fired>, fired: Fired, max: usize) {
    if waiting.iter().any(|f| f.id == fired.id) {
        return;
    }
    if waiting.len() >= max {
        waiting.remove(0);
    }
    waiting.push(fired);
}

/// The Trigger frame of `fired` for a relay window [from, to].
pub fn trigger_frame(fired: &Fired, relay_from_ns: u64, relay_to_ns: u64) -> v1::Trigger {
    v1::Trigger {
        id: fired.id,
        name: fired.name.clone(),
        host_time_ns: fired.host_time_ns,
        before_ns: fired.before_ns,
        after_ns: fired.after_ns,
        relay_from_ns,
        relay_to_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn fired(id: u64, t: u64) -> Fired {
        Fired {
            id,
            name: "crash".into(),
            host_time_ns: t * S,
            before_ns: 30 * S,
            after_ns: 5 * S,
        }
    }

    fn estimate(offset_s: i64) -> SyncEstimate {
        SyncEstimate {
            ref_relay_ns: 1000 * S,
            offset_ns: offset_s * S as i64,
            error_bound_ns: 1_000_000,
            ..SyncEstimate::default()
        }
    }

    #[test]
    fn a_trigger_waits_for_the_estimate_and_is_sent_once_per_connection() {
        let mut relays = RingRelays::new(8);
        relays.connect(3, vec![fired(1, 900)]);
        relays.fired(&fired(3, 1000));
        assert!(!relays.is_ring(4));
        // No estimate yet: nothing can be mapped.
        assert!(relays.due(3, None).is_empty());
        assert_eq!(relays.waiting(3), 2);
        let sent = relays.due(3, Some(&estimate(5)));
        assert_eq!(sent.iter().map(|t| t.id).collect::<Vec<_>>(), [1, 3]);
        // On the relay's clock, 5 s ahead, widened by the bound (1 ms at
        // the reference, more away from it).
        let (from, to) = (sent[1].relay_from_ns, sent[1].relay_to_ns);
        assert!(
            (975 * S - 10_000_000..=975 * S - 1_000_000).contains(&from),
            "{from}"
        );
        assert!(
            (1010 * S + 1_000_000..1010 * S + 10_000_000).contains(&to),
            "{to}"
        );
        assert!(relays.due(3, Some(&estimate(5))).is_empty());
        // Fired again (same id): not owed twice.
        relays.fired(&fired(3, 1000));
        assert_eq!(relays.waiting(3), 0);
        // A frame the connection could not take is owed again, first.
        relays.unsend(3, &sent[0]);
        assert_eq!(relays.due(3, Some(&estimate(5)))[0].id, 1);
        // A new connection owes what is remembered again.
        relays.disconnect(3);
        assert!(!relays.is_ring(3));
        relays.connect(3, vec![fired(3, 1000)]);
        assert_eq!(relays.due(3, Some(&estimate(5))).len(), 1);
    }

    #[test]
    fn owed_triggers_are_bounded_oldest_first() {
        let mut relays = RingRelays::new(2);
        relays.connect(1, Vec::new());
        for id in 1..=5 {
            relays.fired(&fired(id, 1000));
        }
        let ids: Vec<u64> = relays
            .due(1, Some(&estimate(0)))
            .iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(ids, [4, 5]);
        assert_eq!(relays.slots(), [1]);
    }
}
