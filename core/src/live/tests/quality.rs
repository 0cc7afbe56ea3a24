//! The sync-quality tracks written before remote machines' packets.

use super::*;
use crate::sync_quality::{QualityTrack, bound_us_to_ns, is_quality_seq, read_sample, track_uuid};
use tracesync_protocol::scan::scan_packet;

/// Reads `out` back as a file reader does: per packet of machine `raw_id`,
/// the error bound in force (its last bound sample before it).
fn bounds_in_force(out: &[OutPacket], raw_id: u32) -> Vec<(u64, u64)> {
    let mut in_force = 0;
    let mut got = Vec::new();
    for p in out {
        let bytes = p.bytes.to_vec();
        let fields = scan_packet(&bytes).unwrap();
        if let Some(s) = read_sample(&fields, &bytes) {
            if s.track == QualityTrack::ErrorBound && s.raw_id == raw_id {
                in_force = bound_us_to_ns(s.value.unwrap());
            }
        } else if p.origin.is_some() && p.machine_raw_id == raw_id {
            got.push((p.err_ns, in_force));
        }
    }
    got
}

#[test]
fn tracks_show_the_estimates_and_the_bound_covers_every_packet() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 5_000);
    let mut out = Vec::new();
    // Packets ever farther from the estimate's reference: growing bounds.
    let times: Vec<u64> = (1..=50).map(|i| i * 1_000_000).collect();
    let events: Vec<TracePacket> = times.iter().map(|&t| event(2, t)).collect();
    core.batch(a, 1, 0, encode(&events), None, 0).unwrap();
    core.flush_all(&mut out);
    // A new estimate that moved the offset and lowered nothing.
    core.sync(a, estimate(9_000)).unwrap();
    core.batch(a, 2, 50, encode(&[event(2, 60_000_000)]), None, 0)
        .unwrap();
    core.flush_all(&mut out);

    let covered = bounds_in_force(&out, 1);
    assert_eq!(covered.len(), 51);
    for (err, in_force) in &covered {
        assert!(
            *err > 0 && in_force >= err,
            "bound {in_force} < packet's {err}"
        );
    }
    // Far fewer bound samples than packets.
    let quality: Vec<&OutPacket> = out.iter().filter(|p| is_quality_seq(p.seq)).collect();
    let samples = |track| {
        quality
            .iter()
            .filter_map(|p| {
                let b = p.bytes.to_vec();
                read_sample(&scan_packet(&b).unwrap(), &b).filter(|s| s.track == track)
            })
            .collect::<Vec<_>>()
    };
    let bound_samples = samples(QualityTrack::ErrorBound).len();
    assert!(
        (1..=15).contains(&bound_samples),
        "{bound_samples} bound samples"
    );
    // The descriptors come first, once, with the machine's id.
    let first = decode(quality[0]);
    assert_eq!(first.machine_id, Some(1));
    match first.data {
        Some(Data::TrackDescriptor(d)) => {
            assert_eq!(d.uuid, Some(track_uuid(1, QualityTrack::Offset)));
        }
        other => panic!("first is {other:?}"),
    }
    assert_eq!(
        quality
            .iter()
            .filter(|p| p.role == Role::IncrementalStateCleared)
            .count(),
        1
    );
    // Offsets equal the sync points' (µs); frequency and round trip the
    // estimate's.
    let offsets: Vec<f64> = samples(QualityTrack::Offset)
        .iter()
        .map(|s| s.value.unwrap())
        .collect();
    assert_eq!(offsets, [5.0, 9.0]);
    let rtt = samples(QualityTrack::RoundTrip);
    assert_eq!(rtt.len(), 1, "unchanged values are not written again");
    assert_eq!(rtt[0].value, Some(0.08));
    assert_eq!(samples(QualityTrack::FreqError)[0].value, Some(0.0));
}

#[test]
fn epoch_changes_are_instants() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 5_000);
    let mut out = Vec::new();
    core.batch(a, 1, 0, encode(&[event(2, 1_000_000)]), None, 0)
        .unwrap();
    core.flush_all(&mut out);
    // A suspend: BOOTTIME-MONOTONIC jumps by 30 s.
    core.sync(
        a,
        SyncEstimate {
            boottime_minus_monotonic_ns: 30_000_000_000,
            ..estimate(5_000)
        },
    )
    .unwrap();
    core.batch(a, 2, 1, encode(&[event(2, 2_000_000)]), None, 0)
        .unwrap();
    core.flush_all(&mut out);
    let names: Vec<String> = out
        .iter()
        .filter_map(|p| {
            let b = p.bytes.to_vec();
            read_sample(&scan_packet(&b).ok()?, &b)?.name
        })
        .collect();
    assert_eq!(names, ["suspend"]);
}
