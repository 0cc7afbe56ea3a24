use super::*;
use crate::merge::output::Format;
use crate::merge::packets::{bundle_of, open_reader};
use crate::merge::test_traces::{compressed_bundle, record, source_of};
use crate::merge::{MergeOptions, merge_with_scan_threads};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tracesync_protocol::scan::{field, scan_packet};
use tracesync_protocol::wire;

fn track_event(i: u64) -> Vec<u8> {
    let mut p = Vec::new();
    wire::put_varint_field(&mut p, field::TIMESTAMP, 1000 + i);
    wire::put_len_field(&mut p, 11, &[0x08, (i % 100) as u8]);
    wire::put_varint_field(&mut p, field::TRUSTED_PACKET_SEQUENCE_ID, 1 + i % 3);
    p
}

/// A packet of about `len` bytes with timestamp `ts`.
fn large(ts: u64, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    wire::put_varint_field(&mut p, field::TIMESTAMP, ts);
    wire::put_len_field(&mut p, 11, &vec![(ts % 251) as u8; len]);
    p
}

/// What the first pass's reader and scan yield: bytes, and whether the
/// scan accepted each packet.
fn read_directly(source: &InputSource) -> Vec<(Vec<u8>, bool)> {
    let mut reader = open_reader(source).unwrap();
    let mut got = Vec::new();
    while let Ok(Some(packet)) = reader.next_packet() {
        let scanned = scan_packet(packet.bytes);
        if let Some(range) = bundle_of(&packet, scanned.as_ref().ok().map(|f| f.compressed_packets))
        {
            if reader.expand_last(range).is_err() {
                break;
            }
            continue;
        }
        got.push((packet.bytes.to_vec(), scanned.is_ok()));
    }
    got
}

/// The feed's packets; `pause` is called after each, with its length.
fn read_feed(feed: &mut PacketFeed, mut pause: impl FnMut(usize)) -> Vec<(Vec<u8>, bool)> {
    let mut got = Vec::new();
    while let Some((bytes, scan)) = feed.advance() {
        if let Some(s) = scan {
            assert_eq!(s.stamp_layout, scan_packet(bytes).unwrap().stamp_layout);
        }
        got.push((bytes.to_vec(), scan.is_some()));
        pause(bytes.len());
    }
    assert!(feed.advance().is_none(), "the end stays the end");
    got
}

#[test]
fn both_feeds_yield_the_readers_packets_across_batches_up_to_a_fault() {
    let mut trace = Vec::new();
    // Several batches of small packets, some large ones, a malformed one,
    // a bundle, then a record cut short (the input's fault).
    for i in 0..(3 * THREADED.packets as u64 + 17) {
        record(&mut trace, &track_event(i));
    }
    for i in 0..5u8 {
        let mut big = Vec::new();
        wire::put_len_field(&mut big, 11, &vec![i; THREADED.bytes / 3 + usize::from(i)]);
        record(&mut trace, &big);
    }
    record(&mut trace, &vec![0u8; 40 * THREADED.bytes]);
    record(&mut trace, &[0x42, 0x7f]);
    let inner: Vec<Vec<u8>> = (0..10).map(|i| track_event(100_000 + i)).collect();
    record(
        &mut trace,
        &compressed_bundle(inner.iter().map(Vec::as_slice)),
    );
    record(&mut trace, &track_event(7));
    trace.extend_from_slice(&[0x0a, 0x20, 0x40]);
    let dir = tempfile::tempdir().unwrap();
    let source = source_of(dir.path(), "t.pftrace", &trace);

    let want = read_directly(&source);
    assert!(want.len() > 3 * THREADED.packets + 30, "{}", want.len());
    assert!(want.iter().any(|(_, ok)| !ok), "a malformed packet");
    let threaded = read_feed(&mut PacketFeed::spawn(&source).unwrap(), |_| {});
    assert!(
        threaded == want,
        "{} packets, want {}",
        threaded.len(),
        want.len()
    );
    let inline = read_feed(&mut PacketFeed::inline(&source).unwrap(), |_| {});
    assert!(
        inline == want,
        "{} packets, want {}",
        inline.len(),
        want.len()
    );
}

#[test]
fn dropping_the_feed_early_ends_its_thread_and_frees_its_batches() {
    let mut trace = Vec::new();
    for i in 0..(20 * THREADED.packets as u64) {
        record(&mut trace, &track_event(i));
    }
    let dir = tempfile::tempdir().unwrap();
    let source = source_of(dir.path(), "t.pftrace", &trace);
    let mut feed = PacketFeed::spawn(&source).unwrap();
    assert!(feed.advance().is_some());
    let meter = feed.meter();
    assert!(meter.held() >= THREADED.bytes);
    // The thread waits on a full channel (or for a batch): drop joins it.
    drop(feed);
    assert_eq!(meter.held(), 0, "every batch freed");
}

/// An input whose large packets come in runs: ungated, a scan thread would
/// fill all its batches with them while the merging thread lags.
#[test]
fn an_input_holds_one_large_packet_in_its_batches() {
    let mut trace = Vec::new();
    let mut largest = 0;
    let mut ts = 0;
    for run in [6, 1, 3] {
        for _ in 0..2 * THREADED.packets {
            ts += 1;
            record(&mut trace, &track_event(ts));
        }
        for i in 0..run {
            ts += 1;
            let p = large(ts, (1 << 20) + 1000 * i);
            largest = largest.max(p.len());
            record(&mut trace, &p);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let source = source_of(dir.path(), "t.pftrace", &trace);
    let want = read_directly(&source);

    // The merging thread lags at every large packet: the scan thread has
    // time to fill whatever batches it may.
    let mut feed = PacketFeed::spawn(&source).unwrap();
    let meter = feed.meter();
    std::thread::sleep(Duration::from_millis(20));
    let got = read_feed(&mut feed, |len| {
        if len > THREADED.bytes {
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    assert!(got == want, "{} packets, want {}", got.len(), want.len());
    let bound = (BATCHES - 1) * THREADED.bytes + largest;
    assert!(meter.peak() >= largest, "peak {}", meter.peak());
    assert!(
        meter.peak() <= bound,
        "threaded: peak {} bytes, bound {bound}",
        meter.peak()
    );

    let mut feed = PacketFeed::inline(&source).unwrap();
    let meter = feed.meter();
    assert!(read_feed(&mut feed, |_| {}) == want);
    assert!(
        meter.peak() <= largest.max(INLINE.bytes),
        "inline: peak {}",
        meter.peak()
    );
    drop(feed);
    assert_eq!(meter.held(), 0);
}

#[test]
fn an_input_that_cannot_be_opened_again_is_an_error_unless_it_had_no_packets() {
    let dir = tempfile::tempdir().unwrap();
    let mut trace = Vec::new();
    record(&mut trace, &track_event(1));
    let source = source_of(dir.path(), "t.pftrace", &trace);
    std::fs::remove_file(dir.path().join("t.pftrace")).unwrap();
    for threaded in [false, true] {
        let Err(OpenError::Reopen(e)) = PacketFeed::open(&source, 1, threaded) else {
            panic!("threaded {threaded}: a missing input fed as empty");
        };
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        // The first pass could not read it either, and said so.
        let mut empty = PacketFeed::open(&source, 0, threaded).unwrap();
        assert!(empty.advance().is_none());
    }
}

#[test]
fn the_inputs_with_most_packets_get_the_threads() {
    assert_eq!(
        threaded_inputs(&[5, 9, 1, 9, 7], 3),
        [false, true, false, true, true]
    );
    assert_eq!(threaded_inputs(&[3, 3, 3], 2), [true, true, false]);
    assert_eq!(threaded_inputs(&[1, 2], 4), [true, true]);
    assert_eq!(threaded_inputs(&[1, 2], 0), [false, false]);
}

/// 200 inputs of different lengths whose packets interleave in time, some
/// with large packets: (file name, trace).
fn many_inputs() -> Vec<(String, Vec<u8>)> {
    (0..200u64)
        .map(|i| {
            let n = match i {
                7 | 150 => 3 * THREADED.packets as u64,
                _ => 10 + i * 7 % 50,
            };
            let mut trace = Vec::new();
            for j in 0..n {
                let ts = 1000 + j * 200 + i;
                let mut p = if j % 40 == 5 && i % 3 == 0 {
                    large(ts, THREADED.bytes + (i as usize) * 100)
                } else {
                    track_event(j * 200 + i)
                };
                wire::put_varint_field(&mut p, field::TRUSTED_PACKET_SEQUENCE_ID, 1 + j % 2);
                record(&mut trace, &p);
            }
            (format!("in-{i:03}.pftrace"), trace)
        })
        .collect()
}

fn merge_to(inputs: &[PathBuf], out: &Path, format: Format, scan_threads: usize) -> Vec<u8> {
    let opts = MergeOptions {
        inputs: inputs.to_vec(),
        manifest: None,
        output: Some(out.to_path_buf()),
        format,
        stats: None,
        strict: false,
        machine_per_file: false,
    };
    let outcome = merge_with_scan_threads(&opts, &mut |f| panic!("{f}"), scan_threads).unwrap();
    assert_eq!(outcome.exit_code(), 0);
    std::fs::read(out).unwrap()
}

#[test]
fn many_inputs_merge_the_same_inline_and_threaded() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = many_inputs()
        .into_iter()
        .map(|(name, trace)| {
            let path = dir.path().join(name);
            std::fs::write(&path, trace).unwrap();
            path
        })
        .collect();
    let out = dir.path().join("out.pftrace");
    for format in [Format::Perfetto, Format::Jsonl] {
        // Every input on a thread of its own: the second pass as it was.
        let all = merge_to(&inputs, &out, format, inputs.len());
        assert!(all.len() > 3 * THREADED.bytes, "{}", all.len());
        for threads in [0, 1, MAX_SCAN_THREADS] {
            let got = merge_to(&inputs, &out, format, threads);
            assert!(got == all, "{format:?}, {threads} scan threads");
        }
    }
}
