//! One valid certificate against everyone else (docs/reliability-hostile.md,
//! "A squatter on a fresh daemon" and "One certificate, every slot"): it
//! cannot claim another machine's raw id first, and cannot hold more than
//! `[tls] max-sessions-per-certificate` sessions. Each prints its figures on
//! a `hostile-peers:` line.

use std::path::Path;
use std::time::{Duration, Instant};

use tracesync_common::tls::pki;
use tracesync_protocol::relay::{name_bound_raw_id, v1};
use tracesync_tests::faults::tls_peer::{self, TlsStream};
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, process};

use super::{Pki, RATE, WAIT};

/// A TLS client presenting `dir/<cert>.crt` that sends `hello` (with the
/// daemon's token) and returns the daemon's answer (Welcome or Refused)
/// with the open connection.
fn tls_hello(
    daemon: &Daemon,
    dir: &Path,
    cert: &str,
    hello: v1::Hello,
) -> (v1::frame::Body, TlsStream) {
    let hello = v1::Hello {
        token: daemon.token.clone(),
        ..hello
    };
    tls_peer::hello(daemon.data_addr, &dir.join("ca.crt"), dir, cert, hello)
        .unwrap_or_else(|e| panic!("{cert}: Hello: {e}"))
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("boot id")
        .trim()
        .to_owned()
}

#[test]
fn a_squatter_on_a_fresh_daemon_is_refused_and_the_machine_welcomed() {
    // alice's certificate computes bob's raw id (bob's boot id is no
    // secret) and claims it before bob's first connect. On main alice was
    // welcomed and bob refused as final (exit 77).
    let pki = Pki::new();
    for name in ["tls-alice", "tls-bob"] {
        pki::issue(&pki.ca, name, None).expect("pki issue");
    }
    let daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let bobs = name_bound_raw_id(&boot_id(), "tls-bob");
    let mut answers = Vec::new();
    for (boot, instance) in [(boot_id(), 1u64), ("alice-boot".to_owned(), 2)] {
        let (answer, _conn) = tls_hello(
            &daemon,
            &pki.ca,
            "tls-alice",
            v1::Hello {
                relay_instance_id: 0x5a0a_0000_0000_0000 | instance,
                boot_id: boot,
                machine_name: "tls-alice".into(),
                machine_raw_id: bobs,
                ..v1::Hello::default()
            },
        );
        match answer {
            v1::frame::Body::Refused(r) => {
                assert_eq!(r.code, "certificate_identity_mismatch", "{r:?}");
                assert!(r.reason.contains("raw-id-rule"), "{r:?}");
                answers.push(r.code);
            }
            other => panic!("the squatter was welcomed: {other:?}"),
        }
    }
    let started = Instant::now();
    let mut bob = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-bob")),
            ..RelayOpts::synthetic("tls-bob", RATE)
        },
    );
    let status = daemon.wait_connected(&["tls-bob"], WAIT);
    let welcomed_after = started.elapsed();
    assert_eq!(
        process::machine(&status, "tls-bob").map(|m| m["raw_id"].clone()),
        Some(serde_json::json!(bobs)),
        "{status}"
    );
    assert!(process::machine(&status, "tls-alice").is_none(), "{status}");
    let refused = status["relays_refused"]["raw_id_not_bound"].clone();
    assert_eq!(refused, serde_json::json!(2), "{status}");
    assert!(bob.exited().is_none(), "{}", bob.log());
    eprintln!(
        "hostile-peers: a_squatter_on_a_fresh_daemon_is_refused_and_the_machine_welcomed: \
         alice's 2 claims of bob's raw id {bobs} refused ({}, relays_refused raw_id_not_bound \
         {refused}); bob welcomed under it {:.2} s after its start, running",
        answers.join(", "),
        welcomed_after.as_secs_f64()
    );
    let status = bob.stop();
    assert!(status.success(), "relay exit: {status}\n{}", bob.log());
}

#[test]
fn one_certificate_cannot_take_every_slot() {
    // One valid certificate opens sessions under 256 raw ids (one boot id
    // each, each hashed with its name as the rule asks) and stays silent.
    // On main all 256 were welcomed and every other relay refused
    // max_relays.
    const TRIES: u32 = 256;
    let pki = Pki::new();
    for name in ["tls-hog", "tls-other"] {
        pki::issue(&pki.ca, name, None).expect("pki issue");
    }
    let daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let mut held = Vec::new();
    let (mut welcomed, mut limited) = (0, 0);
    for i in 0..TRIES {
        let boot = format!("hog-boot-{i}");
        let (answer, conn) = tls_hello(
            &daemon,
            &pki.ca,
            "tls-hog",
            v1::Hello {
                relay_instance_id: 0x6000_0000_0000_0000 | u64::from(i),
                machine_raw_id: name_bound_raw_id(&boot, "tls-hog"),
                boot_id: boot,
                machine_name: "tls-hog".into(),
                ..v1::Hello::default()
            },
        );
        match answer {
            v1::frame::Body::Welcome(_) => {
                welcomed += 1;
                held.push(conn);
            }
            v1::frame::Body::Refused(r) if r.code == "certificate_session_limit" => limited += 1,
            other => panic!("session {i}: {other:?}"),
        }
    }
    let started = Instant::now();
    let mut other = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-other")),
            ..RelayOpts::synthetic("tls-other", RATE)
        },
    );
    let status = daemon.wait_connected(&["tls-other"], WAIT);
    let welcomed_after = started.elapsed();
    let counted = status["relays_refused"]["certificate_session_limit"].clone();
    eprintln!(
        "hostile-peers: one_certificate_cannot_take_every_slot: {TRIES} sessions tried with \
         one certificate: {welcomed} welcomed, {limited} refused certificate_session_limit \
         (counted {counted}); another relay welcomed {:.2} s after its start",
        welcomed_after.as_secs_f64()
    );
    assert_eq!(welcomed, 4, "the default limit");
    assert_eq!(limited, TRIES - 4);
    assert_eq!(counted, serde_json::json!(TRIES - 4), "{status}");
    assert!(other.exited().is_none(), "{}", other.log());
    // A session given back frees its place.
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(500));
    let boot = "hog-boot-again".to_owned();
    let (answer, _conn) = tls_hello(
        &daemon,
        &pki.ca,
        "tls-hog",
        v1::Hello {
            relay_instance_id: 0x6000_0000_0001_0000,
            machine_raw_id: name_bound_raw_id(&boot, "tls-hog"),
            boot_id: boot,
            machine_name: "tls-hog".into(),
            ..v1::Hello::default()
        },
    );
    assert!(
        matches!(answer, v1::frame::Body::Welcome(_)),
        "after one closed: {answer:?}"
    );
    let status = other.stop();
    assert!(status.success(), "relay exit: {status}");
}
