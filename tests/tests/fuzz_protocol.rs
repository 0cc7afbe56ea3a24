//! Fuzz targets of the wire formats (see `tracesync_tests::fuzz`): the
//! Trace stream reader (chunked, plain and gzip, with compressed bundles),
//! the packet scanner with stamping, and the probe datagrams.
//!
//! What every case must show: no panic; no packet over the reader's limit;
//! the reader holds no more than one record plus the chunk in hand; a stamp
//! gives a packet that scans again with the stamped fields; a datagram
//! that is not a reply to an outstanding probe changes no clock.

use std::io::{Cursor, Write as _};
use std::net::SocketAddr;
use std::sync::OnceLock;

use flate2::Compression;
use flate2::write::{GzEncoder, ZlibEncoder};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tracesync_protocol::reader::{TraceFile, TraceReader};
use tracesync_protocol::relay::v1::{Probe, ProbeRegister, ProbeReply, probe_body::Kind};
use tracesync_protocol::scan::{Stamp, scan_packet, stamp_into, stamp_scanned};
use tracesync_tests::fuzz::{
    self, Node, encode, message, mutate, mutations, packet_field_number, plausible_packet,
    put_varint,
};

const BIN: &str = "fuzz_protocol";

// ---- Trace reader ----

#[derive(Clone, Debug)]
enum Record {
    Packet(Vec<u8>),
    /// A record that is not field 1 / length-delimited.
    Other(Node),
    /// A TracePacket with `compressed_packets` (zlib), possibly cut short.
    Bundle(Vec<Vec<u8>>, Option<prop::sample::Index>),
    /// A bundle that expands to 1 MiB of zeros (a small zip bomb).
    Bomb,
}

fn frame(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.push(0x0a);
        put_varint(&mut out, r.len() as u64);
        out.extend_from_slice(r);
    }
    out
}

fn zlib(b: &[u8]) -> Vec<u8> {
    let mut e = ZlibEncoder::new(Vec::new(), Compression::fast());
    e.write_all(b).expect("in memory");
    e.finish().expect("in memory")
}

fn bomb() -> &'static [u8] {
    static BOMB: OnceLock<Vec<u8>> = OnceLock::new();
    BOMB.get_or_init(|| {
        let zeros = vec![0u8; 1 << 20];
        encode(&[Node::Bytes(50, zlib(&frame(&[zeros])))])
    })
}

impl Record {
    fn encode(&self, out: &mut Vec<u8>) {
        let body = match self {
            Record::Packet(b) => b.clone(),
            Record::Other(n) => {
                n.encode(out);
                return;
            }
            Record::Bundle(inner, cut) => {
                let mut z = zlib(&frame(inner));
                if let Some(cut) = cut {
                    z.truncate(cut.index(z.len()));
                }
                encode(&[Node::Bytes(50, z)])
            }
            Record::Bomb => bomb().to_vec(),
        };
        out.push(0x0a);
        put_varint(out, body.len() as u64);
        out.extend_from_slice(&body);
    }
}

fn packet_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => plausible_packet(),
        2 => message(packet_field_number()).prop_map(|n| encode(&n)),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    prop_oneof![
        8 => packet_body().prop_map(Record::Packet),
        1 => message(packet_field_number()).prop_map(|mut n| Record::Other(
            n.pop().unwrap_or(Node::Varint(2, 1))
        )),
        2 => (prop::collection::vec(packet_body(), 0..4), prop::option::of(any::<prop::sample::Index>()))
            .prop_map(|(p, cut)| Record::Bundle(p, cut)),
        1 => Just(Record::Bomb),
    ]
}

#[derive(Debug)]
struct ReaderCase {
    stream: Vec<u8>,
    chunks: Vec<usize>,
    max: usize,
    gzip: bool,
}

fn reader_case() -> impl Strategy<Value = ReaderCase> {
    (
        prop::collection::vec(record(), 0..8),
        mutations(),
        prop::collection::vec(1usize..300, 1..8),
        prop::sample::select(vec![64usize, 4096, 2 << 20]),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(records, muts, chunks, max, gzip)| {
            let mut stream = Vec::new();
            for r in &records {
                r.encode(&mut stream);
            }
            ReaderCase {
                stream: mutate(stream, &muts),
                chunks,
                max,
                gzip,
            }
        })
}

fn read_chunked(case: &ReaderCase) -> Result<(), TestCaseError> {
    let mut reader = TraceReader::with_max_packet_size(case.max);
    let mut pos = 0;
    let mut k = 0;
    let mut failed = false;
    while pos < case.stream.len() && !failed {
        let n = case.chunks[k % case.chunks.len()].min(case.stream.len() - pos);
        k += 1;
        reader.push(&case.stream[pos..pos + n]);
        pos += n;
        loop {
            match reader.next_packet() {
                Ok(Some(p)) => prop_assert!(
                    p.bytes.len() <= case.max,
                    "packet of {} bytes over the limit {}",
                    p.bytes.len(),
                    case.max
                ),
                Ok(None) => break,
                Err(e) => {
                    prop_assert!(!e.to_string().is_empty());
                    failed = true;
                    break;
                }
            }
        }
        // At most one partial record (header + body <= max) plus one chunk.
        prop_assert!(
            reader.buffered() <= case.max + 16 + 300,
            "reader holds {} bytes (limit {})",
            reader.buffered(),
            case.max
        );
    }
    if !failed {
        let _ = reader.finish();
    }
    Ok(())
}

fn read_file(case: &ReaderCase) -> Result<(), TestCaseError> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(&case.stream).expect("in memory");
    let mut gz = e.finish().expect("in memory");
    // Break the gzip layer too, now and then.
    if case.stream.len().is_multiple_of(3) && gz.len() > 12 {
        let at = case.stream.len() % gz.len();
        gz[at] ^= 0x5a;
    }
    let mut file =
        TraceFile::with_reader(Cursor::new(gz), TraceReader::with_max_packet_size(case.max))
            .map_err(|e| TestCaseError::fail(format!("in-memory read failed: {e}")))?;
    let _ = file.is_gzip();
    let mut packets = 0u64;
    while let Ok(Some(p)) = file.next_packet() {
        prop_assert!(p.bytes.len() <= case.max);
        packets += 1;
        prop_assert!(packets < 1 << 20);
    }
    Ok(())
}

#[test]
fn trace_reader() {
    fuzz::with_big_stack(|| {
        fuzz::run(BIN, "trace_reader", 1_500, reader_case(), |case| {
            read_chunked(&case)?;
            if case.gzip {
                read_file(&case)?;
            }
            Ok(())
        });
    });
}

// ---- packet scanner and stamping ----

fn stamp() -> impl Strategy<Value = Stamp> {
    (
        prop::option::of(prop_oneof![Just(0u32), 1u32..5, any::<u32>()]),
        prop::option::of(prop_oneof![1u32..5, any::<u32>()]),
        prop::option::of(prop_oneof![Just(6u32), 64u32..128, any::<u32>()]),
        any::<bool>(),
    )
        .prop_map(|(machine_id, seq, clock, strip)| Stamp {
            machine_id,
            trusted_packet_sequence_id: seq,
            default_timestamp_clock_id: clock,
            strip_trusted: strip,
        })
}

fn scanner_input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (plausible_packet(), mutations()).prop_map(|(p, m)| mutate(p, &m)),
        3 => (message(packet_field_number()), mutations()).prop_map(|(n, m)| mutate(encode(&n), &m)),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

#[test]
fn packet_scanner_and_stamp() {
    fuzz::with_big_stack(|| {
        fuzz::run(
            BIN,
            "packet_scanner_and_stamp",
            6_000,
            (scanner_input(), stamp()),
            |(packet, stamp)| {
                let Ok(fields) = scan_packet(&packet) else {
                    // A packet that does not scan is never stamped.
                    let mut out = Vec::new();
                    prop_assert!(stamp_into(&packet, &stamp, &mut out).is_err());
                    return Ok(());
                };
                let _ = fields.kind();
                let _ = fields.clears_incremental_state();
                if let Some(defaults) = fields.trace_packet_defaults {
                    let _ = tracesync_protocol::scan::defaults_timestamp_clock_id(defaults);
                }
                let mut a = Vec::new();
                stamp_into(&packet, &stamp, &mut a).map_err(|e| {
                    TestCaseError::fail(format!("stamp_into after a good scan: {e}"))
                })?;
                let mut b = Vec::new();
                stamp_scanned(&packet, &fields, &stamp, &mut b)
                    .map_err(|e| TestCaseError::fail(format!("stamp_scanned: {e}")))?;
                prop_assert_eq!(&a, &b, "stamp_scanned differs from stamp_into");
                let again = scan_packet(&a).map_err(|e| {
                    TestCaseError::fail(format!("stamped packet does not scan: {e}"))
                })?;
                if let Some(seq) = stamp.trusted_packet_sequence_id {
                    prop_assert_eq!(again.trusted_packet_sequence_id, Some(seq));
                } else if stamp.strip_trusted {
                    prop_assert_eq!(again.trusted_packet_sequence_id, None);
                }
                match stamp.machine_id {
                    Some(0) => prop_assert_eq!(again.machine_id, None),
                    Some(m) => prop_assert_eq!(again.machine_id, Some(m)),
                    None if stamp.strip_trusted => prop_assert_eq!(again.machine_id, None),
                    None => prop_assert_eq!(again.machine_id, fields.machine_id),
                }
                // Field 58 of any wire type counts as present (StampLayout).
                if let (false, Some(c)) = (
                    fields.stamp_layout.has_clock_id,
                    stamp.default_timestamp_clock_id,
                ) {
                    prop_assert_eq!(again.timestamp_clock_id, Some(c));
                }
                prop_assert_eq!(again.timestamp, fields.timestamp);
                Ok(())
            },
        );
    });
}

// ---- probe datagrams ----

/// The key session 7 is registered with on both sides.
const PROBE_KEY: [u8; 32] = [0x5a; 32];

fn datagram() -> impl Strategy<Value = Vec<u8>> {
    use tracesync_protocol::probe::{ProbeKey, seal};
    let ids = prop_oneof![Just(7u64), Just(0), any::<u64>()];
    let kind = prop_oneof![
        edge().prop_map(|nonce| Kind::Register(ProbeRegister { nonce })),
        edge().prop_map(|nonce| Kind::Probe(Probe { nonce })),
        (edge(), edge(), edge(), any::<i64>()).prop_map(|(nonce, t2_ns, t3_ns, d)| {
            Kind::Reply(ProbeReply {
                nonce,
                t2_ns,
                t3_ns,
                boottime_minus_monotonic_ns: d,
            })
        }),
    ];
    // Signed with the session's key, with another key, or not at all.
    let key = prop_oneof![Just(PROBE_KEY), any::<[u8; 32]>()];
    prop_oneof![
        4 => (ids, kind, key, mutations()).prop_map(|(session_id, kind, key, m)| {
            let key = ProbeKey::new(&key).expect("32-byte key");
            mutate(seal(&key, session_id, kind), &m)
        }),
        2 => message(prop_oneof![1u32..4, any::<u32>()]).prop_map(|n| encode(&n)),
        1 => prop::collection::vec(any::<u8>(), 0..400),
    ]
}

fn edge() -> impl Strategy<Value = u64> {
    fuzz::edge_u64()
}

#[test]
fn probe_datagrams() {
    fuzz::with_big_stack(|| {
        use tracesync_core::sync::prober::{ProberConfig, ProberCore, Route};
        use tracesync_core::sync::sessions::Registration;
        let from: SocketAddr = "127.0.0.1:9".parse().expect("address");
        fuzz::run(
            BIN,
            "probe_datagrams",
            3_000,
            prop::collection::vec(datagram(), 1..6),
            |datagrams| {
                // Daemon side: session 7 registered, no probe sent yet, so no
                // datagram (reply or not) may produce a clock update.
                let mut prober = ProberCore::new(ProberConfig::default());
                let mut responder =
                    tracesync_relay::probe::Responder::new(7, &PROBE_KEY).expect("32-byte key");
                let registered = [(
                    7u64,
                    Registration {
                        slot: 1,
                        machine_raw_id: 5,
                        probe_key: PROBE_KEY,
                    },
                )]
                .into_iter()
                .collect();
                prober.set_registered(registered);
                for (i, d) in datagrams.iter().enumerate() {
                    let (_, update) =
                        prober.on_datagram(d, Route::Udp(from), 1_000_000_000 + i as u64);
                    prop_assert!(update.is_none(), "an unsolicited datagram moved a clock");
                    // Relay side.
                    let _ = responder.classify(d);
                }
                Ok(())
            },
        );
    });
}
