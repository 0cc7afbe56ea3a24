//! Tests of the reader: framing, chunking, bundles, files.

use super::*;
use crate::perfetto::{TracePacket, TrackDescriptor, trace_packet};
use crate::wire;
use flate2::Compression;
use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
use prost::Message;
use std::io::Write;

/// Packet bodies of assorted sizes: empty, 1-byte and 2-byte lengths.
pub(super) fn bodies() -> Vec<Vec<u8>> {
    (0..6u64)
        .map(|i| {
            TracePacket {
                timestamp: (i > 0).then_some(1000 * i),
                data: (i % 2 == 1).then(|| {
                    trace_packet::Data::TrackDescriptor(TrackDescriptor {
                        name: Some("n".repeat(60 * i as usize)),
                        ..Default::default()
                    })
                }),
                ..Default::default()
            }
            .encode_to_vec()
        })
        .collect()
}

pub(super) fn frame(bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bodies {
        wire::put_trace_packet(&mut out, b);
    }
    out
}

/// Offsets of each record in a framed stream.
pub(super) fn offsets(bodies: &[Vec<u8>]) -> Vec<u64> {
    let mut off = 0;
    bodies
        .iter()
        .map(|b| {
            let o = off;
            off += (1 + wire::varint_len(b.len() as u64) + b.len()) as u64;
            o
        })
        .collect()
}

pub(super) type Got = Vec<(Vec<u8>, u64, bool)>;

fn drain(r: &mut TraceReader, got: &mut Got) -> Result<(), ReadError> {
    while let Some(p) = r.next_packet()? {
        got.push((p.bytes.to_vec(), p.offset, p.in_bundle));
    }
    Ok(())
}

fn read_chunked(stream: &[u8], cuts: &[usize]) -> Result<Got, ReadError> {
    let mut r = TraceReader::new();
    let mut got = Vec::new();
    let mut prev = 0;
    for &c in cuts.iter().chain(std::iter::once(&stream.len())) {
        r.push(&stream[prev..c]);
        prev = c;
        drain(&mut r, &mut got)?;
    }
    r.finish()?;
    Ok(got)
}

/// As [`read_chunked`], with expansion off and each bundle expanded by the
/// caller (`bundle_range`, `expand_last`), as a caller that scans every
/// packet does.
fn read_caller_expanding(stream: &[u8], cuts: &[usize]) -> Result<Got, ReadError> {
    let mut r = TraceReader::new();
    r.set_expand_bundles(false);
    let mut got = Vec::new();
    let mut prev = 0;
    for &c in cuts.iter().chain(std::iter::once(&stream.len())) {
        r.push(&stream[prev..c]);
        prev = c;
        while let Some(p) = r.next_packet()? {
            let range = (!p.in_bundle).then(|| bundle_range(p.bytes)).flatten();
            let bytes_len = p.bytes.len();
            match range {
                Some(range) => {
                    assert_eq!(r.last_packet().map(|p| p.bytes.len()), Some(bytes_len));
                    r.expand_last(range)?;
                }
                None => got.push((p.bytes.to_vec(), p.offset, p.in_bundle)),
            }
        }
    }
    r.finish()?;
    Ok(got)
}

pub(super) fn expected(bodies: &[Vec<u8>]) -> Got {
    bodies
        .iter()
        .zip(offsets(bodies))
        .map(|(b, o)| (b.clone(), o, false))
        .collect()
}

#[test]
fn split_at_every_boundary() {
    let bodies = bodies();
    assert!(bodies.iter().any(Vec::is_empty));
    assert!(bodies.iter().any(|b| b.len() >= 128));
    let stream = frame(&bodies);
    let want = expected(&bodies);
    for i in 0..=stream.len() {
        assert_eq!(read_chunked(&stream, &[i]).unwrap(), want, "cut at {i}");
    }
    // Every pair of cuts over the first records.
    for i in 0..40 {
        for j in i..40 {
            assert_eq!(read_chunked(&stream, &[i, j]).unwrap(), want);
        }
    }
    let every: Vec<usize> = (1..stream.len()).collect();
    assert_eq!(read_chunked(&stream, &every).unwrap(), want);
}

#[test]
fn zero_length_packets_and_empty_input() {
    let stream = [0x0a, 0x00, 0x0a, 0x00];
    let got = read_chunked(&stream, &[]).unwrap();
    assert_eq!(got, [(vec![], 0, false), (vec![], 2, false)]);
    assert_eq!(read_chunked(&[], &[]).unwrap(), []);
}

#[test]
fn non_minimal_tag_is_accepted() {
    // Tag 10 as a two-byte varint is still field 1, wire type 2.
    let got = read_chunked(&[0x8a, 0x00, 0x01, 0x42], &[]).unwrap();
    assert_eq!(got, [(vec![0x42], 0, false)]);
}

fn err_of(stream: &[u8]) -> ReadError {
    read_chunked(stream, &[]).unwrap_err()
}

#[test]
fn truncated_record_at_eof() {
    let bodies = bodies();
    let stream = frame(&bodies);
    let last = *offsets(&bodies).last().unwrap();
    let cut = &stream[..stream.len() - 3];
    let len = bodies.last().unwrap().len() as u64;
    let e = err_of(cut);
    assert_eq!(e.offset, last);
    assert_eq!(
        e.kind,
        ReadErrorKind::LengthPastEnd {
            len,
            available: len - 3
        }
    );
    assert!(e.to_string().starts_with(&format!("byte offset {last}: ")));
    // A header cut after the tag.
    let e = err_of(&stream[..last as usize + 1]);
    assert_eq!(
        (e.offset, e.kind),
        (last, ReadErrorKind::TruncatedHeader { available: 1 })
    );
}

#[test]
fn length_beyond_eof() {
    let mut stream = frame(&bodies()[..2]);
    let at = stream.len() as u64;
    stream.extend_from_slice(&[0x0a, 0xe8, 0x07, 1, 2, 3]); // len 1000
    let e = err_of(&stream);
    assert_eq!(e.offset, at);
    assert_eq!(
        e.kind,
        ReadErrorKind::LengthPastEnd {
            len: 1000,
            available: 3
        }
    );
}

#[test]
fn garbage_is_not_a_packet_record() {
    let mut stream = frame(&bodies()[..3]);
    let at = stream.len() as u64;
    stream.extend_from_slice(b"hello, world");
    let e = err_of(&stream);
    // 'h' = 0x68: field 13, wire type 0.
    assert_eq!(e.offset, at);
    assert_eq!(
        e.kind,
        ReadErrorKind::NotPacketRecord {
            field: 13,
            wire_type: 0
        }
    );
    assert!(e.to_string().contains("field 13, wire type 0"));
    // Another field with the right wire type is rejected too.
    let e = err_of(&[0x12, 0x00]);
    assert_eq!(
        e.kind,
        ReadErrorKind::NotPacketRecord {
            field: 2,
            wire_type: 2
        }
    );
}

#[test]
fn bad_varints() {
    let mut stream = frame(&bodies()[..1]);
    let at = stream.len() as u64;
    stream.extend_from_slice(&[0xff; 11]);
    let e = err_of(&stream);
    assert_eq!((e.offset, e.kind), (at, ReadErrorKind::BadVarint));
    // The length varint, and a 10-byte varint overflowing 64 bits.
    let mut len = vec![0x0a];
    len.extend_from_slice(&[0xff; 11]);
    assert_eq!(err_of(&len).kind, ReadErrorKind::BadVarint);
    let mut over = vec![0x0a];
    over.extend_from_slice(&[0x80; 9]);
    over.push(0x02);
    assert_eq!(err_of(&over).kind, ReadErrorKind::BadVarint);
}

#[test]
fn errors_are_sticky() {
    let mut r = TraceReader::new();
    r.push(&[0x0a, 0x01, 0x05, 0x12]);
    assert!(r.next_packet().unwrap().is_some());
    let e = r.next_packet().unwrap_err();
    r.push(&[0x0a, 0x00]);
    assert_eq!(r.next_packet().unwrap_err(), e);
    assert_eq!(r.finish().unwrap_err(), e);
}

#[test]
fn packet_size_limit() {
    let mut r = TraceReader::with_max_packet_size(4);
    r.push(&[0x0a, 0x04, 1, 2, 3, 4, 0x0a, 0x05]);
    assert_eq!(r.next_packet().unwrap().unwrap().bytes, [1, 2, 3, 4]);
    // Rejected from the header alone, before the body arrives.
    let e = r.next_packet().unwrap_err();
    assert_eq!(
        (e.offset, e.kind),
        (6, ReadErrorKind::PacketTooLarge { len: 5, max: 4 })
    );
}

#[test]
fn memory_stays_bounded() {
    let body = vec![7u8; 1000];
    let stream = frame(&vec![body; 2000]);
    let mut r = TraceReader::new();
    let mut n = 0;
    for chunk in stream.chunks(4096) {
        r.push(chunk);
        while r.next_packet().unwrap().is_some() {
            n += 1;
        }
        assert!(
            r.buf.len() <= 2 * (4096 + 1003),
            "buffer grew to {}",
            r.buf.len()
        );
    }
    r.finish().unwrap();
    assert_eq!(n, 2000);
}

fn bundle_packet(inner: &[Vec<u8>], encode: fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    TracePacket {
        data: Some(trace_packet::Data::CompressedPackets(
            encode(&frame(inner)).into(),
        )),
        ..Default::default()
    }
    .encode_to_vec()
}

fn zlib(b: &[u8]) -> Vec<u8> {
    let mut e = ZlibEncoder::new(Vec::new(), Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(b: &[u8]) -> Vec<u8> {
    let mut e = DeflateEncoder::new(Vec::new(), Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

pub(super) fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

#[test]
fn bundles_expand_with_the_bundle_offset() {
    let b = bodies();
    for encode in [zlib as fn(&[u8]) -> Vec<u8>, raw_deflate, gzip] {
        let outer = vec![
            b[1].clone(),
            bundle_packet(&b[2..5], encode),
            b[5].clone(),
            bundle_packet(&[], encode),
            b[0].clone(),
        ];
        let stream = frame(&outer);
        let offs = offsets(&outer);
        let mut want = vec![(b[1].clone(), offs[0], false)];
        want.extend(b[2..5].iter().map(|p| (p.clone(), offs[1], true)));
        want.push((b[5].clone(), offs[2], false));
        want.push((b[0].clone(), offs[4], false)); // empty bundle yields nothing
        for cut in 0..=stream.len() {
            assert_eq!(read_chunked(&stream, &[cut]).unwrap(), want);
            assert_eq!(read_caller_expanding(&stream, &[cut]).unwrap(), want);
        }

        // With expansion off, bundles pass through.
        let mut r = TraceReader::new();
        r.set_expand_bundles(false);
        r.push(&stream);
        let mut got = Vec::new();
        drain(&mut r, &mut got).unwrap();
        assert_eq!(got, expected(&outer));
    }
}

fn bundle_err(data: Vec<u8>, max: usize) -> ReadError {
    let p = TracePacket {
        data: Some(trace_packet::Data::CompressedPackets(data.into())),
        ..Default::default()
    };
    let mut stream = frame(&bodies()[..1]);
    wire::put_trace_packet(&mut stream, &p.encode_to_vec());
    let mut r = TraceReader::with_max_packet_size(max);
    r.push(&stream);
    assert!(r.next_packet().unwrap().is_some());
    let e = r.next_packet().unwrap_err();
    assert_eq!(e.offset, offsets(&bodies()[..2])[1]);
    // The same error when the caller expands the bundle.
    let mut r = TraceReader::with_max_packet_size(max);
    r.set_expand_bundles(false);
    r.push(&stream);
    assert!(r.next_packet().unwrap().is_some());
    let bytes = r.next_packet().unwrap().unwrap().bytes;
    let range = bundle_range(bytes).expect("a bundle");
    assert_eq!(r.expand_last(range).unwrap_err(), e);
    assert_eq!(r.next_packet().unwrap_err(), e, "final");
    e
}

#[test]
fn bad_bundles() {
    let e = bundle_err(b"\x78\x9cnot deflate at all".to_vec(), 1 << 20);
    assert!(
        matches!(e.kind, ReadErrorKind::BadBundle(BundleError::Inflate(_))),
        "{e}"
    );

    let full = zlib(&frame(&bodies()));
    let e = bundle_err(full[..full.len() / 2].to_vec(), 1 << 20);
    assert_eq!(e.kind, ReadErrorKind::BadBundle(BundleError::Truncated));

    let e = bundle_err(zlib(&[0u8; 10_000]), 4096);
    assert_eq!(
        e.kind,
        ReadErrorKind::BadBundle(BundleError::TooLarge { max: 4096 })
    );
    // A limit below the initial reservation (found by the property tests).
    let e = bundle_err(zlib(&[0u8; 1000]), 30);
    assert_eq!(
        e.kind,
        ReadErrorKind::BadBundle(BundleError::TooLarge { max: 30 })
    );

    // Inner stream with a partial record after a good one.
    let mut inner = frame(&bodies()[..2]);
    let at = inner.len() as u64;
    inner.extend_from_slice(&[0x0a, 0x09, 1]);
    let e = bundle_err(zlib(&inner), 1 << 20);
    let want = BundleError::Inner {
        offset: at,
        kind: Box::new(ReadErrorKind::LengthPastEnd {
            len: 9,
            available: 1,
        }),
    };
    assert_eq!(e.kind, ReadErrorKind::BadBundle(want));
    assert!(e.to_string().contains("bad compressed bundle"));

    let e = bundle_err(zlib(b"\x10\x01"), 1 << 20);
    let want = BundleError::Inner {
        offset: 0,
        kind: Box::new(ReadErrorKind::NotPacketRecord {
            field: 2,
            wire_type: 0,
        }),
    };
    assert_eq!(e.kind, ReadErrorKind::BadBundle(want));
}

#[test]
fn malformed_packet_with_field_50_is_not_a_bundle() {
    // Field 50 then a truncated field: passed through for the scanner.
    let mut body = Vec::new();
    wire::put_len_field(&mut body, 50, b"junk");
    body.push(0x08);
    let got = read_chunked(&frame(std::slice::from_ref(&body)), &[]).unwrap();
    assert_eq!(got, [(body, 0, false)]);
}

proptest::proptest! {
    /// The word-at-a-time search agrees with `contains` at every length,
    /// offset and position of the byte (and of its neighbours 0x91, 0x93,
    /// 0x12 and 0x82, one bit away).
    #[test]
    fn has_byte_0x92_is_contains(
        mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80),
        plant in proptest::option::of((0usize..80, proptest::sample::select(vec![0x92u8, 0x91, 0x93, 0x12, 0x82]))),
        skip in 0usize..8,
    ) {
        if let Some((at, byte)) = plant && !bytes.is_empty() {
            let at = at % bytes.len();
            bytes[at] = byte;
        }
        let p = &bytes[skip.min(bytes.len())..];
        proptest::prop_assert_eq!(super::bundle::has_byte_0x92(p), p.contains(&0x92));
    }
}
