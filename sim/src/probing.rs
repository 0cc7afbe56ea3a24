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
use super::link::{Leg, LossState};
use super::rng::Rng;
use super::scenarios::Scenario;
use tracesync_core::sync::{
    ProberConfig, ProberCore, ProberStats, Registration, Route, SyncEstimate,
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

fn to_ns(s: f64) -> u64 {
    (HOST_START_NS + s * 1e9).round() as u64
}

fn to_s(ns: u64) -> f64 {
    (ns as f64 - HOST_START_NS) * 1e-9
}

/// Runs the real prober over `sc`'s link against `clock` for the whole run.
pub(super) fn probe(sc: &Scenario, clock: &RelayClock, rng: &mut Rng) -> Probing {
    let mut timer_rng = rng.fork(1);
    let mut fwd_rng = rng.fork(2);
    let mut bwd_rng = rng.fork(3);
    let mut read_rng = rng.fork(4);
    let mut loss_rng = rng.fork(5);
    let (mut fwd_loss, mut bwd_loss) = (LossState::new(), LossState::new());
    let link = &sc.link;
    let partitioned = |a: f64, b: f64| link.partitions.iter().any(|p| a < p.1 && b >= p.0);
    // One leg: arrival time, or None when lost or partitioned.
    let mut cross = |leg: &Leg, rng: &mut Rng, loss: &mut LossState, from: f64| {
        let to = from + leg.delay(rng) * 1e-9;
        let dropped = loss.lost(&link.loss, &mut loss_rng);
        (!dropped && !partitioned(from, to)).then_some(to)
    };

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
    let route = Route::Udp(SocketAddr::from(([10, 0, 0, 2], 40_000)));

    let mut flights: Vec<Flight> = Vec::new();
    let mut exchanges = Vec::new();
    let mut lost = 0;
    let mut now = 0.0f64;
    let mut next_register = CONNECT_S;
    let mut register_nonce = 0u64;
    let mut probed = false;
    let mut due = Vec::new();
    loop {
        let wake = core.next_wakeup_ns().map(|ns| {
            if ns == 0 || to_s(ns) <= now {
                now
            } else {
                to_s(ns) + timer_rng.uniform(0.0, TIMER_SLACK_S)
            }
        });
        let arrival = flights
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.at_s.total_cmp(&b.1.at_s))
            .map(|(i, f)| (i, f.at_s));
        let next = [Some(next_register), wake, arrival.map(|a| a.1)]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min);
        if next >= sc.secs {
            break;
        }
        now = now.max(next);
        if let Some((i, at)) = arrival
            && at <= next
        {
            let flight = flights.swap_remove(i);
            let t4 = clock.read_host(flight.at_s, &mut read_rng);
            match flight.what {
                Arrival::Register => {
                    register_nonce += 1;
                    let bytes = probe::seal(
                        &key,
                        SESSION,
                        Kind::Register(ProbeRegister {
                            nonce: register_nonce,
                        }),
                    );
                    core.on_datagram(&bytes, route, to_ns(flight.at_s));
                }
                Arrival::Reply { reply, t1, at_s } => {
                    let bytes = probe::seal(&key, SESSION, Kind::Reply(reply));
                    core.on_datagram(&bytes, route, t4);
                    exchanges.push(Exchange {
                        done_s: flight.at_s,
                        t: [t1, reply.t2_ns, reply.t3_ns, t4],
                        bmm: reply.boottime_minus_monotonic_ns,
                        at_s,
                    });
                    now += EDGE_TURNAROUND_S;
                }
            }
            continue;
        }
        if next_register <= next {
            // The relay's register timer (it sleeps while suspended).
            let at = next_register;
            next_register += if probed { 10.0 } else { 1.0 };
            if !clock.asleep(at) {
                match cross(&link.backward, &mut bwd_rng, &mut bwd_loss, at) {
                    Some(to) => flights.push(Flight {
                        at_s: to,
                        what: Arrival::Register,
                    }),
                    None => lost += 1,
                }
            }
            continue;
        }
        // The prober's wakeup: send what is due.
        due.clear();
        core.poll(to_ns(now), &mut due);
        for d in &due {
            let Some(prepared) = core.prepare_probe(d.session_id) else {
                continue;
            };
            let h1 = now;
            let t1 = clock.read_host(h1, &mut read_rng);
            core.probe_sent(d.session_id, prepared.nonce, t1);
            let Some(h2) = cross(&link.forward, &mut fwd_rng, &mut fwd_loss, h1) else {
                lost += 1;
                continue;
            };
            if clock.asleep(h2) {
                lost += 1;
                continue;
            }
            probed = true;
            let hold = link.hold_ns + fwd_rng.exponential(link.hold_exp_ns);
            let h3 = h2 + hold * 1e-9;
            let t2 = clock.read(h2, &mut read_rng);
            let t3 = clock.read(h3, &mut read_rng).max(t2);
            let reply = ProbeReply {
                nonce: prepared.nonce,
                t2_ns: t2,
                t3_ns: t3,
                boottime_minus_monotonic_ns: clock.boottime_minus_monotonic(h2),
            };
            match cross(&link.backward, &mut bwd_rng, &mut bwd_loss, h3) {
                Some(h4) => flights.push(Flight {
                    at_s: h4,
                    what: Arrival::Reply {
                        reply,
                        t1,
                        at_s: h2,
                    },
                }),
                None => lost += 1,
            }
        }
    }
    Probing {
        exchanges,
        lost,
        stats: *core.stats(),
        final_estimate: core.estimate(SESSION),
    }
}
