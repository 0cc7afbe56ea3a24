use super::*;

fn at(boottime_ns: u64) -> RelayClocks {
    RelayClocks {
        boottime_ns,
        monotonic_ns: boottime_ns,
        realtime_ns: boottime_ns + 1_000,
        monotonic_raw_ns: boottime_ns,
    }
}

#[test]
fn a_backlog_claims_when_its_batches_were_cut_not_now() {
    let mut cuts = CutClocks::new(at(0));
    // Batches 1-3 cut at 10, 4 at 20, 5-6 at 30; nothing sent yet.
    cuts.note(1, 3, || at(10));
    cuts.note(1, 4, || at(20));
    cuts.note(1, 6, || at(30));
    let now = at(1_000);
    assert_eq!(cuts.of(2), Some(at(10)));
    assert_eq!(cuts.of(4), Some(at(20)));
    assert_eq!(cuts.of(6), Some(at(30)));
    assert_eq!(cuts.of(7), None);
    // Batch 5 is the next to send: what follows was taken after 4 was cut.
    assert_eq!(cuts.claim(5, 6, now), at(20));
    // Everything sent: now.
    assert_eq!(cuts.claim(7, 6, now), now);
}

#[test]
fn a_claim_never_passes_the_packets_still_to_come() {
    // The property the daemon's watermark needs, on a simulated backlog:
    // packets taken at t = 0, 1, 2, ... into batches of 3 cut at once,
    // sent much later. Whatever is sent, the claim it carries is not newer
    // than any packet not sent yet.
    let mut cuts = CutClocks::new(at(0));
    let mut packets = Vec::new();
    for t in 0..30u64 {
        packets.push(t);
        if packets.len() % 3 == 0 {
            let seq = packets.len() as u64 / 3;
            cuts.note(1, seq, || at(t));
        }
    }
    let last = packets.len() as u64 / 3;
    let now = at(10_000);
    for next in 1..=last + 1 {
        let claim = cuts.claim(next, last, now);
        let first_unsent = packets.get(((next - 1) * 3) as usize).copied();
        if let Some(first) = first_unsent {
            assert!(
                claim.boottime_ns <= first,
                "next {next}: {claim:?} > {first}"
            );
        } else {
            assert_eq!(claim, now);
        }
        if next <= last {
            // And a batch's own clocks are not older than its packets.
            let own = cuts.of(next).unwrap().boottime_ns;
            assert!(own >= packets[(next * 3 - 1) as usize]);
        }
    }
}

#[test]
fn acked_batches_are_forgotten_but_the_last_one_is_kept() {
    let mut cuts = CutClocks::new(at(0));
    cuts.note(1, 2, || at(10));
    cuts.note(1, 4, || at(20));
    cuts.note(1, 6, || at(30));
    cuts.forget_before(5);
    // Batch 4's clocks still say where a resend from 5 starts.
    assert_eq!(cuts.claim(5, 6, at(99)), at(20));
    cuts.forget_before(7);
    assert_eq!(cuts.of(6), Some(at(30)));
    assert_eq!(cuts.claim(7, 6, at(99)), at(99));
}

#[test]
fn batches_recovered_on_a_restart_claim_the_start() {
    let mut cuts = CutClocks::new(at(400));
    // The spool holds unacked batches 40-45 from before the restart.
    cuts.note(40, 45, || at(500));
    assert_eq!(cuts.of(39), None);
    assert_eq!(cuts.of(40), Some(at(500)));
    // Nothing before 40 is known: the clocks at start.
    assert_eq!(cuts.claim(40, 45, at(900)), at(400));
    cuts.note(40, 46, || at(600));
    assert_eq!(cuts.claim(46, 46, at(900)), at(500));
}

#[test]
fn a_claim_is_never_ahead_of_now() {
    // A clock stepped back since the cut.
    let mut cuts = CutClocks::new(at(0));
    cuts.note(1, 2, || at(5_000));
    assert_eq!(cuts.claim(2, 2, at(100)), at(100));
}

#[test]
fn memory_is_bounded_and_merging_keeps_the_older_clocks() {
    let mut cuts = CutClocks::new(at(0));
    for seq in 1..=(MAX_RUNS as u64 + 10) {
        cuts.note(1, seq, || at(seq * 10));
    }
    assert_eq!(cuts.runs.len(), MAX_RUNS);
    // Merged batches claim the older clocks (less, so safe).
    assert_eq!(cuts.of(5), Some(at(10)));
    let last = MAX_RUNS as u64 + 10;
    assert_eq!(cuts.of(last), Some(at(last * 10)));
}

#[test]
fn advancing_moves_every_clock_and_stops_at_now() {
    let claim = at(1_000_000_000);
    let now = at(5_000_000_000);
    assert_eq!(advance(claim, Duration::ZERO, now), claim);
    let moved = advance(claim, Duration::from_millis(500), now);
    assert_eq!(moved.boottime_ns, 1_500_000_000);
    assert_eq!(moved.monotonic_ns, 1_500_000_000);
    assert_eq!(moved.realtime_ns, 1_500_001_000);
    assert_eq!(advance(claim, Duration::from_secs(60), now), now);
}
