//! Sync points (before the first packet, when the offset moves, after a
//! restart) and the write-time check of packets a later sample covers.

use super::*;

#[test]
fn producer_remote_clock_syncs_are_replaced() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    let sync = on_seq(
        TracePacket {
            data: Some(Data::RemoteClockSync(RemoteClockSync::default())),
            ..Default::default()
        },
        2,
    );
    core.batch(a, 1, 0, encode(&[sync]), None, 0).unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    assert!(out.is_empty());
    assert_eq!(drop_count(&core, 1, reason::REMOTE_SYNC_REPLACED), 1);
}

/// The sync points of `out`: (client, host) of their first entry.
fn sync_points(out: &[OutPacket]) -> Vec<(u64, u64)> {
    out.iter()
        .filter(|p| p.role == Role::SyncPoint)
        .map(|p| {
            let Some(Data::RemoteClockSync(s)) = decode(p).data else {
                panic!("sync point is a RemoteClockSync");
            };
            assert_eq!(s.synced_clocks.len(), 2);
            assert_eq!(s.synced_clocks[0], s.synced_clocks[1]);
            let value =
                |c: &Option<ClockSnapshot>| c.as_ref().unwrap().clocks[0].timestamp.unwrap();
            (
                value(&s.synced_clocks[0].client_clocks),
                value(&s.synced_clocks[0].host_clocks),
            )
        })
        .collect()
}

#[test]
fn sync_points_before_first_packet_and_when_offset_moves_past_threshold() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 5_000);
    let mut out = Vec::new();
    core.batch(a, 1, 0, encode(&[event(2, 100_000)]), None, 0)
        .unwrap();
    core.flush_all(&mut out);
    assert_eq!(out[0].role, Role::SyncPoint, "before the first packet");
    assert_eq!(out[0].machine_raw_id, 1);
    assert_eq!(decode(&out[0]).machine_id, Some(1));
    assert_eq!(sync_points(&out), [(100_000, 95_000)]);

    // Moves by 600 ns: within the 1 us threshold, no new sync point.
    core.sync(a, estimate(5_600)).unwrap();
    core.batch(a, 2, 1, encode(&[event(2, 200_000)]), None, 0)
        .unwrap();
    core.flush_all(&mut out);
    assert_eq!(sync_points(&out).len(), 1);
    assert_eq!(
        out.last().unwrap().ts,
        194_400,
        "the core's own time is exact"
    );

    // Moves by 1500 ns from the last sync point: a new one.
    core.sync(a, estimate(6_500)).unwrap();
    core.batch(a, 3, 2, encode(&[event(2, 300_000)]), None, 0)
        .unwrap();
    core.flush_all(&mut out);
    assert_eq!(sync_points(&out), [(100_000, 95_000), (300_000, 293_500)]);
    // Right before its packet, but for the sync-quality tracks' packets.
    let last_sync = out.iter().rposition(|p| p.role == Role::SyncPoint).unwrap();
    assert!(
        out[last_sync + 1..out.len() - 1]
            .iter()
            .all(|p| crate::sync_quality::is_quality_seq(p.seq))
    );
    assert_eq!(core.stats().sync_points_written, 2);
}

#[test]
fn sync_points_after_a_restart_never_go_below_the_replayed_one() {
    // The new file's preamble replays a sync point of machine 1 at client
    // 500_000; a resent older packet (client 100_000) must not put an
    // earlier one after it (Perfetto: invalid_clock_snapshots).
    let mut core = LiveCore::new(
        config(),
        Recovered {
            sync_floors: vec![(1, 500_000)],
            ..Recovered::default()
        },
    );
    let a = synced_relay(&mut core, 10, 1, 5_000);
    let mut out = Vec::new();
    core.batch(a, 1, 0, encode(&[event(2, 100_000)]), None, 0)
        .unwrap();
    core.flush_all(&mut out);
    // Same offset (5_000), client raised to the floor.
    assert_eq!(sync_points(&out), [(500_000, 495_000)]);
    assert_eq!(
        relayed(&out).last().unwrap().ts,
        95_000,
        "placement unchanged"
    );
}

/// An estimate made right after a sample at relay time `through` that saw
/// offset `seen` (± `half_width`).
fn checked_estimate(offset_ns: i64, through: u64, seen: i64, half_width: u64) -> SyncEstimate {
    SyncEstimate {
        ref_relay_ns: through,
        covered_through_relay_ns: through,
        checked: Some(crate::sync::CheckedSample {
            relay_ns: through,
            offset_ns: seen,
            half_width_ns: half_width,
        }),
        ..estimate(offset_ns)
    }
}

fn machine_status(core: &LiveCore, raw_id: u32) -> crate::status::MachineStatus {
    core.status(0, 0)
        .into_iter()
        .find(|m| m.raw_id == raw_id)
        .expect("machine row")
}

/// A relay with offset 1 ms from a sample at relay 4 ms, and one packet at
/// relay 5 ms mapped on arrival with it (host 4 ms), not yet written.
fn packet_after_the_newest_sample() -> (LiveCore, RelaySlot) {
    let mut core = core();
    let slot = synced_relay(&mut core, 10, 1, 1_000_000);
    core.sync(slot, checked_estimate(1_000_000, 4_000_000, 1_000_000, 50))
        .unwrap();
    core.batch(slot, 1, 0, encode(&[event(2, 5_000_000)]), None, 0)
        .unwrap();
    (core, slot)
}

#[test]
fn a_later_sample_that_shows_a_step_remaps_packets_still_queued() {
    let (mut core, slot) = packet_after_the_newest_sample();
    // The next sample (after the packet) shows the clock 1 ms further on,
    // and the estimator refitted: the packet is written with that mapping.
    core.sync(slot, checked_estimate(2_000_000, 6_000_000, 2_000_000, 50))
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let p = relayed(&out)[0];
    assert_eq!(p.ts, 3_000_000);
    assert!(p.err_ns < 1_000, "{}", p.err_ns);
    let m = machine_status(&core, 1);
    assert_eq!((m.remapped_packets, m.unprobed_packets), (1, 0));
    assert!(m.drops.is_empty(), "not drops: {:?}", m.drops);
    // Its sync point carries the corrected offset.
    assert!(sync_points(&out).contains(&(5_000_000, 3_000_000)));
}

#[test]
fn a_step_no_estimate_noticed_still_lies_inside_the_bound() {
    let (mut core, slot) = packet_after_the_newest_sample();
    // The next sample is noisy (half width 600 us) and its interval still
    // meets the estimate, so the estimate keeps the old offset; had the
    // clock stepped +1 ms before the packet, the truth is in that interval.
    core.sync(
        slot,
        checked_estimate(1_000_000, 6_000_000, 1_700_000, 600_000),
    )
    .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let p = relayed(&out)[0];
    assert_eq!(p.ts, 4_000_000, "the time stays");
    let truth_if_stepped = 5_000_000 - 2_000_000;
    assert!(p.err_ns >= p.ts.abs_diff(truth_if_stepped), "{}", p.err_ns);
    let m = machine_status(&core, 1);
    assert_eq!((m.remapped_packets, m.unprobed_packets), (0, 0));
}

#[test]
fn packets_written_before_any_later_sample_are_counted_unprobed() {
    let (mut core, _) = packet_after_the_newest_sample();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    assert_eq!(relayed(&out)[0].ts, 4_000_000);
    assert_eq!(machine_status(&core, 1).unprobed_packets, 1);
}
