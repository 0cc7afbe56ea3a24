//! Per-stream FIFO, merge by time, watermark, late packets.

use super::*;

#[test]
fn streams_keep_their_order_and_interleave_by_time() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    let packets = [
        event(2, 100),
        event(3, 60),
        event(2, 50), // older than its predecessor: stays behind it
        event(3, 150),
        event(2, 200),
    ];
    core.batch(a, 1, 0, encode(&packets), None, 0).unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    assert_eq!(ts_of(&out), [60, 100, 50, 150, 200]);
    assert_eq!(core.stats().late_packets, 1);
    let late = core
        .status(0, 0)
        .into_iter()
        .find(|m| m.raw_id == 1)
        .map(|m| m.late_packets);
    assert_eq!(late, Some(1));
    assert_eq!(
        drop_count(&core, 1, reason::LATE),
        0,
        "late packets are not drops"
    );
    // Indices (Origin) are the relay-wide ones of the batch.
    let idx: Vec<u64> = relayed(&out)
        .iter()
        .map(|p| p.origin.unwrap().index)
        .collect();
    assert_eq!(idx, [1, 0, 2, 3, 4]);
}

#[test]
fn watermark_holds_until_the_slow_relays_heartbeat_advances() {
    let mut core = core();
    let fast = synced_relay(&mut core, 10, 1, 0);
    let slow = synced_relay(&mut core, 20, 2, -1_000);
    core.heartbeat(slow, clocks(500), 0).unwrap(); // host 1500
    let packets = [event(2, 1_000), event(2, 1_300), event(2, 2_000)];
    core.batch(fast, 1, 0, encode(&packets), clocks(3_000), 0)
        .unwrap();
    let mut out = Vec::new();
    core.drain(1_000_000, &mut out);
    // Watermark = 1500 - 100 (merge window).
    assert_eq!(core.watermark(1_000_000), 1_400);
    assert_eq!(ts_of(&out), [1_000, 1_300]);
    core.heartbeat(slow, clocks(1_200), 0).unwrap(); // host 2200
    core.drain(1_000_000, &mut out);
    assert_eq!(ts_of(&out), [1_000, 1_300, 2_000]);
    // Host now bounds it too.
    assert_eq!(core.watermark(1_000), 900);
}

#[test]
fn disconnect_releases_the_watermark() {
    let mut core = core();
    let fast = synced_relay(&mut core, 10, 1, 0);
    let slow = synced_relay(&mut core, 20, 2, 0);
    core.heartbeat(slow, clocks(10), 0).unwrap();
    core.batch(fast, 1, 0, encode(&[event(2, 5_000)]), clocks(6_000), 0)
        .unwrap();
    let mut out = Vec::new();
    core.drain(1_000_000, &mut out);
    assert!(ts_of(&out).is_empty());
    core.disconnect(slow);
    core.drain(1_000_000, &mut out);
    assert_eq!(ts_of(&out), [5_000]);
    // A disconnected relay's slot is gone.
    assert_eq!(
        core.heartbeat(slow, clocks(20), 0),
        Err(SessionError::UnknownSlot(slow))
    );
}

#[test]
fn unsynced_relays_past_the_grace_do_not_hold_the_watermark_and_come_in_late() {
    let mut core = core();
    // Past the connect grace (connect at 0).
    let now = config().connect_grace_ns + 1_000_000;
    let fast = synced_relay(&mut core, 10, 1, 0);
    let c = core.connect(hello(20, 2, "new"), 0).unwrap();
    core.heartbeat(c.slot, clocks(10), 0).unwrap();
    core.batch(fast, 1, 0, encode(&[event(2, 5_000)]), clocks(6_000), 0)
        .unwrap();
    core.batch(c.slot, 1, 0, encode(&[event(2, 3_000)]), clocks(4_000), 0)
        .unwrap();
    let mut out = Vec::new();
    core.drain(now, &mut out);
    assert_eq!(ts_of(&out), [5_000]);
    core.sync(c.slot, estimate(0)).unwrap();
    core.drain(now, &mut out);
    assert_eq!(ts_of(&out), [5_000, 3_000]);
    assert_eq!(core.stats().late_packets, 1);
}

#[test]
fn queue_limit_writes_the_oldest_before_the_watermark() {
    let mut core = core_with(LiveConfig {
        queue_max_bytes: 1,
        ..config()
    });
    let fast = synced_relay(&mut core, 10, 1, 0);
    let stalled = synced_relay(&mut core, 20, 2, 0);
    core.heartbeat(stalled, clocks(0), 0).unwrap();
    core.batch(fast, 1, 0, encode(&[event(2, 10), event(2, 20)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.drain(1_000_000, &mut out);
    assert_eq!(ts_of(&out), [10, 20]);
    assert_eq!(core.stats().forced_by_queue_limit, 2);
    assert_eq!(core.queued(), 0);
}

#[test]
fn a_crowded_queue_holds_back_the_relays_ahead_of_the_watermark() {
    let mut core = core_with(LiveConfig {
        // The 20 packets below take over half of it, not all.
        queue_max_bytes: 30 * crate::live::order::ENTRY_OVERHEAD,
        ..config()
    });
    let fast = synced_relay(&mut core, 10, 1, 0);
    let slow = synced_relay(&mut core, 20, 2, 0);
    core.heartbeat(slow, clocks(1_000), 0).unwrap();
    let ahead: Vec<_> = (0..20).map(|i| event(2, 5_000 + i)).collect();
    core.batch(fast, 1, 0, encode(&ahead), clocks(6_000), 0)
        .unwrap();
    let mut out = Vec::new();
    core.drain(1_000_000, &mut out);
    assert!(relayed(&out).is_empty(), "all past the watermark (900)");
    assert!(core.queued() > 0);
    // Over half the bound: the relay far ahead stops, the laggard reads.
    assert_eq!(core.held_back(1_000_000), [fast]);
    // The laggard catches up: nobody is ahead any more.
    core.heartbeat(slow, clocks(6_000), 0).unwrap();
    assert!(core.held_back(1_000_000).is_empty());
    core.drain(1_000_000, &mut out);
    assert_eq!(core.stats().forced_by_queue_limit, 0);
}

#[test]
fn host_and_relay_packets_interleave_by_time() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    core.host_tick(2_000, &[(BOOTTIME, 2_000)]);
    core.batch(
        a,
        1,
        0,
        encode(&[event(2, 1_000), event(2, 3_000)]),
        None,
        0,
    )
    .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let order: Vec<(u32, i64)> = out
        .iter()
        .filter(|p| p.role != Role::SyncPoint && !crate::sync_quality::is_quality_seq(p.seq))
        .map(|p| (p.machine_raw_id, p.ts))
        .collect();
    assert_eq!(order, [(1, 1_000), (0, 2_000), (0, 2_000), (1, 3_000)]);
}

/// Rough throughput of batch + drain (run with --release --ignored). The
/// test times the core; the core itself reads no clock.
#[test]
#[ignore]
#[allow(clippy::disallowed_methods, clippy::disallowed_types)]
fn throughput() {
    let mut core = core();
    let slots: Vec<RelaySlot> = (0..4)
        .map(|i| synced_relay(&mut core, 10 + i, 1 + i as u32, 0))
        .collect();
    let batches: Vec<Vec<Vec<Bytes>>> = (0..500u64)
        .map(|b| {
            (0..slots.len() as u64)
                .map(|r| {
                    let packets: Vec<TracePacket> = (0..1_000u64)
                        .map(|i| event(2 + (i % 4) as u32, b * 1_000_000 + i * 1_000 + r))
                        .collect();
                    encode(&packets)
                })
                .collect()
        })
        .collect();
    let start = std::time::Instant::now();
    let mut out = Vec::new();
    let mut total = 0u64;
    for (b, per_relay) in (0u64..).zip(batches) {
        for (&slot, packets) in slots.iter().zip(per_relay) {
            let c = clocks(b * 1_000_000 + 999_999);
            core.batch(slot, b + 1, b * 1_000, packets, c, 0).unwrap();
        }
        core.drain(u64::MAX, &mut out);
        total += out.len() as u64;
        out.clear();
        let _ = core.committed();
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{total} packets in {secs:.2}s: {:.0} packets/s",
        total as f64 / secs
    );
}

#[test]
fn a_new_unsynced_relay_holds_the_watermark_for_the_grace() {
    let mut core = core_with(LiveConfig {
        connect_grace_ns: 1_000,
        ..config()
    });
    let a = synced_relay(&mut core, 10, 1, 0);
    core.batch(a, 1, 0, encode(&[event(2, 400)]), clocks(10_000), 0)
        .unwrap();
    // Relay B connects at host 500, its packets wait for its first estimate.
    let b = core
        .connect(hello(20, 2, "m2"), 500)
        .expect("connects")
        .slot;
    core.batch(b, 1, 0, encode(&[event(2, 450)]), clocks(700), 500)
        .unwrap();
    core.batch(a, 2, 1, encode(&[event(2, 600)]), clocks(10_000), 600)
        .unwrap();
    let mut out = Vec::new();
    // Within the grace: held at B's connect time minus the window.
    core.drain(900, &mut out);
    assert_eq!(core.watermark(900), 400);
    assert_eq!(ts_of(&out), [400]);
    // B's estimate comes: its packet is ordered, not late.
    core.sync(b, estimate(0)).unwrap();
    core.drain(1_200, &mut out);
    assert_eq!(ts_of(&out), [400, 450, 600]);
    assert_eq!(core.stats().late_packets, 0);
}

#[test]
fn the_grace_expires_without_an_estimate() {
    let mut core = core_with(LiveConfig {
        connect_grace_ns: 1_000,
        ..config()
    });
    let a = synced_relay(&mut core, 10, 1, 0);
    let _b = core.connect(hello(20, 2, "m2"), 500).expect("connects");
    core.batch(a, 1, 0, encode(&[event(2, 800)]), clocks(10_000), 600)
        .unwrap();
    let mut out = Vec::new();
    core.drain(1_499, &mut out);
    assert!(ts_of(&out).is_empty(), "held during the grace");
    // Past connect + grace an unsynced relay holds nothing.
    core.drain(1_500, &mut out);
    assert_eq!(core.watermark(1_500), 1_400);
    assert_eq!(ts_of(&out), [800]);
}

#[test]
fn the_queue_bound_counts_each_packets_overhead() {
    // Many tiny packets: their bytes alone are far below the bound, their
    // queue entries are not.
    let n = 100u64;
    let mut core = core_with(LiveConfig {
        queue_max_bytes: 10 * crate::live::order::ENTRY_OVERHEAD,
        ..config()
    });
    let a = synced_relay(&mut core, 10, 1, 0);
    let slow = synced_relay(&mut core, 20, 2, 0);
    core.heartbeat(slow, clocks(0), 0).unwrap();
    let packets: Vec<_> = (0..n).map(|i| event(2, 1_000 + i)).collect();
    core.batch(a, 1, 0, encode(&packets), clocks(10_000), 0)
        .unwrap();
    let mut out = Vec::new();
    core.drain(1_000_000, &mut out);
    // The slow relay holds the watermark at 0: only the bound forced packets out.
    assert!(core.queued() <= 10, "{} queued", core.queued());
    assert_eq!(
        core.stats().forced_by_queue_limit as usize,
        ts_of(&out).len()
    );
    assert!(ts_of(&out).len() >= (n as usize) - 10);
}
