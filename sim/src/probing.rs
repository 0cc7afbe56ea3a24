//! Probe exchanges as the daemon makes them: the real [`ProberCore`] runs in
//! virtual time (it is sans-IO: it takes timestamps and returns the probes
//! due), and this module plays its edge and the relay. The relay registers
//! (every 1 s until the first probe arrives, then every 10 s, as
//! relay/src/probe/mod.rs does); the core answers with its burst on first
//! contact, its steady trains, its adaptive rate (4-10 Hz) and the bursts it
//! starts on a new epoch or a suspected step; every probe and reply crosses
//! the link model; replies are signed with the session key and handed to
//! the core in arrival order, as the edge does.

use std::collections::HashMap;
use std::net::SocketAddr;

use tracesync_protocol::probe::{self, PROBE_KEY_BYTES, ProbeKey};
use tracesync_protocol::relay::v1::{ProbeRegister, ProbeReply, probe_body::Kind};

use super::clock::{HOST_START_NS, RelayClock};
use super::link::{LinkModel, LossState};
use super::rng::Rng;
use super::scenarios::Scenario;
use tracesync_core::sync::{
    ProbeDue, ProberConfig, ProberCore, ProberStats, Registration, Route, SyncEstimate,
};

/// One completed probe exchange, as the prober's estimator saw it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Exchange {
    /// Host time of the reply's arrival (s): when the sample is usable.
    pub done_s: f64,
    pub t: [u64; 4],
    pub bmm: i64,
    /// Host time at the relay's receive (s), for the frequency check.
    pub at_s: f64,
}

/// What the probing produced.
#[derive(Debug)]
pub(super) struct Probing {
    /// Exchanges in the order the prober processed them.
    pub exchanges: Vec<Exchange>,
    /// Probes or replies lost on the way.
    pub lost: usize,
    /// The prober's counters at the end.
    pub stats: ProberStats,
    /// The prober's own last estimate (the simulator's estimator, fed the
    /// same samples, must agree).
    pub final_estimate: Option<SyncEstimate>,
}

const SESSION: u64 = 0x51_4d;
const KEY: [u8; PROBE_KEY_BYTES] = [0x5a; PROBE_KEY_BYTES];
/// The edge's work between a reply's arrival and the follow-up's send (s).
const EDGE_TURNAROUND_S: f64 = 20e-6;
/// Largest lateness of a timer wakeup (s).
const TIMER_SLACK_S: f64 = 100e-6;
/// First register after the simulation starts (s).
const CONNECT_S: f64 = 0.05;

enum Arrival {
    Register,
    Reply {
        reply: ProbeReply,
        t1: u64,
        at_s: f64,
    },
}

struct Flight {
    at_s: f64,
    what: Arrival,
}

/// The direction a packet crosses the link in.
#[derive(Clone, Copy)]
enum Way {
    /// Host to relay (the link's forward leg).
    ToRelay,
    /// Relay to host (the backward leg).
    ToHost,
}

fn to_ns(s: f64) -> u64 {
    (HOST_START_NS + s * 1e9).round() as u64
}

fn to_s(ns: u64) -> f64 {
    (ns as f64 - HOST_START_NS) * 1e-9
}

/// Runs the real prober over `sc`'s link against `clock` for the whole run.
pub(super) fn probe(sc: &Scenario, clock: &RelayClock, rng: &mut Rng) -> Probing {
    let mut run = ProbeRun::new(sc, clock, rng);
    loop {
        let wake = run.wakeup();
        let arrival = run.first_arrival();
        let next = [Some(run.next_register), wake, arrival.map(|a| a.1)]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min);
        if next >= sc.secs {
            break;
        }
        run.now = run.now.max(next);
        if let Some((i, at)) = arrival
            && at <= next
        {
            run.land(i);
            continue;
        }
        if run.next_register <= next {
            run.register();
            continue;
        }
        run.send_due();
    }
    Probing {
        exchanges: run.exchanges,
        lost: run.lost,
        stats: *run.core.stats(),
        final_estimate: run.core.estimate(SESSION),
    }
}

/// The prober's edge and the relay in virtual time: the random streams of
/// each purpose, the packets in flight and what came of them so far.
struct ProbeRun<'a> {
    link: &'a LinkModel,
    clock: &'a RelayClock,
    timer_rng: Rng,
    fwd_rng: Rng,
    bwd_rng: Rng,
    read_rng: Rng,
    loss_rng: Rng,
    fwd_loss: LossState,
    bwd_loss: LossState,
    key: ProbeKey,
    core: ProberCore,
    route: Route,
    flights: Vec<Flight>,
    exchanges: Vec<Exchange>,
    lost: usize,
    /// Host time (s).
    now: f64,
    next_register: f64,
    register_nonce: u64,
    /// A probe reached the relay (its register timer slows down).
    probed: bool,
    due: Vec<ProbeDue>,
}

impl<'a> ProbeRun<'a> {
    fn new(sc: &'a Scenario, clock: &'a RelayClock, rng: &mut Rng) -> Self {
        let timer_rng = rng.fork(1);
        let fwd_rng = rng.fork(2);
        let bwd_rng = rng.fork(3);
        let read_rng = rng.fork(4);
        let loss_rng = rng.fork(5);
        let key = ProbeKey::new(&KEY).expect("a 32-byte key");
        let mut core = ProberCore::new(ProberConfig::default());
        core.set_registered(
            HashMap::from([(
                SESSION,
                Registration {
                    slot: 0,
                    machine_raw_id: 1,
                    probe_key: KEY,
                },
            )])
            .into(),
        );
        Self {
            link: &sc.link,
            clock,
            timer_rng,
            fwd_rng,
            bwd_rng,
            read_rng,
            loss_rng,
            fwd_loss: LossState::new(),
            bwd_loss: LossState::new(),
            key,
            core,
            route: Route::Udp(SocketAddr::from(([10, 0, 0, 2], 40_000))),
            flights: Vec::new(),
            exchanges: Vec::new(),
            lost: 0,
            now: 0.0,
            next_register: CONNECT_S,
            register_nonce: 0,
            probed: false,
            due: Vec::new(),
        }
    }

    /// When the prober's timer fires (s), late by up to the timer slack.
    fn wakeup(&mut self) -> Option<f64> {
        self.core.next_wakeup_ns().map(|ns| {
            if ns == 0 || to_s(ns) <= self.now {
                self.now
            } else {
                to_s(ns) + self.timer_rng.uniform(0.0, TIMER_SLACK_S)
            }
        })
    }

    /// The flight that lands first: its index and arrival time (s).
    fn first_arrival(&self) -> Option<(usize, f64)> {
        self.flights
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.at_s.total_cmp(&b.1.at_s))
            .map(|(i, f)| (i, f.at_s))
    }

    /// One leg: arrival time, or None when lost or partitioned.
    fn cross(&mut self, way: Way, from: f64) -> Option<f64> {
        let (leg, rng, loss) = match way {
            Way::ToRelay => (&self.link.forward, &mut self.fwd_rng, &mut self.fwd_loss),
            Way::ToHost => (&self.link.backward, &mut self.bwd_rng, &mut self.bwd_loss),
        };
        let to = from + leg.delay(rng) * 1e-9;
        let dropped = loss.lost(&self.link.loss, &mut self.loss_rng);
        let partitioned = self.link.partitions.iter().any(|p| from < p.1 && to >= p.0);
        (!dropped && !partitioned).then_some(to)
    }

    /// Hands flight `i` to the prober as the edge receives it.
    fn land(&mut self, i: usize) {
        let flight = self.flights.swap_remove(i);
        let t4 = self.clock.read_host(flight.at_s, &mut self.read_rng);
        match flight.what {
            Arrival::Register => {
                self.register_nonce += 1;
                let bytes = probe::seal(
                    &self.key,
                    SESSION,
                    Kind::Register(ProbeRegister {
                        nonce: self.register_nonce,
                    }),
                );
                self.core
                    .on_datagram(&bytes, self.route, to_ns(flight.at_s));
            }
            Arrival::Reply { reply, t1, at_s } => {
                let bytes = probe::seal(&self.key, SESSION, Kind::Reply(reply));
                self.core.on_datagram(&bytes, self.route, t4);
                self.exchanges.push(Exchange {
                    done_s: flight.at_s,
                    t: [t1, reply.t2_ns, reply.t3_ns, t4],
                    bmm: reply.boottime_minus_monotonic_ns,
                    at_s,
                });
                self.now += EDGE_TURNAROUND_S;
            }
        }
    }

    /// The relay's register timer (it sleeps while suspended).
    fn register(&mut self) {
        let at = self.next_register;
        self.next_register += if self.probed { 10.0 } else { 1.0 };
        if self.clock.asleep(at) {
            return;
        }
        match self.cross(Way::ToHost, at) {
            Some(to) => self.flights.push(Flight {
                at_s: to,
                what: Arrival::Register,
            }),
            None => self.lost += 1,
        }
    }

    /// The prober's wakeup: send what is due.
    fn send_due(&mut self) {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        self.core.poll(to_ns(self.now), &mut due);
        for d in &due {
            if let Some(prepared) = self.core.prepare_probe(d.session_id) {
                self.send_probe(d.session_id, prepared.nonce);
            }
        }
        self.due = due;
    }

    /// One probe through the link, the relay's reply and its way back.
    fn send_probe(&mut self, session_id: u64, nonce: u64) {
        let h1 = self.now;
        let t1 = self.clock.read_host(h1, &mut self.read_rng);
        self.core.probe_sent(session_id, nonce, t1);
        let Some(h2) = self.cross(Way::ToRelay, h1) else {
            self.lost += 1;
            return;
        };
        if self.clock.asleep(h2) {
            self.lost += 1;
            return;
        }
        self.probed = true;
        let hold = self.link.hold_ns + self.fwd_rng.exponential(self.link.hold_exp_ns);
        let h3 = h2 + hold * 1e-9;
        let t2 = self.clock.read(h2, &mut self.read_rng);
        let t3 = self.clock.read(h3, &mut self.read_rng).max(t2);
        let reply = ProbeReply {
            nonce,
            t2_ns: t2,
            t3_ns: t3,
            boottime_minus_monotonic_ns: self.clock.boottime_minus_monotonic(h2),
        };
        match self.cross(Way::ToHost, h3) {
            Some(h4) => self.flights.push(Flight {
                at_s: h4,
                what: Arrival::Reply {
                    reply,
                    t1,
                    at_s: h2,
                },
            }),
            None => self.lost += 1,
        }
    }
}
