//! Limits: a batch of too many packets, a frame over the size limit, a
//! sequence flood, a second Hello and garbage.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_of_too_many_packets_is_refused_before_decoding() {
    let mut server = serve(LiveConfig::default()).await;
    let addr = server.running.data_addr;
    let mut bad = dial(addr).await;
    bad.send(frame(hello(1, 11, "bad"))).await.expect("send");
    let Some(v1::frame::Body::Welcome(_)) = recv(&mut bad).await else {
        panic!("expected Welcome");
    };
    // Empty packets: 2 bytes each on the wire, 32 + decoded.
    let batch = v1::frame::Body::Batch(v1::Batch {
        seq: 1,
        first_packet_index: 0,
        packets: vec![Bytes::new(); MAX_BATCH_PACKETS + 1],
        clocks: None,
    });
    let bytes = frame(batch);
    assert!(bytes.len() < MAX_FRAME_BYTES, "within the frame limit");
    bad.send(bytes).await.expect("send");
    let r = refused(&mut bad).await;
    assert_eq!(r.code, "batch_too_large", "{r:?}");
    assert!(r.reason.contains(&MAX_BATCH_PACKETS.to_string()), "{r:?}");
    server.wait_refused("batch_too_large", 1).await;
    good_relay_is_served(addr, 2).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_over_the_size_limit_is_refused() {
    let mut server = serve(LiveConfig::default()).await;
    let addr = server.running.data_addr;
    let mut bad = dial(addr).await;
    bad.send(frame(hello(1, 11, "bad"))).await.expect("send");
    let Some(v1::frame::Body::Welcome(_)) = recv(&mut bad).await else {
        panic!("expected Welcome");
    };
    // Only the prefix: the daemon must refuse before reading (or
    // allocating) the announced 4 GiB.
    bad.get_mut()
        .write_all(&u32::MAX.to_be_bytes())
        .await
        .expect("send");
    let r = refused(&mut bad).await;
    assert_eq!(r.code, "frame_too_large", "{r:?}");
    assert!(r.reason.contains("max-frame-bytes"), "{r:?}");
    server.wait_refused("frame_too_large", 1).await;
    good_relay_is_served(addr, 2).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_flood_is_cut_at_the_limit_and_closed() {
    const LIMIT: usize = 32;
    let mut server = serve(LiveConfig {
        max_sequences_per_relay: LIMIT,
        ..LiveConfig::default()
    })
    .await;
    let addr = server.running.data_addr;
    let mut bad = dial(addr).await;
    bad.send(frame(hello(1, 11, "flood"))).await.expect("send");
    let Some(v1::frame::Body::Welcome(_)) = recv(&mut bad).await else {
        panic!("expected Welcome");
    };
    // One packet on each of 10_000 sequences.
    let packets: Vec<Bytes> = (1..=10_000u64)
        .map(|seq| {
            Bytes::from(encode(&[
                Node::Varint(10, seq),
                Node::Bytes(11, Vec::new()),
            ]))
        })
        .collect();
    let batch = v1::frame::Body::Batch(v1::Batch {
        seq: 1,
        first_packet_index: 0,
        packets,
        clocks: None,
    });
    bad.send(frame(batch)).await.expect("send");
    let r = refused(&mut bad).await;
    assert_eq!(r.code, "closed_by_core", "{r:?}");
    assert!(r.reason.contains("max-sequences-per-relay"), "{r:?}");
    let status = server.wait_refused("closed_by_core", 1).await;
    // Every packet past the limit was dropped and counted, none stored.
    let machine = status
        .machines
        .iter()
        .find(|m| m.raw_id == 11)
        .expect("the flooding machine in status");
    assert_eq!(
        machine.drops.get("sequences_over_limit").copied(),
        Some(10_000 - LIMIT as u64),
        "{machine:?}"
    );
    good_relay_is_served(addr, 2).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_hello_and_garbage_are_refused_with_their_codes() {
    let mut server = serve(LiveConfig::default()).await;
    let addr = server.running.data_addr;
    for (i, (bad_frame, code)) in [
        (frame(hello(9, 19, "twice")), "unexpected_frame"),
        (Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]), "bad_frame"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut bad = dial(addr).await;
        bad.send(frame(hello(10 + i as u64, 20 + i as u32, "bad")))
            .await
            .expect("send");
        let Some(v1::frame::Body::Welcome(_)) = recv(&mut bad).await else {
            panic!("expected Welcome");
        };
        bad.send(bad_frame).await.expect("send");
        let r = refused(&mut bad).await;
        assert_eq!(r.code, code, "{r:?}");
        server.wait_refused(code, 1).await;
    }
    good_relay_is_served(addr, 2).await;
    server.stop().await;
}
