//! Tests of the pipeline: sequence remapping, chunking, bundles, drops,
//! replay.

use super::*;
use prost::Message;
use tracesync_protocol::perfetto::{TracePacket, trace_packet};
use tracesync_protocol::wire;

fn producer_packet(ts: u64, seq: Option<u32>) -> Vec<u8> {
    TracePacket {
        timestamp: Some(ts),
        optional_trusted_packet_sequence_id: seq
            .map(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId),
        optional_trusted_uid: Some(trace_packet::OptionalTrustedUid::TrustedUid(1000)),
        trusted_pid: Some(77),
        machine_id: Some(9),
        ..Default::default()
    }
    .encode_to_vec()
}

fn framed(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        wire::put_trace_packet(&mut out, p);
    }
    out
}

/// A compressed_packets bundle in raw deflate stored blocks (no
/// compression needed: the reader takes raw deflate too).
fn bundle(inner: &[Vec<u8>]) -> Vec<u8> {
    let data = framed(inner);
    let mut deflate = Vec::new();
    let blocks: Vec<_> = data.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        deflate.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        deflate.extend_from_slice(&len.to_le_bytes());
        deflate.extend_from_slice(&(!len).to_le_bytes());
        deflate.extend_from_slice(block);
    }
    let mut packet = Vec::new();
    wire::put_varint_field(&mut packet, 10, 5);
    wire::put_len_field(&mut packet, 50, &deflate);
    packet
}

fn decode(p: &Bytes) -> TracePacket {
    TracePacket::decode(p.clone()).unwrap()
}

fn seq_of(p: &TracePacket) -> Option<u32> {
    p.optional_trusted_packet_sequence_id.map(|s| match s {
        trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(v) => v,
    })
}

fn drain(p: &mut Pipeline, stats: &SourceStats) -> Vec<Bytes> {
    let mut all = Vec::new();
    loop {
        let b = p.next_batch(stats).unwrap();
        if b.packets.is_empty() {
            return all;
        }
        all.extend(b.packets);
    }
}

#[test]
fn remaps_sequences_and_strips_trusted_fields() {
    let alloc = Arc::new(SequenceAllocator::new());
    let stats = SourceStats::default();
    let mut p = Pipeline::new(alloc.clone(), 0);
    p.push(&framed(&[
        producer_packet(10, Some(7)),
        producer_packet(11, None),
        producer_packet(12, Some(7)),
        producer_packet(13, Some(3)),
    ]));
    let out: Vec<_> = drain(&mut p, &stats).iter().map(decode).collect();
    assert_eq!(out.len(), 4);
    let seqs: Vec<_> = out.iter().map(seq_of).collect();
    assert_eq!(seqs, [Some(2), Some(3), Some(2), Some(4)]);
    for (i, packet) in out.iter().enumerate() {
        assert_eq!(
            packet.timestamp,
            Some(10 + i as u64),
            "timestamps untouched"
        );
        assert_eq!(packet.optional_trusted_uid, None);
        assert_eq!(packet.trusted_pid, None);
        assert_eq!(packet.machine_id, None);
    }
    // A second stream gets its own relay sequences.
    let mut q = Pipeline::new(alloc, 0);
    q.push(&framed(&[producer_packet(1, Some(7))]));
    assert_eq!(seq_of(&decode(&drain(&mut q, &stats)[0])), Some(5));
}

#[test]
fn any_chunking_gives_the_same_packets_and_cursor() {
    let stats = SourceStats::default();
    let input = framed(
        &(0..50)
            .map(|i| producer_packet(i, Some(1)))
            .collect::<Vec<_>>(),
    );
    let mut whole = Pipeline::new(Arc::new(SequenceAllocator::new()), 0);
    whole.push(&input);
    let expected = drain(&mut whole, &stats);
    assert_eq!(expected.len(), 50);
    for chunk in [1, 2, 3, 7, 64] {
        let mut p = Pipeline::new(Arc::new(SequenceAllocator::new()), 0);
        let mut got = Vec::new();
        for c in input.chunks(chunk) {
            p.push(c);
            let b = p.next_batch(&stats).unwrap();
            // The cursor never points inside a record.
            assert!(b.end_offset <= p.input_end());
            got.extend(b.packets);
        }
        got.extend(drain(&mut p, &stats));
        assert_eq!(got, expected, "chunk {chunk}");
        assert_eq!(p.committed(), input.len() as u64);
        p.finish().unwrap();
    }
}

#[test]
fn partial_record_waits_then_completes() {
    let stats = SourceStats::default();
    let input = framed(&[producer_packet(1, None), producer_packet(2, None)]);
    let mut p = Pipeline::new(Arc::new(SequenceAllocator::new()), 100);
    let cut = input.len() - 3;
    p.push(&input[..cut]);
    let b = p.next_batch(&stats).unwrap();
    assert_eq!(b.packets.len(), 1);
    let first_end = b.end_offset;
    assert!(first_end > 100 && first_end < 100 + cut as u64);
    assert!(
        p.finish().is_err(),
        "a partial record at the end is an error"
    );
    let mut p = Pipeline::new(Arc::new(SequenceAllocator::new()), 100);
    p.push(&input[..cut]);
    drain(&mut p, &stats);
    p.push(&input[cut..]);
    let b = p.next_batch(&stats).unwrap();
    assert_eq!(b.packets.len(), 1);
    assert_eq!(b.end_offset, 100 + input.len() as u64);
}

#[test]
fn bundles_are_expanded_and_never_split() {
    let stats = SourceStats::default();
    let inner: Vec<_> = (0..BATCH_MAX_PACKETS as u64 + 10)
        .map(|i| producer_packet(i, Some(9)))
        .collect();
    let bundled = bundle(&inner);
    let input = framed(&[
        producer_packet(0, Some(1)),
        bundled,
        producer_packet(1, Some(1)),
    ]);
    let mut p = Pipeline::new(Arc::new(SequenceAllocator::new()), 0);
    p.push(&input);
    let first = p.next_batch(&stats).unwrap();
    // Full, but the bundle is finished first: the cursor lies past it.
    assert_eq!(first.packets.len(), 1 + inner.len());
    let after_bundle = input.len() as u64 - framed(&[producer_packet(1, Some(1))]).len() as u64;
    assert_eq!(first.end_offset, after_bundle);
    let p1 = decode(&first.packets[1]);
    assert_eq!(p1.timestamp, Some(0));
    assert_eq!(
        seq_of(&p1),
        Some(3),
        "bundled packets keep their own sequence"
    );
    assert_eq!(p1.optional_trusted_uid, None);
    let rest = p.next_batch(&stats).unwrap();
    assert_eq!(rest.packets.len(), 1);
    assert_eq!(rest.end_offset, input.len() as u64);
}

#[test]
fn malformed_packet_is_skipped_and_counted() {
    let stats = SourceStats::default();
    // Field 1 claiming 5 bytes with 1 left: framing fine, body broken.
    let bad = vec![0x0a, 0x05, 0x00];
    let input = framed(&[producer_packet(1, None), bad, producer_packet(2, None)]);
    let mut p = Pipeline::new(Arc::new(SequenceAllocator::new()), 0);
    p.push(&input);
    let out = drain(&mut p, &stats);
    assert_eq!(out.len(), 2);
    assert_eq!(stats.malformed_packets.load(Ordering::Relaxed), 1);
    assert_eq!(p.committed(), input.len() as u64);
}

#[test]
fn oversized_packets_are_dropped_and_counted() {
    let stats = SourceStats::default();
    let mut big = Vec::new();
    wire::put_len_field(&mut big, 1234, &vec![7u8; MAX_PACKET_BYTES]);
    let input = framed(&[producer_packet(1, None), big, producer_packet(2, None)]);
    let mut p = Pipeline::new(Arc::new(SequenceAllocator::new()), 0);
    p.push(&input);
    assert_eq!(drain(&mut p, &stats).len(), 2);
    assert_eq!(stats.oversized_packets.load(Ordering::Relaxed), 1);
    assert_eq!(p.committed(), input.len() as u64);
}

#[test]
fn broken_framing_names_the_offset() {
    let stats = SourceStats::default();
    let mut input = framed(&[producer_packet(1, None)]);
    let good = input.len() as u64;
    input.extend_from_slice(&[0x10, 0x01]); // field 2 varint: not a packet record
    let mut p = Pipeline::new(Arc::new(SequenceAllocator::new()), 1000);
    p.push(&input);
    let e = loop {
        match p.next_batch(&stats) {
            Ok(b) if b.packets.is_empty() => panic!("expected an error"),
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(e.offset, 1000 + good);
    assert!(
        e.to_string()
            .starts_with(&format!("byte offset {}: ", 1000 + good))
    );
    assert_eq!(p.committed(), 1000 + good);
}

fn state_packet(seq: u32, flags: u32, name: &str, clock: Option<u32>, ts: u64) -> Vec<u8> {
    use tracesync_protocol::perfetto::{EventName, InternedData, TracePacketDefaults};
    TracePacket {
        timestamp: Some(ts),
        sequence_flags: Some(flags),
        interned_data: Some(InternedData {
            event_names: vec![EventName {
                iid: Some(1),
                name: Some(name.into()),
            }],
        }),
        trace_packet_defaults: clock.map(|c| TracePacketDefaults {
            timestamp_clock_id: Some(c),
        }),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        ),
        trusted_pid: Some(3),
        ..Default::default()
    }
    .encode_to_vec()
}

fn snapshot_packet(seq: u32, value: u64) -> Vec<u8> {
    use tracesync_protocol::perfetto::{ClockSnapshot, clock_snapshot::Clock};
    let clock = |id, ts| Clock {
        clock_id: Some(id),
        timestamp: Some(ts),
        ..Default::default()
    };
    TracePacket {
        timestamp: Some(value),
        data: Some(trace_packet::Data::ClockSnapshot(ClockSnapshot {
            clocks: vec![clock(6, value), clock(64, value + 5)],
            primary_trace_clock: None,
        })),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        ),
        ..Default::default()
    }
    .encode_to_vec()
}

fn names(p: &TracePacket) -> Vec<String> {
    p.interned_data
        .iter()
        .flat_map(|i| &i.event_names)
        .filter_map(|n| n.name.clone())
        .collect()
}

#[test]
fn replay_rebuilds_each_sequences_state_and_keeps_the_relay_sequences() {
    let stats = SourceStats::default();
    let prefix = framed(&[
        state_packet(7, 1, "a-old", Some(64), 1), // replaced by the next clear
        snapshot_packet(8, 100),
        state_packet(8, 1, "b0", Some(64), 2),
        state_packet(7, 1, "a0", None, 3),
        producer_packet(4, Some(7)),
        snapshot_packet(8, 200), // the latest snapshot is kept
        state_packet(7, 2, "a1", Some(3), 5),
        producer_packet(6, Some(8)),
        producer_packet(7, None), // a sequence without state
    ]);
    let rest = framed(&[
        producer_packet(8, Some(8)),
        producer_packet(9, Some(7)),
        producer_packet(10, None),
    ]);
    // The first read: relay sequences by first appearance.
    let alloc = Arc::new(SequenceAllocator::new());
    let mut first = Pipeline::new(alloc, 0);
    first.push(&prefix);
    first.push(&rest);
    let first: Vec<_> = drain(&mut first, &stats).iter().map(decode).collect();
    let relay_of = |seq: u32| {
        first
            .iter()
            .find(|p| p.timestamp == Some(if seq == 7 { 9 } else { 8 }))
            .and_then(seq_of)
    };
    let (a, b) = (relay_of(7), relay_of(8));

    // A restarted relay (fresh allocator) resumes after the prefix.
    let mut state = ReplayState::new();
    for chunk in prefix.chunks(13) {
        state.push(chunk).unwrap();
    }
    assert_eq!(state.sequences(), 2);
    let replay = state.into_replay();
    assert_eq!(replay.sequences, [7, 8, 0]);
    let mut p = Pipeline::new(Arc::new(SequenceAllocator::new()), prefix.len() as u64);
    let batch = p.replay(&replay, &stats);
    assert_eq!(batch.end_offset, prefix.len() as u64, "nothing consumed");
    let got: Vec<_> = batch.packets.iter().map(decode).collect();
    // Sequence 7 came first in the file: its relay sequence is first.
    let summary: Vec<_> = got
        .iter()
        .map(|q| {
            (
                seq_of(q),
                q.sequence_flags,
                names(q),
                q.trace_packet_defaults.and_then(|d| d.timestamp_clock_id),
                q.data.is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (a, Some(1), vec!["a0".to_owned()], None, false),
            (a, Some(2), vec!["a1".to_owned()], Some(3), false),
            (b, None, vec![], None, true),
            (b, Some(1), vec!["b0".to_owned()], Some(64), false),
        ]
    );
    for q in &got {
        assert_eq!(q.timestamp, None, "replayed state carries no time");
        assert_eq!(q.trusted_pid, None, "trusted fields stripped");
    }
    let Some(trace_packet::Data::ClockSnapshot(snap)) = &got[2].data else {
        panic!("a snapshot: {:?}", got[2]);
    };
    assert_eq!(snap.clocks[0].timestamp, Some(200), "the latest snapshot");
    // The resumed packets land on the same relay sequences as at first.
    p.push(&rest);
    let resumed: Vec<_> = drain(&mut p, &stats).iter().map(decode).collect();
    let none = first
        .iter()
        .find(|q| q.timestamp == Some(10))
        .and_then(seq_of);
    assert_eq!(
        resumed.iter().map(seq_of).collect::<Vec<_>>(),
        [b, a, none],
        "same relay sequences as the first read"
    );
}

#[test]
fn replay_state_is_bounded_per_sequence() {
    let big = "x".repeat(REPLAY_MAX_SEQUENCE_BYTES / 3);
    let mut state = ReplayState::new();
    let mut input = vec![state_packet(5, 1, "clear", None, 1)];
    for _ in 0..4 {
        input.push(state_packet(5, 2, &big, None, 2));
    }
    state.push(&framed(&input)).unwrap();
    assert_eq!(state.overflowed, 1);
    assert_eq!(state.sequences(), 0, "no partial state is replayed");
    // A new clear starts afresh.
    let mut state2 = ReplayState::new();
    input.push(state_packet(5, 1, "again", None, 3));
    state2.push(&framed(&input)).unwrap();
    let replay: Vec<_> = state2.into_replay().packets.iter().map(decode).collect();
    assert_eq!(replay.len(), 1);
    assert_eq!(names(&replay[0]), ["again"]);
}

#[test]
fn replayed_incremental_clock_snapshot_is_at_the_last_absolute_value() {
    use tracesync_protocol::perfetto::{ClockSnapshot, clock_snapshot::Clock};
    let clock = |id, ts, incremental| Clock {
        clock_id: Some(id),
        timestamp: Some(ts),
        is_incremental: incremental,
        ..Default::default()
    };
    let snap = |clocks| ClockSnapshot {
        clocks,
        primary_trace_clock: None,
    };
    let on9 = |mut p: TracePacket| {
        p.optional_trusted_packet_sequence_id =
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(9));
        p.encode_to_vec()
    };
    let delta = |ts| {
        on9(TracePacket {
            timestamp: Some(ts),
            ..Default::default()
        })
    };
    let input = framed(&[
        state_packet(9, 1, "x", Some(64), 3), // defaults before the clock
        on9(TracePacket {
            data: Some(trace_packet::Data::ClockSnapshot(snap(vec![
                clock(6, 1_000, None),
                clock(64, 500, Some(true)),
            ]))),
            ..Default::default()
        }),
        delta(10),
        delta(20),
        on9(TracePacket {
            timestamp: Some(77_777), // another clock: not summed
            timestamp_clock_id: Some(6),
            ..Default::default()
        }),
    ]);
    let mut state = ReplayState::new();
    state.push(&input).unwrap();
    let replay: Vec<_> = state.into_replay().packets.iter().map(decode).collect();
    let Some(trace_packet::Data::ClockSnapshot(got)) = &replay[0].data else {
        panic!("snapshot first: {replay:?}");
    };
    assert_eq!(
        got,
        &snap(vec![clock(6, 1_030, None), clock(64, 530, Some(true))])
    );
    assert_eq!(seq_of(&replay[0]), Some(9), "before stamping");
    assert_eq!(replay[1].sequence_flags, Some(1));
}
