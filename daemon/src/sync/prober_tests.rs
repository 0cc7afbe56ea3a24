//! ProberCore: schedule, reply matching, what is ignored and counted.

use super::*;

const MS: u64 = 1_000_000;
const SESSION: u64 = 0xfeed_beef;

fn relay_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 40_000))
}

fn core_with_session() -> ProberCore {
    let mut core = ProberCore::new(ProberConfig::default());
    core.set_registered(HashMap::from([(
        SESSION,
        Registration {
            slot: 2,
            machine_raw_id: 99,
        },
    )]));
    core
}

fn encode(body: Body) -> Vec<u8> {
    ProbeDatagram { body: Some(body) }.encode_to_vec()
}

fn register_datagram(session_id: u64) -> Vec<u8> {
    encode(Body::Register(
        tracesync_protocol::relay::v1::ProbeRegister { session_id },
    ))
}

/// Decodes a Probe the core produced.
fn decode_probe(bytes: &[u8]) -> Probe {
    match ProbeDatagram::decode(bytes).expect("decodes").body {
        Some(Body::Probe(probe)) => probe,
        other => panic!("not a probe: {other:?}"),
    }
}

/// A reply from a relay 1 ms ahead of the host, 10 µs each way.
fn reply_to(probe: &Probe, suspend_offset: i64) -> (ProbeReply, u64) {
    let t2 = probe.t1_ns + 10_000 + MS;
    let t3 = t2 + 2_000;
    let t4 = probe.t1_ns + 22_000;
    let reply = ProbeReply {
        session_id: probe.session_id,
        probe_id: probe.probe_id,
        t1_ns: probe.t1_ns,
        t2_ns: t2,
        t3_ns: t3,
        boottime_minus_monotonic_ns: suspend_offset,
    };
    (reply, t4)
}

/// Polls at `now`, sends every due probe with t1 = now; returns them.
fn send_due(core: &mut ProberCore, now: u64) -> Vec<Probe> {
    let mut due = Vec::new();
    core.poll(now, &mut due);
    due.iter()
        .map(|d| {
            assert_eq!(d.addr, relay_addr());
            decode_probe(&core.probe_datagram(d.session_id, now).expect("active"))
        })
        .collect()
}

#[test]
fn unregistered_sessions_are_ignored_and_counted() {
    let mut core = ProberCore::new(ProberConfig::default());
    assert!(
        core.on_datagram(&register_datagram(SESSION), relay_addr(), 0)
            .is_none()
    );
    assert_eq!(core.stats().unknown_session, 1);
    assert_eq!(core.next_wakeup_ns(), None);
    assert!(send_due(&mut core, 0).is_empty());
}

#[test]
fn burst_then_steady_schedule() {
    let mut core = core_with_session();
    let start = 1_000 * MS;
    core.on_datagram(&register_datagram(SESSION), relay_addr(), start);
    let mut sent_at = Vec::new();
    let mut now = start;
    while now < start + 1_000 * MS {
        if !send_due(&mut core, now).is_empty() {
            sent_at.push(now - start);
        }
        now += MS;
    }
    let burst: Vec<u64> = (0..8).map(|i| i * 20 * MS).collect();
    assert_eq!(&sent_at[..8], &burst[..]);
    assert_eq!(sent_at[8], 140 * MS + 250 * MS);
    assert_eq!(sent_at[9], 140 * MS + 500 * MS);
    // A second register (address refresh) does not restart the burst.
    let moved = SocketAddr::from(([127, 0, 0, 1], 40_001));
    assert!(core.on_register(SESSION, moved, now));
    let mut due = Vec::new();
    core.poll(now, &mut due);
    assert!(due.is_empty());
}

#[test]
fn matching_reply_gives_an_update_with_the_sample() {
    let mut core = core_with_session();
    core.on_register(SESSION, relay_addr(), 5 * MS);
    let probe = send_due(&mut core, 5 * MS).remove(0);
    let (reply, t4) = reply_to(&probe, 0);
    let update = core
        .on_datagram(&encode(Body::Reply(reply)), relay_addr(), t4)
        .expect("update");
    assert_eq!(update.slot, 2);
    assert_eq!(update.session_id, SESSION);
    assert_eq!(update.samples.len(), 1);
    assert_eq!(update.samples[0].machine_raw_id, 99);
    assert_eq!(update.samples[0].t1, probe.t1_ns);
    assert_eq!(update.samples[0].t4, t4);
    assert_eq!(update.estimate.offset_ns, MS as i64);
    assert_eq!(update.estimate.rtt_ns, 20_000);
    assert_eq!(core.estimate(SESSION), Some(update.estimate));
    // The same reply again: the probe is no longer outstanding.
    assert!(core.on_reply(&reply, t4).is_none());
    assert_eq!(core.stats().unknown_probe, 1);
    assert_eq!(core.stats().replies_accepted, 1);
}

#[test]
fn mismatching_replies_are_ignored_and_counted() {
    let mut core = core_with_session();
    core.on_register(SESSION, relay_addr(), 0);
    let probe = send_due(&mut core, 0).remove(0);
    let (reply, t4) = reply_to(&probe, 0);
    let other_session = ProbeReply {
        session_id: SESSION + 1,
        ..reply
    };
    assert!(core.on_reply(&other_session, t4).is_none());
    let wrong_t1 = ProbeReply {
        t1_ns: reply.t1_ns + 1,
        ..reply
    };
    assert!(core.on_reply(&wrong_t1, t4).is_none());
    let unknown_id = ProbeReply {
        probe_id: 12_345,
        ..reply
    };
    assert!(core.on_reply(&unknown_id, t4).is_none());
    let reversed = ProbeReply {
        t3_ns: reply.t2_ns - 1,
        ..reply
    };
    assert!(core.on_reply(&reversed, t4).is_none());
    for garbage in [&[0xff, 0xff, 0xff][..], &[], &[0u8; 300][..]] {
        assert!(core.on_datagram(garbage, relay_addr(), t4).is_none());
    }
    // A Probe arriving at the daemon is not part of the protocol.
    assert!(
        core.on_datagram(&encode(Body::Probe(probe)), relay_addr(), t4)
            .is_none()
    );
    let stats = core.stats();
    assert_eq!(stats.wrong_session, 1);
    assert_eq!(stats.unknown_probe, 2);
    assert_eq!(stats.replies_rejected, 1);
    assert_eq!(stats.malformed, 4);
    assert_eq!(stats.replies_accepted, 0);
}

#[test]
fn new_epoch_restarts_the_burst() {
    let mut core = core_with_session();
    let mut now = 0;
    core.on_register(SESSION, relay_addr(), now);
    // Run well past the burst.
    while now < 2_000 * MS {
        for probe in send_due(&mut core, now) {
            let (reply, t4) = reply_to(&probe, 7);
            core.on_reply(&reply, t4).expect("update");
        }
        now += 10 * MS;
    }
    let mut due = Vec::new();
    core.poll(now, &mut due);
    let probe = decode_probe(&core.probe_datagram(SESSION, now).expect("active"));
    let (reply, t4) = reply_to(&probe, 7 + 30_000 * MS as i64);
    let update = core.on_reply(&reply, t4).expect("update");
    assert_eq!(update.estimate.epoch, 1);
    assert_eq!(core.stats().new_epochs, 1);
    assert_eq!(core.next_wakeup_ns(), Some(t4), "burst starts at once");
    let mut burst = 0;
    let mut at = t4;
    while at < t4 + 200 * MS {
        burst += send_due(&mut core, at).len();
        at += MS;
    }
    assert_eq!(burst, 8);
}

#[test]
fn unregistering_stops_probes() {
    let mut core = core_with_session();
    core.on_register(SESSION, relay_addr(), 0);
    let probe = send_due(&mut core, 0).remove(0);
    core.set_registered(HashMap::new());
    assert!(send_due(&mut core, 10_000 * MS).is_empty());
    assert!(core.probe_datagram(SESSION, 0).is_none());
    let (reply, t4) = reply_to(&probe, 0);
    assert!(core.on_reply(&reply, t4).is_none());
    assert_eq!(core.stats().unknown_session, 1);
}

#[test]
fn outstanding_table_stays_bounded() {
    let mut core = ProberCore::new(ProberConfig {
        max_outstanding: 4,
        ..ProberConfig::default()
    });
    core.set_registered(HashMap::from([(SESSION, Registration::default())]));
    core.on_register(SESSION, relay_addr(), 0);
    let probes: Vec<Probe> = (0..10)
        .map(|i| decode_probe(&core.probe_datagram(SESSION, i * MS).expect("active")))
        .collect();
    assert_eq!(core.stats().outstanding_evicted, 6);
    let (oldest, t4) = reply_to(&probes[0], 0);
    assert!(core.on_reply(&oldest, t4).is_none());
    let (newest, t4) = reply_to(&probes[9], 0);
    assert!(core.on_reply(&newest, t4).is_some());
}
