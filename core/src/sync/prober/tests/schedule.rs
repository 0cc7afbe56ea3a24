//! The probe schedule: bursts, the steady rate and its follow-ups, what
//! restarts a burst, a new schedule on running sessions.

use super::*;

#[test]
fn burst_of_eight_at_15_ms_then_a_minute_at_10_hz_then_4_hz() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    let start = 1_000 * MS;
    assert!(register(&mut core, &mut relay, relay_addr(), start));
    let mut sent_at = Vec::new();
    let mut now = start;
    // No replies: no follow-ups, only the schedule.
    while now < start + 61_000 * MS {
        if !send_due(&mut core, now).is_empty() {
            sent_at.push(now - start);
        }
        now += MS;
    }
    let burst: Vec<u64> = (0..8).map(|i| i * 15 * MS).collect();
    assert_eq!(&sent_at[..8], &burst[..]);
    // The warm-up: the fastest steady spacing until a minute after the
    // burst began, then the adaptive spacing (4 Hz at first).
    let steady: Vec<u64> = sent_at[7..]
        .windows(2)
        .map(|w| (w[1] - w[0]) / MS)
        .collect();
    let warm = steady.iter().take_while(|&&d| d == 100).count();
    assert!(warm >= 590, "{warm} probes at 10 Hz");
    assert!(
        steady[warm..].iter().all(|&d| d == 250),
        "{:?}",
        &steady[warm..]
    );
    assert!(!steady[warm..].is_empty());
    let last_warm = sent_at[7 + warm];
    assert!(
        (60_000 * MS..60_100 * MS).contains(&last_warm),
        "{last_warm}"
    );
    assert_eq!(core.stats().bursts, 1);
    // A second register from the same address (refresh) does not restart
    // the burst.
    assert!(register(&mut core, &mut relay, relay_addr(), now));
    let mut due = Vec::new();
    core.poll(now, &mut due);
    assert!(due.is_empty());
    assert_eq!(core.stats().bursts, 1);
}

#[test]
fn a_register_from_a_new_route_restarts_the_burst() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let now = run_answering(&mut core, &relay, 0, 2_000 * MS, MS, |s| reply_to(s, 0));
    assert_eq!(core.burst_left(SESSION), Some(0));
    // The relay reconnected over TCP (or its NAT mapping moved).
    assert!(register(&mut core, &mut relay, Route::Tcp(3), now));
    assert_eq!(core.burst_left(SESSION), Some(8));
    assert_eq!(core.stats().bursts, 2);
    let mut due = Vec::new();
    core.poll(now, &mut due);
    assert_eq!(
        due,
        vec![ProbeDue {
            session_id: SESSION,
            route: Route::Tcp(3)
        }]
    );
    // The TCP connection closes: nothing to probe until the next register.
    core.route_closed(Route::Tcp(3));
    assert_eq!(core.next_wakeup_ns(), None);
    assert!(send_due(&mut core, now + 1_000 * MS).is_empty());
    assert!(core.prepare_probe(SESSION).is_none());
}

#[test]
fn new_epoch_restarts_the_burst() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let now = run_answering(&mut core, &relay, 0, 2_000 * MS, 10 * MS, |s| {
        reply_to(s, 7)
    });
    let prepared = core.prepare_probe(SESSION).expect("active");
    core.probe_sent(SESSION, prepared.nonce, now);
    let sent = Sent {
        nonce: prepared.nonce,
        t1: now,
    };
    let (reply, t4) = reply_to(sent, 7 + 30_000 * MS as i64);
    let update = deliver(&mut core, &relay, reply, t4).expect("update");
    assert_eq!(update.estimate.epoch, 1);
    assert_eq!(core.stats().new_epochs, 1);
    assert_eq!(core.next_wakeup_ns(), Some(t4), "burst starts at once");
    let mut burst = 0;
    let mut at = t4;
    while at < t4 + 150 * MS {
        burst += send_due(&mut core, at).len();
        at += MS;
    }
    assert_eq!(burst, 8);
}

/// The tolerance the core uses to judge a sample against `estimate`.
fn tolerance(estimate: &SyncEstimate, delay: u64) -> u64 {
    estimate.error_bound_ns + delay.div_ceil(2) + 1_000
}

#[test]
fn a_low_delay_sample_far_outside_the_bound_starts_a_burst() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let now = run_answering(&mut core, &relay, 0, 3_000 * MS, MS, |s| reply_to(s, 0));
    assert_eq!(core.burst_left(SESSION), Some(0));
    let estimate = core.estimate(SESSION).expect("estimate");
    let jump = (8 * tolerance(&estimate, 22_000)).max(50_000) * 2;
    // Same low delay, relay clock jumped ahead.
    let sent = send_due(&mut core, now + 1_000 * MS).remove(0);
    let (reply, t4) = reply_with(sent, MS + jump, 10_000, 0);
    deliver(&mut core, &relay, reply, t4);
    assert_eq!(core.stats().suspected_steps, 1);
    assert_eq!(core.burst_left(SESSION), Some(8));
    assert_eq!(core.next_wakeup_ns(), Some(t4));
    // A far sample with a high delay is only a disagreement (queueing).
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let now = run_answering(&mut core, &relay, 0, 3_000 * MS, MS, |s| reply_to(s, 0));
    let before = core.steady_interval_ns(SESSION).expect("active");
    let sent = send_due(&mut core, now + 1_000 * MS).remove(0);
    // 100 µs each way (5x the floor), relay clock off by more than the
    // sample's own half delay plus the bound.
    let estimate = core.estimate(SESSION).expect("estimate");
    let miss = tolerance(&estimate, 200_000) + 5_000;
    let (reply, t4) = reply_with(sent, MS + miss, 100_000, 0);
    deliver(&mut core, &relay, reply, t4);
    assert_eq!(core.stats().suspected_steps, 0);
    assert_eq!(core.burst_left(SESSION), Some(0));
    assert_eq!(
        core.steady_interval_ns(SESSION),
        Some((before / 2).max(100 * MS))
    );
}

#[test]
fn the_steady_rate_slows_while_samples_agree_and_speeds_up_when_not() {
    let config = ProberConfig {
        train_length: 1,
        max_interval_ns: 1_000 * MS,
        warmup_ns: 0,
        ..ProberConfig::default()
    };
    let mut core = core_with(config);
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    assert_eq!(core.steady_interval_ns(SESSION), Some(250 * MS));
    // Agreeing samples: the interval grows to the 1 s ceiling (1 Hz).
    let now = run_answering(&mut core, &relay, 0, 60_000 * MS, MS, |s| reply_to(s, 0));
    assert_eq!(core.steady_interval_ns(SESSION), Some(1_000 * MS));
    // Each disagreeing sample halves it, down to the 100 ms floor (10 Hz).
    let mut now = now;
    let mut intervals = Vec::new();
    for i in 0..5u64 {
        let estimate = core.estimate(SESSION).expect("estimate");
        let off = tolerance(&estimate, 20_000) + 2_000;
        let sent = loop {
            if let Some(sent) = send_due(&mut core, now).pop() {
                break sent;
            }
            now += MS;
        };
        // Alternate sides so the estimate does not follow.
        let offset = if i % 2 == 0 { MS + off } else { MS - off };
        let (reply, t4) = reply_with(sent, offset, 10_000, 0);
        deliver(&mut core, &relay, reply, t4);
        intervals.push(core.steady_interval_ns(SESSION).expect("active") / MS);
    }
    assert_eq!(core.stats().suspected_steps, 0, "small misses are no steps");
    assert_eq!(intervals, vec![500, 250, 125, 100, 100]);
    // A burst (here: the relay moved to TCP) starts over at 4 Hz.
    assert!(register(&mut core, &mut relay, Route::Tcp(1), now));
    assert_eq!(core.steady_interval_ns(SESSION), Some(250 * MS));
    // Within the steady schedule, the next probe is due an interval after
    // the disagreeing reply at most.
    assert!(core.next_wakeup_ns().expect("active") <= now + 101 * MS);
}

#[test]
fn by_default_agreeing_samples_never_slow_probing_below_4_hz() {
    let config = ProberConfig {
        train_length: 1,
        ..ProberConfig::default()
    };
    let mut core = core_with(config);
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    // 10 Hz through the warm-up's minute, however well samples agree.
    let now = run_answering(&mut core, &relay, 0, 59_000 * MS, MS, |s| reply_to(s, 0));
    assert_eq!(core.steady_interval_ns(SESSION), Some(100 * MS));
    run_answering(&mut core, &relay, now, 120_000 * MS, MS, |s| reply_to(s, 0));
    assert_eq!(core.steady_interval_ns(SESSION), Some(250 * MS));
}

#[test]
fn each_steady_probe_gets_one_follow_up_after_its_reply() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let now = run_answering(&mut core, &relay, 0, 1_000 * MS, MS, |s| reply_to(s, 0));
    let at = core.next_wakeup_ns().expect("active").max(now);
    let first = send_due(&mut core, at).remove(0);
    assert!(
        send_due(&mut core, at + MS).is_empty(),
        "no follow-up before the reply"
    );
    let (reply, t4) = reply_to(first, 0);
    deliver(&mut core, &relay, reply, t4).expect("update");
    assert_eq!(core.next_wakeup_ns(), Some(0), "follow-up due at once");
    let follow_up = send_due(&mut core, t4);
    assert_eq!(follow_up.len(), 1);
    // Its reply ends the train (length 2).
    let (reply, t4) = reply_to(follow_up[0], 0);
    deliver(&mut core, &relay, reply, t4).expect("update");
    assert!(send_due(&mut core, t4).is_empty());
}

#[test]
fn bursts_have_no_follow_ups() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let mut probes = 0;
    let mut now = 0;
    while now < 110 * MS {
        for sent in send_due(&mut core, now) {
            probes += 1;
            let (reply, t4) = reply_to(sent, 0);
            deliver(&mut core, &relay, reply, t4);
        }
        now += MS;
    }
    assert_eq!(probes, 8);
}

#[test]
fn a_new_schedule_applies_to_running_sessions() {
    let mut core = core_with_session();
    let mut relay = Relay::new();
    register(&mut core, &mut relay, relay_addr(), 0);
    let now = run_answering(&mut core, &relay, 0, 2_000 * MS, MS, |s| reply_to(s, 0));
    assert_eq!(
        core.steady_interval_ns(SESSION),
        Some(100 * MS),
        "warming up"
    );
    let estimate = core.estimate(SESSION);
    let slower = ProberConfig {
        steady_interval_ns: 1_000 * MS,
        min_interval_ns: 500 * MS,
        max_interval_ns: 2_000 * MS,
        burst_probes: 3,
        ..ProberConfig::default()
    };
    // SIGHUP: the registry hands the schedule over with the same sessions.
    core.set_registered(Registered {
        sessions: HashMap::from([(
            SESSION,
            Registration {
                slot: 2,
                machine_raw_id: 99,
                probe_key: KEY,
            },
        )]),
        config: Some(slower),
    });
    assert_eq!(core.config(), &slower);
    assert_eq!(core.steady_interval_ns(SESSION), Some(500 * MS), "clamped");
    assert_eq!(core.estimate(SESSION), estimate, "the estimator is kept");
    // The next burst has the new size.
    register(&mut core, &mut relay, Route::Tcp(4), now);
    assert_eq!(core.burst_left(SESSION), Some(3));
}
