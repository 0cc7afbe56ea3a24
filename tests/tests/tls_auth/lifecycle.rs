//! A certificate's life after the handshake: the raw-id bindings survive
//! a daemon restart (no squatting after one), a certificate revoked by
//! `tracesync pki revoke` fails the handshake under `--tls-crl`, and
//! `tracesync pki issue --days 1` is valid for that day only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use tracesync_common::tls::pki;
use tracesync_protocol::relay::v1;
use tracesync_tests::faults::tls_peer;
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, process};

use super::{Pki, RATE, WAIT, handshake_failures, wait_for};

/// Runs `tracesync ARGS` (the real CLI) and returns its stdout; panics
/// with its stderr if it fails.
fn tracesync(args: &[&std::ffi::OsStr]) -> String {
    let out = std::process::Command::new(tracesync_tests::live::bin("tracesync"))
        .args(args)
        .output()
        .expect("run tracesync");
    assert!(
        out.status.success(),
        "tracesync {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A TLS client presenting `dir/<cert>.crt` that sends one Hello (with the
/// daemon's token) naming `machine` with `raw_id`, and returns the daemon's
/// answer (Refused or Welcome), read as a length-prefixed frame.
fn hello_with_certificate(
    daemon: &Daemon,
    ca: &Path,
    dir: &Path,
    cert: &str,
    machine: &str,
    raw_id: u32,
) -> v1::frame::Body {
    let hello = v1::Hello {
        token: daemon.token.clone(),
        relay_instance_id: 0x5a0a_77e4_0000_0001,
        boot_id: "squatter".into(),
        machine_name: machine.into(),
        machine_raw_id: raw_id,
        ..v1::Hello::default()
    };
    tls_peer::hello(daemon.data_addr, ca, dir, cert, hello)
        .unwrap_or_else(|e| panic!("{cert}: Hello: {e}"))
        .0
}

#[test]
fn squatting_after_a_restart_is_refused_and_the_real_machine_is_welcomed() {
    // Relay A binds its raw id; the daemon restarts; a valid certificate
    // for machine b claims A's raw id before A is back. On main the
    // bindings were in memory only: b was welcomed and A refused for good.
    let pki = Pki::new();
    for name in ["tls-sq-a", "tls-sq-b"] {
        pki::issue(&pki.ca, name, None).expect("pki issue");
    }
    let mut daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let mut a = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-sq-a")),
            ..RelayOpts::synthetic("tls-sq-a", RATE)
        },
    );
    let status = daemon.wait_connected(&["tls-sq-a"], WAIT);
    let raw_id = process::machine(&status, "tls-sq-a")
        .and_then(|m| m["raw_id"].as_u64())
        .and_then(|id| u32::try_from(id).ok())
        .unwrap_or_else(|| panic!("no raw id of tls-sq-a: {status}"));
    let status = a.stop();
    assert!(status.success(), "relay exit: {status}\n{}", a.log());
    let status = daemon.stop();
    assert!(status.success(), "daemon exit: {status}\n{}", daemon.log());
    daemon.restart();
    match hello_with_certificate(
        &daemon,
        &pki.ca.join("ca.crt"),
        &pki.ca,
        "tls-sq-b",
        "tls-sq-b",
        raw_id,
    ) {
        // Under raw-id-rule = "name" the claim fails before the bindings
        // are asked: a's raw id is not the hash of b's boot id and name.
        v1::frame::Body::Refused(r) => {
            assert_eq!(r.code, "certificate_identity_mismatch", "{r:?}");
            assert!(
                r.reason.contains(&format!(
                    "Hello claims raw machine id {raw_id}, which is not the hash of its boot id"
                )),
                "{r:?}"
            );
        }
        other => panic!("the squatter was not refused: {other:?}"),
    }
    daemon.wait_status("the refusal counted", WAIT, |s| {
        s["relays_refused"]["raw_id_not_bound"] == 1
    });

    // The real machine comes back (same spool, same raw id) and is welcomed.
    a.restart();
    let status = daemon.wait_connected(&["tls-sq-a"], WAIT);
    assert_eq!(
        process::machine(&status, "tls-sq-a").map(|m| m["raw_id"].clone()),
        Some(serde_json::json!(raw_id))
    );
    assert!(process::machine(&status, "tls-sq-b").is_none(), "{status}");
    assert!(a.exited().is_none(), "{}", a.log());
    assert!(
        !a.log().contains("certificate-identity-mismatch"),
        "{}",
        a.log()
    );
    let status = a.stop();
    assert!(status.success(), "relay exit: {status}\n{}", a.log());
    let status = daemon.stop();
    assert!(status.success(), "daemon exit: {status}\n{}", daemon.log());
    // The binding came from the file the daemon keeps in its output
    // (state) directory.
    assert!(
        daemon
            .log()
            .contains("identity bindings: 1 machine names from"),
        "{}",
        daemon.log()
    );
    let bindings = std::fs::read_to_string(daemon.output.join("identity-bindings.jsonl"))
        .expect("the daemon keeps its bindings in its output directory");
    assert!(
        bindings.contains(&format!("{{\"name\":\"tls-sq-a\",\"raw_ids\":[{raw_id}]")),
        "{bindings}"
    );
}

/// A sample of the daemon's Prometheus page, e.g.
/// `tracesync_connections_failed_total{reason="tls_handshake"}`.
fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut page = String::new();
    s.read_to_string(&mut page).ok()?;
    page.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

#[test]
fn a_revoked_relay_certificate_fails_the_handshake_and_others_connect() {
    // `tracesync pki revoke` writes ca.crl; the daemon's [tls] crl (here
    // --tls-crl) makes the revoked certificate fail the TLS handshake.
    let pki = Pki::new();
    let dir = pki.ca.as_os_str();
    tracesync(&[
        "pki".as_ref(),
        "issue".as_ref(),
        "--name".as_ref(),
        "tls-revoked".as_ref(),
        dir,
    ]);
    let out = tracesync(&[
        "pki".as_ref(),
        "revoke".as_ref(),
        "--name".as_ref(),
        "tls-revoked".as_ref(),
        dir,
    ]);
    let crl = pki.ca.join("ca.crl");
    assert_eq!(out.trim(), crl.display().to_string());
    let mut daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        extra_args: vec![
            "--tls-crl".into(),
            crl.display().to_string(),
            "--metrics-listen".into(),
            "127.0.0.1:0".into(),
        ],
        ..DaemonOpts::default()
    });
    let metrics = tracesync_tests::faults::peer::logged_metrics_addr(|| daemon.log());
    let handshakes = "tracesync_connections_failed_total{reason=\"tls_handshake\"}";
    let counted = || metric(metrics, handshakes).unwrap_or(0.0);
    assert_eq!(counted(), 0.0, "{}", daemon.log());

    let before = handshake_failures(&daemon);
    let mut revoked = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-revoked")),
            ..RelayOpts::synthetic("tls-revoked", RATE)
        },
    );
    wait_for(
        "the daemon to refuse a revoked certificate",
        || handshake_failures(&daemon) > before && counted() >= 1.0,
        || format!("{}\n{}", daemon.log(), revoked.log()),
    );
    assert!(daemon.log().contains("Revoked"), "{}", daemon.log());
    assert!(revoked.exited().is_none(), "a handshake failure is retried");
    revoked.kill9();

    // Another relay of the same CA still gets in.
    let mut good = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-good")),
            ..RelayOpts::synthetic("tls-good", RATE)
        },
    );
    let status = daemon.wait_connected(&["tls-good"], WAIT);
    assert!(
        process::machine(&status, "tls-revoked").is_none(),
        "{status}"
    );
    let status = good.stop();
    assert!(status.success(), "relay exit: {status}\n{}", good.log());
    let status = daemon.stop();
    assert!(status.success(), "daemon exit: {status}\n{}", daemon.log());
}

#[test]
fn a_certificate_issued_for_one_day_is_valid_now_and_not_after() {
    // `tracesync pki issue --days 1`: the validity read back from the DER,
    // and rustls's verifier (the daemon's) asked about given instants, so
    // no clock needs to move.
    let dir = tempfile::tempdir().expect("tempdir");
    let pki_dir = dir.path().join("pki");
    let d = pki_dir.as_os_str();
    tracesync(&[
        "pki".as_ref(),
        "init".as_ref(),
        "--daemon-name".as_ref(),
        "localhost".as_ref(),
        d,
    ]);
    let before = unix_now();
    tracesync(&[
        "pki".as_ref(),
        "issue".as_ref(),
        "--name".as_ref(),
        "tls-day".as_ref(),
        "--days".as_ref(),
        "1".as_ref(),
        d,
    ]);
    let after = unix_now();
    let pem = std::fs::read(pki_dir.join("tls-day.crt")).expect("tls-day.crt");
    let der = rustls_pki_types::CertificateDer::from_pem_slice(&pem).expect("PEM");
    let cert = tracesync_common::tls::x509::certificate(der.as_ref()).expect("DER");
    assert!(
        cert.not_before <= before - 3000,
        "back-dated for skew: {cert:?}"
    );
    assert!(cert.not_before >= before - 3600 - 5, "{cert:?}");
    assert!(
        (before + 86_400..=after + 86_400).contains(&cert.not_after),
        "one day: {cert:?} (issued between {before} and {after})"
    );
    // Well short of the old rcgen default (4096).
    let ca = std::fs::read(pki_dir.join("ca.crt")).expect("ca.crt");
    let ca = rustls_pki_types::CertificateDer::from_pem_slice(&ca).expect("PEM");
    let ca_fields = tracesync_common::tls::x509::certificate(ca.as_ref()).expect("DER");
    assert!(ca_fields.not_after < after + 3651 * 86_400, "{ca_fields:?}");

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).expect("CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
    let at = |unix: i64| {
        let t = rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(unix as u64));
        verifier.verify_client_cert(&der, &[], t).map(|_| ())
    };
    at(after).expect("valid now");
    at(after + 86_400 - 120).expect("valid for the day");
    for late in [after + 86_400 + 120, after + 30 * 86_400] {
        let err = at(late).expect_err("not valid after the day");
        assert!(
            matches!(
                err,
                rustls::Error::InvalidCertificate(rustls::CertificateError::ExpiredContext { .. })
                    | rustls::Error::InvalidCertificate(rustls::CertificateError::Expired)
            ),
            "{err:?}"
        );
    }
}

#[test]
fn a_daemon_certificate_without_the_host_name_is_named_and_renewed_with_it() {
    // The daemon's certificate names only localhost; a relay connecting to
    // 127.0.0.1 is told so, with the command that fixes it; after
    // `tracesync pki renew --daemon --daemon-name 127.0.0.1` it connects.
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("pki");
    let d = ca.as_os_str();
    let run = |args: &[&str]| {
        let mut all: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        all.push(d);
        tracesync(&all)
    };
    run(&["pki", "init", "--daemon-name", "localhost"]);
    run(&["pki", "issue", "--name", "tls-named"]);
    let pki = Pki {
        _dir: tempfile::tempdir().expect("tempdir"),
        ca: ca.clone(),
        other: ca.clone(),
    };
    let daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let mut relay = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&ca, "tls-named")),
            extra_args: vec!["--give-up-after-seconds".into(), "2".into()],
            ..RelayOpts::synthetic("tls-named", RATE)
        },
    );
    let exited = super::wait_exited(&mut relay, &daemon, "the relay to give up");
    assert_eq!(exited.code(), Some(78), "{}", relay.log());
    assert!(
        relay.log().contains(
            "the daemon's certificate does not name the host connected to: give \
             --tls-server-name NAME (a name it carries), or reissue it from the same CA on the \
             daemon's host: tracesync pki renew --daemon --daemon-name HOST DIR"
        ),
        "{}",
        relay.log()
    );
    drop(daemon);

    run(&["pki", "renew", "--daemon", "--daemon-name", "127.0.0.1"]);
    let daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let mut relay = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&ca, "tls-named")),
            ..RelayOpts::synthetic("tls-named", RATE)
        },
    );
    daemon.wait_connected(&["tls-named"], WAIT);
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status}\n{}", relay.log());
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
