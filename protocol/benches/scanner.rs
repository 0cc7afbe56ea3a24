//! Throughput of the reader + scanner against a plain memcpy of the same bytes.

use std::sync::LazyLock;

use divan::Bencher;
use divan::counter::BytesCount;
use tracesync_protocol::reader::TraceReader;
use tracesync_protocol::scan::{field, scan_packet};
use tracesync_protocol::wire::{self, WireType};

fn main() {
    divan::main();
}

const TOTAL: usize = 64 << 20;
const CHUNK: usize = 256 << 10;

/// ~64-byte packets like TrackEvent slices: timestamp, sequence id, flags
/// and a nested payload.
fn track_event_packet(out: &mut Vec<u8>, i: u64) {
    let mut event = Vec::with_capacity(48);
    wire::put_varint_field(&mut event, 11, 0x1234_5678 + i % 7); // track_uuid
    wire::put_varint_field(&mut event, 9, 1 + i % 2); // type
    wire::put_varint_field(&mut event, 10, i % 500); // name_iid
    wire::put_len_field(&mut event, 22, b"rendering,gpu"); // categories
    wire::put_tag(&mut event, 30, WireType::Varint); // counter_value
    wire::put_varint(&mut event, i.wrapping_mul(0x9e37_79b9));
    let mut p = Vec::with_capacity(64);
    wire::put_varint_field(
        &mut p,
        field::TIMESTAMP,
        1_700_000_000_000_000_000 + i * 1000,
    );
    wire::put_len_field(&mut p, 11, &event); // track_event
    wire::put_varint_field(&mut p, field::TRUSTED_PACKET_SEQUENCE_ID, 1 + i % 16);
    wire::put_varint_field(&mut p, field::SEQUENCE_FLAGS, 2);
    wire::put_trace_packet(out, &p);
}

/// ~4 KiB packets like FtraceEventBundles: cpu plus many nested events.
fn ftrace_bundle_packet(out: &mut Vec<u8>, i: u64) {
    let mut bundle = Vec::with_capacity(4200);
    wire::put_varint_field(&mut bundle, 1, i % 8); // cpu
    let mut n = 0u64;
    while bundle.len() < 4000 {
        let mut event = Vec::with_capacity(48);
        wire::put_varint_field(&mut event, 1, 1_700_000_000_000_000_000 + n * 137); // timestamp
        wire::put_varint_field(&mut event, 2, 1000 + n % 300); // pid
        wire::put_len_field(
            &mut event,
            315,
            &[0x0a, 0x04, b'c', b'o', b'm', b'm', 0x10, 0x2a],
        );
        wire::put_len_field(&mut bundle, 2, &event); // event
        n += 1;
    }
    let mut p = Vec::with_capacity(4200);
    wire::put_len_field(&mut p, 1, &bundle); // ftrace_events
    wire::put_varint_field(&mut p, field::TRUSTED_UID, 0);
    wire::put_varint_field(&mut p, field::TRUSTED_PACKET_SEQUENCE_ID, 100 + i % 8);
    wire::put_trace_packet(out, &p);
}

static TRACE: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut out = Vec::with_capacity(TOTAL + 8192);
    let mut i = 0u64;
    while out.len() < TOTAL {
        // About half the bytes in each kind.
        if i % 64 == 63 {
            ftrace_bundle_packet(&mut out, i);
        } else {
            track_event_packet(&mut out, i);
        }
        i += 1;
    }
    out
});

#[divan::bench(sample_count = 30, sample_size = 1)]
fn reader_and_scan(bencher: Bencher) {
    let trace = &**TRACE;
    bencher
        .counter(BytesCount::new(trace.len()))
        .bench_local(|| {
            let mut reader = TraceReader::new();
            let mut acc = 0u64;
            for chunk in trace.chunks(CHUNK) {
                reader.push(chunk);
                while let Some(p) = reader.next_packet().unwrap() {
                    let f = scan_packet(p.bytes).unwrap();
                    acc = acc.wrapping_add(f.timestamp.unwrap_or(0));
                    acc = acc.wrapping_add(u64::from(f.trusted_packet_sequence_id.unwrap_or(0)));
                }
            }
            reader.finish().unwrap();
            acc
        });
}

#[divan::bench(sample_count = 30, sample_size = 1)]
fn memcpy_baseline(bencher: Bencher) {
    let trace = &**TRACE;
    let mut dst = vec![0u8; trace.len()];
    bencher
        .counter(BytesCount::new(trace.len()))
        .bench_local(|| {
            dst.copy_from_slice(divan::black_box(trace));
            divan::black_box(&dst);
        });
}
