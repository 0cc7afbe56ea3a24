//! A relay's session: the hello and its refusals, limits, acks after
//! commit, a failing writer and shutdown.

use super::*;

#[tokio::test]
async fn welcome_carries_version_session_and_sync_port() {
    let server = serve(4, Some("s3cret")).await;
    let (_relay, welcome) = welcomed(&server, "s3cret").await;
    assert_eq!(welcome.protocol_version, PROTOCOL_VERSION);
    assert_eq!(welcome.acked_through_batch, 0);
    assert_eq!(welcome.sync_udp_port, 7411);
    assert_ne!(welcome.session_id, 0);
}

#[tokio::test]
async fn bad_token_is_refused_with_the_reason() {
    let server = serve(4, Some("s3cret")).await;
    let mut relay = dial(&server).await;
    send(&mut relay, hello("guess", "relay")).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.starts_with("bad token"), "{reason}");
    assert!(!reason.contains("s3cret"), "never echo the token: {reason}");
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Refused(Refused::Token)),
        1
    );
}

#[tokio::test]
async fn allow_machines_refuses_other_names_and_a_reload_applies_to_the_next_connection() {
    let server = serve(4, None).await;
    server
        .running
        .shared
        .set_allow_machines(&["vm-1".to_owned()]);
    let mut relay = dial(&server).await;
    send(&mut relay, hello("", "phone")).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.contains("\"phone\""), "{reason}");
    assert!(reason.contains("allow-machines"), "{reason}");
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Refused(Refused::MachineNotAllowed)),
        1
    );
    // An empty list (the default) allows every machine again.
    server.running.shared.set_allow_machines(&[]);
    let mut relay = dial(&server).await;
    send(&mut relay, hello("", "phone")).await;
    assert!(matches!(
        recv(&mut relay).await,
        Some(v1::frame::Body::Welcome(_))
    ));
}

#[tokio::test]
async fn reloaded_output_limits_reach_the_writer() {
    let config = crate::config::DaemonConfig::default();
    let first = crate::reload::OutputLimits::from_config(&config);
    let (limits, rx) = watch::channel(first);
    let server = serve_with(settings(4), None, Some(rx)).await;
    let mut reloaded = config.clone();
    reloaded.output.retain_bytes = 1 << 20;
    reloaded.output.rotate_seconds = 0;
    let second = crate::reload::OutputLimits::from_config(&reloaded);
    limits.send_replace(second);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while server.writer.output.lock().unwrap().limits != Some(second) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ingest loop never passed the new limits to the writer"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(second.retain_bytes, 1 << 20);
    assert_eq!(second.max_file_age, Duration::MAX);
}

#[tokio::test]
async fn no_token_configured_accepts_any() {
    let server = serve(4, None).await;
    let (_relay, welcome) = welcomed(&server, "whatever").await;
    assert_eq!(welcome.protocol_version, PROTOCOL_VERSION);
}

#[tokio::test]
async fn version_mismatch_is_refused() {
    let server = serve(4, None).await;
    let mut relay = dial(&server).await;
    let mut body = hello("", "relay");
    if let v1::frame::Body::Hello(h) = &mut body {
        h.protocol_version = PROTOCOL_VERSION + 1;
    }
    send(&mut relay, body).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.contains("protocol version 2"), "{reason}");
}

#[tokio::test]
async fn core_refusal_is_passed_on() {
    let server = serve(4, None).await;
    let mut relay = dial(&server).await;
    send(&mut relay, hello("", "refuse-me")).await;
    let reason = refused_reason(&mut relay).await;
    assert_eq!(reason, "machine name refused by the core");
}

#[tokio::test]
async fn hello_timeout_is_refused() {
    let server = serve(4, None).await;
    let mut relay = dial(&server).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.contains("no Hello within 300 ms"), "{reason}");
}

#[tokio::test]
async fn max_relays_is_enforced_and_a_freed_place_is_reused() {
    let server = serve(1, None).await;
    let (first, _) = welcomed(&server, "").await;
    let mut second = dial(&server).await;
    // The slot is checked once the Hello passed, not at accept.
    send(&mut second, hello("", "second")).await;
    let reason = refused_reason(&mut second).await;
    assert_eq!(reason, "daemon at max-relays=1; raise limits.max-relays");
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Refused(Refused::MaxRelays)),
        1
    );
    drop(first);
    // The place frees once the session has noticed the close.
    let mut tries = 0;
    loop {
        let mut relay = dial(&server).await;
        send(&mut relay, hello("", "relay")).await;
        match recv(&mut relay).await {
            Some(v1::frame::Body::Welcome(_)) => break,
            _ if tries < 50 => tries += 1,
            other => panic!("place never freed: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn malformed_frame_is_refused_without_hurting_another_session() {
    let server = serve(4, None).await;
    let (mut good, _) = welcomed(&server, "").await;
    let (mut bad, _) = welcomed(&server, "").await;
    bad.send(Bytes::from_static(&[0xff, 0xff, 0xff]))
        .await
        .unwrap();
    let reason = refused_reason(&mut bad).await;
    assert!(reason.starts_with("malformed frame"), "{reason}");
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Failed(Failed::MalformedFrame)),
        1
    );
    send(&mut good, batch(1, &[b"packet"])).await;
    ack_through(&mut good, 1).await;
}

#[tokio::test]
async fn unexpected_frame_kind_is_refused() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    send(&mut relay, hello("", "again")).await;
    let reason = refused_reason(&mut relay).await;
    assert!(reason.contains("unexpected Hello frame"), "{reason}");
}

#[tokio::test]
async fn batches_are_acked_after_commit() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    send(&mut relay, batch(1, &[b"a", b"b"])).await;
    send(&mut relay, batch(2, &[b"c"])).await;
    send(
        &mut relay,
        v1::frame::Body::Heartbeat(v1::Heartbeat {
            clocks: None,
            last_batch_sent: 2,
            sources: Vec::new(),
            ring: None,
        }),
    )
    .await;
    ack_through(&mut relay, 2).await;
    // Acked means committed.
    assert_eq!(server.writer.committed(), [&b"a"[..], b"b", b"c"]);
}

#[tokio::test]
async fn failing_writer_stops_acks_until_it_recovers() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    server.writer.fail.store(true, Ordering::SeqCst);
    send(&mut relay, batch(1, &[b"a"])).await;
    let early = timeout(Duration::from_millis(300), relay.next()).await;
    assert!(early.is_err(), "no ack while the writer fails: {early:?}");
    server.writer.fail.store(false, Ordering::SeqCst);
    ack_through(&mut relay, 1).await;
    assert_eq!(server.writer.committed(), [&b"a"[..]]);
}

#[tokio::test]
async fn shutdown_commits_sends_final_acks_and_closes_the_writer() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    send(&mut relay, batch(1, &[b"x"])).await;
    send(&mut relay, batch(2, &[b"y"])).await;
    // Make sure both frames are in before stopping (the ack proves it).
    ack_through(&mut relay, 2).await;
    send(&mut relay, batch(3, &[b"z"])).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.shutdown.cancel();
    let TestServer {
        running, writer, ..
    } = server;
    let stopped = tokio::spawn(running.stopped());
    ack_through(&mut relay, 3).await;
    assert!(
        recv(&mut relay).await.is_none(),
        "closed after the final ack"
    );
    let summary = stopped.await.unwrap().unwrap();
    assert_eq!(summary.packets_written, 3);
    let output = writer.output.lock().unwrap();
    assert!(output.closed);
    assert_eq!(output.committed, 3);
}

#[tokio::test]
async fn shutdown_with_no_relays_is_prompt() {
    let server = serve(4, None).await;
    server.shutdown.cancel();
    let summary = timeout(Duration::from_secs(5), server.running.stopped())
        .await
        .expect("stops within 5 s")
        .unwrap();
    assert_eq!(summary.packets_written, 0);
    assert!(server.writer.output.lock().unwrap().closed);
}

#[tokio::test]
async fn a_relay_trigger_is_answered_placed_at_its_receipt_without_an_estimate() {
    let server = serve(4, None).await;
    let (mut relay, welcome) = welcomed(&server, "").await;
    assert!(welcome.takes_trigger_requests, "{welcome:?}");
    let request = |id: u64, name: &str| {
        v1::frame::Body::TriggerRequest(v1::TriggerRequest {
            request_id: id,
            name: name.into(),
            before_ns: 1_000_000_000,
            after_ns: 0,
            relay_time_ns: 5,
            origin: "command".into(),
        })
    };
    let before = tracesync_common::clock::boottime_ns();
    send(&mut relay, request(7, "crash")).await;
    let Some(v1::frame::Body::TriggerResult(fired)) = recv(&mut relay).await else {
        panic!("no TriggerResult");
    };
    let after = tracesync_common::clock::boottime_ns();
    assert_eq!(fired.request_id, 7);
    assert!(fired.fired, "{fired:?}");
    // No estimate of this relay's clock: T is when the request came.
    assert_eq!(fired.mapped_by, "receipt");
    assert!(
        (before..=after).contains(&fired.host_time_ns),
        "{fired:?} not within [{before}, {after}]"
    );
    assert!(fired.snapshot.ends_with("-crash.pftrace"), "{fired:?}");
    // A bad name is refused in a line, and the session goes on.
    send(&mut relay, request(8, "a/b")).await;
    let Some(v1::frame::Body::TriggerResult(refused)) = recv(&mut relay).await else {
        panic!("no TriggerResult");
    };
    assert_eq!(refused.request_id, 8);
    assert!(!refused.fired);
    assert!(refused.reason.contains("trigger name"), "{refused:?}");
    send(&mut relay, batch(1, &[b"a"])).await;
    ack_through(&mut relay, 1).await;
}

#[tokio::test]
async fn a_shard_forwards_a_relay_trigger_to_the_flight_shard_and_refuses_when_it_is_full() {
    // A shard that is not the flight shard, whose flight shard takes one
    // forwarded trigger and never gets to it.
    let (flight, mut forwarded) = mpsc::channel(1);
    let mut ingest = IngestSettings::new(Duration::from_millis(20));
    ingest.flight_shard = Some(flight);
    let server = serve_ingest(settings(4), None, ingest).await;
    let (mut relay, _) = welcomed(&server, "").await;
    let request = |id: u64| {
        v1::frame::Body::TriggerRequest(v1::TriggerRequest {
            request_id: id,
            name: "crash".into(),
            before_ns: 1_000_000_000,
            after_ns: 0,
            relay_time_ns: 5,
            origin: "command".into(),
        })
    };
    send(&mut relay, request(1)).await;
    let first = tokio::time::timeout(Duration::from_secs(5), forwarded.recv())
        .await
        .expect("forwarded in time")
        .expect("forwarded");
    let first = format!("{first:?}");
    assert!(
        first.contains("request_id: 1") && first.contains("crash"),
        "{first}"
    );
    // The queue holds one more: the third is refused at once, answered.
    send(&mut relay, request(2)).await;
    send(&mut relay, request(3)).await;
    let Some(v1::frame::Body::TriggerResult(refused)) = recv(&mut relay).await else {
        panic!("no TriggerResult");
    };
    assert_eq!(refused.request_id, 3);
    assert!(!refused.fired);
    assert_eq!(refused.reason, crate::server::ingest::FLIGHT_BUSY);
    send(&mut relay, batch(1, &[b"a"])).await;
    ack_through(&mut relay, 1).await;
}
