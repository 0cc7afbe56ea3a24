//! The registry of probe sessions: the server registers a session when a
//! relay connects (its Welcome carries the session id) and unregisters it
//! on disconnect; the prober probes only registered sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tracesync_protocol::probe::PROBE_KEY_BYTES;

/// What the prober needs to know about a registered session.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Registration {
    /// The live core's slot of the relay.
    pub slot: u32,
    /// Perfetto machine id of the relay (0 when the server did not say).
    pub machine_raw_id: u32,
    /// The session's probe key (sent in Welcome.probe_key).
    pub probe_key: [u8; PROBE_KEY_BYTES],
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("slot", &self.slot)
            .field("machine_raw_id", &self.machine_raw_id)
            .finish_non_exhaustive()
    }
}

/// Counters of the prober, readable from the registry (and in the status
/// report's `sync` object).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProberStats {
    pub probes_sent: u64,
    pub registers_accepted: u64,
    pub replies_accepted: u64,
    /// Replies whose timestamps the estimator rejected (reversed, absurd).
    pub replies_rejected: u64,
    /// Datagrams naming a session that is not registered.
    pub unknown_session: u64,
    /// Datagrams whose MAC does not check with their session's key
    /// (forged, corrupted, or signed for another session).
    pub bad_mac: u64,
    /// Authenticated replies whose nonce is no outstanding probe of their
    /// session (never sent, or forgotten to keep the table bounded).
    pub nonce_mismatch: u64,
    /// Authenticated replies to a probe already answered.
    pub replayed: u64,
    /// Authenticated registers whose nonce is not above the last accepted.
    pub registers_replayed: u64,
    /// Datagrams that do not decode, or that a daemon never receives (Probe).
    pub malformed: u64,
    /// Outstanding probes forgotten to keep the table bounded.
    pub outstanding_evicted: u64,
    /// Clock epochs started after the first (relay suspends).
    pub new_epochs: u64,
    /// Bursts started (first register, new route, new epoch, suspected step).
    pub bursts: u64,
    /// Low-delay samples far outside the estimate (each starts a burst).
    pub suspected_steps: u64,
    /// TCP probe connections accepted / closed for a bad first frame.
    pub tcp_connections: u64,
    pub tcp_refused: u64,
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

    /// Lets the prober answer ProbeRegister for `session_id` (signed with
    /// `registration.probe_key`) and probe it.
    pub fn register(&self, session_id: u64, registration: Registration) {
        let mut registry = lock(&self.shared.registry);
        registry.sessions.insert(session_id, registration);
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
        let registration = Registration {
            slot: 3,
            machine_raw_id: 77,
            probe_key: [9; PROBE_KEY_BYTES],
        };
        handle.register(42, registration);
        let (generation, map) = sessions.changed_since(0).expect("changed");
        assert_eq!(map.get(&42), Some(&registration));
        assert!(!format!("{registration:?}").contains('9'), "no key in logs");
        assert!(sessions.changed_since(generation).is_none());
        handle.unregister(99); // unknown: no change
        assert!(sessions.changed_since(generation).is_none());
        handle.unregister(42);
        let (_, map) = sessions.changed_since(generation).expect("changed");
        assert!(map.is_empty());
        assert!(sessions.is_empty());
    }
}
