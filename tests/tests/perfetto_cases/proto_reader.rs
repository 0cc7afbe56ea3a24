//! Remote machines: the vectors of Perfetto's proto reader
//! (`proto_trace_reader_unittest.cc`: CalculateClockOffset*), of the
//! tracing service (`tracing_service_impl_unittest.cc`:
//! RelayEndpointClockSync) and of the remote-machine clock tracker tests
//! (ClockOffset, RemoteNoClockOffset, NonDefaultTraceTimeClock), each as a
//! relay-recorded trace: the host's packets, then machine 7's with a
//! RemoteClockSync giving the offset.

use tracesync_protocol::perfetto::TracePacket;
use tracesync_tests::build::{SnapshotClockSpec as C, clock_snapshot_ext};
use tracesync_tests::cases::{
    Case, Merged, Round, instant, on, remote_sync, snap, snap_primary, track,
};

use super::common::*;

/// Host snapshot, then machine 7: the sync, its snapshots, its events.
fn relay(
    origin: &'static str,
    host: TracePacket,
    sync: Option<TracePacket>,
    remote: Vec<TracePacket>,
) -> Merged {
    let mut p = vec![host, track(1, 1)];
    if let Some(s) = sync {
        p.push(on(7, s));
    }
    p.push(on(7, track(2, 2)));
    p.extend(remote.into_iter().map(|x| on(7, x)));
    merged(Case::new(origin).file("relay.pb", &p))
}

fn ev(clock: u32, value: u64) -> TracePacket {
    instant(2, 2, Some(clock), value, &format!("{clock}:{value}"))
}

fn expect(m: &Merged, clock: u32, pairs: &[(u64, i64)]) {
    for &(v, want) in pairs {
        let s = m.slice(&format!("{clock}:{v}"));
        assert_eq!((s.ts, s.raw_id), (want, 7), "{}: {clock}:{v}", m.origin);
    }
}

/// ClockOffset's snapshots of the remote machine (s1 = (seq 2, 64)).
fn tv11_snapshots(with_rt30: bool) -> Vec<TracePacket> {
    let mut p = vec![
        snap(&[(RT, 10), (BT, 10010)]),
        snap(&[(RT, 20), (BT, 20220)]),
    ];
    if with_rt30 {
        p.push(snap(&[(RT, 30), (BT, 30030)]));
    }
    p.push(snap(&[(MONO, 1000), (BT, 100000)]));
    p.push(clock_snapshot_ext(
        2,
        &[C::ns(MONO, 2000), C::ns(64, 1200)],
        None,
    ));
    p
}

#[test]
fn clock_offset() {
    // Offset client - host = -10000: a round {client BT c, host BT c + 10000}.
    let round: Round = (&[(BT, 1_000_000)], &[(BT, 1_010_000)]);
    let rt = [
        (0, 20000),
        (1, 20001),
        (9, 20009),
        (10, 20010),
        (11, 20011),
        (19, 20019),
        (20, 30220),
        (21, 30221),
        (29, 30229),
        (30, 40030),
        (40, 40040),
    ];
    let mono = [
        (0, 109000),
        (999, 109999),
        (1000, 110000),
        (1_000_000, 1_109_000),
    ];
    let mut remote = tv11_snapshots(true);
    remote.extend(rt.iter().map(|&(v, _)| ev(RT, v)));
    remote.extend(mono.iter().map(|&(v, _)| ev(MONO, v)));
    remote.push(instant(2, 2, Some(64), 1100, "s1"));
    let m = relay(
        "ClockTrackerTest.ClockOffset",
        snap(&[(BT, 1)]),
        Some(remote_sync(&[round, round])),
        remote,
    );
    expect(&m, RT, &rt);
    expect(&m, MONO, &mono);
    assert_eq!(m.slice("s1").ts, 110900);
}

#[test]
fn remote_no_clock_offset() {
    let mut remote = tv11_snapshots(false);
    remote.push(instant(2, 2, Some(64), 1100, "s1"));
    remote.push(ev(MONO, 1000));
    let m = relay(
        "ClockTrackerTest.RemoteNoClockOffset",
        snap(&[(BT, 1)]),
        None,
        remote,
    );
    assert_eq!(m.slice("s1").ts, 100900);
    expect(&m, MONO, &[(1000, 100000)]);
}

#[test]
fn non_default_trace_time_clock() {
    // Trace time is the host's MONOTONIC; the sync relates MONOTONIC
    // (offset -2000) and BOOTTIME (-10000): the trace clock's edge decides.
    // The client clocks of the rounds follow the remote's own snapshots
    // (MONOTONIC = BOOTTIME - 99000) and come after them.
    let round: Round = (
        &[(BT, 2_000_000), (MONO, 1_901_000)],
        &[(BT, 2_010_000), (MONO, 1_903_000)],
    );
    let mut remote = vec![
        snap(&[(RT, 10), (BT, 10010)]),
        snap(&[(MONO, 1000), (BT, 100000)]),
        clock_snapshot_ext(2, &[C::ns(MONO, 2000), C::ns(64, 1200)], None),
        remote_sync(&[round, round]),
    ];
    let mono = [(0, 2000), (999, 2999), (1000, 3000), (1_000_000, 1_002_000)];
    remote.extend(mono.iter().map(|&(v, _)| ev(MONO, v)));
    remote.push(instant(2, 2, Some(64), 1100, "s1"));
    // RT 9, 10, 20 -> -86991, -86990, -86980: before trace time, dropped.
    remote.extend([9, 10, 20].map(|v| ev(RT, v)));
    let m = relay(
        "ClockTrackerTest.NonDefaultTraceTimeClock",
        snap_primary(&[(MONO, 0), (BT, 0)], Some(MONO)),
        None,
        remote,
    );
    expect(&m, MONO, &mono);
    assert_eq!(m.slice("s1").ts, 3900);
    assert_eq!(m.stat("trace_sorter_negative_timestamp_dropped"), 3);
}

/// A relay file whose sync has `rounds`, and machine 7 events at client
/// BOOTTIME `at`: the offset Perfetto computed is `host - client`.
fn offset_case(origin: &'static str, rounds: &[Round], at: u64) -> Merged {
    relay(
        origin,
        snap(&[(BT, 1)]),
        Some(remote_sync(rounds)),
        vec![snap(&[(BT, at), (MONO, at)]), ev(BT, at)],
    )
}

#[test]
fn calculate_clock_offset() {
    let e0: Round = (&[(BT, 10000), (RT, 25000)], &[(BT, 120000), (RT, 135000)]);
    let e1: Round = (&[(BT, 20000), (RT, 35000)], &[(BT, 140000), (RT, 150000)]);
    let m = offset_case(
        "ProtoTraceReaderTest.CalculateClockOffset",
        &[e0, e1],
        30000,
    );
    expect(&m, BT, &[(30000, 30000 + 107500)]);
}

#[test]
fn calculate_clock_offset_above_threshold() {
    let e = 30 * S;
    let e0: Round = (&[(BT, 10000)], &[(BT, 120000)]);
    let far: Round = (&[(BT, 20000 + e)], &[(BT, 140000 + e)]);
    // No offset: the same-domain BOOTTIME overlay.
    let m = offset_case(
        "ProtoTraceReaderTest.CalculateClockOffset_AboveThreshold",
        &[e0, far],
        30000,
    );
    expect(&m, BT, &[(30000, 30000)]);
}

#[test]
fn calculate_clock_offset_multi_rounds() {
    let e = 30 * S;
    let rounds: [Round; 4] = [
        (&[(BT, 10000)], &[(BT, 120000)]),
        (&[(BT, 20000)], &[(BT, 140000)]),
        (&[(BT, 30000 + e)], &[(BT, 160000 + e)]),
        (&[(BT, 45000 + e)], &[(BT, 170000 + e)]),
    ];
    let m = offset_case(
        "ProtoTraceReaderTest.CalculateClockOffset_MultiRounds",
        &rounds,
        50000 + e,
    );
    expect(&m, BT, &[(50000 + e, (50000 + e + 114375) as i64)]);
}

#[test]
fn remote_clock_sync_incomplete() {
    let rounds: [Round; 2] = [(&[(BT, 10000)], &[(BT, 120000)]), (&[(BT, 25000)], &[])];
    let m = offset_case(
        "ProtoTraceReaderTest.RemoteClockSync_Incomplete",
        &rounds,
        30000,
    );
    expect(&m, BT, &[(30000, 30000)]);
}

#[test]
fn relay_endpoint_clock_sync() {
    // PING client 100 / host 1000, UPDATE client 300 / host 1200: -800.
    let rounds: [Round; 2] = [(&[(BT, 100)], &[(BT, 1000)]), (&[(BT, 300)], &[(BT, 1200)])];
    let m = offset_case(
        "TracingServiceImplTest.RelayEndpointClockSync",
        &rounds,
        400,
    );
    expect(&m, BT, &[(400, 1200)]);
}

#[test]
fn remote_clock_sync_valid() {
    // Offsets (10000 + 25000)/2 - 120000 and 25000 - (120000 + 135000)/2:
    // both -102500, so client BOOTTIME 0 is trace time 102500.
    let rounds: [Round; 2] = [
        (&[(BT, 10000)], &[(BT, 120000)]),
        (&[(BT, 25000)], &[(BT, 135000)]),
    ];
    let m = offset_case("ProtoTraceReaderTest.RemoteClockSync_Valid", &rounds, 30000);
    expect(&m, BT, &[(30000, 30000 + 102500)]);
}

#[test]
fn remote_clock_sync_per_machine_offsets() {
    // Two remote machines, each with its own sync (client bases 10000 and
    // 50000 against the same host times): offsets -102500 and -62500, kept
    // apart.
    let sync = |base: u64| {
        let rounds: [Round; 2] = [
            (&[(BT, base)], &[(BT, 120000)]),
            (&[(BT, base + 15000)], &[(BT, 135000)]),
        ];
        remote_sync(&rounds)
    };
    let mut p = vec![snap(&[(BT, 1)]), track(1, 1)];
    p.push(on(7, sync(10000)));
    p.push(on(8, sync(50000)));
    for (machine, seq, at) in [(7, 2, 30000), (8, 3, 80000)] {
        p.push(on(machine, track(seq, seq as u64)));
        p.push(on(machine, snap(&[(BT, at), (MONO, at)])));
        p.push(on(
            machine,
            instant(seq, seq as u64, Some(BT), at, &format!("m{machine}")),
        ));
    }
    let m = merged(
        Case::new("ProtoTraceReaderTest.RemoteClockSync_PerMachineOffsets").file("relay.pb", &p),
    );
    let (a, b) = (m.slice("m7"), m.slice("m8"));
    assert_eq!((a.ts, a.raw_id), (30000 + 102500, 7));
    assert_eq!((b.ts, b.raw_id), (80000 + 62500, 8));
}
