//! Building blocks of the merge's unit tests: trace records, compressed
//! bundles, inputs written to a directory, and arbitrary packets.

use std::io::Write;
use std::path::Path;

use flate2::Compression;
use flate2::write::ZlibEncoder;
use tracesync_protocol::scan::field;
use tracesync_protocol::wire;

use super::inputs::{InputSource, expand_inputs};

/// Appends `packet` as one record of a trace (field 1 of `Trace`).
pub fn record(out: &mut Vec<u8>, packet: &[u8]) {
    wire::put_len_field(out, 1, packet);
}

/// A packet whose `compressed_packets` holds `packets` as zlib'd records.
pub fn compressed_bundle<'a>(packets: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut inner = Vec::new();
    for p in packets {
        record(&mut inner, p);
    }
    let mut z = ZlibEncoder::new(Vec::new(), Compression::fast());
    z.write_all(&inner).expect("writes to a Vec");
    let mut bundle = Vec::new();
    wire::put_len_field(
        &mut bundle,
        field::COMPRESSED_PACKETS,
        &z.finish().expect("writes to a Vec"),
    );
    bundle
}

/// `bytes` written to `dir/name`, as the merge's input.
pub fn source_of(dir: &Path, name: &str, bytes: &[u8]) -> InputSource {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("writes the input");
    expand_inputs(&[path], None)
        .expect("one input")
        .traces
        .remove(0)
}

/// Packets of the top-level fields the merge reads (and any others),
/// repeated and in any order, of every wire type, some with a byte
/// changed or cut short: what the scans must agree on.
pub fn arbitrary_packet() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let numbers = prop_oneof![
        Just(field::CLOCK_SNAPSHOT),
        Just(field::TIMESTAMP),
        Just(field::TRUSTED_PACKET_SEQUENCE_ID),
        Just(11u32),
        Just(field::SEQUENCE_FLAGS),
        Just(36u32),
        Just(field::INCREMENTAL_STATE_CLEARED),
        Just(field::SYSTEM_INFO),
        Just(field::COMPRESSED_PACKETS),
        Just(field::TIMESTAMP_CLOCK_ID),
        Just(field::TRACE_PACKET_DEFAULTS),
        Just(97u32),
        Just(field::MACHINE_ID),
        1u32..130,
    ];
    let field = (
        numbers,
        0u8..6,
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..12),
    );
    (
        proptest::collection::vec(field, 0..10),
        proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
        0usize..3,
    )
        .prop_map(|(fields, damage, cut)| {
            let mut p = Vec::new();
            for (number, kind, v, bytes) in fields {
                match kind {
                    0 => wire::put_varint_field(&mut p, number, v % 4),
                    1 => wire::put_varint_field(&mut p, number, v),
                    2 => wire::put_len_field(&mut p, number, &bytes),
                    3 => {
                        // A TracePacketDefaults-like body: a clock id, or none.
                        let mut d = Vec::new();
                        if v % 3 > 0 {
                            wire::put_varint_field(&mut d, field::TIMESTAMP_CLOCK_ID, v % 300);
                        }
                        wire::put_len_field(&mut p, number, &d);
                    }
                    4 => {
                        wire::put_varint(&mut p, u64::from(number) << 3 | 1);
                        p.extend_from_slice(&v.to_le_bytes());
                    }
                    _ => {
                        wire::put_varint(&mut p, u64::from(number) << 3 | 5);
                        p.extend_from_slice(&v.to_le_bytes()[..4]);
                    }
                }
            }
            if let Some((at, byte)) = damage
                && !p.is_empty()
            {
                let at = at.index(p.len());
                p[at] = byte;
            }
            p.truncate(p.len().saturating_sub(cut));
            p
        })
}
