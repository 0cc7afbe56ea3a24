//! The prober's core (sans-IO): which session to probe when and over which
//! route, checking and matching replies, one estimator per session. The
//! tokio edge (`super::edge`) reads the clock and moves the bytes.
//!
//! This file holds the sessions and the schedule (what is due, probes out,
//! timeouts); the configuration and routes are in `super::config`, datagrams in
//! (authentication, registers, reply matching) in `replies.rs`, one
//! session's cadence state and the judging of a sample in `session.rs`.
//!
//! Security: every datagram is signed with the session's probe key (see
//! `tracesync_protocol::probe`). A datagram with a bad MAC, a reply whose
//! nonce is not an outstanding probe of its session, a replayed reply, or a
//! register whose nonce is not above the last accepted one changes nothing
//! but a counter in [`ProberStats`].
//!
//! Schedule (docs/clock-sync-live.md "Probe channel"):
//! - a burst of `burst_probes` probes `burst_interval_ns` apart when a
//!   session's relay first registers, when it registers from another route
//!   (reconnect, transport change), when its relay starts a new clock epoch
//!   (resume), and when a low-delay sample lies far outside the estimate's
//!   bound (suspected step);
//! - then one scheduled probe per steady interval, each starting a short
//!   train: the follow-up goes out as soon as the previous reply is in. A
//!   relay idle since the last probe wakes late (one-sided delay on the way
//!   there); the follow-up finds both ends awake, so its delay is lower;
//! - the steady interval adapts between `min_interval_ns` and
//!   `max_interval_ns` (by default 10 Hz and 4 Hz: it only speeds up; see
//!   docs/clock-sync-accuracy.md): it grows by 1/4 after
//!   `slow_after_agreeing` samples
//!   in a row agree with the estimate (the sample's interval
//!   `offset ± delay/2` meets the estimate's `offset ± bound`), and halves
//!   when a sample disagrees; every burst resets it to `steady_interval_ns`;
//! - for `warmup_ns` after every burst (a minute by default), steady probes
//!   go at `min_interval_ns` whatever the adaptive spacing says: a young
//!   estimate's frequency rests on few samples over a short span, and
//!   2.5x the samples then cut the live error of 40 s simulated Wi-Fi runs
//!   from 13-85 to 11-17 us p99 (docs/clock-sync-accuracy.md
//!   "Warm-up: measured");
//! - a probe not answered within `probe_timeout_ns` is forgotten and
//!   counted as a timeout (its late reply would be a useless sample).
//!
//! The operator's knobs are the daemon's `[sync]` section
//! (`SyncConfig`);
//! SIGHUP hands a new schedule to the running prober through the registry
//! (`ProbeSessions::set_config`).

use std::collections::{HashMap, VecDeque};

use tracesync_protocol::probe::{self, ProbeKey};
use tracesync_protocol::relay::v1::{Probe, probe_body::Kind};

pub use super::config::{ProberConfig, Route};
use super::sessions::{Registered, RouteKind, SessionSync};
use super::{ProberStats, Registration, SyncEstimate};
use session::ActiveSession;

/// A probe the edge should send now: [`ProberCore::prepare_probe`], stamp
/// t1, send, [`ProberCore::probe_sent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeDue {
    pub session_id: u64,
    pub route: Route,
}

/// A signed probe ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedProbe {
    pub session_id: u64,
    pub nonce: u64,
    pub route: Route,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
struct Outstanding {
    /// Host BOOTTIME at send; None until the edge reports the send.
    t1: Option<u64>,
    /// Host BOOTTIME of the poll that made it due (timeouts of probes the
    /// edge never reported as sent count from here).
    due_ns: u64,
}

/// A registered session: what the server said, and its key.
#[derive(Debug)]
struct Known {
    registration: Registration,
    key: Option<ProbeKey>,
}

#[derive(Debug)]
pub struct ProberCore {
    config: ProberConfig,
    registered: HashMap<u64, Known>,
    /// Registered sessions whose relay has registered a route.
    active: HashMap<u64, ActiveSession>,
    outstanding: HashMap<(u64, u64), Outstanding>,
    /// (session, nonce) in send order; bounds `outstanding`.
    outstanding_order: VecDeque<(u64, u64)>,
    /// Sessions unregistered within the last probe timeout, oldest first,
    /// with their keys (at most [`ENDED_KEPT`]): a datagram its relay sent
    /// just before it left is counted as `after_end`, not as a stranger's
    /// `unknown_session`.
    ended: VecDeque<Ended>,
    /// Host BOOTTIME of the latest poll.
    now_ns: u64,
    stats: ProberStats,
}

/// Most ended sessions remembered: a burst of relays leaving at once costs
/// at most this many keys.
const ENDED_KEPT: usize = 64;

#[derive(Debug)]
struct Ended {
    session_id: u64,
    ended_ns: u64,
    key: Option<ProbeKey>,
}

/// The prober's counters (it derefs to [`ProberStats`]) and, for the
/// registry to publish, its sessions.
#[derive(Clone, Copy)]
pub struct ProberView<'a> {
    core: &'a ProberCore,
}

impl std::ops::Deref for ProberView<'_> {
    type Target = ProberStats;

    fn deref(&self) -> &ProberStats {
        &self.core.stats
    }
}

impl ProberView<'_> {
    /// Every registered session that has a route or had one.
    pub fn sessions(&self) -> impl Iterator<Item = SessionSync> + '_ {
        let config = &self.core.config;
        let now_ns = self.core.now_ns;
        self.core
            .active
            .iter()
            .map(move |(&session_id, session)| SessionSync {
                session_id,
                machine_raw_id: session.registration.machine_raw_id,
                state: session.state(),
                route: session.route.map(|route| match route {
                    Route::Udp(_) => RouteKind::Udp,
                    Route::Tcp(_) => RouteKind::Tcp,
                }),
                probe_rate_hz: session.probe_rate_hz(config, now_ns),
                estimate: session.estimator.estimate(),
                last_sample_host_ns: session.last_sample_ns,
                counters: session.counters,
            })
    }
}

impl ProberCore {
    pub fn new(config: ProberConfig) -> Self {
        Self {
            config,
            registered: HashMap::new(),
            active: HashMap::new(),
            outstanding: HashMap::new(),
            outstanding_order: VecDeque::new(),
            ended: VecDeque::new(),
            now_ns: 0,
            stats: ProberStats::default(),
        }
    }

    /// The schedule in use.
    pub fn config(&self) -> &ProberConfig {
        &self.config
    }

    /// Replaces the schedule (SIGHUP). Running sessions keep their
    /// estimators; their adaptive spacing, burst and train are clamped
    /// into the new limits.
    pub fn set_config(&mut self, config: ProberConfig) {
        if config == self.config {
            return;
        }
        self.config = config;
        for session in self.active.values_mut() {
            session.adopt(&config);
            let latest = self
                .now_ns
                .saturating_add(session.steady_spacing(&config, self.now_ns));
            session.next_probe_ns = session.next_probe_ns.min(latest);
        }
    }

    /// Replaces the set of registered sessions (and the schedule, when the
    /// registry carries one); sessions no longer in it stop being probed
    /// and lose their estimator.
    pub fn set_registered(&mut self, registered: Registered) {
        let Registered {
            sessions: registered,
            config,
        } = registered;
        if let Some(config) = config {
            self.set_config(config);
        }
        self.active.retain(|id, session| match registered.get(id) {
            Some(registration) => {
                session.registration = *registration;
                true
            }
            None => false,
        });
        self.outstanding
            .retain(|(id, _), _| registered.contains_key(id));
        self.outstanding_order
            .retain(|(id, _)| registered.contains_key(id));
        let previous = std::mem::replace(
            &mut self.registered,
            registered
                .into_iter()
                .map(|(id, registration)| {
                    let key = ProbeKey::new(&registration.probe_key);
                    (id, Known { registration, key })
                })
                .collect(),
        );
        self.ended
            .retain(|e| !self.registered.contains_key(&e.session_id));
        for (session_id, known) in previous {
            if self.registered.contains_key(&session_id) {
                continue;
            }
            if self.ended.len() == ENDED_KEPT {
                self.ended.pop_front();
            }
            self.ended.push_back(Ended {
                session_id,
                ended_ns: self.now_ns,
                key: known.key,
            });
        }
    }

    /// The key of `session_id` if it ended within the probe timeout.
    pub(super) fn ended_key(&self, session_id: u64) -> Option<&ProbeKey> {
        let ended = self.ended.iter().find(|e| e.session_id == session_id)?;
        ended.key.as_ref()
    }

    /// Appends the probes due at `now_ns` to `due` and schedules the next;
    /// forgets probes unanswered for `probe_timeout_ns`.
    pub fn poll(&mut self, now_ns: u64, due: &mut Vec<ProbeDue>) {
        self.now_ns = now_ns;
        self.expire(now_ns);
        let config = self.config;
        for (session_id, session) in &mut self.active {
            let Some(route) = session.route else {
                continue;
            };
            let probe = ProbeDue {
                session_id: *session_id,
                route,
            };
            if session.follow_up_due {
                session.follow_up_due = false;
                due.push(probe);
                continue;
            }
            if session.next_probe_ns > now_ns {
                continue;
            }
            due.push(probe);
            let interval = if session.in_burst() {
                session.burst_left -= 1;
                session.follow_ups_left = 0;
                if session.in_burst() {
                    config.burst_interval_ns
                } else {
                    session.steady_spacing(&config, now_ns)
                }
            } else {
                session.follow_ups_left = config.train_length.saturating_sub(1);
                session.steady_spacing(&config, now_ns)
            };
            session.next_probe_ns = now_ns.saturating_add(interval.max(1));
        }
    }

    /// The signed Probe for `session_id`, remembered as outstanding; the
    /// edge stamps t1 right before sending it and reports it with
    /// [`ProberCore::probe_sent`]. None when the session is not active.
    pub fn prepare_probe(&mut self, session_id: u64) -> Option<PreparedProbe> {
        let key = self.registered.get(&session_id)?.key.as_ref()?;
        let session = self.active.get_mut(&session_id)?;
        let route = session.route?;
        session.last_nonce += 1;
        let nonce = session.last_nonce;
        let bytes = probe::seal(key, session_id, Kind::Probe(Probe { nonce }));
        let due_ns = self.now_ns;
        self.outstanding
            .insert((session_id, nonce), Outstanding { t1: None, due_ns });
        self.outstanding_order.push_back((session_id, nonce));
        while self.outstanding_order.len() > self.config.max_outstanding.max(1) {
            if let Some(oldest) = self.outstanding_order.pop_front()
                && self.outstanding.remove(&oldest).is_some()
            {
                self.stats.outstanding_evicted += 1;
            }
        }
        Some(PreparedProbe {
            session_id,
            nonce,
            route,
            bytes,
        })
    }

    /// The probe `nonce` of `session_id` left at host BOOTTIME `t1`.
    pub fn probe_sent(&mut self, session_id: u64, nonce: u64, t1: u64) {
        if let Some(outstanding) = self.outstanding.get_mut(&(session_id, nonce)) {
            outstanding.t1 = Some(t1);
            self.stats.probes_sent += 1;
            if let Some(session) = self.active.get_mut(&session_id) {
                session.counters.probes_sent += 1;
            }
        }
    }

    /// Forgets the probes sent more than `probe_timeout_ns` before `now_ns`
    /// (oldest first: the order is the send order), counting each one sent
    /// as a timeout of its session. Answered probes still queued in the
    /// order are dropped on the way.
    fn expire(&mut self, now_ns: u64) {
        let timeout = self.config.probe_timeout_ns.max(1);
        while let Some(ended) = self.ended.front() {
            if now_ns.saturating_sub(ended.ended_ns) < timeout {
                break;
            }
            self.ended.pop_front();
        }
        while let Some(&oldest) = self.outstanding_order.front() {
            let Some(outstanding) = self.outstanding.get(&oldest) else {
                self.outstanding_order.pop_front();
                continue;
            };
            let since = outstanding.t1.unwrap_or(outstanding.due_ns);
            if now_ns.saturating_sub(since) < timeout {
                break;
            }
            let sent = outstanding.t1.is_some();
            self.outstanding.remove(&oldest);
            self.outstanding_order.pop_front();
            if sent {
                self.stats.probe_timeouts += 1;
                if let Some(session) = self.active.get_mut(&oldest.0) {
                    session.counters.timeouts += 1;
                }
            }
        }
    }

    /// Host BOOTTIME of the next due probe (0: now), if any session has a
    /// route.
    pub fn next_wakeup_ns(&self) -> Option<u64> {
        self.active
            .values()
            .filter(|s| s.route.is_some())
            .map(|s| if s.follow_up_due { 0 } else { s.next_probe_ns })
            .min()
    }

    /// Latest estimate of a session.
    pub fn estimate(&self, session_id: u64) -> Option<SyncEstimate> {
        self.active.get(&session_id)?.estimator.estimate()
    }

    /// Steady probe spacing of a session at the latest poll (ns): the
    /// adaptive one, or the fastest during a warm-up.
    pub fn steady_interval_ns(&self, session_id: u64) -> Option<u64> {
        let session = self.active.get(&session_id)?;
        Some(session.steady_spacing(&self.config, self.now_ns))
    }

    /// Probes left in a session's current burst.
    pub fn burst_left(&self, session_id: u64) -> Option<u32> {
        Some(self.active.get(&session_id)?.burst_left)
    }

    /// The counters (through `Deref`) and the sessions.
    pub fn stats(&self) -> ProberView<'_> {
        ProberView { core: self }
    }

    /// Counters the edge keeps (socket errors, dropped samples) fold in here.
    pub fn stats_mut(&mut self) -> &mut ProberStats {
        &mut self.stats
    }
}

mod replies;
mod session;

#[cfg(test)]
mod tests;
