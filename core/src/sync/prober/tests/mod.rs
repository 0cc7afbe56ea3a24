//! ProberCore: authentication, schedule, reply matching, what is ignored
//! and counted.

use super::*;
use crate::sync::SyncUpdate;
use crate::sync::sessions::{RouteKind, SessionSync, SyncState};
use std::net::SocketAddr;
use tracesync_protocol::probe::PROBE_KEY_BYTES;
use tracesync_protocol::relay::v1::{ProbeRegister, ProbeReply};

mod schedule;

const MS: u64 = 1_000_000;
const SESSION: u64 = 0xfeed_beef;
const KEY: [u8; PROBE_KEY_BYTES] = [7; PROBE_KEY_BYTES];

fn relay_addr() -> Route {
    Route::Udp(SocketAddr::from(([127, 0, 0, 1], 40_000)))
}

fn key() -> ProbeKey {
    ProbeKey::new(&KEY).expect("32 bytes")
}

fn core_with(config: ProberConfig) -> ProberCore {
    let mut core = ProberCore::new(config);
    core.set_registered(
        [(
            SESSION,
            Registration {
                slot: 2,
                machine_raw_id: 99,
                probe_key: KEY,
            },
        )]
        .into_iter()
        .collect(),
    );
    core
}

fn core_with_session() -> ProberCore {
    core_with(ProberConfig::default())
}

/// A relay of the session: signs with the session key, counts registers.
struct Relay {
    key: ProbeKey,
    register_nonce: u64,
}

impl Relay {
    fn new() -> Self {
        Self {
            key: key(),
            register_nonce: 0,
        }
    }

    fn register(&mut self) -> Vec<u8> {
        self.register_nonce += 1;
        probe::seal(
            &self.key,
            SESSION,
            Kind::Register(ProbeRegister {
                nonce: self.register_nonce,
            }),
        )
    }

    fn reply(&self, reply: ProbeReply) -> Vec<u8> {
        probe::seal(&self.key, SESSION, Kind::Reply(reply))
    }
}

/// Registers the session from `route` at `now`.
fn register(core: &mut ProberCore, relay: &mut Relay, route: Route, now: u64) -> bool {
    core.on_datagram(&relay.register(), route, now).0 == Some(SESSION)
}

/// Opens a probe the core produced (checking its MAC).
fn decode_probe(bytes: &[u8]) -> Probe {
    let datagram = probe::envelope(bytes).expect("decodes");
    assert_eq!(datagram.session_id, SESSION);
    match probe::open(&key(), &datagram).expect("signed with the session key") {
        Kind::Probe(probe) => probe,
        other => panic!("not a probe: {other:?}"),
    }
}

/// A sent probe: its nonce and t1.
#[derive(Clone, Copy, Debug)]
struct Sent {
    nonce: u64,
    t1: u64,
}

/// A reply from a relay `offset` ahead of the host, with `one_way` each way.
fn reply_with(sent: Sent, offset: u64, one_way: u64, suspend_offset: i64) -> (ProbeReply, u64) {
    let t2 = sent.t1 + one_way + offset;
    let t3 = t2 + 2_000;
    let t4 = sent.t1 + 2 * one_way + 2_000;
    let reply = ProbeReply {
        nonce: sent.nonce,
        t2_ns: t2,
        t3_ns: t3,
        boottime_minus_monotonic_ns: suspend_offset,
    };
    (reply, t4)
}

/// A reply from a relay 1 ms ahead of the host, 10 µs each way.
fn reply_to(sent: Sent, suspend_offset: i64) -> (ProbeReply, u64) {
    reply_with(sent, MS, 10_000, suspend_offset)
}

/// Polls at `now`, sends every due probe with t1 = now; returns them.
fn send_due(core: &mut ProberCore, now: u64) -> Vec<Sent> {
    let mut due = Vec::new();
    core.poll(now, &mut due);
    due.iter()
        .map(|d| {
            let prepared = core.prepare_probe(d.session_id).expect("active");
            assert_eq!(prepared.route, d.route);
            let probe = decode_probe(&prepared.bytes);
            assert_eq!(probe.nonce, prepared.nonce);
            core.probe_sent(d.session_id, prepared.nonce, now);
            Sent {
                nonce: prepared.nonce,
                t1: now,
            }
        })
        .collect()
}

/// Delivers a reply; the update if it was accepted.
fn deliver(core: &mut ProberCore, relay: &Relay, reply: ProbeReply, t4: u64) -> Option<SyncUpdate> {
    core.on_datagram(&relay.reply(reply), relay_addr(), t4).1
}

/// Answers every due probe at once for `until - now`, stepping by `step`.
fn run_answering(
    core: &mut ProberCore,
    relay: &Relay,
    mut now: u64,
    until: u64,
    step: u64,
    answer: impl Fn(Sent) -> (ProbeReply, u64),
) -> u64 {
    while now < until {
        for sent in send_due(core, now) {
            let (reply, t4) = answer(sent);
            deliver(core, relay, reply, t4);
        }
        now += step;
    }
    now
}

#[test]
fn unregistered_sessions_are_ignored_and_counted() {
    let mut core = ProberCore::new(ProberConfig::default());
    let mut relay = Relay::new();
    assert!(!register(&mut core, &mut relay, relay_addr(), 0));
    assert_eq!(core.stats().unknown_session, 1);
    assert_eq!(core.next_wakeup_ns(), None);
    assert!(send_due(&mut core, 0).is_empty());
}

#[test]
fn matching_reply_gives_an_update_with_the_sample() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 5 * MS);
    let sent = send_due(&mut core, 5 * MS).remove(0);
    let (reply, t4) = reply_to(sent, 0);
    let update = deliver(&mut core, &relay, reply, t4).expect("update");
    assert_eq!(update.slot, 2);
    assert_eq!(update.session_id, SESSION);
    assert_eq!(update.samples.len(), 1);
    assert_eq!(update.samples[0].machine_raw_id, 99);
    assert_eq!(update.samples[0].t1, sent.t1);
    assert_eq!(update.samples[0].t4, t4);
    assert_eq!(update.estimate.offset_ns, MS as i64);
    assert_eq!(update.estimate.rtt_ns, 20_000);
    assert_eq!(core.estimate(SESSION), Some(update.estimate));
    assert_eq!(core.stats().replies_accepted, 1);
}

#[test]
fn forged_replies_change_nothing() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let sent = send_due(&mut core, 0).remove(0);
    let (reply, t4) = reply_to(sent, 0);
    let genuine = deliver(&mut core, &relay, reply, t4).expect("update");
    let next = send_due(&mut core, 15 * MS).remove(0);
    // A forger who knows the session id and the nonce but not the key.
    let forger = Relay {
        key: ProbeKey::new(&[8; PROBE_KEY_BYTES]).expect("key"),
        register_nonce: 100,
    };
    let (forged, t4) = reply_with(next, 50 * MS, 10_000, 0);
    assert!(deliver(&mut core, &forger, forged, t4).is_none());
    // Unsigned and truncated MACs are forgeries too.
    let mut datagram = probe::envelope(&relay.reply(forged)).expect("decodes");
    datagram.mac = Default::default();
    use prost::Message;
    assert!(
        core.on_datagram(&datagram.encode_to_vec(), relay_addr(), t4)
            .1
            .is_none()
    );
    // A forged register cannot move the probes elsewhere.
    let elsewhere = Route::Udp(SocketAddr::from(([10, 0, 0, 9], 1)));
    let mut forger = forger;
    assert!(!register(&mut core, &mut forger, elsewhere, t4));
    assert_eq!(core.stats().bad_mac, 3);
    assert_eq!(core.stats().replies_accepted, 1);
    assert_eq!(core.estimate(SESSION), Some(genuine.estimate));
    // The genuine reply to that probe is still taken.
    let (reply, t4) = reply_to(next, 0);
    assert!(deliver(&mut core, &relay, reply, t4).is_some());
    let mut due = Vec::new();
    core.poll(30 * MS, &mut due);
    assert_eq!(due[0].route, relay_addr());
}

#[test]
fn replayed_replies_are_counted_and_ignored() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let sent = send_due(&mut core, 0).remove(0);
    let (reply, t4) = reply_to(sent, 0);
    let bytes = relay.reply(reply);
    let update = core
        .on_datagram(&bytes, relay_addr(), t4)
        .1
        .expect("update");
    // The same datagram again, later (a replay), even from elsewhere.
    let elsewhere = Route::Udp(SocketAddr::from(([10, 0, 0, 9], 1)));
    assert!(core.on_datagram(&bytes, elsewhere, t4 + 5 * MS).1.is_none());
    assert!(
        core.on_datagram(&bytes, relay_addr(), t4 + 9 * MS)
            .1
            .is_none()
    );
    assert_eq!(core.stats().replayed, 2);
    assert_eq!(core.stats().replies_accepted, 1);
    assert_eq!(core.estimate(SESSION), Some(update.estimate));
}

#[test]
fn replies_to_no_outstanding_probe_are_nonce_mismatches() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let sent = send_due(&mut core, 0).remove(0);
    let (reply, t4) = reply_to(sent, 0);
    // A nonce never sent (the relay's key, so authentic but stray).
    let stray = ProbeReply {
        nonce: sent.nonce + 10,
        ..reply
    };
    assert!(deliver(&mut core, &relay, stray, t4).is_none());
    // A probe prepared but not reported sent has no t1 yet.
    let prepared = core.prepare_probe(SESSION).expect("active");
    let early = ProbeReply {
        nonce: prepared.nonce,
        ..reply
    };
    assert!(deliver(&mut core, &relay, early, t4).is_none());
    assert_eq!(core.stats().nonce_mismatch, 2);
    assert_eq!(core.stats().replayed, 0);
    let reversed = ProbeReply {
        t3_ns: reply.t2_ns - 1,
        ..reply
    };
    assert!(deliver(&mut core, &relay, reversed, t4).is_none());
    assert_eq!(core.stats().replies_rejected, 1);
    for garbage in [&[0xff, 0xff, 0xff][..], &[], &[0u8; 300][..]] {
        assert!(core.on_datagram(garbage, relay_addr(), t4).1.is_none());
    }
    // A Probe reflected back at the daemon is not part of the protocol.
    assert!(
        core.on_datagram(&prepared.bytes, relay_addr(), t4)
            .1
            .is_none()
    );
    let stats = core.stats();
    assert_eq!(
        stats.malformed, 3,
        "oversized + probe at daemon + undecodable"
    );
    assert_eq!(stats.replies_accepted, 0);
}

#[test]
fn replayed_registers_do_not_move_the_session() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    let first = relay.register();
    assert_eq!(core.on_datagram(&first, relay_addr(), 0).0, Some(SESSION));
    // Someone on the path replays the register from their own address.
    let attacker = Route::Udp(SocketAddr::from(([10, 0, 0, 66], 7411)));
    assert_eq!(core.on_datagram(&first, attacker, MS).0, None);
    assert_eq!(core.stats().registers_replayed, 1);
    let mut due = Vec::new();
    core.poll(MS, &mut due);
    assert_eq!(due[0].route, relay_addr());
    assert_eq!(core.stats().bursts, 1);
}

#[test]
fn unregistering_stops_probes() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let sent = send_due(&mut core, 0).remove(0);
    core.set_registered(Registered::default());
    // Its relay's last reply, in flight when the session ended: counted
    // apart, not as a stranger's datagram.
    let (reply, t4) = reply_to(sent, 0);
    assert!(deliver(&mut core, &relay, reply, t4).is_none());
    assert_eq!(core.stats().after_end, 1);
    assert_eq!(core.stats().unknown_session, 0);
    // Naming the ended session without its key is still a stranger.
    let forger = Relay {
        key: ProbeKey::new(&[8; PROBE_KEY_BYTES]).expect("32 bytes"),
        register_nonce: 0,
    };
    assert!(deliver(&mut core, &forger, reply, t4).is_none());
    assert_eq!(core.stats().after_end, 1);
    assert_eq!(core.stats().unknown_session, 1);
    assert!(send_due(&mut core, 10_000 * MS).is_empty());
    assert!(core.prepare_probe(SESSION).is_none());
    // Past the probe timeout the ended session is forgotten.
    assert!(10_000 * MS > core.config().probe_timeout_ns);
    assert!(deliver(&mut core, &relay, reply, 10_000 * MS).is_none());
    assert_eq!(core.stats().after_end, 1);
    assert_eq!(core.stats().unknown_session, 2);
}

#[test]
fn outstanding_table_stays_bounded() {
    let mut core = core_with(ProberConfig {
        max_outstanding: 4,
        ..ProberConfig::default()
    });
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let sent: Vec<Sent> = (0..10)
        .map(|i| {
            let prepared = core.prepare_probe(SESSION).expect("active");
            core.probe_sent(SESSION, prepared.nonce, i * MS);
            Sent {
                nonce: prepared.nonce,
                t1: i * MS,
            }
        })
        .collect();
    assert_eq!(core.stats().outstanding_evicted, 6);
    let (oldest, t4) = reply_to(sent[0], 0);
    assert!(deliver(&mut core, &relay, oldest, t4).is_none());
    assert_eq!(core.stats().nonce_mismatch, 1);
    let (newest, t4) = reply_to(sent[9], 0);
    assert!(deliver(&mut core, &relay, newest, t4).is_some());
}

fn session_view(core: &ProberCore) -> SessionSync {
    let sessions: Vec<SessionSync> = core.stats().sessions().collect();
    assert_eq!(sessions.len(), 1);
    sessions[0]
}

#[test]
fn unanswered_probes_time_out_and_late_replies_are_ignored() {
    let mut core = core_with(ProberConfig {
        probe_timeout_ns: 100 * MS,
        ..ProberConfig::default()
    });
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    // The first two burst probes go unanswered.
    let first = send_due(&mut core, 0).remove(0);
    send_due(&mut core, 15 * MS);
    send_due(&mut core, 99 * MS);
    assert_eq!(core.stats().probe_timeouts, 0);
    send_due(&mut core, 100 * MS);
    assert_eq!(
        core.stats().probe_timeouts,
        1,
        "the first, at exactly 100 ms"
    );
    send_due(&mut core, 115 * MS);
    assert_eq!(core.stats().probe_timeouts, 2);
    assert_eq!(session_view(&core).counters.timeouts, 2);
    // Its reply arrives after all: no sample.
    let (late, t4) = reply_to(first, 0);
    assert!(deliver(&mut core, &relay, late, 200 * MS + t4).is_none());
    assert_eq!(core.stats().nonce_mismatch, 1);
    assert_eq!(session_view(&core).counters.nonce_mismatch, 1);
    assert_eq!(core.stats().replies_accepted, 0);
}

#[test]
fn the_view_shows_each_sessions_state_route_rate_and_counters() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let view = session_view(&core);
    assert_eq!(view.session_id, SESSION);
    assert_eq!(view.machine_raw_id, 99);
    assert_eq!(view.state, SyncState::Unsynced);
    assert_eq!(view.route, Some(RouteKind::Udp));
    // A burst: one probe per 15 ms.
    assert!((view.probe_rate_hz - 1e9 / (15.0 * MS as f64)).abs() < 1e-6);
    // A forged datagram naming the session counts against it.
    let forged = probe::seal(
        &ProbeKey::new(&[1; PROBE_KEY_BYTES]).expect("key"),
        SESSION,
        Kind::Reply(ProbeReply::default()),
    );
    core.on_datagram(&forged, relay_addr(), MS);
    let now = run_answering(&mut core, &relay, 0, 2_000 * MS, MS, |s| reply_to(s, 0));
    let view = session_view(&core);
    assert_eq!(view.state, SyncState::Steady);
    // Warming up at 10 Hz with one follow-up each: 20 probes per second.
    assert!(
        (view.probe_rate_hz - 20.0).abs() < 1e-9,
        "{}",
        view.probe_rate_hz
    );
    assert!(view.estimate.is_some());
    assert!(view.last_sample_host_ns.is_some_and(|t| t < now));
    let c = view.counters;
    assert_eq!(c.bad_mac, 1);
    assert_eq!(c.bursts, 1);
    assert!(c.probes_sent >= 8 + 18 * 2, "{c:?}");
    assert_eq!(c.replies, c.probes_sent);
    assert_eq!(c.probes_sent, core.stats().probes_sent);
    // Over TCP the route says so; a closed route probes at 0 Hz.
    register(&mut core, &mut relay, Route::Tcp(1), now);
    let view = session_view(&core);
    assert_eq!(
        (view.route, view.state),
        (Some(RouteKind::Tcp), SyncState::Bursting)
    );
    core.route_closed(Route::Tcp(1));
    let view = session_view(&core);
    assert_eq!((view.route, view.probe_rate_hz), (None, 0.0));
}
