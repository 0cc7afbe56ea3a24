//! Property tests of the scanner, the stream reader and stamping.

use std::io::Write;

use flate2::Compression;
use flate2::write::{GzEncoder, ZlibEncoder};
use proptest::prelude::*;
use prost::Message;
use tracesync_protocol::perfetto::{
    ClockSnapshot, TracePacket, TracePacketDefaults, TrackDescriptor, TrackEvent, clock_snapshot,
    trace_packet,
};
use tracesync_protocol::reader::{TraceFile, TraceReader};
use tracesync_protocol::scan::{self, Fields, Stamp, scan_packet, stamp_into};
use tracesync_protocol::wire;

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn zlib(b: &[u8]) -> Vec<u8> {
    let mut e = ZlibEncoder::new(Vec::new(), Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn frame(bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bodies {
        wire::put_trace_packet(&mut out, b);
    }
    out
}

/// Splits `bytes` into chunks whose sizes cycle through `sizes`.
fn chunks<'a>(bytes: &'a [u8], sizes: &'a [usize]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = bytes;
    let mut i = 0;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let n = sizes[i % sizes.len()].clamp(1, rest.len());
        i += 1;
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Some(head)
    })
}

type Got = Vec<(Vec<u8>, u64, bool)>;

/// Feeds `bytes` in chunks; returns the packets and whether the stream ended cleanly.
fn read_chunked(bytes: &[u8], sizes: &[usize], max: usize) -> (Got, bool) {
    let mut r = TraceReader::with_max_packet_size(max);
    let mut got = Vec::new();
    for chunk in chunks(bytes, sizes) {
        r.push(chunk);
        loop {
            match r.next_packet() {
                Ok(Some(p)) => got.push((p.bytes.to_vec(), p.offset, p.in_bundle)),
                Ok(None) => break,
                Err(_) => return (got, false),
            }
        }
    }
    (got, r.finish().is_ok())
}

fn read_file(bytes: &[u8]) -> (Got, bool) {
    let mut f = TraceFile::new(bytes).unwrap();
    let mut got = Vec::new();
    loop {
        match f.next_packet() {
            Ok(Some(p)) => got.push((p.bytes.to_vec(), p.offset, p.in_bundle)),
            Ok(None) => return (got, true),
            Err(_) => return (got, false),
        }
    }
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..300, 1..8)
}

/// Streams that reach deep into the reader: valid records, random records,
/// bundles of random or valid content, and raw junk.
fn messy_stream() -> impl Strategy<Value = Vec<u8>> {
    let segment = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| frame(&[b])),
        prop::collection::vec(any::<u8>(), 0..20),
        prop::collection::vec(any::<u8>(), 0..60).prop_map(|junk| {
            // A bundle of random bytes behind a zlib header.
            let mut data = vec![0x78, 0x9c];
            data.extend(junk);
            let mut p = Vec::new();
            wire::put_len_field(&mut p, 50, &data);
            frame(&[p])
        }),
        prop::collection::vec(any::<u8>(), 0..60).prop_map(|inner| {
            // A well-compressed bundle of random (probably malformed) inner bytes.
            let mut p = Vec::new();
            wire::put_len_field(&mut p, 50, &zlib(&inner));
            frame(&[p])
        }),
    ];
    prop::collection::vec(segment, 0..6).prop_map(|s| s.concat())
}

fn packet() -> impl Strategy<Value = TracePacket> {
    let data = prop_oneof![
        Just(None),
        (any::<u64>(), ".{0,20}").prop_map(|(uuid, name)| Some(
            trace_packet::Data::TrackDescriptor(TrackDescriptor {
                uuid: Some(uuid),
                name: Some(name),
                parent_uuid: None,
                ..Default::default()
            })
        )),
        (any::<u64>(), ".{0,40}").prop_map(|(track, name)| Some(trace_packet::Data::TrackEvent(
            TrackEvent {
                track_uuid: Some(track),
                name_field: Some(tracesync_protocol::perfetto::track_event::NameField::Name(
                    name
                )),
                ..Default::default()
            }
        ))),
        prop::collection::vec((0u32..200, any::<u64>()), 0..4).prop_map(|clocks| Some(
            trace_packet::Data::ClockSnapshot(ClockSnapshot {
                clocks: clocks
                    .into_iter()
                    .map(|(id, ts)| clock_snapshot::Clock {
                        clock_id: Some(id),
                        timestamp: Some(ts),
                        ..Default::default()
                    })
                    .collect(),
                primary_trace_clock: None,
            })
        )),
        // Large enough for multi-byte lengths.
        prop::collection::vec(any::<u8>(), 100..400).prop_map(|b| Some(
            trace_packet::Data::TrackDescriptor(TrackDescriptor {
                name: Some(String::from_utf8_lossy(&b).into_owned()),
                ..Default::default()
            })
        )),
    ];
    (
        (
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u32>()),
            prop::option::of(any::<i32>()),
            prop::option::of(any::<u32>()),
            prop::option::of(any::<i32>()),
        ),
        (
            prop::option::of(0u32..4),
            prop::option::of(any::<u32>()),
            prop::option::of(any::<u32>()),
            prop::option::of(0u32..256),
            data,
        ),
    )
        .prop_map(
            |((ts, clock, uid, seq, pid), (flags, dropped, machine, defaults, data))| TracePacket {
                timestamp: ts,
                timestamp_clock_id: clock,
                optional_trusted_uid: uid.map(trace_packet::OptionalTrustedUid::TrustedUid),
                optional_trusted_packet_sequence_id: seq
                    .map(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId),
                trusted_pid: pid,
                sequence_flags: flags,
                previous_packet_dropped: dropped,
                machine_id: machine,
                trace_packet_defaults: defaults.map(|c| TracePacketDefaults {
                    timestamp_clock_id: Some(c),
                }),
                data,
                ..Default::default()
            },
        )
}

fn stamp() -> impl Strategy<Value = Stamp> {
    (
        prop::option::of(prop_oneof![Just(0u32), any::<u32>()]),
        prop::option::of(any::<u32>()),
        prop::option::of(any::<u32>()),
        any::<bool>(),
    )
        .prop_map(|(machine_id, seq, clock, strip)| Stamp {
            machine_id,
            trusted_packet_sequence_id: seq,
            default_timestamp_clock_id: clock,
            strip_trusted: strip,
        })
}

/// `scan_packet` as plainly defined over [`Fields`]: the reference for the
/// hand-rolled loop.
fn reference_scan(packet: &[u8]) -> Result<scan::PacketFields<'_>, scan::ScanError> {
    use scan::FieldValue::{Len, Varint};
    use scan::field::*;
    let mut out = scan::PacketFields::default();
    let metadata = [
        TRUSTED_UID,
        TIMESTAMP,
        TRUSTED_PACKET_SEQUENCE_ID,
        INTERNED_DATA,
        SEQUENCE_FLAGS,
        INCREMENTAL_STATE_CLEARED,
        PREVIOUS_PACKET_DROPPED,
        TIMESTAMP_CLOCK_ID,
        TRACE_PACKET_DEFAULTS,
        TRUSTED_PID,
        FIRST_PACKET_ON_SEQUENCE,
        MACHINE_ID,
    ];
    for f in Fields::new(packet) {
        let f = f?;
        out.stamp_layout.note(f.number, f.start, f.end);
        match (f.number, f.value) {
            (TIMESTAMP, Varint(v)) => out.timestamp = Some(v),
            (TIMESTAMP_CLOCK_ID, Varint(v)) => out.timestamp_clock_id = Some(v as u32),
            (TRUSTED_PACKET_SEQUENCE_ID, Varint(v)) => {
                out.trusted_packet_sequence_id = Some(v as u32)
            }
            (TRUSTED_UID, _) => out.has_trusted_uid = true,
            (TRUSTED_PID, _) => out.has_trusted_pid = true,
            (SEQUENCE_FLAGS, Varint(v)) => out.sequence_flags = v as u32,
            (INCREMENTAL_STATE_CLEARED, Varint(v)) => out.incremental_state_cleared = v != 0,
            (PREVIOUS_PACKET_DROPPED, Varint(v)) => out.previous_packet_dropped = v as u32,
            (MACHINE_ID, Varint(v)) => out.machine_id = Some(v as u32),
            (INTERNED_DATA, _) => out.has_interned_data = true,
            (TRACE_PACKET_DEFAULTS, Len(b)) => out.trace_packet_defaults = Some(b),
            (n, value) => {
                if let Len(b) = value {
                    match n {
                        CLOCK_SNAPSHOT => out.clock_snapshot = Some(b),
                        SYSTEM_INFO => out.system_info = Some(b),
                        REMOTE_CLOCK_SYNC => out.remote_clock_sync = Some(b),
                        COMPRESSED_PACKETS => out.compressed_packets = Some(b),
                        _ => {}
                    }
                }
                if !metadata.contains(&n) && out.data_field.is_none() {
                    out.data_field = Some(n);
                }
            }
        }
    }
    Ok(out)
}

/// Random top-level fields over the numbers the scanner knows, any wire type.
fn field_soup() -> impl Strategy<Value = Vec<u8>> {
    let number = prop_oneof![
        prop::sample::select(vec![
            1u32, 3, 6, 8, 10, 11, 12, 13, 41, 42, 45, 50, 58, 59, 79, 87, 98, 107
        ]),
        1u32..200,
    ];
    let one = (
        number,
        0u8..6,
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(n, wt, v, b)| {
            let mut out = Vec::new();
            wire::put_varint(&mut out, (u64::from(n) << 3) | u64::from(wt));
            match wt {
                0 => wire::put_varint(&mut out, v),
                1 => out.extend_from_slice(&v.to_le_bytes()),
                2 => {
                    wire::put_varint(&mut out, b.len() as u64);
                    out.extend_from_slice(&b);
                }
                5 => out.extend_from_slice(&(v as u32).to_le_bytes()),
                _ => out.extend_from_slice(&b),
            }
            out
        });
    (
        prop::collection::vec(one, 0..8),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|(fields, cut, truncate)| {
            let mut b = fields.concat();
            if truncate && !b.is_empty() {
                b.truncate(cut.index(b.len()));
            }
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn scan_matches_the_field_walk(bytes in prop_oneof![
        field_soup(),
        prop::collection::vec(any::<u8>(), 0..64),
        packet().prop_map(|p| p.encode_to_vec()),
    ]) {
        prop_assert_eq!(scan_packet(&bytes), reference_scan(&bytes));
    }

    /// Stamping with the scan's field positions gives the same bytes as
    /// stamping by walking the packet.
    #[test]
    fn stamp_scanned_matches_stamp_into(
        bytes in prop_oneof![field_soup(), packet().prop_map(|p| p.encode_to_vec())],
        st in stamp(),
    ) {
        if let Ok(fields) = scan_packet(&bytes) {
            let (mut fast, mut walked) = (Vec::new(), Vec::new());
            let fast_result = scan::stamp_scanned(&bytes, &fields, &st, &mut fast);
            let walked_result = scan::stamp_into(&bytes, &st, &mut walked);
            prop_assert_eq!(fast_result.is_ok(), walked_result.is_ok());
            prop_assert_eq!(fast, walked);
        }
    }

    #[test]
    fn scanner_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256), st in stamp()) {
        let _ = scan_packet(&bytes);
        let _ = scan::defaults_timestamp_clock_id(&bytes);
        for f in Fields::new(&bytes).flatten() {
            prop_assert!(f.start < f.end && f.end <= bytes.len());
        }
        let mut out = Vec::new();
        if stamp_into(&bytes, &st, &mut out).is_ok() {
            prop_assert!(scan_packet(&out).is_ok());
        }
    }

    #[test]
    fn varint_decoding_matches_the_definition(bytes in prop::collection::vec(any::<u8>(), 0..14)) {
        let mut value = 0u64;
        let mut want = Err(wire::WireError::VarintTooLong);
        for i in 0..10 {
            let Some(&byte) = bytes.get(i) else {
                want = Err(wire::WireError::Truncated);
                break;
            };
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                want = Ok((value, i + 1));
                break;
            }
        }
        prop_assert_eq!(wire::decode_varint(&bytes), want);
    }

    #[test]
    fn reader_never_panics_on_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        sizes in chunk_sizes(),
    ) {
        read_chunked(&bytes, &sizes, 1 << 20);
    }

    #[test]
    fn reader_never_panics_on_messy_streams(
        bytes in messy_stream(),
        sizes in chunk_sizes(),
        max in prop_oneof![Just(1usize << 20), 0usize..64],
    ) {
        // The same stream gives the same answer however it is chunked.
        let whole = read_chunked(&bytes, &[bytes.len().max(1)], max);
        prop_assert_eq!(read_chunked(&bytes, &sizes, max), whole);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn file_reader_never_panics(bytes in messy_stream(), gz in any::<bool>(), cut in any::<prop::sample::Index>()) {
        let input = if gz { gzip(&bytes) } else { bytes.clone() };
        let (got, ok) = read_file(&input);
        prop_assert_eq!((got, ok), read_chunked(&bytes, &[bytes.len().max(1)], 128 << 20));
        // Truncated and corrupted gzip.
        if gz && !input.is_empty() {
            let at = cut.index(input.len());
            read_file(&input[..at]);
            let mut bad = input.clone();
            bad[at] ^= 0x5a;
            read_file(&bad);
        }
    }

    #[test]
    fn file_reader_never_panics_on_gzip_magic_junk(junk in prop::collection::vec(any::<u8>(), 0..200)) {
        let input = [&[0x1f, 0x8b][..], &junk].concat();
        let (_, ok) = read_file(&input);
        prop_assert!(!ok);
    }

    #[test]
    fn valid_streams_round_trip(
        packets in prop::collection::vec(packet(), 0..20),
        sizes in chunk_sizes(),
        gz in any::<bool>(),
    ) {
        let bodies: Vec<Vec<u8>> = packets.iter().map(Message::encode_to_vec).collect();
        let stream = frame(&bodies);
        let mut offset = 0;
        let want: Got = bodies
            .iter()
            .map(|b| {
                let o = offset;
                offset += (1 + wire::varint_len(b.len() as u64) + b.len()) as u64;
                (b.clone(), o, false)
            })
            .collect();
        prop_assert_eq!(read_chunked(&stream, &sizes, 128 << 20), (want.clone(), true));
        let input = if gz { gzip(&stream) } else { stream.clone() };
        prop_assert_eq!(read_file(&input), (want, true));
    }

    #[test]
    fn bundles_round_trip(
        packets in prop::collection::vec(packet(), 1..12),
        split in any::<prop::sample::Index>(),
        sizes in chunk_sizes(),
    ) {
        let bodies: Vec<Vec<u8>> = packets.iter().map(Message::encode_to_vec).collect();
        let at = split.index(bodies.len());
        let bundle = TracePacket {
            data: Some(trace_packet::Data::CompressedPackets(zlib(&frame(&bodies[at..])).into())),
            ..Default::default()
        }
        .encode_to_vec();
        let mut outer = bodies[..at].to_vec();
        outer.push(bundle);
        let stream = frame(&outer);
        let bundle_offset = (stream.len() - outer.last().map_or(0, |b| {
            1 + wire::varint_len(b.len() as u64) + b.len()
        })) as u64;
        let (got, ok) = read_chunked(&stream, &sizes, 128 << 20);
        prop_assert!(ok);
        let got_bodies: Vec<Vec<u8>> = got.iter().map(|g| g.0.clone()).collect();
        prop_assert_eq!(got_bodies, bodies);
        for (i, (_, offset, in_bundle)) in got.iter().enumerate() {
            prop_assert_eq!(*in_bundle, i >= at);
            if i >= at {
                prop_assert_eq!(*offset, bundle_offset);
            }
        }
    }

    #[test]
    fn stamp_sets_exactly_the_stamped_fields(p in packet(), st in stamp()) {
        let mut out = Vec::new();
        stamp_into(&p.encode_to_vec(), &st, &mut out).unwrap();
        let got = TracePacket::decode(&out[..]).unwrap();

        let mut want = p.clone();
        if st.strip_trusted {
            want.optional_trusted_uid = None;
            want.trusted_pid = None;
            want.machine_id = None;
            want.optional_trusted_packet_sequence_id = None;
        }
        if let Some(m) = st.machine_id {
            want.machine_id = (m != 0).then_some(m);
        }
        if let Some(seq) = st.trusted_packet_sequence_id {
            want.optional_trusted_packet_sequence_id = Some(
                trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
            );
        }
        if want.timestamp_clock_id.is_none() {
            want.timestamp_clock_id = st.default_timestamp_clock_id;
        }
        prop_assert_eq!(got, want);

        // The scanner agrees with prost.
        let f = scan_packet(&out).unwrap();
        prop_assert_eq!(f.machine_id, st.machine_id.filter(|&m| m != 0).or(
            if st.strip_trusted || st.machine_id.is_some() { None } else { p.machine_id }
        ));
    }
}
