//! Datagrams in (`super::prober`): authentication, registers (which route
//! a session is probed on), and matching replies to outstanding probes,
//! judging each sample and adapting the session's schedule to it. Anything
//! that fails a check changes nothing but a counter (see "Security" in the
//! prober's docs).

use tracesync_protocol::probe::{self, OpenError, ReplayWindow};
use tracesync_protocol::relay::v1::{ProbeDatagram, ProbeReply, probe_body::Kind};

use super::session::{ActiveSession, Verdict, judge};
use super::{Outstanding, ProberCore, Route};
use crate::sync::sessions::SessionCounters;
use crate::sync::{Estimator, ProbeSample, SyncUpdate};

impl ProberCore {
    /// Handles one received datagram (or TCP frame) from `route`; `now_ns`
    /// is host BOOTTIME read right after the receive (t4 for replies).
    /// Returns the session it authenticated for, if any, and an update for
    /// an accepted reply.
    pub fn on_datagram(
        &mut self,
        bytes: &[u8],
        route: Route,
        now_ns: u64,
    ) -> (Option<u64>, Option<SyncUpdate>) {
        let datagram = match probe::envelope(bytes) {
            Ok(datagram) => datagram,
            Err(_) => {
                self.stats.malformed += 1;
                return (None, None);
            }
        };
        let session_id = datagram.session_id;
        let Some(known) = self.registered.get(&session_id) else {
            self.on_unregistered(&datagram);
            return (None, None);
        };
        let Some(key) = &known.key else {
            // Registered without a usable key: nothing can be verified.
            self.stats.bad_mac += 1;
            return (None, None);
        };
        let kind = match probe::open(key, &datagram) {
            Ok(kind) => kind,
            Err(OpenError::BadMac | OpenError::SessionMismatch) => {
                self.stats.bad_mac += 1;
                if let Some(session) = self.active.get_mut(&session_id) {
                    session.counters.bad_mac += 1;
                }
                return (None, None);
            }
            Err(OpenError::Malformed) => {
                self.stats.malformed += 1;
                return (None, None);
            }
        };
        match kind {
            Kind::Register(register) => {
                let accepted = self.on_register(session_id, register.nonce, route, now_ns);
                (accepted.then_some(session_id), None)
            }
            Kind::Reply(reply) => (Some(session_id), self.on_reply(session_id, &reply, now_ns)),
            // A Probe is daemon -> relay only (a reflected probe lands here).
            Kind::Probe(_) => {
                self.stats.malformed += 1;
                (None, None)
            }
        }
    }

    /// A datagram of a session that is not registered: `after_end` when it
    /// verifies with the key of a session that ended within the probe
    /// timeout (its relay's last replies), `unknown_session` otherwise.
    fn on_unregistered(&mut self, datagram: &ProbeDatagram) {
        let verified = self
            .ended_key(datagram.session_id)
            .is_some_and(|key| probe::open(key, datagram).is_ok());
        if verified {
            self.stats.after_end += 1;
        } else {
            self.stats.unknown_session += 1;
        }
    }

    /// An authenticated ProbeRegister of `session_id` from `route`. The
    /// first one starts a burst; one from another route moves the session
    /// there and starts a burst; a nonce not above the last accepted one is
    /// a replay and changes nothing. Returns whether it was accepted.
    fn on_register(&mut self, session_id: u64, nonce: u64, route: Route, now_ns: u64) -> bool {
        let Some(known) = self.registered.get(&session_id) else {
            self.stats.unknown_session += 1;
            return false;
        };
        let registration = known.registration;
        let config = self.config;
        let session = self
            .active
            .entry(session_id)
            .or_insert_with(|| ActiveSession {
                registration,
                route: None,
                estimator: Estimator::new(config.estimator),
                burst_left: 0,
                next_probe_ns: now_ns,
                interval_ns: config.steady_interval_ns,
                warm_until_ns: 0,
                agreeing: 0,
                follow_ups_left: 0,
                follow_up_due: false,
                last_nonce: 0,
                answered: ReplayWindow::default(),
                register_nonce: 0,
                last_sample_ns: None,
                counters: SessionCounters::default(),
            });
        if nonce <= session.register_nonce {
            self.stats.registers_replayed += 1;
            return false;
        }
        session.register_nonce = nonce;
        self.stats.registers_accepted += 1;
        if session.route != Some(route) {
            // First contact, reconnect, or a new address: re-acquire.
            session.route = Some(route);
            session.start_burst(&config, now_ns);
            self.stats.bursts += 1;
            session.counters.bursts += 1;
        }
        true
    }

    /// The edge lost `route` (a TCP probe connection closed): sessions on it
    /// wait for their relay to register again.
    pub fn route_closed(&mut self, route: Route) {
        for session in self.active.values_mut() {
            if session.route == Some(route) {
                session.route = None;
                session.follow_up_due = false;
            }
        }
    }

    /// An authenticated reply of `session_id` arrived at host BOOTTIME `t4`.
    /// Returns an update when it answers an outstanding probe of the session
    /// for the first time and its timestamps are sane.
    fn on_reply(&mut self, session_id: u64, reply: &ProbeReply, t4: u64) -> Option<SyncUpdate> {
        let Some(session) = self.active.get_mut(&session_id) else {
            self.stats.unknown_session += 1;
            return None;
        };
        let t1 = match self.outstanding.get(&(session_id, reply.nonce)) {
            Some(Outstanding { t1: Some(t1), .. }) => *t1,
            _ => {
                if session.answered.is_seen(reply.nonce) {
                    self.stats.replayed += 1;
                    session.counters.replayed += 1;
                } else {
                    self.stats.nonce_mismatch += 1;
                    session.counters.nonce_mismatch += 1;
                }
                return None;
            }
        };
        self.outstanding.remove(&(session_id, reply.nonce));
        // Cannot fail: the nonce was outstanding, so it was never answered.
        let _ = session.answered.accept(reply.nonce);
        let (t2, t3) = (reply.t2_ns, reply.t3_ns);
        let config = self.config;
        let before = session.estimator.estimate();
        // Judged before the estimator sees it: a step's first samples may
        // well be gated out, and those are the ones to react to.
        let verdict = before
            .filter(|_| t1 <= t4 && t2 <= t3)
            .map(|b| judge(&config, &b, t1, t2, t3, t4));
        let trimmed = session.estimator.trimmed();
        let result =
            session
                .estimator
                .add_sample(t1, t2, t3, t4, reply.boottime_minus_monotonic_ns);
        if session.estimator.trimmed() > trimmed {
            // The window lost its history (a long gap, or samples no line
            // fits): as young as after a burst, without the burst.
            session.warm_up(&config, t4);
        }
        if let (Some(b), Some(e)) = (before, result)
            && b.epoch != e.epoch
        {
            // The relay's clock stepped (suspend): re-acquire quickly.
            self.stats.new_epochs += 1;
            self.stats.bursts += 1;
            session.counters.bursts += 1;
            session.start_burst(&config, t4);
        } else {
            match verdict {
                Some(Verdict::Step) if !session.in_burst() => {
                    self.stats.suspected_steps += 1;
                    self.stats.bursts += 1;
                    session.counters.bursts += 1;
                    session.start_burst(&config, t4);
                }
                Some(Verdict::Agree) if !session.in_burst() => {
                    session.agreeing += 1;
                    if session.agreeing >= config.slow_after_agreeing.max(1) {
                        session.agreeing = 0;
                        session.interval_ns = (session.interval_ns + session.interval_ns / 4)
                            .min(config.max_interval_ns);
                    }
                }
                Some(Verdict::Disagree) if !session.in_burst() => {
                    session.agreeing = 0;
                    session.interval_ns = (session.interval_ns / 2).max(config.min_interval_ns);
                    // Do not wait out a long interval on a disagreeing clock.
                    session.next_probe_ns = session
                        .next_probe_ns
                        .min(t4.saturating_add(session.interval_ns));
                }
                _ => {}
            }
            if session.follow_ups_left > 0 && session.last_nonce == reply.nonce {
                session.follow_ups_left -= 1;
                session.follow_up_due = true;
            }
        }
        let Some(estimate) = result else {
            self.stats.replies_rejected += 1;
            session.counters.replies_rejected += 1;
            return None;
        };
        self.stats.replies_accepted += 1;
        session.counters.replies += 1;
        session.last_sample_ns = Some(t4);
        Some(SyncUpdate {
            slot: session.registration.slot,
            session_id,
            estimate,
            samples: vec![ProbeSample {
                machine_raw_id: session.registration.machine_raw_id,
                session_id,
                t1,
                t2,
                t3,
                t4,
                boottime_minus_monotonic_ns: reply.boottime_minus_monotonic_ns,
            }],
        })
    }
}
