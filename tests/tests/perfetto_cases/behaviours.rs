//! The behaviours of issue 15 where tracesync disagreed with Perfetto
//! (the manifest cases of behaviours 1, 3 and 7 are with their Perfetto
//! tests in the other modules), each from the Perfetto source it follows:
//! `proto_trace_reader.cc` at 02603952ce0ca9a1f4728ec3153663e8b4b05e06
//! (ParseRemoteClockSync, TimestampTokenizeAndPushToSorter,
//! CreateRemoteMachineReader) and `tracing_service_impl.cc`
//! (MaybeEmitServiceEvents: service events carry BOOTTIME timestamps).

use tracesync_protocol::perfetto::TracePacket;
use tracesync_protocol::perfetto::trace_packet::Data;
use tracesync_tests::cases::{
    Case, Merged, Round, instant, on, raw, remote_sync, service_event, slice, snap, snap_primary,
    track,
};

use super::common::*;

/// Behaviour 2: with MONOTONIC as primary trace clock, a service event (no
/// clock id) is still on BOOTTIME, and the output names BOOTTIME for it.
#[test]
fn service_events_are_boottime() {
    // MONOTONIC = BOOTTIME - 10 s; trace time is MONOTONIC.
    let packets = vec![
        raw(&snap_primary(&[(BT, 20 * S), (MONO, 10 * S)], Some(MONO))),
        service_event(21 * S),
        raw(&track(2, 1)),
        raw(&instant(2, 1, None, 11 * S, "mono_default")),
    ];
    let m = Case::new("tracing_service_impl.cc MaybeEmitServiceEvents")
        .raw_file("t.pb", &packets)
        .merge()
        .ok();
    let ev = m.records_of("service_event");
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["ts"], 11 * S, "BOOTTIME 21 s is MONOTONIC 11 s");
    assert_eq!(ev[0]["clock"], BT);
    // The default-clock slice stays on MONOTONIC.
    assert_eq!(m.slice("mono_default").ts, (11 * S) as i64);
    let stamped: Vec<Option<u32>> = m
        .copied
        .iter()
        .filter(|p| p.timestamp == Some(21 * S))
        .map(|p| p.timestamp_clock_id)
        .collect();
    assert_eq!(stamped, vec![Some(BT)], "the output names BOOTTIME");
    m.judge();
    remerge_same(&m);
}

/// A relay file: host snapshot, then machine 7 packets and syncs in order.
fn relay(origin: &'static str, remote: Vec<TracePacket>) -> Merged {
    let mut p = vec![snap(&[(BT, S)]), track(1, 1)];
    p.push(on(7, track(2, 2)));
    p.extend(remote.into_iter().map(|x| on(7, x)));
    merged(Case::new(origin).file("relay.pb", &p))
}

fn ev(value: u64, name: &str) -> TracePacket {
    instant(2, 2, Some(BT), value, name)
}

/// Behaviour 4: sync #1, a packet, sync #2: the packet uses #1 (Perfetto
/// converts each packet with the edges read so far), although #2's anchor
/// is nearer its value.
#[test]
fn remote_syncs_apply_in_stream_order() {
    let sync = |client: u64, host: u64| {
        let r: Round = (&[(BT, client)], &[(BT, host)]);
        remote_sync(&[r, r])
    };
    let m = relay(
        "ProtoTraceReader::ParseRemoteClockSync (stream order)",
        vec![
            // #1: offset client - host = 40 s, anchored at client 50 s.
            sync(50 * S, 10 * S),
            ev(60 * S, "between"),
            // #2: offset 41 s, anchored at client 59 s (nearer to 60 s).
            sync(59 * S, 18 * S),
            ev(70 * S, "after"),
        ],
    );
    assert_eq!(
        m.slice("between").ts,
        (20 * S) as i64,
        "sync #1: 60 s - 40 s"
    );
    assert_eq!(m.slice("after").ts, (29 * S) as i64, "sync #2: 70 s - 41 s");
}

/// Behaviour 5: a RemoteClockSync relating REALTIME only still relates the
/// machines (every clock present on both sides gets an edge).
#[test]
fn realtime_only_remote_sync_relates_the_machines() {
    let mut host = vec![snap(&[(BT, S), (RT, WALL + S)]), track(1, 1)];
    host.extend(slice(1, 3, Some(BT), 2 * S, 2 * S + 10, "host_slice"));
    let r: Round = (&[(RT, WALL + 100 * S)], &[(RT, WALL + 3 * S)]);
    let remote = [
        on(7, snap(&[(BT, 500 * S), (RT, WALL + 100 * S)])),
        on(7, remote_sync(&[r, r])),
        on(7, track(2, 2)),
        on(7, ev(501 * S, "vm")),
    ];
    host.extend(remote);
    let m = merged(
        Case::new("ProtoTraceReader::ParseRemoteClockSync (REALTIME)").file("relay.pb", &host),
    );
    // vm BOOTTIME 501 s = REALTIME +101 s = host REALTIME +4 s = host BOOTTIME 4 s.
    assert_eq!(m.slice("vm").ts, (4 * S) as i64);
    assert_eq!(m.stat("clock_sync_unrelatable_clock_domains"), 0);
}

/// Behaviour 6: a remote packet with no clock id, no sequence default and
/// no default clock on its machine (the host had none when the machine was
/// first seen) is taken as trace time, not shifted.
#[test]
fn remote_packet_without_any_clock_is_trace_time() {
    let r: Round = (&[(BT, 50 * S)], &[(BT, 2 * S)]);
    let p = vec![
        track(1, 1),
        on(7, remote_sync(&[r, r])),
        on(7, track(2, 2)),
        on(7, instant(2, 2, None, 3 * S, "as_is")),
        on(7, instant(2, 2, Some(BT), 50 * S, "shifted")),
    ];
    let m = merged(
        Case::new("TimestampTokenizeAndPushToSorter: no clock, no default").file("relay.pb", &p),
    );
    assert_eq!(m.slice("as_is").ts, (3 * S) as i64);
    assert_eq!(m.slice("shifted").ts, (2 * S) as i64);
    assert_eq!(m.stat("remote_packets_as_trace_time"), 1);
    let stamped = m
        .copied
        .iter()
        .find(|p| p.timestamp == Some(3 * S))
        .and_then(|p| p.timestamp_clock_id);
    assert_eq!(stamped, None, "no clock id is added to it");
}

/// ... while with a host default clock in place first, the machine inherits
/// it (CreateRemoteMachineReader copies the parent's default).
#[test]
fn remote_packet_inherits_the_host_default() {
    let r: Round = (&[(BT, 50 * S)], &[(BT, 2 * S)]);
    let m = relay(
        "CreateRemoteMachineReader: SetTraceDefaultClock(parent)",
        vec![
            remote_sync(&[r, r]),
            instant(2, 2, None, 51 * S, "inherited"),
        ],
    );
    assert_eq!(m.slice("inherited").ts, (3 * S) as i64);
}

/// Behaviour 8: REALTIME trace time with a relay-recorded remote machine:
/// the sync points relate both BOOTTIME (what v52 subtracts) and REALTIME
/// (the edge the qualified-edge graph of v58+ crosses), each with the
/// offset that places the packet where the jsonl says.
#[test]
fn sync_points_relate_the_trace_time_clock() {
    let r: Round = (&[(BT, 50 * S)], &[(BT, 2 * S)]);
    let mut p = vec![snap(&[(BT, S), (RT, WALL + S)]), track(1, 1)];
    p.extend(slice(
        1,
        3,
        Some(BT),
        1_100_000_000,
        1_200_000_000,
        "host_slice",
    ));
    p.extend([
        on(7, snap(&[(BT, 50 * S), (RT, WALL + 60 * S)])),
        on(7, remote_sync(&[r, r])),
        on(7, track(2, 2)),
        on(7, ev(50_100_000_000, "vm_slice")),
    ]);
    let m = merged(
        Case::new("test_machines_remote_clock_sync (REALTIME trace time)")
            .manifest(serde_json::json!({"version": 1, "trace_time": {"clock": "REALTIME"}}))
            .file("relay.pb", &p),
    );
    let vm_ts = (WALL + 2_100_000_000) as i64;
    assert_eq!(m.slice("host_slice").ts, (WALL + 1_100_000_000) as i64);
    assert_eq!(m.slice("vm_slice").ts, vm_ts);
    let syncs: Vec<_> = m
        .own
        .iter()
        .filter_map(|p| match &p.data {
            Some(Data::RemoteClockSync(s)) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(syncs.len(), 1);
    // Two entries per clock, each with that clock alone.
    let pairs: Vec<(u32, i64)> = syncs[0]
        .synced_clocks
        .iter()
        .map(|e| {
            let (c, h) = (
                e.client_clocks.as_ref().unwrap(),
                e.host_clocks.as_ref().unwrap(),
            );
            assert_eq!((c.clocks.len(), h.clocks.len()), (1, 1));
            let (c, h) = (&c.clocks[0], &h.clocks[0]);
            (
                c.clock_id.unwrap(),
                c.timestamp.unwrap() as i64 - h.timestamp.unwrap() as i64,
            )
        })
        .collect();
    // BOOTTIME: 50.1 s - trace ts; REALTIME: vm REALTIME (50.1 s + 10 s + WALL) - trace ts.
    assert_eq!(
        pairs,
        vec![
            (BT, 50_100_000_000 - vm_ts),
            (BT, 50_100_000_000 - vm_ts),
            (RT, (WALL + 60_100_000_000) as i64 - vm_ts),
            (RT, (WALL + 60_100_000_000) as i64 - vm_ts),
        ]
    );
}
