use super::*;

const S: u64 = 1_000_000_000;

fn config(seconds: u64, bytes: u64) -> RingConfig {
    RingConfig {
        seconds: Duration::from_secs(seconds),
        bytes,
        source_lag: Duration::from_secs(1),
    }
}

fn trigger(id: u64, from_s: u64, to_s: u64) -> TriggerSpec {
    TriggerSpec {
        id,
        name: "crash".into(),
        host_time_ns: 0,
        before_ns: 0,
        after_ns: 0,
        relay_from_ns: from_s * S,
        relay_to_ns: to_s * S,
    }
}

/// Polls until nothing is left to do.
fn drain(ring: &mut Ring, now: u64) -> Vec<RingAction> {
    std::iter::from_fn(|| ring.poll(now)).collect()
}

#[test]
fn the_time_bound_releases_the_oldest_batches_and_counts_them() {
    let mut ring = Ring::new(config(10, u64::MAX), [], 0);
    for second in 1..=30 {
        ring.cut(second, 100, 2, second * S);
    }
    assert_eq!(drain(&mut ring, 30 * S), vec![RingAction::Release(19)]);
    assert_eq!(ring.oldest_cut_ns(), Some(20 * S));
    assert_eq!(ring.held_bytes(), 11 * 100);
    assert_eq!(ring.held_packets(), 11 * 2, "what the heartbeat reports");
    assert_eq!(ring.stats().batches_released, 19);
    assert_eq!(ring.stats().packets_released, 38);
    assert_eq!(
        ring.deadline_ns(),
        Some(30 * S),
        "the oldest expires at 20 + 10 s"
    );
    assert!(drain(&mut ring, 30 * S).is_empty(), "released once");
}

#[test]
fn the_byte_bound_releases_the_oldest_first() {
    let mut ring = Ring::new(config(3600, 1000), [], 0);
    for seq in 1..=25 {
        ring.cut(seq, 100, 1, seq * S);
    }
    assert_eq!(drain(&mut ring, 26 * S), vec![RingAction::Release(15)]);
    assert_eq!(ring.held_bytes(), 1000);
}

#[test]
fn a_window_is_collected_when_whole_and_held_until_then() {
    let mut ring = Ring::new(config(10, u64::MAX), [], 0);
    for second in 1..=20 {
        ring.cut(second, 100, 1, second * S);
    }
    assert_eq!(ring.trigger(trigger(7, 15, 25)), TriggerOutcome::Taken);
    for second in 21..=40 {
        ring.cut(second, 100, 1, second * S);
        let actions = drain(&mut ring, second * S);
        // Never past the window's first batch while it waits.
        assert!(
            actions
                .iter()
                .all(|a| !matches!(a, RingAction::Release(through) if *through >= 15)),
            "{actions:?}"
        );
        if second < 26 {
            assert!(
                !actions
                    .iter()
                    .any(|a| matches!(a, RingAction::Collect { .. }))
            );
        }
        if second == 26 {
            assert!(actions.contains(&RingAction::Collect {
                trigger: trigger(7, 15, 25),
                first: 15,
                last: 26,
                lost_packets: 0,
            }));
        }
    }
    assert_eq!(ring.windows_owed(), 1);
    assert_eq!(
        ring.held_bytes(),
        26 * 100,
        "kept until the driver copied it"
    );
    ring.collected(7, true);
    assert_eq!(ring.windows_owed(), 1);
    // Once collected the ring goes back to its bounds.
    assert_eq!(drain(&mut ring, 40 * S), vec![RingAction::Release(29)]);
    ring.acknowledged();
    assert_eq!(ring.windows_owed(), 0);
}

#[test]
fn a_resent_trigger_is_taken_once_and_too_many_are_refused() {
    let mut ring = Ring::new(config(10, u64::MAX), [], 0);
    assert_eq!(ring.trigger(trigger(1, 1, 2)), TriggerOutcome::Taken);
    assert_eq!(ring.trigger(trigger(1, 1, 2)), TriggerOutcome::Again);
    for id in 2..=MAX_WINDOWS as u64 {
        assert_eq!(ring.trigger(trigger(id, 1, 2)), TriggerOutcome::Taken);
    }
    assert!(matches!(
        ring.trigger(trigger(99, 1, 2)),
        TriggerOutcome::Refused(reason) if reason.contains("owed")
    ));
    assert!(matches!(
        Ring::new(config(10, 1), [], 0).trigger(trigger(5, 3, 2)),
        TriggerOutcome::Refused(_)
    ));
    assert_eq!(ring.stats().triggers_refused, 1);
}

#[test]
fn a_window_older_than_the_ring_says_packets_may_be_lost() {
    let mut ring = Ring::new(config(5, u64::MAX), [], 0);
    for second in 1..=20 {
        ring.cut(second, 10, 3, second * S);
    }
    let _ = drain(&mut ring, 20 * S);
    assert_eq!(ring.trigger(trigger(3, 2, 18)), TriggerOutcome::Taken);
    let actions = drain(&mut ring, 20 * S);
    assert!(
        matches!(
            actions.first(),
            Some(RingAction::Collect { first: 15, last: 19, lost_packets, .. }) if *lost_packets > 0
        ),
        "{actions:?}"
    );
}

#[test]
fn batches_of_an_earlier_run_keep_their_times_never_decreasing() {
    let restored = [(4, 10, 1, 100 * S), (5, 10, 1, 90 * S)];
    let mut ring = Ring::new(config(10, u64::MAX), restored, 1);
    assert_eq!(ring.windows_owed(), 1);
    assert_eq!(ring.held_times().get(&5), Some(&(100 * S)));
    assert!(drain(&mut ring, 105 * S).is_empty());
    assert_eq!(drain(&mut ring, 111 * S), vec![RingAction::Release(5)]);
    // A batch at or below what was released is ignored.
    ring.cut(5, 10, 1, 112 * S);
    assert_eq!(ring.held_bytes(), 0);
}

#[test]
fn a_segment_is_an_eighth_of_the_ring_within_its_limits() {
    assert_eq!(segment_bytes(8 << 20), 1 << 20);
    assert_eq!(segment_bytes(1 << 20), 128 << 10);
    assert_eq!(segment_bytes(1 << 10), 64 << 10);
    assert_eq!(segment_bytes(1 << 40), 64 << 20);
}
