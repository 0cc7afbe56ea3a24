//! The registry of probe sessions: the server registers a session when a
//! relay connects (its Welcome carries the session id) and unregisters it
//! on disconnect; the prober probes only registered sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// What the prober needs to know about a registered session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Registration {
    /// The live core's slot of the relay.
    pub slot: u32,
    /// Perfetto machine id of the relay (0 when the server did not say).
    pub machine_raw_id: u32,
}

/// Counters of the prober, readable from the registry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProberStats {
    pub probes_sent: u64,
    pub registers_accepted: u64,
    pub replies_accepted: u64,
    /// Replies whose timestamps the estimator rejected (reversed, absurd).
    pub replies_rejected: u64,
    /// Register or reply datagrams naming a session that is not registered.
    pub unknown_session: u64,
    /// Replies to a known probe id that name another session.
    pub wrong_session: u64,
    /// Replies to no outstanding probe (unknown id, duplicate, t1 mismatch).
    pub unknown_probe: u64,
    /// Datagrams that do not decode, or that a daemon never receives (Probe).
    pub malformed: u64,
    /// Outstanding probes forgotten to keep the table bounded.
    pub outstanding_evicted: u64,
    /// Clock epochs started after the first (relay suspends).
    pub new_epochs: u64,
    pub send_errors: u64,
    pub recv_errors: u64,
    /// Samples dropped because the update channel stayed full.
    pub samples_dropped: u64,
}

#[derive(Debug, Default)]
struct Registry {
    /// Bumped on every change, so the prober copies the map only then.
    generation: u64,
    sessions: HashMap<u64, Registration>,
}

#[derive(Debug, Default)]
struct Shared {
    registry: Mutex<Registry>,
    stats: Mutex<ProberStats>,
}

/// Cheaply cloneable handle on the session registry.
#[derive(Clone, Debug, Default)]
pub struct ProbeSessions {
    shared: Arc<Shared>,
}

/// A panic elsewhere while holding the lock leaves plain data behind that is
/// still consistent (every update is a single insert/remove/assign).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ProbeSessions {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets the prober answer ProbeRegister for `session_id` and probe it.
    /// Samples of this session carry machine_raw_id 0; prefer
    /// [`ProbeSessions::register_machine`] when the id is known.
    pub fn register(&self, session_id: u64, slot: u32) {
        self.register_machine(session_id, slot, 0);
    }

    /// As [`ProbeSessions::register`], with the relay's machine raw id for
    /// the samples.
    pub fn register_machine(&self, session_id: u64, slot: u32, machine_raw_id: u32) {
        let mut registry = lock(&self.shared.registry);
        registry.sessions.insert(
            session_id,
            Registration {
                slot,
                machine_raw_id,
            },
        );
        registry.generation += 1;
    }

    /// Stops probing `session_id` and forgets its estimator.
    pub fn unregister(&self, session_id: u64) {
        let mut registry = lock(&self.shared.registry);
        if registry.sessions.remove(&session_id).is_some() {
            registry.generation += 1;
        }
    }

    pub fn is_registered(&self, session_id: u64) -> bool {
        lock(&self.shared.registry)
            .sessions
            .contains_key(&session_id)
    }

    pub fn len(&self) -> usize {
        lock(&self.shared.registry).sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The prober's counters as of its last loop turn.
    pub fn stats(&self) -> ProberStats {
        *lock(&self.shared.stats)
    }

    pub(crate) fn publish_stats(&self, stats: ProberStats) {
        *lock(&self.shared.stats) = stats;
    }

    /// The sessions, if they changed since `seen_generation`.
    pub(crate) fn changed_since(
        &self,
        seen_generation: u64,
    ) -> Option<(u64, HashMap<u64, Registration>)> {
        let registry = lock(&self.shared.registry);
        (registry.generation != seen_generation)
            .then(|| (registry.generation, registry.sessions.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_unregister_and_change_tracking() {
        let sessions = ProbeSessions::new();
        let handle = sessions.clone();
        assert!(sessions.changed_since(0).is_none());
        handle.register_machine(42, 3, 77);
        let (generation, map) = sessions.changed_since(0).expect("changed");
        assert_eq!(
            map.get(&42),
            Some(&Registration {
                slot: 3,
                machine_raw_id: 77
            })
        );
        assert!(sessions.changed_since(generation).is_none());
        handle.unregister(99); // unknown: no change
        assert!(sessions.changed_since(generation).is_none());
        handle.unregister(42);
        let (_, map) = sessions.changed_since(generation).expect("changed");
        assert!(map.is_empty());
        assert!(sessions.is_empty());
    }
}
