use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use tracesync_protocol::perfetto::{TracePacket, trace_packet, track_event};
use tracesync_protocol::scan::{
    SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE, scan_packet,
};

use super::generator::MAX_IDENTITY_EVERY;
use super::*;
use crate::clocks::{Clock, SimulatedClock, SystemClock};
use crate::source::test_support::context;
use crate::source::{SourceSpec, spawn};

fn identity_truth(ts: u64) -> u64 {
    ts + 7
}

fn generate(g: &mut Generator, n: usize, from: u64, to: u64) -> Vec<Bytes> {
    let mut out = Vec::new();
    g.generate(n, from, to, &identity_truth, &mut out);
    out
}

fn decode(p: &Bytes) -> TracePacket {
    TracePacket::decode(p.clone()).expect("valid TracePacket")
}

#[test]
fn counters_are_contiguous_across_sequences_and_calls() {
    let mut g = Generator::new("box/3", &[2, 3, 4], 0, None);
    let mut all = generate(&mut g, 100, 1_000, 2_000);
    all.extend(generate(&mut g, 50, 2_000, 3_000));
    let ids: Vec<_> = all.iter().filter_map(|p| read_identity(p)).collect();
    assert_eq!(ids.len(), 150, "descriptor packets carry no identity");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(id.n, i as u64);
        assert_eq!(id.src, "box/3");
    }
    assert_eq!(g.next_counter(), 150);
    // Timestamps are spread over the interval and the truth follows them.
    let events: Vec<_> = all.iter().filter(|p| read_identity(p).is_some()).collect();
    let first = scan_packet(events[0]).unwrap().timestamp.unwrap();
    let last = scan_packet(events[149]).unwrap().timestamp.unwrap();
    assert_eq!((first, last), (1_010, 3_000));
    for p in &events {
        let ts = scan_packet(p).unwrap().timestamp.unwrap();
        assert_eq!(read_identity(p).unwrap().truth_ns, ts + 7);
    }
}

#[test]
fn resumes_at_the_cursor_counter() {
    let mut g = Generator::new("box/1", &[9], 12_345, None);
    let out = generate(&mut g, 3, 0, 30);
    let ns: Vec<_> = out
        .iter()
        .filter_map(|p| read_identity(p))
        .map(|i| i.n)
        .collect();
    assert_eq!(ns, [12_345, 12_346, 12_347]);
}

#[test]
fn sequences_look_like_the_sdk_writes_them() {
    let mut g = Generator::new("m/1", &[5, 6], 0, None);
    let packets = generate(&mut g, 2 * 3 * 400, 0, 10_000_000);
    let mut per_seq: HashMap<u32, Vec<TracePacket>> = HashMap::new();
    for p in &packets {
        let fields = scan_packet(p).unwrap();
        per_seq
            .entry(fields.trusted_packet_sequence_id.unwrap())
            .or_default()
            .push(decode(p));
    }
    assert_eq!(per_seq.len(), 2);
    for seq in per_seq.values() {
        // First packet clears the state and interns names.
        assert_eq!(seq[0].sequence_flags, Some(SEQ_INCREMENTAL_STATE_CLEARED));
        assert!(
            seq[0]
                .interned_data
                .as_ref()
                .is_some_and(|d| !d.event_names.is_empty())
        );
        assert!(matches!(
            seq[0].data,
            Some(trace_packet::Data::TrackDescriptor(_))
        ));
        let Some(trace_packet::Data::TrackDescriptor(counter)) = &seq[1].data else {
            panic!("second packet describes the counter track");
        };
        assert!(counter.counter.is_some());
        let clears = seq
            .iter()
            .filter(|p| p.sequence_flags == Some(SEQ_INCREMENTAL_STATE_CLEARED))
            .count();
        assert_eq!(clears, 2, "cleared again after {CLEAR_EVERY} packets");
        let mut open = false;
        let mut last_ts = 0;
        for p in seq {
            let ts = p.timestamp.unwrap();
            assert!(ts >= last_ts, "timestamps never go back on a sequence");
            last_ts = ts;
            let Some(trace_packet::Data::TrackEvent(te)) = &p.data else {
                assert!(!open, "state is cleared only between slices");
                continue;
            };
            assert_eq!(p.sequence_flags, Some(SEQ_NEEDS_INCREMENTAL_STATE));
            match te.r#type() {
                track_event::Type::SliceBegin => {
                    assert!(!open);
                    open = true;
                    assert!(matches!(
                        te.name_field,
                        Some(track_event::NameField::NameIid(1..=8))
                    ));
                }
                track_event::Type::SliceEnd => {
                    assert!(open);
                    open = false;
                }
                track_event::Type::Counter => assert!(te.counter_value_field.is_some()),
                other => panic!("unexpected {other:?}"),
            }
            assert_eq!(te.debug_annotations.len(), 3);
        }
    }
}

#[test]
fn size_pads_packets_to_about_that_size() {
    for size in [200, 1000, 4096] {
        let mut g = Generator::new("box/1", &[2, 3], 0, Some(size));
        let packets = generate(&mut g, 300, 1 << 40, (1 << 40) + 1_000_000);
        for p in packets.iter().filter(|p| read_identity(p).is_some()) {
            let diff = p.len().abs_diff(size);
            assert!(diff <= size / 20 + 8, "size {size}: packet of {}", p.len());
        }
    }
    assert_eq!(
        Generator::new("box/1", &[2], 0, Some(200)).identity_every(),
        1
    );
}

#[test]
fn small_sizes_average_that_size_with_every_kth_event_annotated() {
    for size in [40, 64, 90] {
        let mut g = Generator::new("bench-1/1", &[2, 3, 4, 5], 0, Some(size));
        let every = g.identity_every();
        assert!(every > 1, "size {size}");
        let packets = generate(&mut g, 3000, 1 << 46, (1 << 46) + 1_000_000);
        let events: Vec<&Bytes> = packets
            .iter()
            .filter(|p| scan_packet(p).unwrap().kind().0 == Some(11))
            .collect();
        assert_eq!(events.len(), 3000);
        let mean = events.iter().map(|p| p.len()).sum::<usize>() as f64 / 3000.0;
        assert!(
            (mean - size as f64).abs() <= 4.0,
            "size {size}: mean {mean}"
        );
        // Every k-th event carries the identity, counted without gaps.
        let ns: Vec<u64> = events
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let id = read_identity(p);
                assert_eq!(id.is_some(), (i as u64).is_multiple_of(every), "event {i}");
                id.map(|id| id.n)
            })
            .collect();
        assert_eq!(ns, (0..ns.len() as u64).collect::<Vec<_>>());
        assert_eq!(g.next_counter(), ns.len() as u64);
        // The daemon's checker reads the same identities.
        let checked = events
            .iter()
            .filter_map(|p| tracesync_cli::check::identity(p))
            .count();
        assert_eq!(checked, ns.len());
        for p in &events {
            decode(p);
        }
    }
    // Smaller than a bare packet: at most every 64th event is annotated.
    let mut g = Generator::new("box/1", &[2], 0, Some(10));
    assert_eq!(g.identity_every(), MAX_IDENTITY_EVERY);
    let p = generate(&mut g, 3, 0, 3);
    assert_eq!(p.iter().filter(|p| read_identity(p).is_some()).count(), 1);
}

#[test]
fn token_bucket_keeps_the_rate_and_caps_bursts() {
    let mut b = TokenBucket::new(1000.0);
    assert_eq!(b.take(0), 0);
    let mut total = 0;
    for ms in 1..=1000u64 {
        total += b.take(ms * 1_000_000);
    }
    assert!((999..=1000).contains(&total), "{total}");
    // A 10 s stall yields at most 100 ms of packets.
    assert_eq!(b.take(11_000_000_000), 100);
    let mut slow = TokenBucket::new(0.5);
    assert_eq!(slow.take(0) + slow.take(1_000_000_000), 0);
    assert_eq!(slow.take(2_000_000_000), 1);
}

#[tokio::test]
async fn runs_at_rate_and_resumes_from_its_cursor() {
    let mut ctx = context();
    let clock = SimulatedClock {
        inner: SystemClock::default(),
        offset_ns: 5_000_000_000,
        drift_ppm: 0.0,
        origin_ns: 0,
    };
    ctx.clock = Arc::new(clock);
    let spec = SourceSpec::parse("synthetic:100k,seqs=3").unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let started = std::time::Instant::now();
    let task = spawn(spec.clone(), 2, ctx.clone(), Cursor::None, tx);
    let mut ns = Vec::new();
    let mut cursor = Cursor::None;
    while ns.len() < 20_000 {
        let batch = rx.recv().await.unwrap();
        assert_eq!(batch.source, 2);
        for p in &batch.packets {
            if let Some(id) = read_identity(p) {
                assert_eq!(id.src, "testbox/2");
                let ts = scan_packet(p).unwrap().timestamp.unwrap();
                assert_eq!(id.truth_ns, clock.truth_host_boottime(ts));
                ns.push(id.n);
            }
        }
        cursor = batch.cursor;
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        elapsed > 0.1 && elapsed < 2.0,
        "20k packets at 100k/s took {elapsed} s"
    );
    assert_eq!(ns, (0..ns.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        cursor,
        Cursor::Synthetic {
            next_counter: ns.len() as u64
        }
    );
    ctx.shutdown.cancel();
    task.await.unwrap();

    let ctx = context();
    let (tx, mut rx) = mpsc::channel(16);
    let task = spawn(spec, 2, ctx.clone(), cursor, tx);
    let batch = rx.recv().await.unwrap();
    let first = batch.packets.iter().find_map(|p| read_identity(p)).unwrap();
    assert_eq!(first.n, ns.len() as u64);
    ctx.shutdown.cancel();
    task.await.unwrap();
}

#[test]
#[ignore = "timing; run with --release --ignored"]
fn generator_speed() {
    for size in [None, Some(4096)] {
        let mut g = Generator::new("box/1", &[2, 3, 4, 5], 0, size);
        let started = std::time::Instant::now();
        let mut bytes = 0;
        for i in 0..250u64 {
            let mut out = Vec::with_capacity(4100);
            g.generate(4000, i * 1000, i * 1000 + 1000, &identity_truth, &mut out);
            bytes += out.iter().map(Bytes::len).sum::<usize>();
        }
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "size {size:?}: {:.0} ns/packet, {:.0} MB/s",
            secs * 1e9 / 1e6,
            bytes as f64 / secs / 1e6
        );
    }
}
