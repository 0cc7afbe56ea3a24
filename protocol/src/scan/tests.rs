//! Tests of the scanner and of stamping.

use super::*;
use crate::perfetto::{TracePacket, TracePacketDefaults, trace_packet};
use crate::wire::{self, WireError};
use prost::Message;

fn packet() -> TracePacket {
    TracePacket {
        timestamp: Some(123_456_789),
        timestamp_clock_id: None,
        optional_trusted_uid: Some(trace_packet::OptionalTrustedUid::TrustedUid(1000)),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(7),
        ),
        trusted_pid: Some(42),
        sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
        previous_packet_dropped: Some(1),
        machine_id: Some(3),
        data: Some(trace_packet::Data::SystemInfo(Default::default())),
        ..Default::default()
    }
}

#[test]
fn scan_reads_top_level_fields() {
    let mut p = packet();
    p.trace_packet_defaults = Some(TracePacketDefaults {
        timestamp_clock_id: Some(64),
    });
    p.timestamp_clock_id = Some(6);
    let bytes = p.encode_to_vec();
    let f = scan_packet(&bytes).unwrap();
    assert_eq!(f.timestamp, Some(123_456_789));
    assert_eq!(f.timestamp_clock_id, Some(6));
    assert_eq!(f.trusted_packet_sequence_id, Some(7));
    assert!(f.has_trusted_uid && f.has_trusted_pid);
    assert!(f.needs_incremental_state() && !f.clears_incremental_state());
    assert_eq!(f.previous_packet_dropped, 1);
    assert_eq!(f.machine_id, Some(3));
    assert_eq!(f.data_field, Some(field::SYSTEM_INFO));
    assert_eq!(f.system_info, Some(&[][..]));
    assert_eq!(f.kind().to_string(), "system_info");
    let defaults = f.trace_packet_defaults.unwrap();
    assert_eq!(defaults_timestamp_clock_id(defaults).unwrap(), Some(64));
}

#[test]
fn scan_into_keeps_the_fields_before_a_malformed_one() {
    let mut bytes = packet().encode_to_vec();
    // Field 1's varint tag with its value cut off.
    bytes.push(0x08);
    let mut f = PacketFields::default();
    let e = scan_packet_into(&bytes, &mut f).unwrap_err();
    assert_eq!(e.offset, bytes.len() - 1);
    assert_eq!(f.timestamp, Some(123_456_789));
    assert_eq!(f.machine_id, Some(3));
    assert_eq!(scan_packet(&bytes).unwrap_err(), e);
}

#[test]
fn scan_empty_and_unknown_payload() {
    assert_eq!(scan_packet(&[]).unwrap(), PacketFields::default());
    let mut b = Vec::new();
    wire::put_len_field(&mut b, 1234, b"x");
    wire::put_varint_field(&mut b, field::SEQUENCE_FLAGS, 1);
    let f = scan_packet(&b).unwrap();
    assert_eq!(f.data_field, Some(1234));
    assert!(f.clears_incremental_state());
    assert_eq!(f.kind().to_string(), "field_1234");
    assert_eq!(Kind(None).to_string(), "none");
}

#[test]
fn fields_iterates_every_wire_type() {
    let mut b = Vec::new();
    wire::put_varint_field(&mut b, 1, 300);
    wire::put_tag(&mut b, 2, wire::WireType::Fixed64);
    b.extend_from_slice(&7u64.to_le_bytes());
    wire::put_tag(&mut b, 3, wire::WireType::Fixed32);
    b.extend_from_slice(&9u32.to_le_bytes());
    wire::put_len_field(&mut b, 4, b"abc");
    let fields: Vec<_> = Fields::new(&b).map(Result::unwrap).collect();
    let values: Vec<_> = fields.iter().map(|f| (f.number, f.value)).collect();
    assert_eq!(
        values,
        [
            (1, FieldValue::Varint(300)),
            (2, FieldValue::Fixed64(7)),
            (3, FieldValue::Fixed32(9)),
            (4, FieldValue::Len(b"abc")),
        ]
    );
    // Ranges tile the message.
    assert_eq!(fields[0].start, 0);
    for w in fields.windows(2) {
        assert_eq!(w[0].end, w[1].start);
    }
    assert_eq!(fields[3].end, b.len());
}

fn first_error(b: &[u8]) -> ScanError {
    Fields::new(b)
        .find_map(Result::err)
        .expect("malformed input must give an error")
}

#[test]
fn fields_errors_have_kind_and_offset() {
    let ok = [0x08, 0x01]; // field 1 = 1
    let cases: [(&[u8], WireError); 6] = [
        (&[0x08], WireError::Truncated),
        (&[0xff; 11], WireError::VarintTooLong),
        (
            &[0x12, 0x05, 1, 2],
            WireError::LengthPastEnd {
                len: 5,
                available: 2,
            },
        ),
        (&[0x0b], WireError::BadWireType(3)),
        (&[0x00, 0x01], WireError::FieldZero),
        (&[0x09, 1, 2, 3], WireError::Truncated),
    ];
    for (bad, error) in cases {
        let b = [&ok[..], bad].concat();
        assert_eq!(first_error(&b), ScanError { offset: 2, error }, "{bad:?}");
        assert!(scan_packet(&b).is_err());
        assert!(stamp_into(&b, &Stamp::default(), &mut Vec::new()).is_err());
    }
    // The iterator stops after an error.
    let mut it = Fields::new(&[0x0b, 0x08, 0x01]);
    assert!(it.next().unwrap().is_err());
    assert!(it.next().is_none());
}

fn stamped(p: &TracePacket, stamp: &Stamp) -> (Vec<u8>, TracePacket) {
    let mut out = vec![0xAA]; // stamp_into appends
    stamp_into(&p.encode_to_vec(), stamp, &mut out).unwrap();
    assert_eq!(out[0], 0xAA);
    let out = out.split_off(1);
    let decoded = TracePacket::decode(&out[..]).unwrap();
    (out, decoded)
}

#[test]
fn stamp_replaces_fields() {
    let p = packet();
    let stamp = Stamp {
        machine_id: Some(9),
        trusted_packet_sequence_id: Some(77),
        ..Stamp::default()
    };
    let (_, d) = stamped(&p, &stamp);
    let mut want = p.clone();
    want.machine_id = Some(9);
    want.optional_trusted_packet_sequence_id =
        Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(77));
    assert_eq!(d, want);
}

#[test]
fn stamp_zero_machine_removes_it() {
    let p = packet();
    let stamp = Stamp {
        machine_id: Some(0),
        ..Stamp::default()
    };
    let (bytes, d) = stamped(&p, &stamp);
    assert_eq!(d.machine_id, None);
    assert_eq!(scan_packet(&bytes).unwrap().machine_id, None);
    let mut want = p.clone();
    want.machine_id = None;
    assert_eq!(d, want);
}

#[test]
fn stamp_adds_missing_fields_and_clock_only_if_absent() {
    let mut p = packet();
    p.machine_id = None;
    p.optional_trusted_packet_sequence_id = None;
    let stamp = Stamp {
        machine_id: Some(5),
        trusted_packet_sequence_id: Some(8),
        default_timestamp_clock_id: Some(6),
        strip_trusted: false,
    };
    let (bytes, d) = stamped(&p, &stamp);
    let f = scan_packet(&bytes).unwrap();
    assert_eq!(
        (f.machine_id, f.trusted_packet_sequence_id),
        (Some(5), Some(8))
    );
    assert_eq!(d.timestamp_clock_id, Some(6));
    // The original bytes come first, unchanged.
    assert!(bytes.starts_with(&p.encode_to_vec()));

    p.timestamp_clock_id = Some(64);
    let (_, d) = stamped(&p, &stamp);
    assert_eq!(d.timestamp_clock_id, Some(64));
}

#[test]
fn stamp_strip_trusted_keeps_other_bytes_in_order() {
    let p = packet();
    let original = p.encode_to_vec();
    let stamp = Stamp {
        strip_trusted: true,
        ..Stamp::default()
    };
    let (bytes, d) = stamped(&p, &stamp);
    let mut want = p.clone();
    want.optional_trusted_uid = None;
    want.trusted_pid = None;
    want.machine_id = None;
    want.optional_trusted_packet_sequence_id = None;
    assert_eq!(d, want);
    // Exactly the kept fields' bytes, in their original order.
    let kept: Vec<u8> = Fields::new(&original)
        .map(Result::unwrap)
        .filter(|f| {
            ![
                field::TRUSTED_UID,
                field::TRUSTED_PID,
                field::MACHINE_ID,
                field::TRUSTED_PACKET_SEQUENCE_ID,
            ]
            .contains(&f.number)
        })
        .flat_map(|f| original[f.start..f.end].to_vec())
        .collect();
    assert_eq!(bytes, kept);
}

#[test]
fn stamp_default_is_identity() {
    let bytes = packet().encode_to_vec();
    let mut out = Vec::new();
    stamp_into(&bytes, &Stamp::default(), &mut out).unwrap();
    assert_eq!(out, bytes);
}

#[test]
fn data_field_names_are_perfettos() {
    for (n, name) in [
        (1, "ftrace_events"),
        (6, "clock_snapshot"),
        (11, "track_event"),
        (39, "android_log"),
        (43, "process_descriptor"),
        (50, "compressed_packets"),
        (60, "track_descriptor"),
        (66, "perf_sample"),
        (107, "remote_clock_sync"),
    ] {
        assert_eq!(data_field_name(n), Some(name));
    }
    assert_eq!(data_field_name(8), None); // timestamp is metadata
}

/// Packets as a relay sends them (its sequence id appended last) and
/// as producers may write them (replaced fields anywhere, repeated).
fn split_cases() -> Vec<Vec<u8>> {
    let body = |ts: Option<u64>, clock: Option<u32>| {
        TracePacket {
            timestamp: ts,
            timestamp_clock_id: clock,
            sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
            data: Some(trace_packet::Data::TrackEvent(Default::default())),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let mut cases = Vec::new();
    for (ts, clock) in [(None, None), (Some(9), None), (Some(9), Some(64))] {
        let b = body(ts, clock);
        cases.push(b.clone());
        for tail in [
            vec![(10, 300)],
            vec![(98, 5)],
            vec![(10, 300), (98, 5)],
            vec![(98, 5), (10, 1 << 30)],
            vec![(10, 2), (10, 3)], // repeated: the walking path
        ] {
            let mut p = b.clone();
            for (f, v) in tail {
                wire::put_varint_field(&mut p, f, v);
            }
            cases.push(p);
        }
        // Replaced fields inside the packet, or not adjacent at its end.
        let mut p = Vec::new();
        wire::put_varint_field(&mut p, 10, 4);
        p.extend_from_slice(&b);
        cases.push(p);
        let mut p = b.clone();
        wire::put_varint_field(&mut p, 98, 5);
        wire::put_varint_field(&mut p, 8, 1);
        wire::put_varint_field(&mut p, 10, 4);
        cases.push(p);
    }
    cases
}

#[test]
fn split_stamp_is_the_copied_stamp_byte_for_byte() {
    let stamps = [
        Stamp::default(),
        Stamp {
            machine_id: Some(u32::MAX),
            trusted_packet_sequence_id: Some(u32::MAX),
            default_timestamp_clock_id: Some(u32::MAX),
            strip_trusted: false,
        },
        Stamp {
            machine_id: Some(0),
            trusted_packet_sequence_id: Some(2),
            default_timestamp_clock_id: Some(6),
            strip_trusted: false,
        },
        Stamp {
            machine_id: Some(7),
            trusted_packet_sequence_id: None,
            default_timestamp_clock_id: None,
            strip_trusted: false,
        },
    ];
    let mut split = 0;
    for p in split_cases() {
        let fields = scan_packet(&p).unwrap();
        for stamp in &stamps {
            let mut copied = Vec::new();
            stamp_scanned(&p, &fields, stamp, &mut copied).unwrap();
            let Some((n, suffix)) = stamp_split(&p, &fields, stamp) else {
                continue;
            };
            split += 1;
            assert!(suffix.as_slice().len() <= STAMP_MOVED_MAX + STAMP_SUFFIX_MAX);
            assert_eq!(
                [&p[..n], suffix.as_slice()].concat(),
                copied,
                "{p:?} {stamp:?}"
            );
        }
    }
    assert!(split > 20, "{split}");
    // A replaced field further inside the packet needs the copy.
    let mut p = Vec::new();
    wire::put_varint_field(&mut p, 10, 4);
    wire::put_len_field(&mut p, 11, &[0; STAMP_MOVED_MAX]);
    let stamp = Stamp {
        trusted_packet_sequence_id: Some(2),
        ..Stamp::default()
    };
    assert_eq!(stamp_split(&p, &scan_packet(&p).unwrap(), &stamp), None);
    // Only replaced: the kept prefix is empty.
    let p = &p[..2];
    let (n, suffix) = stamp_split(p, &scan_packet(p).unwrap(), &stamp).unwrap();
    assert_eq!((n, suffix.as_slice()), (0, &[0x50, 2][..]));
}

/// The merge's way: the appended fields built once ([`StampSuffix`]) and
/// joined to each packet's split give [`stamp_split`]'s result.
#[test]
fn split_with_a_prebuilt_suffix_is_stamp_split() {
    let stamps = [
        (Some(u32::MAX), Some(u32::MAX), Some(u32::MAX)),
        (Some(2), Some(0), Some(6)),
        (Some(300), Some(7), None),
        (None, Some(7), Some(1)),
    ];
    let mut split = 0;
    for p in split_cases() {
        let fields = scan_packet(&p).unwrap();
        let layout = &fields.stamp_layout;
        for (seq, machine, clock) in stamps {
            let stamp = Stamp {
                machine_id: machine,
                trusted_packet_sequence_id: seq,
                default_timestamp_clock_id: clock,
                strip_trusted: false,
            };
            let suffix = StampSuffix::new(&stamp, layout.has_clock_id);
            let mut tail = StampTail::default();
            let got = stamp_split_with_suffix_into(&p, layout, &stamp, &suffix, &mut tail)
                .map(|head| (head, tail));
            assert_eq!(got, stamp_split(&p, &fields, &stamp), "{p:?} {stamp:?}");
            split += usize::from(got.is_some());
        }
    }
    assert!(split > 20, "{split}");
}

/// A field pushed after a split stamp's tail reads as if appended to the
/// stamped packet: the split and the copy give the same bytes.
#[test]
fn a_field_pushed_on_a_tail_is_the_field_appended_to_the_copy() {
    let stamp = Stamp {
        machine_id: Some(3),
        trusted_packet_sequence_id: Some(9),
        default_timestamp_clock_id: Some(64),
        strip_trusted: false,
    };
    for p in split_cases() {
        let fields = scan_packet(&p).unwrap();
        let layout = &fields.stamp_layout;
        let suffix = StampSuffix::new(&stamp, layout.has_clock_id);
        for ts in [0, 1, 127, 128, u64::from(u32::MAX), u64::MAX] {
            let mut tail = StampTail::default();
            let Some(head) = stamp_split_with_suffix_into(&p, layout, &stamp, &suffix, &mut tail)
            else {
                continue;
            };
            assert!(tail.push_varint_field(field::TIMESTAMP, ts));
            let mut copy = Vec::new();
            stamp_by_layout(&p, layout, &stamp, &mut copy).unwrap();
            wire::put_varint_field(&mut copy, field::TIMESTAMP, ts);
            assert_eq!([&p[..head], tail.as_slice()].concat(), copy, "{p:?} {ts}");
            // One field only: a second may not fit, and 2-byte tags never do.
            let mut other = StampTail::default();
            assert!(!other.push_varint_field(16, 1));
            assert!(!other.push_varint_field(0, 1));
        }
    }
}

/// Records what a walk reports: each field's number, its span and, for a
/// varint whose value it asked for, the value.
#[derive(Default)]
struct Calls {
    wants_values: bool,
    seen: Vec<(u32, usize, usize, Option<u64>)>,
    value: Option<u64>,
}

impl FieldSink<'_> for Calls {
    fn varint(&mut self, _number: u32, value: u64) {
        self.value = Some(value);
    }
    fn wants_value(&self, _number: u32) -> bool {
        self.wants_values
    }
    fn len(&mut self, _number: u32, _bytes: &[u8]) {}
    fn fixed(&mut self, _number: u32) {}
    fn span(&mut self, number: u32, start: usize, end: usize) {
        let value = self.value.take();
        self.seen.push((number, start, end, value));
    }
}

proptest::proptest! {
    /// A sink that skips the varints' values sees the same fields at the
    /// same spans, and the same error at the same offset, as one that
    /// takes them: only whether a value was decoded differs.
    #[test]
    fn a_walk_that_skips_values_reads_the_same_fields(
        bytes in proptest::collection::vec(
            proptest::sample::select(vec![
                0x00u8, 0x01, 0x08, 0x10, 0x12, 0x0a, 0x7f, 0x80, 0x81, 0xff, 0x03, 0x05, 0x0d,
            ]),
            0..40,
        ),
    ) {
        let mut taking = Calls { wants_values: true, ..Calls::default() };
        let mut skipping = Calls::default();
        let took = walk_fields_into(&bytes, &mut taking);
        let skipped = walk_fields_into(&bytes, &mut skipping);
        proptest::prop_assert_eq!(took, skipped);
        let strip = |seen: &[(u32, usize, usize, Option<u64>)]| -> Vec<(u32, usize, usize)> {
            seen.iter().map(|&(n, s, e, _)| (n, s, e)).collect()
        };
        proptest::prop_assert_eq!(strip(&taking.seen), strip(&skipping.seen));
        proptest::prop_assert!(skipping.seen.iter().all(|c| c.3.is_none()));
    }
}
