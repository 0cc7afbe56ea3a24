//! Hello/refusals, resends, recovery, acks, status, garbage.

use proptest::prelude::*;

use super::*;

#[test]
fn refusals_name_the_problem() {
    let mut core = core();
    assert_eq!(
        core.connect(hello(10, 0, "x"), 0),
        Err(Refusal::ReservedRawId)
    );
    core.connect(hello(10, 7, "phone"), 0).unwrap();
    let err = core.connect(hello(11, 7, "tablet"), 0).unwrap_err();
    assert_eq!(
        err,
        Refusal::RawIdInUse {
            raw_id: 7,
            holder_instance: 10,
            holder_name: "phone".into()
        }
    );
    // The holder is named by the first 4 hex digits of its instance only:
    // the whole id would let a plaintext peer resume its session.
    assert!(
        err.to_string().contains("instance 0000... (phone)"),
        "{err}"
    );
    assert!(!err.to_string().contains("000000000000000a"), "{err}");
}

#[test]
fn same_instance_reconnecting_replaces_its_stale_session() {
    let mut core = core();
    let first = core.connect(hello(10, 7, "phone"), 0).unwrap();
    let second = core.connect(hello(10, 7, "phone"), 0).unwrap();
    assert_eq!(second.replaced, Some(first.slot));
    assert_ne!(second.slot, first.slot);
    assert!(core.batch(first.slot, 1, 0, vec![], None, 0).is_err());
    // After the raw id's relay disconnects another instance may take it.
    core.disconnect(second.slot);
    assert!(core.connect(hello(11, 7, "phone"), 0).is_ok());
}

#[test]
fn resend_after_reconnect_writes_nothing_twice() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    let batch1 = encode(&[event(2, 10), event(3, 20), event(2, 30)]);
    core.batch(a, 1, 0, batch1.clone(), None, 0).unwrap();
    let mut out = Vec::new();
    core.drain(1_000, &mut out); // written but never committed
    core.disconnect(a);

    let mut h = hello(10, 1, "m1");
    h.oldest_unacked_batch = 1;
    let c = core.connect(h, 0).unwrap();
    assert_eq!(c.acked_through_batch, 0);
    core.sync(c.slot, estimate(0)).unwrap();
    core.batch(c.slot, 1, 0, batch1, None, 0).unwrap();
    core.batch(c.slot, 2, 3, encode(&[event(3, 40)]), None, 0)
        .unwrap();
    core.flush_all(&mut out);
    assert_eq!(ts_of(&out), [10, 20, 30, 40]);
    assert_eq!(drop_count(&core, 1, reason::DUPLICATE), 3);
    assert_eq!(core.committed(), [(c.slot, 2)]);
    // The output sequence ids are the same as before the reconnect.
    let seqs: Vec<u32> = relayed(&out).iter().map(|p| p.seq).collect();
    assert_eq!(seqs[1], seqs[3]);
}

#[test]
fn recovered_state_deduplicates_across_a_restart() {
    let recovered = Recovered {
        streams: vec![RecoveredStream {
            out_seq: 9,
            relay_instance: 10,
            relay_sequence: 2,
            machine_raw_id: 1,
            written_through: 4,
        }],
        next_out_seq: 10,
        sync_floors: vec![],
        sequences: vec![],
        names: vec![],
    };
    let mut core = LiveCore::new(config(), recovered);
    let mut h = hello(10, 1, "phone");
    // The relay still spools batch 3 (indices 3..=6), acked through 2 before.
    h.oldest_unacked_batch = 3;
    let c = core.connect(h, 0).unwrap();
    assert_eq!(c.acked_through_batch, 2);
    core.sync(c.slot, estimate(0)).unwrap();
    let packets = [event(2, 3), event(2, 4), event(2, 5), event(3, 6)];
    core.batch(c.slot, 3, 3, encode(&packets), None, 0).unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got: Vec<(i64, u32)> = relayed(&out).iter().map(|p| (p.ts, p.seq)).collect();
    assert_eq!(got, [(5, 9), (6, 10)]);
    assert_eq!(drop_count(&core, 1, reason::DUPLICATE), 2);
    assert_eq!(&*relayed(&out)[0].src, "phone/2");
    assert_eq!(core.committed(), [(c.slot, 3)]);
}

#[test]
fn recovered_names_name_a_machine_before_its_relay_says_hello() {
    let recovered = Recovered {
        streams: vec![RecoveredStream {
            out_seq: 9,
            relay_instance: 10,
            relay_sequence: 2,
            machine_raw_id: 1,
            written_through: 4,
        }],
        next_out_seq: 10,
        names: vec![(0, "not-the-host".into()), (1, "phone".into())],
        ..Recovered::default()
    };
    let mut core = LiveCore::new(config(), recovered);
    let status = core.status(0, 0);
    let row = status.iter().find(|m| m.raw_id == 1).expect("row");
    assert_eq!(row.name.as_deref(), Some("phone"));
    assert!(!row.connected);
    let host = status.iter().find(|m| m.raw_id == 0).expect("host");
    assert_ne!(
        host.name.as_deref(),
        Some("not-the-host"),
        "the host keeps its configured name"
    );
    // The relay says hello under a new name: the machine keeps its first.
    let c = core.connect(hello(10, 1, "renamed"), 0).unwrap();
    core.sync(c.slot, estimate(0)).unwrap();
    core.batch(c.slot, 5, 5, encode(&[event(2, 9)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    assert_eq!(&*relayed(&out)[0].src, "phone/2");
    assert_eq!(core.status(0, 0)[1].name.as_deref(), Some("phone"));
}

#[test]
fn recovered_sequence_state_resolves_a_resumed_stream_as_before() {
    use crate::live::RecoveredSequence;
    // Clock 64 of relay sequence 2 reads relay BOOTTIME + 1000; the
    // stream's default clock is 64. Both were in the last file's preamble.
    let snapshot = |seq| {
        let p = snapshot(seq, &[(BOOTTIME, 5_000), (64, 6_000)]);
        match p.data {
            Some(Data::ClockSnapshot(s)) => s.encode_to_vec(),
            _ => unreachable!(),
        }
    };
    let recovered = Recovered {
        streams: vec![RecoveredStream {
            out_seq: 9,
            relay_instance: 10,
            relay_sequence: 2,
            machine_raw_id: 1,
            written_through: 4,
        }],
        next_out_seq: 10,
        sync_floors: vec![],
        sequences: vec![RecoveredSequence {
            out_seq: 9,
            default_clock: Some(64),
            clock_snapshots: vec![snapshot(2)],
        }],
        names: vec![],
    };
    let mut core = LiveCore::new(config(), recovered);
    let c = core.connect(hello(10, 1, "phone"), 0).unwrap();
    core.sync(c.slot, estimate(0)).unwrap();
    // No clock id, no defaults packet since the restart: clock 64.
    core.batch(c.slot, 1, 5, encode(&[event(2, 7_500)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got = relayed(&out);
    assert_eq!(got.len(), 1, "resolved, not pending");
    assert_eq!((got[0].ts, got[0].seq, got[0].clock), (6_500, 9, 64));
    assert_eq!(
        decode(got[0]).timestamp_clock_id,
        None,
        "the sequence default still names the clock: nothing stamped"
    );
}

#[test]
fn acked_through_waits_for_every_packet_of_a_batch() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    core.batch(a, 1, 0, encode(&[event(2, 100), event(3, 900)]), None, 0)
        .unwrap();
    core.batch(a, 2, 2, encode(&[event(2, 200)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    // Watermark 400: batch 1's second packet and batch 2 are both partial.
    core.drain(500, &mut out);
    assert_eq!(ts_of(&out), [100, 200]);
    assert_eq!(core.committed(), [], "batch 1 still has a packet queued");
    core.drain(10_000, &mut out);
    assert_eq!(core.committed(), [(a, 2)]);
    assert_eq!(core.committed(), [], "only acks that moved");
}

#[test]
fn commit_points_ack_only_what_was_drained_before_them() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    core.batch(a, 1, 0, encode(&[event(2, 100)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.drain(10_000, &mut out);
    let point = core.commit_point();
    core.batch(a, 2, 1, encode(&[event(2, 200)]), None, 0)
        .unwrap();
    core.drain(10_000, &mut out); // handed to the writer, not committed yet
    assert_eq!(core.committed_through(point), [(a, 1)]);
    let point = core.commit_point();
    assert_eq!(core.committed_through(point), [(a, 2)]);
}

#[test]
fn a_ring_relay_whose_spool_start_moved_lost_nothing() {
    let mut core = core();
    let ring = |oldest| HelloInfo {
        oldest_unacked_batch: oldest,
        ring: true,
        ..hello(10, 1, "m1")
    };
    let a = core.connect(ring(1), 0).unwrap().slot;
    core.disconnect(a);
    // Its ring let 4000 batches go meanwhile: none were the output's.
    let c = core.connect(ring(4001), 10).unwrap();
    assert_eq!(drop_count(&core, 1, reason::BATCHES_LOST), 0);
    assert!(c.acked_through_batch < 4001);
    // Restarted in stream mode: its ring let 1000 more go before that,
    // none lost either.
    core.disconnect(c.slot);
    let stream = |oldest| HelloInfo {
        oldest_unacked_batch: oldest,
        ..hello(10, 1, "m1")
    };
    let s = core.connect(stream(5001), 20).unwrap();
    assert_eq!(drop_count(&core, 1, reason::BATCHES_LOST), 0);
    // The same gap from a stream session to the next is a loss.
    core.disconnect(s.slot);
    core.connect(stream(6001), 30).unwrap();
    assert_eq!(drop_count(&core, 1, reason::BATCHES_LOST), 1000);
}

#[test]
fn batches_the_relay_lost_are_counted_and_acked() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    core.batch(a, 1, 0, encode(&[event(2, 1)]), None, 0)
        .unwrap();
    core.batch(a, 4, 9, encode(&[event(2, 2)]), None, 0)
        .unwrap();
    assert_eq!(drop_count(&core, 1, reason::BATCHES_LOST), 2);
    core.disconnect(a);
    // Reconnecting with a spool that starts past what was accepted.
    let mut h = hello(10, 1, "m1");
    h.oldest_unacked_batch = 8;
    let c = core.connect(h, 0).unwrap();
    assert_eq!(drop_count(&core, 1, reason::BATCHES_LOST), 5);
    core.sync(c.slot, estimate(0)).unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    assert_eq!(core.committed(), [(c.slot, 7)]);
}

#[test]
fn too_many_unacked_batches_is_a_session_error() {
    let mut core = core_with(LiveConfig {
        max_unacked_batches: 2,
        ..config()
    });
    let c = core.connect(hello(10, 1, "m1"), 0).unwrap();
    for seq in 1..=2 {
        core.batch(c.slot, seq, seq, encode(&[event(2, seq)]), None, 0)
            .unwrap();
    }
    assert!(matches!(
        core.batch(c.slot, 3, 3, encode(&[event(2, 3)]), None, 0),
        Err(SessionError::TooManyUnackedBatches { limit: 2, .. })
    ));
}

#[test]
fn status_reports_each_machine() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 1_000);
    core.batch(a, 1, 0, encode(&[event(2, 5_000)]), None, 2_000_000)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let status = core.status(5_000_000, 1_000_000);
    assert_eq!(status.len(), 2);
    assert_eq!(status[0].raw_id, 0);
    assert_eq!(status[0].name.as_deref(), Some(HOST_NAME));
    let m = &status[1];
    assert_eq!(
        (m.raw_id, m.name.as_deref(), m.connected),
        (1, Some("m1"), true)
    );
    assert_eq!(m.packets, 1);
    assert_eq!(m.bytes, relayed(&out)[0].bytes.len() as u64);
    assert_eq!(m.offset_ns, Some(1_000));
    assert_eq!((m.error_bound_ns, m.rtt_ns), (Some(40), Some(80)));
    // Seen 3 ms before "now".
    assert_eq!(m.last_seen_unix_ms, Some(999_997));
    core.disconnect(a);
    assert!(!core.status(0, 0)[1].connected);
}

#[test]
fn malformed_packets_are_counted_not_fatal() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    let mut packets = encode(&[event(2, 1)]);
    packets.push(Bytes::from_static(&[0x0b]));
    packets.push(Bytes::from_static(&[0x12, 0x05, 1]));
    core.batch(a, 1, 0, packets, None, 0).unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    assert_eq!(ts_of(&out), [1]);
    assert_eq!(drop_count(&core, 1, reason::MALFORMED), 2);
    assert_eq!(core.committed(), [(a, 1)]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Arbitrary bytes as packets (and arbitrary clocks) never panic, and
    /// every packet is accounted for: written, pending or counted.
    #[test]
    fn garbage_never_panics(
        packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..24),
        offset in any::<i32>(),
        boottime in any::<u64>(),
        sync_first in any::<bool>(),
    ) {
        let mut core = core();
        let c = core.connect(hello(10, 1, "m1"), 0).unwrap();
        if sync_first {
            core.sync(c.slot, estimate(i64::from(offset))).unwrap();
        }
        let n = packets.len() as u64;
        let packets: Vec<Bytes> = packets.into_iter().map(Bytes::from).collect();
        core.batch(c.slot, 1, 0, packets, clocks(boottime), 0).unwrap();
        core.sync(c.slot, estimate(i64::from(offset))).unwrap();
        let mut out = Vec::new();
        core.drain(u64::MAX, &mut out);
        core.flush_all(&mut out);
        let status = &core.status(0, 0)[1];
        let dropped: u64 = status.drops.iter()
            .filter(|(k, _)| k.as_str() != reason::LATE && k.as_str() != reason::INVALID_SNAPSHOT)
            .map(|(_, v)| v).sum();
        prop_assert_eq!(relayed(&out).len() as u64 + status.pending + dropped, n);
    }
}

#[test]
fn a_renamed_relay_moves_its_streams_to_the_new_machine() {
    let mut core = core();
    let a = synced_relay(&mut core, 10, 1, 0);
    core.batch(a, 1, 0, encode(&[event(2, 1)]), None, 0)
        .unwrap();
    core.disconnect(a);
    let c = core.connect(hello(10, 5, "renamed"), 0).unwrap();
    core.sync(c.slot, estimate(0)).unwrap();
    core.batch(c.slot, 2, 1, encode(&[event(2, 2)]), None, 0)
        .unwrap();
    let mut out = Vec::new();
    core.flush_all(&mut out);
    let got: Vec<u32> = relayed(&out).iter().map(|p| p.machine_raw_id).collect();
    // Packets already resolved keep the machine they came in as.
    assert_eq!(got, [1, 5]);
    let status = core.status(0, 0);
    assert!(!status.iter().find(|m| m.raw_id == 1).unwrap().connected);
    // The old raw id is free again.
    assert!(core.connect(hello(11, 1, "m1"), 0).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Extreme session values (seq, indices, clocks, estimates) never panic.
    #[test]
    fn extreme_session_values_never_panic(
        seqs in proptest::collection::vec(any::<u64>(), 1..6),
        first in any::<u64>(),
        oldest in any::<u64>(),
        ts in any::<u64>(),
        boottime in any::<u64>(),
        offset in any::<i64>(),
        freq in -1e6f64..1e6,
        ref_ns in any::<u64>(),
    ) {
        let mut core = core();
        let mut h = hello(10, 1, "m1");
        h.oldest_unacked_batch = oldest;
        h.clocks = clocks(boottime);
        let c = core.connect(h, u64::MAX).unwrap();
        let e = SyncEstimate { offset_ns: offset, freq_ppm: freq, ref_relay_ns: ref_ns, ..estimate(0) };
        core.sync(c.slot, e).unwrap();
        for seq in seqs {
            let packets = encode(&[event(2, ts), snapshot(3, &[(BOOTTIME, ts), (MONOTONIC, boottime)])]);
            let _ = core.batch(c.slot, seq, first, packets, clocks(boottime), u64::MAX);
            core.heartbeat(c.slot, clocks(ts), u64::MAX).unwrap();
        }
        let mut out = Vec::new();
        core.drain(u64::MAX, &mut out);
        core.drain(0, &mut out);
        core.flush_all(&mut out);
        let _ = core.committed();
        let _ = core.status(u64::MAX, 0);
        for p in relayed(&out) {
            prop_assert!(p.ts >= 0);
        }
    }
}
