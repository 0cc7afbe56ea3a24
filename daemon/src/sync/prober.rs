//! The prober's core (sans-IO): which session to probe when, matching
//! replies to outstanding probes, one estimator per session. The tokio edge
//! (`super::edge`) reads the clock and moves the bytes.
//!
//! Schedule: a burst of probes on a session's first ProbeRegister and again
//! when its relay starts a new clock epoch, then one probe per steady
//! interval.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use prost::Message;
use tracesync_protocol::relay::MAX_PROBE_DATAGRAM_BYTES;
use tracesync_protocol::relay::v1::{Probe, ProbeDatagram, ProbeReply, probe_datagram::Body};

use super::{
    Estimator, EstimatorConfig, ProbeSample, ProberStats, Registration, SyncEstimate, SyncUpdate,
};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProberConfig {
    /// Probes in a burst.
    pub burst_probes: u32,
    /// Spacing of a burst's probes (ns).
    pub burst_interval_ns: u64,
    /// Spacing of steady probes (ns).
    pub steady_interval_ns: u64,
    /// Most probes awaiting a reply, over all sessions.
    pub max_outstanding: usize,
    pub estimator: EstimatorConfig,
}

impl Default for ProberConfig {
    fn default() -> Self {
        Self {
            burst_probes: 8,
            burst_interval_ns: 20_000_000,
            steady_interval_ns: 250_000_000,
            max_outstanding: 4096,
            estimator: EstimatorConfig::default(),
        }
    }
}

/// A probe the edge should send now: stamp t1, then
/// [`ProberCore::probe_datagram`], then send to `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeDue {
    pub session_id: u64,
    pub addr: SocketAddr,
}

#[derive(Debug)]
struct ActiveSession {
    registration: Registration,
    /// Where the relay's ProbeRegister came from (NAT-mapped address).
    addr: SocketAddr,
    estimator: Estimator,
    burst_left: u32,
    next_probe_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Outstanding {
    session_id: u64,
    t1: u64,
}

#[derive(Debug)]
pub struct ProberCore {
    config: ProberConfig,
    registered: HashMap<u64, Registration>,
    /// Registered sessions whose relay address is known.
    active: HashMap<u64, ActiveSession>,
    outstanding: HashMap<u64, Outstanding>,
    /// Probe ids in send order; bounds `outstanding`.
    outstanding_order: VecDeque<u64>,
    next_probe_id: u64,
    stats: ProberStats,
}

impl ProberCore {
    pub fn new(config: ProberConfig) -> Self {
        Self {
            config,
            registered: HashMap::new(),
            active: HashMap::new(),
            outstanding: HashMap::new(),
            outstanding_order: VecDeque::new(),
            next_probe_id: 1,
            stats: ProberStats::default(),
        }
    }

    /// Replaces the set of registered sessions; sessions no longer in it
    /// stop being probed and lose their estimator.
    pub fn set_registered(&mut self, registered: HashMap<u64, Registration>) {
        self.active.retain(|id, session| match registered.get(id) {
            Some(registration) => {
                session.registration = *registration;
                true
            }
            None => false,
        });
        self.registered = registered;
    }

    /// Handles one received datagram; `now_ns` is host BOOTTIME read right
    /// after the receive (t4 for replies).
    pub fn on_datagram(
        &mut self,
        bytes: &[u8],
        from: SocketAddr,
        now_ns: u64,
    ) -> Option<SyncUpdate> {
        let body = (bytes.len() <= MAX_PROBE_DATAGRAM_BYTES)
            .then(|| ProbeDatagram::decode(bytes).ok())
            .flatten()
            .and_then(|datagram| datagram.body);
        match body {
            Some(Body::Register(register)) => {
                self.on_register(register.session_id, from, now_ns);
                None
            }
            Some(Body::Reply(reply)) => self.on_reply(&reply, now_ns),
            // A Probe is daemon -> relay only.
            Some(Body::Probe(_)) | None => {
                self.stats.malformed += 1;
                None
            }
        }
    }

    /// A relay announced its address for `session_id`. The first
    /// announcement starts a burst; later ones only update the address.
    /// Returns false for unregistered sessions.
    pub fn on_register(&mut self, session_id: u64, addr: SocketAddr, now_ns: u64) -> bool {
        let Some(registration) = self.registered.get(&session_id).copied() else {
            self.stats.unknown_session += 1;
            return false;
        };
        self.stats.registers_accepted += 1;
        let config = self.config;
        self.active
            .entry(session_id)
            .and_modify(|session| session.addr = addr)
            .or_insert_with(|| ActiveSession {
                registration,
                addr,
                estimator: Estimator::new(config.estimator),
                burst_left: config.burst_probes,
                next_probe_ns: now_ns,
            });
        true
    }

    /// A reply arrived at host BOOTTIME `t4`. Returns an update when it
    /// matches an outstanding probe and its timestamps are sane.
    pub fn on_reply(&mut self, reply: &ProbeReply, t4: u64) -> Option<SyncUpdate> {
        let Some(outstanding) = self.outstanding.get(&reply.probe_id).copied() else {
            self.stats.unknown_probe += 1;
            return None;
        };
        // A mismatching reply leaves the entry: the real one may follow.
        if outstanding.session_id != reply.session_id {
            self.stats.wrong_session += 1;
            return None;
        }
        if outstanding.t1 != reply.t1_ns {
            self.stats.unknown_probe += 1;
            return None;
        }
        self.outstanding.remove(&reply.probe_id);
        let Some(session) = self.active.get_mut(&reply.session_id) else {
            self.stats.unknown_session += 1;
            return None;
        };
        let epoch_before = session.estimator.epoch();
        let t1 = outstanding.t1;
        let Some(estimate) = session.estimator.add_sample(
            t1,
            reply.t2_ns,
            reply.t3_ns,
            t4,
            reply.boottime_minus_monotonic_ns,
        ) else {
            self.stats.replies_rejected += 1;
            return None;
        };
        if estimate.epoch != epoch_before {
            // The relay's clock stepped (suspend): re-acquire quickly.
            self.stats.new_epochs += 1;
            session.burst_left = self.config.burst_probes;
            session.next_probe_ns = t4;
        }
        self.stats.replies_accepted += 1;
        Some(SyncUpdate {
            slot: session.registration.slot,
            session_id: reply.session_id,
            estimate,
            samples: vec![ProbeSample {
                machine_raw_id: session.registration.machine_raw_id,
                session_id: reply.session_id,
                t1,
                t2: reply.t2_ns,
                t3: reply.t3_ns,
                t4,
            }],
        })
    }

    /// Appends the probes due at `now_ns` to `due` and schedules the next.
    pub fn poll(&mut self, now_ns: u64, due: &mut Vec<ProbeDue>) {
        let config = self.config;
        for (session_id, session) in &mut self.active {
            if session.next_probe_ns > now_ns {
                continue;
            }
            due.push(ProbeDue {
                session_id: *session_id,
                addr: session.addr,
            });
            session.burst_left = session.burst_left.saturating_sub(1);
            let interval = if session.burst_left > 0 {
                config.burst_interval_ns
            } else {
                config.steady_interval_ns
            };
            session.next_probe_ns = now_ns.saturating_add(interval.max(1));
        }
    }

    /// The Probe datagram for `session_id` stamped with `t1` (host BOOTTIME
    /// read right before sending it); remembers it for the reply. None when
    /// the session is not active.
    pub fn probe_datagram(&mut self, session_id: u64, t1: u64) -> Option<Vec<u8>> {
        if !self.active.contains_key(&session_id) {
            return None;
        }
        let probe_id = self.next_probe_id;
        self.next_probe_id = self.next_probe_id.wrapping_add(1).max(1);
        self.outstanding
            .insert(probe_id, Outstanding { session_id, t1 });
        self.outstanding_order.push_back(probe_id);
        while self.outstanding_order.len() > self.config.max_outstanding.max(1) {
            if let Some(oldest) = self.outstanding_order.pop_front()
                && self.outstanding.remove(&oldest).is_some()
            {
                self.stats.outstanding_evicted += 1;
            }
        }
        self.stats.probes_sent += 1;
        let datagram = ProbeDatagram {
            body: Some(Body::Probe(Probe {
                session_id,
                probe_id,
                t1_ns: t1,
            })),
        };
        Some(datagram.encode_to_vec())
    }

    /// Host BOOTTIME of the next due probe, if any session is active.
    pub fn next_wakeup_ns(&self) -> Option<u64> {
        self.active.values().map(|s| s.next_probe_ns).min()
    }

    /// Latest estimate of a session.
    pub fn estimate(&self, session_id: u64) -> Option<SyncEstimate> {
        self.active.get(&session_id)?.estimator.estimate()
    }

    pub fn stats(&self) -> ProberStats {
        self.stats
    }

    /// Counters the edge keeps (socket errors, dropped samples) fold in here.
    pub fn stats_mut(&mut self) -> &mut ProberStats {
        &mut self.stats
    }
}

#[cfg(test)]
#[path = "prober_tests.rs"]
mod tests;
