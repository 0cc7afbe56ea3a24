use super::*;
use prost::Message;
use tracesync_protocol::perfetto::{InternedData, TracePacket, TracePacketDefaults};

fn encode(p: TracePacket) -> Bytes {
    Bytes::from(p.encode_to_vec())
}

fn fields_role(p: TracePacket) -> Role {
    let b = p.encode_to_vec();
    role_of(&scan::scan_packet(&b).expect("valid packet"))
}

#[test]
fn roles_from_fields() {
    use tracesync_protocol::perfetto::trace_packet::Data;
    use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync, SystemInfo};
    let data = |d| TracePacket {
        data: Some(d),
        ..Default::default()
    };
    assert_eq!(
        fields_role(data(Data::SystemInfo(SystemInfo::default()))),
        Role::SystemInfo
    );
    assert_eq!(
        fields_role(data(Data::ClockSnapshot(ClockSnapshot::default()))),
        Role::ClockSnapshot
    );
    assert_eq!(
        fields_role(data(Data::RemoteClockSync(RemoteClockSync::default()))),
        Role::SyncPoint
    );
    let cleared = TracePacket {
        sequence_flags: Some(1),
        interned_data: Some(InternedData::default()),
        ..Default::default()
    };
    assert_eq!(fields_role(cleared), Role::IncrementalStateCleared);
    let legacy_clear = TracePacket {
        incremental_state_cleared: Some(true),
        ..Default::default()
    };
    assert_eq!(fields_role(legacy_clear), Role::IncrementalStateCleared);
    let interned = TracePacket {
        sequence_flags: Some(2),
        interned_data: Some(InternedData::default()),
        ..Default::default()
    };
    assert_eq!(fields_role(interned), Role::IncrementalState);
    let defaults = TracePacket {
        trace_packet_defaults: Some(TracePacketDefaults {
            timestamp_clock_id: Some(6),
        }),
        ..Default::default()
    };
    assert_eq!(fields_role(defaults), Role::IncrementalState);
    let plain = TracePacket {
        timestamp: Some(5),
        sequence_flags: Some(2),
        ..Default::default()
    };
    assert_eq!(fields_role(plain), Role::Data);
}

#[test]
fn strip_keeps_state_fields_byte_for_byte() {
    use tracesync_protocol::perfetto::TrackEvent;
    use tracesync_protocol::perfetto::trace_packet::Data;
    let state = TracePacket {
        sequence_flags: Some(1),
        interned_data: Some(InternedData::default()),
        machine_id: Some(9),
        ..Default::default()
    };
    let mut with_event = state.clone();
    with_event.timestamp = Some(77); // a delta on an incremental clock
    with_event.data = Some(Data::TrackEvent(TrackEvent {
        track_uuid: Some(3),
        ..Default::default()
    }));
    let stripped = strip_for_replay(&encode(with_event));
    assert_eq!(TracePacket::decode(stripped).expect("decodes"), state);
    // Nothing to strip: the same bytes, not a copy.
    let b = encode(state);
    assert_eq!(strip_for_replay(&b).as_ptr(), b.as_ptr());
}

#[test]
fn sync_floors_are_the_replayed_sync_points_client_boottime() {
    use crate::sync_point::sync_point_packet;
    let mut s = PreambleState::new(PreambleLimits::default());
    s.observe(
        Role::SyncPoint,
        3,
        1,
        &Bytes::from(sync_point_packet(3, 1, 700, 650)),
    );
    s.observe(
        Role::SyncPoint,
        3,
        1,
        &Bytes::from(sync_point_packet(3, 1, 900, 850)),
    );
    s.observe(
        Role::SyncPoint,
        5,
        1,
        &Bytes::from(sync_point_packet(5, 1, 40, 10)),
    );
    // Undecodable bytes give no floor rather than a wrong one.
    s.observe(Role::SyncPoint, 7, 1, &Bytes::from_static(&[0xff, 0xff]));
    assert_eq!(s.sync_floors(), [(3, 900), (5, 40)]);
}

fn state_packet(seq: u32, flags: u32, size: usize) -> Bytes {
    use tracesync_protocol::perfetto::EventName;
    encode(TracePacket {
        sequence_flags: Some(flags),
        interned_data: Some(InternedData {
            event_names: vec![EventName {
                iid: Some(1),
                name: Some("x".repeat(size)),
            }],
        }),
        optional_trusted_packet_sequence_id: Some(
            tracesync_protocol::perfetto::trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        ),
        ..Default::default()
    })
}

#[test]
fn order_groups_and_clears() {
    let mut s = PreambleState::new(PreambleLimits::default());
    let b = |n: u8| Bytes::from(vec![0x68, n]); // field 13 = n (kept in replay)
    s.observe(Role::IncrementalState, 0, 5, &b(1)); // before any clear: kept
    s.observe(Role::SyncPoint, 3, 1, &b(2));
    s.observe(Role::ClockSnapshot, 3, 1, &b(3));
    s.observe(Role::SystemInfo, 3, 1, &b(4));
    s.observe(Role::IncrementalStateCleared, 0, 5, &b(5));
    s.observe(Role::IncrementalState, 0, 6, &b(6));
    s.observe(Role::IncrementalState, 0, 5, &b(7));
    s.observe(Role::Data, 0, 5, &b(8));
    s.observe(Role::ClockSnapshot, 3, 1, &b(9)); // replaces b(3)
    s.observe(Role::ClockSnapshot, 3, 2, &b(10));
    s.observe(Role::ClockSnapshot, 4, 1, &b(11));
    assert_eq!(
        s.packets(),
        [b(4), b(9), b(10), b(11), b(2), b(5), b(6), b(7)]
    );
}

#[test]
fn per_sequence_bound_keeps_the_clear() {
    let limits = PreambleLimits {
        per_sequence_bytes: 300,
        ..PreambleLimits::default()
    };
    let mut s = PreambleState::new(limits);
    let clear = state_packet(5, 1, 400);
    s.observe(Role::IncrementalStateCleared, 0, 5, &clear);
    let small = state_packet(5, 2, 10);
    s.observe(Role::IncrementalState, 0, 5, &small);
    assert_eq!(s.packets(), std::slice::from_ref(&clear));
    assert_eq!(s.counters().incremental_state_overflow, 1);
    // A new clear starts afresh.
    let clear2 = state_packet(5, 1, 10);
    s.observe(Role::IncrementalStateCleared, 0, 5, &clear2);
    s.observe(Role::IncrementalState, 0, 5, &small);
    assert_eq!(s.packets(), [clear2, small]);
    assert_eq!(s.incremental_bytes, s.sequences[&5].bytes);
}

#[test]
fn total_bound_forgets_least_recently_written_sequences() {
    let limits = PreambleLimits {
        per_sequence_bytes: 1000,
        total_bytes: 250,
        max_keys: 3,
    };
    let mut s = PreambleState::new(limits);
    let p = |seq| state_packet(seq, 1, 100);
    s.observe(Role::IncrementalStateCleared, 0, 1, &p(1));
    s.observe(Role::IncrementalStateCleared, 0, 2, &p(2));
    s.observe(Role::Data, 0, 1, &Bytes::new()); // sequence 1 is used again
    s.observe(Role::IncrementalStateCleared, 0, 3, &p(3));
    assert_eq!(s.packets(), [p(1), p(3)]);
    assert_eq!(s.counters().forgotten, 1);
    for m in 0..5 {
        s.observe(Role::SystemInfo, m, 0, &Bytes::from(vec![0x40, m as u8]));
    }
    assert_eq!(s.system_info.len(), 3);
    assert!(!s.system_info.contains_key(&0));
}

#[test]
fn recovered_sequences_carry_the_default_clock_and_snapshots() {
    use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
    use tracesync_protocol::perfetto::{ClockSnapshot, clock_snapshot::Clock};
    let on = |seq: u32, mut p: TracePacket| {
        p.optional_trusted_packet_sequence_id = Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        );
        encode(p)
    };
    let defaults = |clock| {
        Some(TracePacketDefaults {
            timestamp_clock_id: Some(clock),
        })
    };
    let snap = ClockSnapshot {
        clocks: vec![Clock {
            clock_id: Some(64),
            timestamp: Some(5),
            ..Default::default()
        }],
        primary_trace_clock: None,
    };
    let mut s = PreambleState::new(PreambleLimits::default());
    let snapshot = on(
        5,
        TracePacket {
            data: Some(Data::ClockSnapshot(snap.clone())),
            ..Default::default()
        },
    );
    s.observe(Role::ClockSnapshot, 2, 5, &snapshot);
    let clear = |clock| {
        on(
            5,
            TracePacket {
                sequence_flags: Some(1),
                trace_packet_defaults: defaults(clock),
                ..Default::default()
            },
        )
    };
    s.observe(Role::IncrementalStateCleared, 2, 5, &clear(3));
    let later = on(
        5,
        TracePacket {
            sequence_flags: Some(2),
            trace_packet_defaults: defaults(64),
            ..Default::default()
        },
    );
    s.observe(Role::IncrementalState, 2, 5, &later);
    // A sequence whose last clear names no default has none.
    s.observe(
        Role::IncrementalState,
        2,
        6,
        &on(
            6,
            TracePacket {
                trace_packet_defaults: defaults(3),
                ..Default::default()
            },
        ),
    );
    s.observe(
        Role::IncrementalStateCleared,
        2,
        6,
        &on(
            6,
            TracePacket {
                sequence_flags: Some(1),
                ..Default::default()
            },
        ),
    );
    let got = s.recovered_sequences();
    assert_eq!(
        got,
        [RecoveredSequence {
            out_seq: 5,
            default_clock: Some(64),
            clock_snapshots: vec![snap.encode_to_vec()],
        }]
    );
}

#[test]
fn incremental_clock_snapshots_are_replayed_at_the_last_absolute_value() {
    use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
    use tracesync_protocol::perfetto::{ClockSnapshot, clock_snapshot::Clock};
    let on = |mut p: TracePacket| {
        p.optional_trusted_packet_sequence_id =
            Some(OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(5));
        p.machine_id = Some(2);
        encode(p)
    };
    let clock = |id, ts, incremental| Clock {
        clock_id: Some(id),
        timestamp: Some(ts),
        is_incremental: incremental,
        ..Default::default()
    };
    let snapshot = |clocks| ClockSnapshot {
        clocks,
        primary_trace_clock: None,
    };
    let mut s = PreambleState::new(PreambleLimits::default());
    // As the SDK writes it: defaults first, then the clock, then deltas.
    let clear = on(TracePacket {
        timestamp: Some(7), // a delta from the snapshot: replayed without it
        sequence_flags: Some(1),
        trace_packet_defaults: Some(TracePacketDefaults {
            timestamp_clock_id: Some(64),
        }),
        ..Default::default()
    });
    s.observe(Role::IncrementalStateCleared, 2, 5, &clear);
    let original = snapshot(vec![clock(6, 1_000, None), clock(64, 500, Some(true))]);
    let snap = on(TracePacket {
        timestamp: Some(1_000),
        timestamp_clock_id: Some(6),
        data: Some(Data::ClockSnapshot(original)),
        ..Default::default()
    });
    s.observe(Role::ClockSnapshot, 2, 5, &snap);
    for delta in [10, 20] {
        let data = on(TracePacket {
            timestamp: Some(delta),
            ..Default::default()
        });
        s.observe(Role::Data, 2, 5, &data);
    }
    // An explicit other clock does not move it.
    let other = on(TracePacket {
        timestamp: Some(99_999),
        timestamp_clock_id: Some(6),
        ..Default::default()
    });
    s.observe(Role::Data, 2, 5, &other);
    let packets: Vec<TracePacket> = s
        .packets()
        .iter()
        .map(|b| TracePacket::decode(&b[..]).expect("decodes"))
        .collect();
    let Some(Data::ClockSnapshot(replayed)) = &packets[0].data else {
        panic!("snapshot first: {packets:?}");
    };
    assert_eq!(
        replayed,
        &snapshot(vec![clock(6, 1_030, None), clock(64, 530, Some(true))])
    );
    assert_eq!(
        (packets[0].timestamp, packets[0].timestamp_clock_id),
        (None, None)
    );
    assert_eq!(packets[0].machine_id, Some(2));
    assert_eq!(packets[1].timestamp, None, "replayed state has no delta");
    assert_eq!(packets[1].sequence_flags, Some(1));
    // Recovery reads the same from the file's bytes.
    let mut r = PreambleState::new(PreambleLimits::default());
    for p in [&clear, &snap] {
        r.observe_raw(p);
    }
    for delta in [10u64, 20] {
        r.observe_raw(&on(TracePacket {
            timestamp: Some(delta),
            ..Default::default()
        }));
    }
    assert_eq!(r.packets()[0], s.packets()[0]);
    assert_eq!(
        r.recovered_sequences()[0].clock_snapshots,
        [snapshot(vec![clock(6, 1_030, None), clock(64, 530, Some(true))]).encode_to_vec()]
    );
}
