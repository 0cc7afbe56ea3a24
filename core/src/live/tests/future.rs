//! Packets dated far ahead of host now (a relay's clock or its producer
//! lying) are held apart from the merge: written at once, counted as
//! `future_packets`, never lost; an honest relay's packets stay in order.

use super::*;

/// An hour, in ns.
const HOUR_NS: u64 = 3_600_000_000_000;

/// The share of the honest relay's packets written late, and the liar's
/// packets written, when a liar sends one packet dated an hour ahead for
/// every two of the honest relay's (on two sequences), through an ordering
/// queue of 30 packets' room, for 200 rounds.
fn honest_late_share_beside_a_liar() -> (f64, u64, u64, LiveCore) {
    let mut core = core_with(LiveConfig {
        queue_max_bytes: 30 * crate::live::order::ENTRY_OVERHEAD,
        ..config()
    });
    let honest = synced_relay(&mut core, 10, 1, 0);
    let liar = synced_relay(&mut core, 20, 2, 0);
    let mut out = Vec::new();
    let rounds = 200;
    for i in 1..=rounds {
        let t = i * 1_000;
        let (h, l) = (
            encode(&[event(2, t), event(3, t + 1)]),
            encode(&[event(4, t + HOUR_NS)]),
        );
        core.batch(honest, i, 2 * (i - 1), h, clocks(t), t).unwrap();
        // The liar's clocks are honest: only its packets' times lie.
        core.batch(liar, i, i - 1, l, clocks(t), t).unwrap();
        core.drain(t, &mut out);
    }
    core.flush_all(&mut out);
    let of = |raw_id: u32| {
        relayed(&out)
            .iter()
            .filter(|p| p.machine_raw_id == raw_id)
            .count() as u64
    };
    let status = core.status(0, 0);
    let late = status
        .iter()
        .find(|m| m.raw_id == 1)
        .map_or(0, |m| m.late_packets);
    assert_eq!(of(1), 2 * rounds, "every honest packet written once");
    (late as f64 / of(1) as f64, of(2), rounds, core)
}

#[test]
fn packets_dated_an_hour_ahead_make_no_honest_packet_late_and_are_all_written() {
    let (late_share, liar_written, rounds, core) = honest_late_share_beside_a_liar();
    // Before the horizon, the liar's packets filled the queue, the first
    // one forced out moved the time written an hour on, and 86.5% of the
    // honest relay's packets were written late (346 of 400).
    eprintln!("share of honest packets late: {:.1}%", late_share * 100.0);
    assert_eq!(late_share, 0.0, "share of honest packets late");
    assert_eq!(liar_written, rounds, "none of the liar's lost");
    let liar = core
        .status(0, 0)
        .into_iter()
        .find(|m| m.raw_id == 2)
        .expect("liar row");
    assert_eq!(liar.future_packets, rounds);
    assert_eq!(liar.late_packets, 0);
    assert!(liar.drops.is_empty(), "{:?}", liar.drops);
    assert_eq!(
        core.stats().forced_by_queue_limit,
        0,
        "the queue never filled"
    );
}

#[test]
fn a_stream_ahead_keeps_its_own_order_and_packets_within_the_slack_wait() {
    let mut core = core();
    let slot = synced_relay(&mut core, 10, 1, 0);
    let mut out = Vec::new();
    // An ordinary packet, one an hour ahead behind it on the same
    // sequence, and one within the slack (0.5 s ahead) on another.
    let packets = encode(&[
        event(2, 1_000),
        event(2, 1_000 + HOUR_NS),
        event(3, 500_000_000),
    ]);
    core.batch(slot, 1, 0, packets, clocks(1_000), 1_000)
        .unwrap();
    core.drain(1_000, &mut out);
    // Nothing is past the watermark yet: the one ahead waits behind its
    // stream's head, in order.
    assert!(relayed(&out).is_empty());
    core.batch(slot, 2, 3, encode(&[event(2, 2_000)]), clocks(2_000), 2_000)
        .unwrap();
    core.drain(2_000, &mut out);
    let written: Vec<(u64, i64)> = relayed(&out)
        .iter()
        .map(|p| (p.origin.map_or(0, |o| o.index), p.ts))
        .collect();
    // Its head went at the watermark, the one ahead right after it (its
    // stream's order), the packet after it waits for the watermark.
    assert_eq!(written[..2], [(0, 1_000), (1, (1_000 + HOUR_NS) as i64)]);
    assert_eq!(written.len(), 2, "{written:?}");
    out.clear();
    core.flush_all(&mut out);
    assert_eq!(ts_of(&out), [2_000, 500_000_000]);
    let row = core
        .status(0, 0)
        .into_iter()
        .find(|m| m.raw_id == 1)
        .expect("row");
    assert_eq!((row.future_packets, row.late_packets), (1, 0));
}
