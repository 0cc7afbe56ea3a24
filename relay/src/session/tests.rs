use super::*;

const MS: Duration = Duration::from_millis(1);

/// A session with a small window (64 batches, 16 MiB), welcomed.
fn welcomed(acked: u64, oldest: u64) -> (Session, Instant) {
    let config = SessionConfig {
        window_batches: 64,
        window_bytes: 16 << 20,
        ..SessionConfig::default()
    };
    welcomed_with(config, acked, oldest)
}

/// A session whose spool held batches through `acked` when it started
/// (so the daemon may ack them), welcomed with `acked`.
fn welcomed_with(config: SessionConfig, acked: u64, oldest: u64) -> (Session, Instant) {
    let t0 = Instant::now();
    let mut s = Session::new(config, t0, 42, acked);
    assert_eq!(s.poll(t0, oldest, 0), Some(Action::Connect));
    assert_eq!(s.connected(t0), vec![Action::SendHello]);
    let actions = s.welcome(acked, 7, 7411, &[1; 32], oldest, t0);
    assert_eq!(
        actions,
        vec![
            Action::AckSpool(acked),
            Action::StartProbe {
                session_id: 7,
                sync_udp_port: 7411,
                probe_key: vec![1; 32],
            }
        ]
    );
    (s, t0)
}

/// Drains poll at `now`, reporting every batch as sent with `bytes`.
fn pump(s: &mut Session, now: Instant, last: u64, bytes: usize) -> Vec<Action> {
    let mut out = Vec::new();
    while let Some(action) = s.poll(now, 1, last) {
        if let Action::SendBatch(seq) = action {
            s.sent(seq, bytes, now);
        }
        out.push(action);
        if out.len() > 1000 {
            break;
        }
    }
    out
}

#[test]
fn sends_from_after_the_welcome_ack_within_the_window() {
    let (mut s, t0) = welcomed(10, 3);
    let actions = pump(&mut s, t0, 200, 100);
    let seqs: Vec<u64> = actions
        .iter()
        .filter_map(|a| match a {
            Action::SendBatch(seq) => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, (11..11 + 64).collect::<Vec<_>>());
    // Acks open the window again.
    assert_eq!(s.ack(20, t0), vec![Action::AckSpool(20)]);
    let more = pump(&mut s, t0, 200, 100);
    assert_eq!(more.first(), Some(&Action::SendBatch(75)));
    assert_eq!(more.len(), 10);
}

#[test]
fn byte_window_limits_in_flight() {
    let (mut s, t0) = welcomed(0, 1);
    let actions = pump(&mut s, t0, 100, 4 << 20);
    assert_eq!(actions.len(), 4);
}

#[test]
fn a_full_link_holds_batches_back_not_heartbeats() {
    let (mut s, t0) = welcomed(0, 1);
    s.set_link_full(true);
    assert_eq!(s.poll(t0, 1, 5), None);
    assert_eq!(
        s.poll(t0 + 250 * MS, 1, 5),
        Some(Action::SendHeartbeat { last_batch_sent: 0 })
    );
    s.set_link_full(false);
    assert_eq!(s.poll(t0 + 250 * MS, 1, 5), Some(Action::SendBatch(1)));
}

#[test]
fn default_window_is_bounded_by_bytes() {
    // Full 512 KiB batches: 64 MiB in flight, not the batch count.
    let (mut s, t0) = welcomed_with(SessionConfig::default(), 0, 1);
    let actions = pump(&mut s, t0, 10_000, 512 << 10);
    assert_eq!(actions.len(), 128);
}

#[test]
fn heartbeat_after_idle() {
    let (mut s, t0) = welcomed(0, 1);
    assert_eq!(s.poll(t0 + 249 * MS, 1, 0), None);
    assert_eq!(s.deadline(), Some(t0 + 250 * MS));
    assert_eq!(
        s.poll(t0 + 250 * MS, 1, 0),
        Some(Action::SendHeartbeat { last_batch_sent: 0 })
    );
    assert_eq!(s.poll(t0 + 251 * MS, 1, 0), None);
    // Sending resets the idle timer.
    assert_eq!(s.poll(t0 + 300 * MS, 1, 1), Some(Action::SendBatch(1)));
    s.sent(1, 10, t0 + 300 * MS);
    assert_eq!(s.poll(t0 + 501 * MS, 1, 1), None);
    assert_eq!(
        s.poll(t0 + 550 * MS, 1, 1),
        Some(Action::SendHeartbeat { last_batch_sent: 1 })
    );
}

#[test]
fn a_heartbeat_goes_out_every_2_s_while_batches_flow() {
    // It carries the sources' states to the daemon's status.
    let (mut s, t0) = welcomed(0, 1);
    let mut heartbeats = Vec::new();
    for step in 1..=50u32 {
        // A batch every 100 ms: never idle.
        let now = t0 + step * 100 * MS;
        for action in pump(&mut s, now, u64::from(step), 10) {
            if let Action::SendHeartbeat { .. } = action {
                heartbeats.push(now);
            }
        }
        // Acked at once, so the window never closes.
        let _ = s.ack(u64::from(step), now);
    }
    assert_eq!(
        heartbeats,
        [t0 + 2000 * MS, t0 + 4000 * MS],
        "{heartbeats:?}"
    );
}

#[test]
fn reconnect_resends_unacked_batches() {
    let (mut s, t0) = welcomed(0, 1);
    pump(&mut s, t0, 5, 10);
    s.ack(2, t0);
    s.connection_lost(t0 + 10 * MS);
    assert!(!s.is_streaming());
    let retry = s.deadline().unwrap();
    assert!(retry >= t0 + 60 * MS && retry <= t0 + 110 * MS, "{retry:?}");
    assert_eq!(s.poll(retry, 3, 5), Some(Action::Connect));
    s.connected(retry);
    // The daemon wrote batch 3 before the drop.
    s.welcome(3, 8, 0, &[], 3, retry);
    let seqs = pump(&mut s, retry, 5, 10);
    assert_eq!(seqs, vec![Action::SendBatch(4), Action::SendBatch(5)]);
}

#[test]
fn skips_batches_the_spool_dropped() {
    let (mut s, t0) = welcomed(0, 1);
    assert_eq!(s.poll(t0, 9, 12), Some(Action::SendBatch(9)));
}

#[test]
fn backoff_grows_capped_with_jitter_and_resets_after_a_healthy_connection() {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig::default(), t0, 7, 0);
    let mut now = t0;
    let mut delays = Vec::new();
    for _ in 0..12 {
        assert_eq!(s.poll(now, 1, 0), Some(Action::Connect));
        s.connection_lost(now);
        let retry = s.deadline().unwrap();
        delays.push(retry - now);
        now = retry;
    }
    let nominal = [100u64, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000];
    for (delay, nominal) in delays.iter().zip(nominal) {
        let nominal = Duration::from_millis(nominal);
        assert!(
            *delay >= nominal / 2 && *delay <= nominal,
            "{delay:?} vs {nominal:?}"
        );
    }
    assert!(delays[11] <= Duration::from_secs(10));
    // Not all equal: jitter is there.
    assert_ne!(delays[8], delays[9]);
    // A connection that lived for a while starts over at the minimum.
    s.poll(now, 1, 0);
    s.connected(now);
    s.welcome(0, 1, 0, &[], 1, now);
    s.connection_lost(now + Duration::from_secs(2));
    let delay = s.deadline().unwrap() - (now + Duration::from_secs(2));
    assert!(delay <= 100 * MS, "{delay:?}");
}

#[test]
fn refusals() {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig::default(), t0, 1, 0);
    s.poll(t0, 1, 0);
    s.connected(t0);
    let actions = s.refused(
        Some(RefusalCode::MaxRelays),
        "daemon busy: 32 relays connected",
        t0,
    );
    assert!(matches!(actions[..], [Action::Close { .. }]));
    assert!(!s.has_exited());
    let retry = s.deadline().unwrap();
    s.poll(retry, 1, 0);
    s.connected(retry);
    // The reason alone decides nothing: a token problem without its code is retried.
    let actions = s.refused(None, "bad token; set --token or TRACESYNC_TOKEN", retry);
    assert!(matches!(actions[..], [Action::Close { .. }]));
    let retry = s.deadline().unwrap();
    s.poll(retry, 1, 0);
    s.connected(retry);
    let actions = s.refused(Some(RefusalCode::BadToken), "bad token; set --token", retry);
    assert!(matches!(actions[..], [Action::Exit { .. }]));
    assert!(s.has_exited());
    assert_eq!(s.poll(retry + Duration::from_secs(60), 1, 0), None);
}

#[test]
fn protocol_violations_close_the_connection() {
    let (mut s, t0) = welcomed(0, 1);
    pump(&mut s, t0, 2, 10);
    assert!(matches!(s.ack(5, t0)[..], [Action::Reject { .. }]));
    let (mut s, t0) = welcomed(0, 1);
    assert!(matches!(
        s.welcome(0, 1, 0, &[], 1, t0)[..],
        [Action::Close { .. }]
    ));
    // A stale ack is ignored.
    let (mut s, t0) = welcomed(4, 1);
    assert!(s.ack(3, t0).is_empty());
}

/// Connects a fresh session (spool last seq `spooled_before`) and hands
/// it a Welcome of `acked`.
fn welcome_fresh(spooled_before: u64, acked: u64) -> (Session, Vec<Action>, Instant) {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig::default(), t0, 9, spooled_before);
    assert_eq!(s.poll(t0, 1, spooled_before), Some(Action::Connect));
    s.connected(t0);
    let actions = s.welcome(acked, 3, 0, &[], 1, t0);
    (s, actions, t0)
}

#[test]
fn a_welcome_beyond_every_batch_sent_or_spooled_is_rejected_and_frees_nothing() {
    for lie in [u64::MAX, u64::MAX - 1, 121, 1 << 40] {
        let (mut s, actions, t0) = welcome_fresh(120, lie);
        let [Action::Reject { reason }] = &actions[..] else {
            panic!("Welcome({lie}): {actions:?}");
        };
        assert!(
            reason.contains(&format!("acknowledges batch {lie}")),
            "{reason}"
        );
        assert!(reason.contains("and batch 120 before it"), "{reason}");
        assert_eq!(s.invalid_welcomes(), 1);
        assert_eq!(s.acked_through(), 0, "nothing acknowledged");
        assert!(!s.is_streaming());
        assert!(!s.has_exited(), "a lying daemon is retried, not obeyed");
        assert_eq!(s.reconnects(), 1);
        // The reconnect is planned: a truthful daemon later resumes it.
        let retry = s.deadline().unwrap();
        assert!(retry > t0 && retry <= t0 + 100 * MS, "{retry:?}");
        assert_eq!(s.poll(retry, 1, 130), Some(Action::Connect));
        s.connected(retry);
        assert_eq!(
            s.welcome(40, 4, 0, &[], 1, retry),
            vec![Action::AckSpool(40)]
        );
        assert_eq!(s.poll(retry, 41, 130), Some(Action::SendBatch(41)));
    }
    // At the limit: everything spooled before this run is acked.
    let (s, actions, _) = welcome_fresh(120, 120);
    assert_eq!(actions, vec![Action::AckSpool(120)]);
    assert_eq!(s.invalid_welcomes(), 0);
    // A new spool: only 0 is true.
    let (_, actions, _) = welcome_fresh(0, 1);
    assert!(
        matches!(actions[..], [Action::Reject { .. }]),
        "{actions:?}"
    );
}

#[test]
fn batch_numbers_at_the_end_of_the_range_never_wrap() {
    // The spool never gets there; the session must still not wrap.
    let (mut s, actions, t0) = welcome_fresh(u64::MAX, u64::MAX);
    assert!(
        matches!(actions[..], [Action::Reject { .. }]),
        "{actions:?}"
    );
    assert_eq!(s.acked_through(), 0);
    let retry = s.deadline().unwrap();
    s.poll(retry, u64::MAX, u64::MAX);
    s.connected(retry);
    assert_eq!(
        s.welcome(u64::MAX - 1, 1, 0, &[], u64::MAX, retry),
        vec![Action::AckSpool(u64::MAX - 1)]
    );
    // u64::MAX is never sent: no seq follows it.
    for _ in 0..3 {
        assert!(!matches!(
            s.poll(retry, u64::MAX, u64::MAX),
            Some(Action::SendBatch(_))
        ));
    }
    assert!(s.ack(u64::MAX - 1, retry + MS).is_empty());
    assert!(retry > t0);
}

#[test]
fn an_ack_beyond_every_batch_sent_is_rejected_and_counted() {
    let (mut s, actions, t0) = welcome_fresh(0, 0);
    assert_eq!(actions, vec![Action::AckSpool(0)]);
    let sent = pump(&mut s, t0, 3, 10);
    assert_eq!(sent.len(), 3);
    // Batch 4 is spooled but was never sent: the daemon cannot have it.
    let actions = s.ack(4, t0);
    let [Action::Reject { reason }] = &actions[..] else {
        panic!("{actions:?}");
    };
    assert!(reason.starts_with("Ack of batch 4"), "{reason}");
    assert_eq!(s.invalid_acks(), 1);
    assert_eq!(s.acked_through(), 0);
    assert!(!s.is_streaming());
    let actions = s.ack(u64::MAX, t0);
    assert!(
        matches!(actions[..], [Action::Close { .. }]),
        "not streaming"
    );
    assert_eq!(s.invalid_acks(), 1);
}

#[test]
fn an_ack_of_a_batch_sent_before_a_reconnect_is_accepted() {
    // Sent 1..=5, reconnected, the Welcome said 2, batch 3 resent: the
    // daemon may still ack 5 (it had it from the first connection).
    let (mut s, _, t0) = welcome_fresh(0, 0);
    pump(&mut s, t0, 5, 10);
    s.connection_lost(t0 + MS);
    let retry = s.deadline().unwrap();
    s.poll(retry, 1, 5);
    s.connected(retry);
    assert_eq!(s.welcome(2, 2, 0, &[], 1, retry), vec![Action::AckSpool(2)]);
    assert_eq!(s.poll(retry, 3, 5), Some(Action::SendBatch(3)));
    s.sent(3, 10, retry);
    assert_eq!(s.ack(5, retry), vec![Action::AckSpool(5)]);
    assert_eq!(s.invalid_acks(), 0);
}

#[test]
fn handshake_times_out() {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig::default(), t0, 1, 0);
    s.poll(t0, 1, 0);
    s.connected(t0);
    assert_eq!(s.poll(t0 + Duration::from_secs(9), 1, 0), None);
    assert!(matches!(
        s.poll(t0 + Duration::from_secs(10), 1, 0),
        Some(Action::Close { .. })
    ));
}

#[test]
fn welcomes_rejected_in_a_row_ask_for_a_new_instance_and_an_accepted_one_resets() {
    let (mut s, actions, _) = welcome_fresh(10, 1 << 40);
    assert!(matches!(actions[..], [Action::Reject { .. }]));
    for round in 2..=NEW_INSTANCE_AFTER {
        assert!(!s.wants_new_instance(), "after {}", round - 1);
        let t = s.deadline().unwrap();
        assert_eq!(s.poll(t, 1, 10), Some(Action::Connect));
        s.connected(t);
        assert!(matches!(
            s.welcome(1 << 40, 3, 0, &[], 1, t)[..],
            [Action::Reject { .. }]
        ));
    }
    assert!(s.wants_new_instance());
    s.instance_renewed(true);
    assert!(!s.wants_new_instance());
    assert_eq!(s.instance_renewals(), 1);
    // The new instance's daemon record starts below the spool: accepted,
    // and nothing was freed on the way.
    let t = s.deadline().unwrap();
    assert_eq!(s.poll(t, 1, 10), Some(Action::Connect));
    s.connected(t);
    assert_eq!(s.welcome(0, 4, 0, &[], 1, t), vec![Action::AckSpool(0)]);
    assert_eq!(s.acked_through(), 0);
    assert_eq!(s.invalid_welcomes(), u64::from(NEW_INSTANCE_AFTER));
}

#[test]
fn a_ring_session_sends_heartbeats_and_no_batches() {
    let config = SessionConfig {
        ships_batches: false,
        ..SessionConfig::default()
    };
    let (mut s, t0) = welcomed_with(config, 0, 1);
    let later = t0 + 300 * MS;
    let actions = pump(&mut s, later, 500, 100);
    assert_eq!(
        actions,
        vec![Action::SendHeartbeat { last_batch_sent: 0 }],
        "heartbeats keep the session (and its probes) alive"
    );
}
