//! The first pass of an input cut into pieces keeps what one scan of it
//! keeps, whatever the input holds and wherever it breaks.

use super::*;
use crate::merge::test_traces::{compressed_bundle, record, source_of};
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use std::io::Write;
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{ClockSnapshot, SystemInfo, TracePacket};
use tracesync_protocol::wire;

/// Packet `i` of a two-machine trace: a SystemInfo per machine, clock
/// snapshots every 97 packets (the first declaring a primary clock only
/// late), the rest small timestamped packets.
fn packet(i: u64) -> Vec<u8> {
    let machine = i.is_multiple_of(5).then_some(7);
    let data = if i % 97 == 3 {
        Some(Data::ClockSnapshot(ClockSnapshot {
            clocks: vec![
                Clock {
                    clock_id: Some(6),
                    timestamp: Some(1_000 + i),
                    ..Default::default()
                },
                Clock {
                    clock_id: Some(3),
                    timestamp: Some(500 + i),
                    ..Default::default()
                },
            ],
            primary_trace_clock: (i > 1000).then_some(6),
        }))
    } else if i == 1 || i == 1505 {
        Some(Data::SystemInfo(SystemInfo {
            machine_name: Some(format!("m{i}")),
            ..Default::default()
        }))
    } else {
        None
    };
    TracePacket {
        timestamp: Some(10_000 + i),
        data,
        machine_id: machine,
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(1 + (i % 3) as u32),
        ),
        ..Default::default()
    }
    .encode_to_vec()
}

/// 3000 packets, a compressed bundle of 20 more after packet 2200 and a
/// malformed packet after packet 1700.
fn trace() -> Vec<u8> {
    trace_broken_after(None)
}

/// [`trace`] with a record of field 2 (framing the reader refuses) after
/// packet `broken`.
fn trace_broken_after(broken: Option<u64>) -> Vec<u8> {
    let mut t = Vec::new();
    for i in 0..3000 {
        record(&mut t, &packet(i));
        if broken == Some(i) {
            wire::put_len_field(&mut t, 2, b"not a packet");
        }
        if i == 1700 {
            record(&mut t, &[0x42, 0x7f]);
        }
        if i == 2200 {
            let inner: Vec<Vec<u8>> = (0..20).map(|k| packet(5000 + k)).collect();
            record(&mut t, &compressed_bundle(inner.iter().map(Vec::as_slice)));
        }
    }
    t
}

/// Cut into up to four pieces of at least 1 KiB, and whole.
fn both(source: &InputSource) -> (FileScan, FileScan) {
    let cut = scan_inputs_cut(std::slice::from_ref(source), 4, 1024).remove(0);
    (cut, scan_input(source))
}

#[test]
fn a_file_cut_into_pieces_is_scanned_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let source = source_of(dir.path(), "t.pftrace", &trace());
    assert_eq!(cuts(0, &source, 4, 1024).len(), 4, "cut into four");
    let (cut, whole) = both(&source);
    assert_eq!(whole.packets, 3000 + 1 + 20);
    assert_eq!(whole.faults.len(), 1, "{:?}", whole.faults);
    assert!(whole.primary_clock.is_some() && whole.system_infos.len() == 2);
    assert_eq!(cut, whole);
}

#[test]
fn a_broken_file_cut_into_pieces_fails_where_it_fails_whole() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace();
    // Framing broken early (before the first cut) and late (after the
    // last), and a file that ends inside a record.
    let early = trace_broken_after(Some(3));
    let late = trace_broken_after(Some(2990));
    let truncated = &t[..t.len() - 3];
    for (name, bytes) in [
        ("early", &early[..]),
        ("late", &late[..]),
        ("truncated", truncated),
    ] {
        let source = source_of(dir.path(), name, bytes);
        let (cut, whole) = both(&source);
        assert!(
            whole.faults.iter().any(|f| f.fatal),
            "{name}: {:?}",
            whole.faults
        );
        assert_eq!(cut, whole, "{name}");
    }
}

#[test]
fn small_gzip_and_empty_inputs_and_large_records_are_scanned_whole() {
    let dir = tempfile::tempdir().unwrap();
    let small = source_of(dir.path(), "small", &trace()[..1500]);
    assert_eq!(cuts(0, &small, 4, 1024), [Work::Whole(0)]);
    // Records of 2 KiB are cut (a window holds ~128 of them), and give the
    // whole file's scan; of 32 KiB (8 per window), no guess: whole.
    let sized = |name: &str, bytes: usize| {
        let mut t = Vec::new();
        for i in 0..200 {
            let mut p = packet(i);
            wire::put_len_field(&mut p, 11, &vec![0; bytes]);
            record(&mut t, &p);
        }
        source_of(dir.path(), name, &t)
    };
    let medium = sized("medium", 2048);
    assert_eq!(cuts(0, &medium, 4, 1024).len(), 4);
    let (cut, whole) = both(&medium);
    assert_eq!((whole.packets, cut), (200, whole));
    let big = sized("big", 32 << 10);
    assert_eq!(cuts(0, &big, 4, 1024), [Work::Whole(0)]);
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&trace()).unwrap();
    let source = source_of(dir.path(), "t.pftrace.gz", &gz.finish().unwrap());
    assert_eq!(cuts(0, &source, 4, 1024), [Work::Whole(0)]);
    let (cut, whole) = both(&source);
    assert_eq!(whole.packets, 3021);
    assert_eq!(cut, whole);
    let empty = source_of(dir.path(), "empty", &[]);
    let (cut, whole) = both(&empty);
    assert!(whole.faults[0].message.contains("holds no trace packets"));
    assert_eq!(cut, whole);
}

#[test]
fn a_large_input_beside_a_small_one_is_cut_for_the_idle_processor() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace();
    let big = source_of(dir.path(), "big.pftrace", &t);
    let small = source_of(dir.path(), "small.pftrace", &t[..1200]);
    let inputs = [small, big];
    let cut = scan_inputs_cut(&inputs, 2, 1024);
    assert_eq!(cut, [scan_input(&inputs[0]), scan_input(&inputs[1])]);
    assert_eq!(shares(&[1200, t.len() as u64], 2), [1, 2]);
    assert_eq!(cuts(1, &inputs[1], 2, 1024).len(), 2);
}

#[test]
fn shares_follow_the_bytes() {
    assert_eq!(shares(&[100, 100, 100, 100], 2), [1, 1, 1, 1]);
    assert_eq!(shares(&[100, 100], 8), [4, 4]);
    assert_eq!(shares(&[900, 50, 50], 2), [2, 1, 1]);
    assert_eq!(shares(&[0, 0], 4), [1, 1], "archive members: no length");
    assert_eq!(shares(&[u64::MAX, u64::MAX], 2), [1, 1]);
    assert_eq!(shares(&[], 2), Vec::<usize>::new());
}

#[test]
fn cuts_that_are_no_record_starts_are_read_on_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace();
    let source = source_of(dir.path(), "t.pftrace", &t);
    let whole = scan_input(&source);
    let len = t.len() as u64;
    let piece = |from, to| Work::Piece { input: 0, from, to };
    // Cuts inside records (a byte past a start is never one), then at true
    // starts guessed from windows, one of them broken at the second cut.
    for offsets in [
        vec![1],
        vec![len / 3 + 1, len / 2, len - 2],
        vec![len / 4, len / 2],
    ] {
        let mut work = Vec::new();
        let mut from = 0;
        for &cut in &offsets {
            work.push(piece(from, Some(cut)));
            from = cut;
        }
        work.push(piece(from, None));
        assert_eq!(
            scan_work(std::slice::from_ref(&source), &work, 3),
            std::slice::from_ref(&whole),
            "{offsets:?}"
        );
    }
}

#[test]
fn a_guess_inside_a_packet_that_frames_as_records_is_read_on() {
    // A large packet whose bytes are 4000 records of their own sits where
    // the second piece's window begins: the guess is inside it.
    let mut inner = Vec::new();
    for _ in 0..4000 {
        record(&mut inner, &[0x08, 0x01]);
    }
    let mut t = Vec::new();
    for i in 0..1500 {
        record(&mut t, &packet(i));
    }
    let target = t.len() as u64;
    let mut decoy = Vec::new();
    wire::put_len_field(&mut decoy, 900, &inner);
    record(&mut t, &decoy);
    let decoy_end = t.len() as u64;
    for i in 1500..3000 {
        record(&mut t, &packet(i));
    }
    let dir = tempfile::tempdir().unwrap();
    let source = source_of(dir.path(), "t.pftrace", &t);
    // Past the decoy's record, field and length headers.
    let guess = guess_record_start(&source, target + 8).unwrap();
    assert!(guess < decoy_end, "the guess lies inside the decoy packet");
    let work = [
        Work::Piece {
            input: 0,
            from: 0,
            to: Some(guess),
        },
        Work::Piece {
            input: 0,
            from: guess,
            to: None,
        },
    ];
    let whole = scan_input(&source);
    assert!(whole.faults.is_empty(), "{:?}", whole.faults);
    assert_eq!(scan_work(std::slice::from_ref(&source), &work, 2), [whole]);
}
