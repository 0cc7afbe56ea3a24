//! Before authentication (server/preauth.rs, session/): limits on the
//! first frame, hello strings, idle and trickling connections.

use super::*;

/// A raw TCP connection (no framing) to the server.
async fn raw(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.running.data_addr).await.unwrap()
}

/// Reads until the daemon closes; the frames it sent on the way.
async fn frames_until_closed<R: tokio::io::AsyncRead + Unpin>(
    stream: &mut R,
    within: Duration,
) -> Vec<v1::frame::Body> {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    timeout(within, stream.read_to_end(&mut answer))
        .await
        .expect("the daemon closes the connection in time")
        .ok();
    let mut out = Vec::new();
    let mut rest = &answer[..];
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(body) = rest.get(4..4 + len) else {
            break;
        };
        if let Some(b) = v1::Frame::decode(body).unwrap().body {
            out.push(b);
        }
        rest = &rest[4 + len..];
    }
    out
}

fn refused_code(frames: &[v1::frame::Body]) -> Option<(String, String)> {
    frames.iter().find_map(|f| match f {
        v1::frame::Body::Refused(r) => Some((r.code.clone(), r.reason.clone())),
        _ => None,
    })
}

#[tokio::test]
async fn a_first_frame_over_the_hello_limit_is_refused_before_its_body_is_read() {
    use tokio::io::AsyncWriteExt;
    use tracesync_protocol::relay::MAX_HELLO_FRAME_BYTES;
    let server = serve(4, Some("s3cret")).await;
    // Only the prefix of a 4 MiB frame: refused at once, nothing sized by it.
    let mut stream = raw(&server).await;
    stream
        .write_all(&(MAX_FRAME_BYTES as u32).to_be_bytes())
        .await
        .unwrap();
    let frames = frames_until_closed(&mut stream, Duration::from_secs(2)).await;
    let (code, reason) = refused_code(&frames).expect("a Refused frame");
    assert_eq!(code, "hello_too_large");
    assert!(
        reason.starts_with("first frame larger than 65536 bytes"),
        "{reason}"
    );
    // One byte over the limit is refused too (on its prefix alone); at the
    // limit it is read (and is not a Hello here, so it is a bad frame).
    for (len, want) in [
        (MAX_HELLO_FRAME_BYTES + 1, "hello_too_large"),
        (MAX_HELLO_FRAME_BYTES, "bad_frame"),
    ] {
        let mut stream = raw(&server).await;
        let mut bytes = (len as u32).to_be_bytes().to_vec();
        if len <= MAX_HELLO_FRAME_BYTES {
            bytes.resize(4 + len, 0xff);
        }
        stream.write_all(&bytes).await.unwrap();
        let frames = frames_until_closed(&mut stream, Duration::from_secs(2)).await;
        assert_eq!(
            refused_code(&frames).map(|c| c.0).as_deref(),
            Some(want),
            "{len}"
        );
    }
    let counters = &server.running.shared.counters;
    assert_eq!(counters.get(Counter::Refused(Refused::HelloTooLarge)), 2);
    assert_eq!(counters.get(Counter::Failed(Failed::FrameTooLarge)), 0);
    assert_eq!(
        counters.refusals().get("hello_too_large").copied(),
        Some(2),
        "in the status report's relays_refused"
    );
}

#[tokio::test]
async fn hello_strings_over_their_limits_are_refused_with_hello_too_large() {
    use tracesync_protocol::relay::{MAX_BOOT_ID_BYTES, MAX_MACHINE_NAME_BYTES, MAX_TOKEN_BYTES};
    let server = serve(4, Some("s3cret")).await;
    let over = |edit: &dyn Fn(&mut v1::Hello)| {
        let v1::frame::Body::Hello(mut h) = hello("s3cret", "relay") else {
            unreachable!()
        };
        edit(&mut h);
        v1::frame::Body::Hello(h)
    };
    let cases: [(&str, v1::frame::Body); 4] = [
        (
            "Hello.machine_name of 256 bytes",
            over(&|h| h.machine_name = "n".repeat(MAX_MACHINE_NAME_BYTES + 1)),
        ),
        (
            "Hello.machine_name of 60000 bytes",
            over(&|h| h.machine_name = "\n".repeat(60_000)),
        ),
        (
            "Hello.boot_id of 129 bytes",
            over(&|h| h.boot_id = "b".repeat(MAX_BOOT_ID_BYTES + 1)),
        ),
        (
            // Checked before the token: no secret is compared or logged.
            "Hello.token of 1025 bytes",
            over(&|h| h.token = "t".repeat(MAX_TOKEN_BYTES + 1)),
        ),
    ];
    for (n, (want, body)) in cases.into_iter().enumerate() {
        let mut relay = dial(&server).await;
        send(&mut relay, body).await;
        let reason = refused_reason(&mut relay).await;
        assert!(reason.starts_with(want), "{reason}");
        assert!(
            reason.len() < 200,
            "the text itself is never echoed: {reason}"
        );
        assert_eq!(
            server
                .running
                .shared
                .counters
                .get(Counter::Refused(Refused::HelloTooLarge)),
            n as u64 + 1
        );
    }
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Refused(Refused::Token)),
        0
    );
    // At every limit: welcomed.
    let mut relay = dial(&server).await;
    send(
        &mut relay,
        over(&|h| {
            h.machine_name = "é".repeat(MAX_MACHINE_NAME_BYTES / 2);
            h.boot_id = "b".repeat(MAX_BOOT_ID_BYTES);
        }),
    )
    .await;
    assert!(matches!(
        recv(&mut relay).await,
        Some(v1::frame::Body::Welcome(_))
    ));
}

#[tokio::test]
async fn the_frame_limit_is_raised_once_the_hello_is_accepted() {
    let server = serve(4, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    // A 1 MiB batch (a full relay batch): far over the Hello limit.
    static BIG: [u8; 1 << 20] = [7; 1 << 20];
    send(&mut relay, batch(1, &[&BIG])).await;
    ack_through(&mut relay, 1).await;
    assert_eq!(server.writer.committed()[0].len(), 1 << 20);
}

#[tokio::test]
async fn idle_connections_hold_no_relay_slot() {
    let server = serve(2, None).await;
    // More idle TCP connections than max-relays: none holds a slot.
    let mut idle = Vec::new();
    for _ in 0..5 {
        idle.push(raw(&server).await);
    }
    let (_a, _) = welcomed(&server, "").await;
    let (_b, _) = welcomed(&server, "").await;
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Refused(Refused::MaxRelays)),
        0
    );
    // The third Hello finds both slots taken.
    let mut third = dial(&server).await;
    send(&mut third, hello("", "third")).await;
    let reason = refused_reason(&mut third).await;
    assert!(reason.starts_with("daemon at max-relays=2"), "{reason}");
}

#[tokio::test]
async fn past_the_unauthenticated_limit_the_oldest_idle_are_closed_and_a_relay_gets_in() {
    // Every connection here comes from 127.0.0.1: the per-source limit.
    use super::preauth::MAX_UNAUTHENTICATED_PER_SOURCE as LIMIT;
    let server = serve_with(
        SessionSettings {
            hello_timeout: Duration::from_secs(30),
            ..settings(4)
        },
        None,
        None,
    )
    .await;
    let extra = 20;
    let mut idle = Vec::new();
    for _ in 0..LIMIT + extra {
        idle.push(raw(&server).await);
    }
    counted(
        &server,
        Counter::Failed(Failed::UnauthenticatedPerSource),
        extra as u64,
    )
    .await;
    // The oldest were closed (no frame: they never said Hello).
    for stream in &mut idle[..extra] {
        let frames = frames_until_closed(stream, Duration::from_secs(5)).await;
        assert!(frames.is_empty(), "{frames:?}");
    }
    // A relay now: its connection closes the oldest idle one, and it is
    // welcomed at its first attempt (long before the idle ones time out):
    // once its Hello's bytes are read, newer idle connections go first.
    let started = std::time::Instant::now();
    let (_relay, _) = welcomed(&server, "").await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Failed(Failed::UnauthenticatedPerSource)),
        extra as u64 + 1
    );
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Failed(Failed::HelloTimeout)),
        0
    );
}

#[tokio::test]
async fn hello_timeout_covers_a_partial_hello() {
    use tokio::io::AsyncWriteExt;
    let server = serve(4, None).await;
    // A Hello that never completes (1 KiB announced, 10 bytes sent).
    let mut stream = raw(&server).await;
    stream.write_all(&1024u32.to_be_bytes()).await.unwrap();
    stream.write_all(&[0; 10]).await.unwrap();
    let frames = frames_until_closed(&mut stream, Duration::from_secs(3)).await;
    assert_eq!(
        refused_code(&frames).map(|c| c.0).as_deref(),
        Some("no_hello")
    );
}

/// Settings with a short frame timeout.
fn trickle_settings() -> SessionSettings {
    SessionSettings {
        frame_timeout: Duration::from_millis(400),
        ..settings(4)
    }
}

#[tokio::test]
async fn a_trickled_frame_is_closed_at_the_frame_timeout() {
    use tokio::io::AsyncWriteExt;
    let server = serve_with(trickle_settings(), None, None).await;
    let (relay, _) = welcomed(&server, "").await;
    let (mut rd, mut wr) = relay.into_inner().into_split();
    // The prefix of a 100-byte frame, then one byte every 100 ms.
    let started = std::time::Instant::now();
    let trickle = tokio::spawn(async move {
        wr.write_all(&100u32.to_be_bytes()).await?;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            wr.write_all(&[0x22]).await?;
        }
        #[allow(unreachable_code)]
        std::io::Result::Ok(())
    });
    let frames = frames_until_closed(&mut rd, Duration::from_secs(3)).await;
    let took = started.elapsed();
    trickle.abort();
    let (code, reason) = refused_code(&frames).expect("a Refused frame");
    assert_eq!(code, "frame_timeout");
    assert!(reason.contains("within 400 ms"), "{reason}");
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(1500),
        "closed after {took:?}"
    );
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Failed(Failed::FrameTimeout)),
        1
    );
    assert_eq!(
        server
            .running
            .shared
            .counters
            .refusals()
            .get("frame_timeout"),
        Some(&1)
    );
}

#[tokio::test]
async fn whole_frames_and_silence_are_not_a_frame_timeout() {
    let server = serve_with(trickle_settings(), None, None).await;
    let (mut relay, _) = welcomed(&server, "").await;
    // Silence longer than the frame timeout: no frame has begun.
    tokio::time::sleep(Duration::from_millis(900)).await;
    // Whole frames, each sent at once, spaced wider than the timeout.
    for seq in 1..=3 {
        send(&mut relay, batch(seq, &[b"p"])).await;
        ack_through(&mut relay, seq).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A frame sent in two halves within the bound.
    let bytes = v1::Frame {
        body: Some(batch(4, &[b"q"])),
    }
    .encode_to_vec();
    {
        use tokio::io::AsyncWriteExt;
        let stream = relay.get_mut();
        stream
            .write_all(&(bytes.len() as u32).to_be_bytes())
            .await
            .unwrap();
        stream.write_all(&bytes[..3]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(&bytes[3..]).await.unwrap();
    }
    ack_through(&mut relay, 4).await;
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Failed(Failed::FrameTimeout)),
        0
    );
}

#[tokio::test]
async fn tls_handshakes_in_progress_hold_no_slot() {
    let dir = tempfile::tempdir().unwrap();
    let tls = required_tls(dir.path(), &["relay"]);
    let server = serve_with(SessionSettings { tls, ..settings(1) }, None, None).await;
    // Connections that never start their handshake, and one that finished
    // it but sends no Hello: none takes the single slot.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(raw(&server).await);
    }
    let _silent = dial_tls(&server, dir.path(), Some("relay")).await.unwrap();
    let mut relay = dial_tls(&server, dir.path(), Some("relay")).await.unwrap();
    send_on(&mut relay, hello("", "relay")).await.unwrap();
    assert!(matches!(
        next_on(&mut relay).await,
        Ok(Some(v1::frame::Body::Welcome(_)))
    ));
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Refused(Refused::MaxRelays)),
        0
    );
    server.shutdown.cancel();
}

#[tokio::test]
async fn a_silent_session_is_closed_at_the_idle_limit_and_a_talking_one_is_not() {
    let server = serve_with(
        SessionSettings {
            idle_timeout: Duration::from_millis(400),
            ..settings(4)
        },
        None,
        None,
    )
    .await;
    let (mut talking, _) = welcomed(&server, "").await;
    let (mut silent, _) = welcomed(&server, "").await;
    // Frames spaced at half the limit, for three limits.
    for seq in 1..=6 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        send(&mut talking, batch(seq, &[b"p"])).await;
        ack_through(&mut talking, seq).await;
    }
    counted(&server, Counter::Failed(Failed::IdleTimeout), 1).await;
    // The silent one got no frame, only the close.
    assert!(recv(&mut silent).await.is_none());
    send(&mut talking, batch(7, &[b"p"])).await;
    ack_through(&mut talking, 7).await;
}
