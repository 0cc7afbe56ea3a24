//! The registry of probe sessions: the server registers a session when a
//! relay connects (its Welcome carries the session id) and unregisters it
//! on disconnect; the prober probes only registered sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracesync_core::status::MachineStatus;
use tracesync_core::sync::ProberConfig;
use tracesync_core::sync::prober::ProberView;
use tracesync_core::sync::sessions::{
    MachineSync, ProberStats, Registered, Registration, SessionSync,
};

/// Per-session state is copied out of the prober at most this often (its
/// loop turns once per datagram; the status and metrics read every 250 ms).
const SESSION_PUBLISH_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct Registry {
    /// Bumped on every change, so the prober copies the map only then.
    generation: u64,
    sessions: HashMap<u64, Registration>,
    config: Option<ProberConfig>,
}

#[derive(Debug, Default)]
struct Published {
    at: Option<Instant>,
    sessions: Vec<SessionSync>,
}

#[derive(Debug, Default)]
struct Shared {
    registry: Mutex<Registry>,
    stats: Mutex<ProberStats>,
    sessions: Mutex<Published>,
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

    /// Replaces the prober's schedule (SIGHUP); the prober applies it on
    /// its next loop turn (within 50 ms).
    pub fn set_config(&self, config: ProberConfig) {
        let mut registry = lock(&self.shared.registry);
        registry.config = Some(config);
        registry.generation += 1;
    }

    /// The sessions as the prober last published them (at most 100 ms old
    /// while it runs).
    pub fn sessions(&self) -> Vec<SessionSync> {
        lock(&self.shared.sessions).sessions.clone()
    }

    /// Fills the `sync` object of every machine with a probe session, at
    /// host BOOTTIME `host_now_ns`. Of two sessions of one machine (a relay
    /// instance being replaced), one with an estimate wins.
    pub fn fill_status(&self, machines: &mut [MachineStatus], host_now_ns: u64) {
        let published = lock(&self.shared.sessions);
        let mut by_machine: HashMap<u32, &SessionSync> = HashMap::new();
        for session in &published.sessions {
            by_machine
                .entry(session.machine_raw_id)
                .and_modify(|held| {
                    if held.estimate.is_none() && session.estimate.is_some() {
                        *held = session;
                    }
                })
                .or_insert(session);
        }
        for machine in machines {
            machine.sync = by_machine
                .get(&machine.raw_id)
                .map(|s| MachineSync::at(s, host_now_ns));
        }
    }

    /// Called by the prober every loop turn: the counters always, the
    /// sessions at most every [`SESSION_PUBLISH_EVERY`].
    pub(crate) fn publish_stats(&self, view: ProberView<'_>) {
        *lock(&self.shared.stats) = *view;
        let mut published = lock(&self.shared.sessions);
        if published
            .at
            .is_some_and(|at| at.elapsed() < SESSION_PUBLISH_EVERY)
        {
            return;
        }
        published.at = Some(Instant::now());
        published.sessions.clear();
        published.sessions.extend(view.sessions());
    }

    /// The sessions and the schedule, if they changed since `seen_generation`.
    pub(crate) fn changed_since(&self, seen_generation: u64) -> Option<(u64, Registered)> {
        let registry = lock(&self.shared.registry);
        (registry.generation != seen_generation).then(|| {
            let registered = Registered {
                sessions: registry.sessions.clone(),
                config: registry.config,
            };
            (registry.generation, registered)
        })
    }
}

/// The ingest loop's status machines with their `sync` objects filled in
/// (unchanged without a prober).
pub fn with_sync(
    mut machines: Vec<MachineStatus>,
    probes: Option<&ProbeSessions>,
) -> Vec<MachineStatus> {
    if let Some(probes) = probes {
        probes.fill_status(&mut machines, tracesync_common::clock::boottime_ns());
    }
    machines
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
            probe_key: [9; tracesync_protocol::probe::PROBE_KEY_BYTES],
        };
        handle.register(42, registration);
        let (generation, map) = sessions.changed_since(0).expect("changed");
        assert_eq!(map.sessions.get(&42), Some(&registration));
        assert!(map.config.is_none());
        assert!(!format!("{registration:?}").contains('9'), "no key in logs");
        assert!(sessions.changed_since(generation).is_none());
        handle.unregister(99); // unknown: no change
        assert!(sessions.changed_since(generation).is_none());
        handle.unregister(42);
        let (generation, map) = sessions.changed_since(generation).expect("changed");
        assert!(map.sessions.is_empty());
        assert!(sessions.is_empty());
        let config = ProberConfig {
            burst_probes: 3,
            ..ProberConfig::default()
        };
        sessions.set_config(config);
        let (_, map) = sessions.changed_since(generation).expect("config changed");
        assert_eq!(map.config, Some(config));
    }
}
