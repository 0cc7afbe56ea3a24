//! Clock resolution, pending packets and stamping.

use super::*;

#[test]
fn two_relays_with_different_offsets_resolve_to_exact_host_times() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 1_000_000);
    let b = synced_relay(&mut core, 20, 2, -500_000);
    core.batch(a, 1, 0, encode(&[event(2, 5_000_000)]), None, 0)
        .unwrap();
    core.batch(b, 1, 0, encode(&[event(2, 3_000_000)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got: Vec<(u32, i64)> = relayed(&out)
        .iter()
        .map(|p| (p.machine_raw_id, p.ts))
        .collect();
    // host = relay - offset
    assert_eq!(got, [(2, 3_500_000), (1, 4_000_000)]);
    for p in relayed(&out) {
        let d = decode(p);
        assert_eq!(d.machine_id, Some(p.machine_raw_id));
        assert_eq!(
            d.timestamp_clock_id,
            Some(BOOTTIME),
            "resolved clock stamped"
        );
        assert_eq!(
            d.optional_trusted_packet_sequence_id,
            Some(OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                p.seq
            ))
        );
        // The estimate's bound (40 ns) plus 100 ppm of the few ms between
        // its reference and the packet.
        assert!((40..=40 + 1_000).contains(&p.err_ns), "{}", p.err_ns);
        assert_eq!((p.clock, p.clock_ts), (BOOTTIME, d.timestamp.unwrap()));
        assert_eq!(p.data_field, Some(11));
        assert_eq!(p.role, Role::Data);
    }
    // Two relays' sequence 2 are two output sequences.
    let seqs: Vec<u32> = relayed(&out).iter().map(|p| p.seq).collect();
    assert_ne!(seqs[0], seqs[1]);
    assert!(seqs.iter().all(|&s| s >= 2));
}

#[test]
fn a_packet_without_a_timestamp_takes_its_streams_time_and_bound() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 1_000_000);
    let mut untimed = event(2, 0);
    untimed.timestamp = None;
    core.batch(a, 1, 0, encode(&[event(2, 5_000_000), untimed]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got: Vec<(i64, u64)> = relayed(&out).iter().map(|p| (p.ts, p.err_ns)).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    // Placed where its stream's last packet was, with the bound of the
    // estimate at that packet's BOOTTIME.
    assert_eq!(got[1], got[0]);
    assert!((40..=40 + 1_000).contains(&got[1].1), "{got:?}");
}

#[test]
fn monotonic_packets_go_through_the_relays_snapshots() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 1_000);
    let packets = [
        snapshot(1, &[(BOOTTIME, 10_000), (MONOTONIC, 4_000)]),
        event_on_clock(3, MONOTONIC, 4_500),
    ];
    core.batch(a, 1, 0, encode(&packets), None, 0).unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got = relayed(&out);
    assert_eq!(got[0].role, Role::ClockSnapshot);
    assert_eq!(got[0].ts, 9_000);
    // MONOTONIC 4500 -> BOOTTIME 10500 -> host 9500; its clock stays 3.
    assert_eq!(got[1].ts, 9_500);
    assert_eq!(decode(got[1]).timestamp_clock_id, Some(MONOTONIC));
    assert_eq!((got[1].clock, got[1].clock_ts), (MONOTONIC, 4_500));
}

#[test]
fn pending_until_sync_then_released_in_order() {
    let mut core = core();
    let c = core.connect(hello(10, 1, "phone"), 0).unwrap();
    let packets = [event(2, 3_000), event(2, 1_000), event(3, 2_000)];
    core.batch(c.slot, 1, 0, encode(&packets), None, 0).unwrap();
    let mut out = Vec::new();
    core.drain(1_000_000, &mut out);
    assert!(
        out.iter().all(|p| p.origin.is_none()),
        "nothing resolvable yet"
    );
    assert_eq!(core.status(0, 0)[1].pending, 3);
    assert_eq!(core.committed(), []);

    core.sync(c.slot, estimate(0)).unwrap();
    core.drain(1_000_000, &mut out);
    // Stream 2 keeps its order (3000 before 1000); stream 3 interleaves.
    assert_eq!(ts_of(&out), [2_000, 3_000, 1_000]);
    assert_eq!(core.status(0, 0)[1].pending, 0);
    assert_eq!(core.committed(), [(c.slot, 1)]);
}

#[test]
fn pending_overflow_holds_an_unsynced_relay_back_then_drops_the_oldest() {
    let mut core = core_with(LiveConfig {
        pending_max_packets: 2,
        ..config()
    });
    let c = core.connect(hello(10, 1, "phone"), 0).unwrap();
    assert!(core.held_back(0).is_empty());
    core.batch(c.slot, 1, 0, encode(&[event(2, 1), event(2, 2)]), None, 0)
        .unwrap();
    // Full, and no estimate yet: the connection stops reading.
    assert_eq!(core.held_back(0), [c.slot]);
    assert_eq!(drop_count(&core, 1, reason::NO_PATH), 0);
    // Frames already on their way fill it up to twice the bound; beyond
    // that the oldest go, counted.
    let more = [event(2, 3), event(2, 4), event(2, 5), event(2, 6)];
    core.batch(c.slot, 2, 2, encode(&more), None, 0).unwrap();
    assert_eq!(drop_count(&core, 1, reason::NO_PATH), 2);
    core.sync(c.slot, estimate(0)).unwrap();
    assert!(core.held_back(0).is_empty(), "synced: reading again");
    let mut out = Vec::new();
    core.flush_all(&mut out);
    assert_eq!(ts_of(&out), [3, 4, 5, 6]);
    assert_eq!(
        core.committed(),
        [(c.slot, 2)],
        "dropped packets count as done"
    );
}

#[test]
fn a_synced_relay_with_a_full_pending_queue_drops_at_the_bound() {
    let mut core = core_with(LiveConfig {
        pending_max_packets: 2,
        ..config()
    });
    let c = core.connect(hello(10, 1, "phone"), 0).unwrap();
    core.sync(c.slot, estimate(0)).unwrap();
    // MONOTONIC before any relay snapshot: no path yet, pending after sync.
    let unresolvable: Vec<_> = (1..=4).map(|ts| event_on_clock(2, MONOTONIC, ts)).collect();
    core.batch(c.slot, 1, 0, encode(&unresolvable), None, 0)
        .unwrap();
    assert_eq!(drop_count(&core, 1, reason::NO_PATH), 2);
    assert!(
        core.held_back(0).is_empty(),
        "a synced relay is never held for pending"
    );
}

#[test]
fn pending_byte_bound_holds_too() {
    let mut core = core_with(LiveConfig {
        pending_max_bytes: 1,
        ..config()
    });
    let c = core.connect(hello(10, 1, "phone"), 0).unwrap();
    core.batch(c.slot, 1, 0, encode(&[event(2, 1), event(2, 2)]), None, 0)
        .unwrap();
    assert_eq!(drop_count(&core, 1, reason::NO_PATH), 2);
    assert_eq!(core.status(0, 0)[1].pending, 0);
}

#[test]
fn sequence_clock_used_before_its_snapshot_is_resolved_later() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    // Clock 64 of sequence 2, and a later packet of the same stream behind it.
    let first = [event_on_clock(2, 64, 150), event(2, 5_000), event(3, 4_000)];
    core.batch(a, 1, 0, encode(&first), None, 0).unwrap();
    let mut out = Vec::new();
    core.drain(1_000_000, &mut out);
    assert_eq!(ts_of(&out), [4_000], "stream 3 is not held by stream 2");
    // A snapshot of clock 64 on another sequence does not define it for 2.
    core.batch(
        a,
        2,
        3,
        encode(&[snapshot(3, &[(64, 100), (BOOTTIME, 9_000)])]),
        None,
        0,
    )
    .unwrap();
    core.drain(1_000_000, &mut out);
    assert_eq!(ts_of(&out), [4_000, 9_000]);
    core.batch(
        a,
        3,
        4,
        encode(&[snapshot(2, &[(64, 100), (BOOTTIME, 1_000)])]),
        None,
        0,
    )
    .unwrap();
    core.flush_all(&mut out);
    // 64@150 -> BOOTTIME 1050, then the held packet, then the snapshot.
    assert_eq!(ts_of(&out), [4_000, 9_000, 1_050, 5_000, 1_000]);
    assert_eq!(decode(relayed(&out)[2]).timestamp_clock_id, Some(64));
}

#[test]
fn clock_without_a_path_is_dropped_after_the_age_limit() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    core.batch(a, 1, 0, encode(&[event_on_clock(2, 200, 5)]), None, 0)
        .unwrap();
    assert_eq!(core.status(0, 0)[1].pending, 1);
    core.heartbeat(a, clocks(1), 20_000_000_000).unwrap();
    core.sync(a, estimate(0)).unwrap();
    assert_eq!(core.status(0, 0)[1].pending, 0);
    assert_eq!(drop_count(&core, 1, reason::NO_PATH), 1);
}

#[test]
fn packets_without_timestamp_take_their_streams_last_time() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 100);
    let mut bare = on_seq(TracePacket::default(), 2);
    bare.data = Some(Data::TrackEvent(TrackEvent::default()));
    let mut first_bare = on_seq(TracePacket::default(), 3);
    first_bare.data = Some(Data::TrackEvent(TrackEvent::default()));
    core.batch(
        a,
        1,
        0,
        encode(&[event(2, 700), bare, first_bare]),
        clocks(900),
        0,
    )
    .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got = relayed(&out);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].ts, 600);
    assert_eq!(got[1].ts, 600);
    assert_eq!((got[1].clock, got[1].clock_ts), (0, 0));
    assert_eq!(
        decode(got[1]).timestamp_clock_id,
        None,
        "no clock stamped without ts"
    );
    // Stream 3 has no time yet: the batch's relay clock.
    assert_eq!(got[2].ts, 800);
}

#[test]
fn negative_host_times_are_dropped_and_counted() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 1_000);
    core.batch(a, 1, 0, encode(&[event(2, 999), event(2, 1_000)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    assert_eq!(ts_of(&out), [0]);
    assert_eq!(drop_count(&core, 1, reason::NEGATIVE), 1);
    assert_eq!(core.committed(), [(a, 1)]);
}

#[test]
fn system_info_keeps_the_machine_name() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    let info = on_seq(
        TracePacket {
            data: Some(Data::SystemInfo(SystemInfo::default())),
            ..Default::default()
        },
        1,
    );
    core.batch(a, 1, 0, encode(&[event(1, 5), info]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got = relayed(&out);
    assert_eq!(got[1].role, Role::SystemInfo);
    let Some(Data::SystemInfo(info)) = decode(got[1]).data else {
        panic!("SystemInfo expected");
    };
    assert_eq!(info.machine_name.as_deref(), Some("m1"));
    assert_eq!(got[1].machine_name.as_deref(), Some("m1"));
}

#[test]
fn host_writes_its_system_info_once_and_a_snapshot_every_second() {
    let mut core = core();
    let snap = |t: u64| [(BOOTTIME, t), (MONOTONIC, t - 7), (1, t + 99), (5, t - 8)];
    for t in [
        1_000_000_000u64,
        1_500_000_000,
        2_000_000_000,
        2_100_000_000,
    ] {
        core.host_tick(t, &snap(t));
    }
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let roles: Vec<Role> = out.iter().map(|p| p.role).collect();
    assert_eq!(
        roles,
        [Role::SystemInfo, Role::ClockSnapshot, Role::ClockSnapshot]
    );
    assert!(
        out.iter()
            .all(|p| p.machine_raw_id == 0 && p.seq == OWN_SEQUENCE_ID)
    );
    let Some(Data::SystemInfo(info)) = decode(&out[0]).data else {
        panic!("SystemInfo expected");
    };
    assert_eq!(info.machine_name.as_deref(), Some(HOST_NAME));
    let d = decode(&out[2]);
    assert_eq!(d.machine_id, None);
    assert_eq!(d.timestamp, Some(2_000_000_000));
    let Some(Data::ClockSnapshot(s)) = d.data else {
        panic!("ClockSnapshot expected");
    };
    assert_eq!(s.clocks.len(), 4);
    assert_eq!(s.clocks[1].timestamp, Some(2_000_000_000 - 7));
}

#[test]
fn defaults_clock_applies_to_the_sequence() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    let mut defaults = snapshot(2, &[(MONOTONIC, 0), (BOOTTIME, 1_000)]);
    defaults.trace_packet_defaults = Some(TracePacketDefaults {
        timestamp_clock_id: Some(MONOTONIC),
    });
    defaults.timestamp_clock_id = Some(BOOTTIME);
    core.batch(a, 1, 0, encode(&[defaults, event(2, 50)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got = relayed(&out);
    assert_eq!(got[1].ts, 1_050);
    assert_eq!(got[1].clock, MONOTONIC);
    // The sequence's default names the clock: nothing is stamped.
    assert_eq!(decode(got[1]).timestamp_clock_id, None);
}

#[test]
fn packets_map_with_the_estimate_of_their_own_clock_epoch() {
    let mut core = core();
    let c = core.connect(hello(10, 1, "laptop"), 0).unwrap();
    // Epoch 1: BOOTTIME-MONOTONIC 6 us, relay 1 us ahead of the host. Then
    // a suspend (BOOTTIME-MONOTONIC jumps by 30 s) and a new epoch whose
    // estimate says 3 us: packets of the old epoch still arriving keep the
    // old mapping.
    let epoch = |offset_ns, bmm| SyncEstimate {
        boottime_minus_monotonic_ns: bmm,
        ..estimate(offset_ns)
    };
    core.sync(c.slot, epoch(1_000, 6_000)).unwrap();
    core.sync(c.slot, epoch(3_000, 30_000_006_000)).unwrap();
    let packets = [
        snapshot(1, &[(BOOTTIME, 10_000), (MONOTONIC, 4_000)]),
        event(2, 20_000),
        snapshot(1, &[(BOOTTIME, 40_000_000_000), (MONOTONIC, 9_999_994_000)]),
        event(2, 40_000_001_000),
    ];
    // Arriving after its last packet was taken (a batch dated 40 s ahead
    // of host now would be held apart from the merge, `future.rs`).
    let now = 40_000_001_000;
    core.batch(c.slot, 1, 0, encode(&packets), None, now)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let times: Vec<i64> = relayed(&out).iter().map(|p| p.ts).collect();
    assert_eq!(
        times,
        [9_000, 19_000, 39_999_997_000, 39_999_998_000],
        "old epoch with its 1 us, new epoch with 3 us"
    );
}

#[test]
fn a_long_pending_queue_is_released_in_order_in_slices() {
    let mut core = core();
    let c = core.connect(hello(10, 1, "phone"), 0).unwrap();
    // More than one staging slice (16 Ki packets), on two streams.
    let n = 40_000u64;
    let packets: Vec<_> = (0..n)
        .map(|i| event(2 + (i % 2) as u32, 1_000 + i))
        .collect();
    core.batch(c.slot, 1, 0, encode(&packets), None, 0).unwrap();
    assert_eq!(core.status(0, 0)[1].pending, n);
    core.sync(c.slot, estimate(0)).unwrap();
    assert_eq!(core.status(0, 0)[1].pending, 0);
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let expected: Vec<i64> = (0..n as i64).map(|i| 1_000 + i).collect();
    assert_eq!(ts_of(&out), expected);
    assert_eq!(core.committed(), [(c.slot, 1)]);
}

#[test]
fn pending_bytes_count_each_copy_as_allocated() {
    use crate::live::pending::allocated;
    assert_eq!(allocated(0), 0);
    assert_eq!(allocated(1), 32);
    // A small packet's copy costs more than its bytes.
    assert_eq!(allocated(64), 80);
    assert_eq!(allocated(4096), 4112);
    // The byte bound holds the relay back at exactly that many packets
    // counted this way.
    let packet = event(2, 1);
    let len = encode(std::slice::from_ref(&packet))[0].len();
    let per_packet = allocated(len) + crate::live::pending::pending_entry_size();
    let mut core = core_with(LiveConfig {
        pending_max_bytes: 3 * per_packet,
        ..config()
    });
    let c = core.connect(hello(10, 1, "phone"), 0).unwrap();
    let two: Vec<_> = (1..=2).map(|ts| event(2, ts)).collect();
    core.batch(c.slot, 1, 0, encode(&two), None, 0).unwrap();
    assert!(
        core.held_back(0).is_empty(),
        "two packets are below the bound"
    );
    core.batch(c.slot, 2, 2, encode(&[event(2, 3)]), None, 0)
        .unwrap();
    assert_eq!(core.held_back(0), [c.slot], "three are at it");
}

#[test]
fn unsynced_relays_share_one_pending_byte_bound() {
    use crate::live::pending::{allocated, pending_entry_size};
    let packet = event(2, 1);
    let len = encode(std::slice::from_ref(&packet))[0].len();
    let per_packet = allocated(len) + pending_entry_size();
    let mut core = core_with(LiveConfig {
        pending_max_bytes: 4 * per_packet,
        ..config()
    });
    let a = core.connect(hello(10, 1, "a"), 0).unwrap();
    let b = core.connect(hello(20, 2, "b"), 0).unwrap();
    let two = |ts: u64| encode(&[event(2, ts), event(2, ts + 1)]);
    core.batch(a.slot, 1, 0, two(1), None, 0).unwrap();
    assert!(core.held_back(0).is_empty(), "2 of 4 held in all");
    core.batch(b.slot, 1, 0, two(1), None, 0).unwrap();
    // Each is at half its own bound; together they hold it: both wait.
    let mut held = core.held_back(0);
    held.sort_unstable();
    assert_eq!(held, [a.slot, b.slot]);
    // Once one is synced its packets are released and the other reads.
    core.sync(a.slot, estimate(0)).unwrap();
    assert!(core.held_back(0).is_empty());
    assert_eq!(drop_count(&core, 1, reason::NO_PATH), 0);
    assert_eq!(drop_count(&core, 2, reason::NO_PATH), 0);
}
