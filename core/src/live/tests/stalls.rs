//! A relay that stalls or lies about its clock cannot hold the watermark:
//! it lets go after the stall grace, its refused clocks never move it, the
//! healthy relays' packets drain meanwhile, and its later packets are
//! written by their own times (late where older than what went out).

use super::*;
use crate::live::hold::{CLOCK_AHEAD_SLACK_NS, READING_STEP_MAX_NS};

/// Merge window 100 ns, stall grace 1000 ns: a relay whose clock stands
/// still for 1100 ns of reading time lets go.
fn stall_config() -> LiveConfig {
    LiveConfig {
        stall_grace_ns: 1_000,
        ..config()
    }
}

/// (clock_stalls, clocks_refused) of `raw_id`.
fn clock_counts(core: &LiveCore, raw_id: u32) -> (u64, u64) {
    core.status(0, 0)
        .into_iter()
        .find(|m| m.raw_id == raw_id)
        .map_or((0, 0), |m| (m.clock_stalls, m.clocks_refused))
}

fn late_of(core: &LiveCore, raw_id: u32) -> u64 {
    core.status(0, 0)
        .into_iter()
        .find(|m| m.raw_id == raw_id)
        .map_or(0, |m| m.late_packets)
}

/// Relay `slot` sends one event at relay time `t` in batch `seq`, with its
/// clocks at `t`, arriving at host `t` (offset 0).
fn stream_one(core: &mut LiveCore, slot: RelaySlot, seq: u64, t: u64) {
    core.batch(slot, seq, seq - 1, encode(&[event(2, t)]), clocks(t), t)
        .unwrap();
}

#[test]
fn a_stalled_relay_lets_go_after_the_grace_and_rejoins_when_its_clock_advances() {
    let mut core = core_with(stall_config());
    let healthy = synced_relay(&mut core, 10, 1, 0);
    let stalled = synced_relay(&mut core, 20, 2, 0);
    core.heartbeat(stalled, clocks(0), 0).unwrap();
    let mut out = Vec::new();
    let mut seq = 0;
    for t in (0..=1_100).step_by(100) {
        seq += 1;
        stream_one(&mut core, healthy, seq, t);
        core.drain(t, &mut out);
    }
    // Within the grace the stalled relay holds it at its clock (0 - 100).
    assert_eq!(core.watermark(1_100), -100);
    assert!(ts_of(&out).is_empty());
    assert_eq!(clock_counts(&core, 2), (0, 0));
    for t in (1_200..=5_000).step_by(100) {
        seq += 1;
        stream_one(&mut core, healthy, seq, t);
        core.drain(t, &mut out);
    }
    // Past it the healthy relay's packets drain up to its own clock minus
    // the window, in order, none late.
    assert_eq!(core.watermark(5_000), 4_900);
    let written = ts_of(&out);
    assert_eq!(written, (0..=4_900).step_by(100).collect::<Vec<i64>>());
    assert_eq!(late_of(&core, 1), 0);
    // Counted once however long it stalls; not a drop.
    assert_eq!(clock_counts(&core, 2), (1, 0));
    assert_eq!(drop_count(&core, 2, reason::CLOCK_STALLS), 0);

    // It wakes up: its backlog (an event at 500) and a new one come with a
    // clock that advanced, a little behind host now.
    out.clear();
    core.batch(
        stalled,
        1,
        0,
        encode(&[event(3, 500), event(3, 5_750)]),
        clocks(4_900),
        5_000,
    )
    .unwrap();
    core.drain(5_000, &mut out);
    // It holds the watermark again, at its own clock.
    assert_eq!(core.watermark(5_000), 4_800);
    // The old event is written at once, at its own time, counted late; the
    // new one waits for the watermark like any other.
    assert_eq!(ts_of(&out), [500]);
    assert_eq!(late_of(&core, 2), 1);
    seq += 1;
    stream_one(&mut core, healthy, seq, 5_900);
    core.heartbeat(stalled, clocks(5_900), 5_900).unwrap();
    core.drain(5_900, &mut out);
    assert_eq!(ts_of(&out), [500, 5_000, 5_750]);
    assert_eq!(late_of(&core, 2), 1);
    assert_eq!(clock_counts(&core, 2), (1, 0));
}

#[test]
fn clocks_that_go_back_or_jump_ahead_are_refused_counted_and_hold_nothing() {
    let mut core = core_with(stall_config());
    let healthy = synced_relay(&mut core, 10, 1, 0);
    let liar = synced_relay(&mut core, 20, 2, 0);
    core.heartbeat(liar, clocks(1_000), 1_000).unwrap();
    let mut out = Vec::new();
    stream_one(&mut core, healthy, 1, 1_000);
    core.drain(1_000, &mut out);
    assert_eq!(core.watermark(1_000), 900);
    // Backwards.
    core.heartbeat(liar, clocks(500), 1_100).unwrap();
    assert_eq!(clock_counts(&core, 2), (0, 1));
    // An hour ahead of host time.
    let hour = 3_600_000_000_000;
    core.heartbeat(liar, clocks(hour), 1_200).unwrap();
    // Ahead by the slack and a little more than the estimate's bound there
    // (40 ns + 100 ppm of the distance from its reference).
    let just_past = 1_300 + CLOCK_AHEAD_SLACK_NS + 40 + CLOCK_AHEAD_SLACK_NS / 10_000 + 1_000;
    core.heartbeat(liar, clocks(just_past), 1_300).unwrap();
    assert_eq!(clock_counts(&core, 2), (0, 3));
    // None of them moved its hold.
    for t in [1_100, 1_200, 1_300] {
        stream_one(&mut core, healthy, t / 100 - 9, t);
        core.drain(t, &mut out);
        assert_eq!(core.watermark(t), 900, "at {t}");
    }
    // Refused clocks do not keep it from stalling: past the grace (1100
    // after its last accepted clock) the healthy relay drains.
    let mut seq = 4;
    for t in (1_400..=2_300).step_by(100) {
        seq += 1;
        stream_one(&mut core, healthy, seq, t);
        core.drain(t, &mut out);
    }
    assert_eq!(core.watermark(2_300), 2_200);
    assert_eq!(
        ts_of(&out),
        (1_000..=2_200).step_by(100).collect::<Vec<i64>>()
    );
    assert_eq!(clock_counts(&core, 2), (1, 3));
    // A clock within the slack of host time counts again.
    core.heartbeat(liar, clocks(2_300 + 1_000), 2_300).unwrap();
    core.drain(2_300, &mut out);
    assert_eq!(core.watermark(2_300), 2_200, "host now bounds it");
    assert_eq!(clock_counts(&core, 2), (1, 3));
}

#[test]
fn a_relay_whose_first_clock_is_absurdly_old_is_refused_and_never_holds() {
    // Host time ~1000 s; the liar's clocks say BOOTTIME = 1 ns while its
    // probes (its estimate) say it runs with the host.
    let t0 = 1_000_000_000_000;
    let mut core = core_with(stall_config());
    let healthy = synced_relay(&mut core, 10, 1, 0);
    let lying_hello = || HelloInfo {
        clocks: clocks(1),
        ..hello(20, 2, "liar")
    };
    let liar = core.connect(lying_hello(), t0).unwrap().slot;
    // No estimate yet: taken for now, checked when the estimate comes.
    assert_eq!(clock_counts(&core, 2), (0, 0));
    core.sync(liar, estimate(0)).unwrap();
    assert_eq!(clock_counts(&core, 2), (0, 1));
    let mut out = Vec::new();
    let mut seq = 0;
    for t in (t0..t0 + 1_000).step_by(100) {
        core.heartbeat(liar, clocks(1), t).unwrap();
        seq += 1;
        stream_one(&mut core, healthy, seq, t);
        core.drain(t, &mut out);
        // The healthy relay alone sets the watermark, from the start.
        assert_eq!(core.watermark(t), t as i64 - 100);
    }
    assert_eq!(ts_of(&out).len(), 9);
    // Every lie counted; nothing it said was accepted, so it never stalled.
    assert_eq!(clock_counts(&core, 2), (0, 11));

    // The same lie with the estimate already there is refused at once.
    core.disconnect(liar);
    let liar = core.connect(lying_hello(), t0 + 1_000).unwrap().slot;
    assert_eq!(clock_counts(&core, 2), (0, 12));
    core.heartbeat(liar, clocks(1), t0 + 1_000).unwrap();
    assert_eq!(clock_counts(&core, 2), (0, 13));
    assert_eq!(core.watermark(t0 + 1_000), t0 as i64 + 800);
}

#[test]
fn a_clock_that_creeps_forward_slower_than_time_stalls() {
    let mut core = core_with(stall_config());
    let healthy = synced_relay(&mut core, 10, 1, 0);
    let creeper = synced_relay(&mut core, 20, 2, 0);
    let mut out = Vec::new();
    for (i, t) in (0..=3_000u64).step_by(100).enumerate() {
        // 1 ns more every 100 ns of host time: it advances, never keeps up.
        core.heartbeat(creeper, clocks(i as u64), t).unwrap();
        stream_one(&mut core, healthy, i as u64 + 1, t);
        core.drain(t, &mut out);
    }
    assert_eq!(clock_counts(&core, 2), (1, 0));
    assert_eq!(core.watermark(3_000), 2_900);
}

#[test]
fn the_grace_does_not_run_while_the_daemon_is_not_reading() {
    // A 1 s grace (the default) and a daemon stopped for 10 s.
    let mut core = core_with(LiveConfig {
        merge_window_ns: 100_000_000,
        ..config()
    });
    let healthy = synced_relay(&mut core, 10, 1, 0);
    let other = synced_relay(&mut core, 20, 2, 0);
    let mut out = Vec::new();
    let s = 1_000_000_000u64;
    core.heartbeat(other, clocks(s), s).unwrap();
    stream_one(&mut core, healthy, 1, s);
    core.drain(s, &mut out);
    // Nothing read for 10 s: counts as READING_STEP_MAX_NS only.
    const { assert!(READING_STEP_MAX_NS < 1_000_000_000) };
    core.drain(11 * s, &mut out);
    assert_eq!(clock_counts(&core, 2), (0, 0));
    assert_eq!(core.watermark(11 * s), s as i64 - 100_000_000);
    // Its frames sent meanwhile come in, stale: they still count (its
    // clock advanced as far as host time did).
    core.heartbeat(other, clocks(3 * s), 11 * s).unwrap();
    stream_one(&mut core, healthy, 2, 11 * s);
    core.drain(11 * s, &mut out);
    assert_eq!(core.watermark(11 * s), 3 * s as i64 - 100_000_000);
    assert_eq!(clock_counts(&core, 2), (0, 0));
    // Reading again, and it stays silent: it stalls after the grace while
    // the healthy relay streams on.
    let step = 100_000_000;
    let (mut t, mut seq) = (11 * s, 2);
    while t < 13 * s {
        t += step;
        seq += 1;
        stream_one(&mut core, healthy, seq, t);
        core.drain(t, &mut out);
    }
    assert_eq!(clock_counts(&core, 2), (1, 0));
    assert_eq!(clock_counts(&core, 1), (0, 0));
    assert_eq!(core.watermark(t), t as i64 - 100_000_000);
}

#[test]
fn a_stalled_relay_holds_nobody_back() {
    let mut core = core_with(LiveConfig {
        // The 20 packets below take over half of it, not all.
        queue_max_bytes: 30 * crate::live::order::ENTRY_OVERHEAD,
        ..stall_config()
    });
    let fast = synced_relay(&mut core, 10, 1, 0);
    let stalled = synced_relay(&mut core, 20, 2, 0);
    core.heartbeat(stalled, clocks(0), 0).unwrap();
    let mut out = Vec::new();
    core.drain(0, &mut out);
    let ahead: Vec<_> = (0..20).map(|i| event(2, 400 + i)).collect();
    core.batch(fast, 1, 0, encode(&ahead), clocks(600), 600)
        .unwrap();
    core.drain(600, &mut out);
    // Crowded, and the stalled relay still holds it (within the grace):
    // the relay ahead is held back.
    assert_eq!(core.held_back(600), [fast]);
    // The held-back relay's own grace does not run while it is not read.
    for t in (700..=1_200).step_by(100) {
        core.drain(t, &mut out);
        let held = core.held_back(t);
        if t < 1_200 {
            assert_eq!(held, [fast], "at {t}");
        } else {
            // The stalled one let go: nobody is held back for it.
            assert!(held.is_empty(), "at {t}: {held:?}");
        }
    }
    assert_eq!(clock_counts(&core, 2), (1, 0));
    assert_eq!(clock_counts(&core, 1), (0, 0), "held back, not stalled");
    core.drain(1_200, &mut out);
    assert_eq!(ts_of(&out).len(), 20);
    // Read again, the fast relay gets a whole grace from now.
    for t in (1_300..=2_300).step_by(100) {
        core.drain(t, &mut out);
    }
    assert_eq!(clock_counts(&core, 1), (0, 0));
    core.drain(2_400, &mut out);
    assert_eq!(clock_counts(&core, 1), (1, 0));
}
