//! Mutual TLS: unauthenticated relays refused, identities bound.

use super::*;

#[tokio::test]
async fn tls_refuses_unauthenticated_relays_and_binds_identities() {
    let dir = tempfile::tempdir().unwrap();
    let tls = required_tls(dir.path(), &["relay", "other"]);
    assert!(tls.is_some());
    let server = serve_with(SessionSettings { tls, ..settings(4) }, Some("s3cret"), None).await;

    // Plaintext: the handshake fails; no frame comes back.
    let mut plain = dial(&server).await;
    let _ = send_on(&mut plain, hello("s3cret", "relay")).await;
    assert!(recv(&mut plain).await.is_none());
    counted(&server, Counter::Failed(Failed::TlsHandshake), 1).await;

    // No certificate: our half of the TLS 1.3 handshake completes, then the
    // daemon's alert ends the connection before any frame.
    let mut anonymous = dial_tls(&server, dir.path(), None).await.unwrap();
    let _ = send_on(&mut anonymous, hello("s3cret", "relay")).await;
    let answer = next_on(&mut anonymous).await;
    assert!(
        matches!(answer, Ok(None) | Err(_)) && !matches!(&answer, Err(e) if e.contains("5 s")),
        "{answer:?}"
    );
    counted(&server, Counter::Failed(Failed::TlsHandshake), 2).await;

    // A valid certificate for "other" claiming "relay": refused, counted.
    let mut impostor = dial_tls(&server, dir.path(), Some("other")).await.unwrap();
    send_on(&mut impostor, hello("s3cret", "relay"))
        .await
        .unwrap();
    match next_on(&mut impostor).await {
        Ok(Some(v1::frame::Body::Refused(r))) => {
            assert!(
                r.reason.starts_with("certificate-identity-mismatch: "),
                "{}",
                r.reason
            );
            assert!(r.reason.contains("\"relay\"") && r.reason.contains("\"other\""));
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Refused(Refused::CertificateIdentity)),
        1
    );

    // The right certificate with the right token is welcomed; with a wrong
    // token it is still refused.
    let mut wrong_token = dial_tls(&server, dir.path(), Some("relay")).await.unwrap();
    send_on(&mut wrong_token, hello("guess", "relay"))
        .await
        .unwrap();
    assert!(matches!(
        next_on(&mut wrong_token).await,
        Ok(Some(v1::frame::Body::Refused(r))) if r.reason.starts_with("bad token")
    ));
    let mut relay = dial_tls(&server, dir.path(), Some("relay")).await.unwrap();
    send_on(&mut relay, hello("s3cret", "relay")).await.unwrap();
    assert!(matches!(
        next_on(&mut relay).await,
        Ok(Some(v1::frame::Body::Welcome(_)))
    ));

    // "other" cannot take over the raw id (7) "relay" now holds, even
    // under its own name.
    let mut squatter = dial_tls(&server, dir.path(), Some("other")).await.unwrap();
    let v1::frame::Body::Hello(mut h) = hello("s3cret", "other") else {
        unreachable!()
    };
    h.relay_instance_id = 43;
    send_on(&mut squatter, v1::frame::Body::Hello(h))
        .await
        .unwrap();
    match next_on(&mut squatter).await {
        Ok(Some(v1::frame::Body::Refused(r))) => {
            assert!(
                r.reason
                    .contains("raw machine id 7 belongs to machine \"relay\""),
                "{}",
                r.reason
            );
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    assert_eq!(
        server
            .running
            .shared
            .counters
            .get(Counter::Refused(Refused::CertificateIdentity)),
        2
    );
    server.shutdown.cancel();
}
