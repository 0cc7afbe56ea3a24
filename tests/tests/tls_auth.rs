//! Mutual TLS between the real `tracesync-relay` and `tracesyncd` on
//! loopback, with a lab PKI made here (rcgen, through `tracesync_common::tls::pki`):
//! a relay without a certificate, with a certificate from another CA, or in
//! plaintext fails the handshake (the daemon logs and counts it); a relay
//! with a valid certificate for one machine cannot claim another
//! (`certificate-identity-mismatch`); the token is still checked; a correct
//! relay's packets arrive under its name, complete; plaintext warns. The
//! raw-id bindings survive a restart (no squatting after one); a certificate
//! revoked by `tracesync pki revoke` fails the handshake under `--tls-crl`;
//! `tracesync pki issue --days 1` is valid for that day only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;
use rustls_pki_types::pem::PemObject;
use tracesync_common::tls::pki;
use tracesync_protocol::relay::{PROTOCOL_VERSION, v1};
use tracesync_tests::live::{
    Daemon, DaemonOpts, DaemonTls, Relay, RelayOpts, RelayTls, check_output, process,
};

const RATE: u64 = 500;
const WAIT: Duration = Duration::from_secs(60);

/// The lab PKI: `ca` (trusted by the daemon) with the daemon's certificate
/// and relay certificates; `other` a second CA the daemon does not trust.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    other: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca");
        let other = dir.path().join("other");
        let names = ["127.0.0.1".to_owned(), "localhost".to_owned()];
        pki::init(&ca, &names).expect("pki init");
        pki::init(&other, &names).expect("pki init (other CA)");
        for name in ["tls-good", "tls-a", "tls-b"] {
            pki::issue(&ca, name, None).expect("pki issue");
        }
        pki::issue(&other, "tls-rogue", None).expect("pki issue (other CA)");
        Pki {
            _dir: dir,
            ca,
            other,
        }
    }

    fn daemon(&self) -> DaemonTls {
        DaemonTls {
            cert: self.ca.join("daemon.crt"),
            key: self.ca.join("daemon.key"),
            client_ca: self.ca.join("ca.crt"),
        }
    }

    /// A relay trusting our CA and presenting `dir/<cert>.crt`.
    fn relay(&self, dir: &Path, cert: &str) -> RelayTls {
        RelayTls {
            ca: self.ca.join("ca.crt"),
            cert: Some(dir.join(format!("{cert}.crt"))),
            key: Some(dir.join(format!("{cert}.key"))),
            server_name: None,
        }
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool, log: impl Fn() -> String) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("waited {WAIT:?} for {what}; output:\n{}", log());
}

/// Waits for a refused relay to give up; its exit status.
fn wait_exited(relay: &mut Relay, daemon: &Daemon, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if let Some(status) = relay.exited() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "waited {WAIT:?} for {what}; relay:\n{}\ndaemon:\n{}",
        relay.log(),
        daemon.log()
    );
}

fn handshake_failures(daemon: &Daemon) -> usize {
    daemon
        .log()
        .matches("TLS handshake with relay failed")
        .count()
}

/// A TLS client that trusts the daemon but has no certificate: it gets
/// through its side of the handshake (TLS 1.3), sends a Hello, and must
/// get no frame back, only the daemon's alert or a close.
fn client_without_certificate(addr: SocketAddr, ca: &Path) -> String {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca).expect("ca.crt") {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let hello = v1::Frame {
        body: Some(v1::frame::Body::Hello(v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            relay_instance_id: 0x5eed,
            boot_id: "no-cert".into(),
            machine_name: "tls-good".into(),
            machine_raw_id: 77,
            ..v1::Hello::default()
        })),
    }
    .encode_to_vec();
    let mut bytes = (hello.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&hello);
    let written = tls.write_all(&bytes).and_then(|()| tls.flush());
    let mut buf = [0u8; 256];
    match tls.read(&mut buf) {
        Ok(0) => format!("closed (write: {written:?})"),
        Ok(n) => panic!("the daemon answered a relay without a certificate ({n} bytes)"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn mutual_tls_admits_the_right_relay_and_refuses_the_rest() {
    let pki = Pki::new();
    let mut daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let mut good = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-good")),
            ..RelayOpts::synthetic("tls-good", RATE)
        },
    );
    daemon.wait_connected(&["tls-good"], WAIT);

    // 1. No client certificate: the handshake fails on the daemon.
    let before = handshake_failures(&daemon);
    let seen = client_without_certificate(daemon.data_addr, &pki.ca.join("ca.crt"));
    wait_for(
        "the daemon to count a handshake without a certificate",
        || handshake_failures(&daemon) > before,
        || daemon.log(),
    );
    assert!(
        daemon.log().contains("peer sent no certificates"),
        "client saw: {seen}\n{}",
        daemon.log()
    );

    // 2. A certificate from a CA the daemon does not trust.
    let before = handshake_failures(&daemon);
    let mut rogue = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.other, "tls-rogue")),
            ..RelayOpts::synthetic("tls-rogue", RATE)
        },
    );
    wait_for(
        "the daemon to refuse a certificate from another CA",
        || handshake_failures(&daemon) > before,
        || format!("{}\n{}", daemon.log(), rogue.log()),
    );
    assert!(daemon.log().contains("UnknownIssuer"), "{}", daemon.log());
    assert!(rogue.exited().is_none(), "a handshake failure is retried");
    rogue.kill9();

    // 3. Plaintext against a TLS daemon.
    let before = handshake_failures(&daemon);
    let mut plain = Relay::start(&daemon, RelayOpts::synthetic("tls-plain", RATE));
    wait_for(
        "the daemon to refuse a plaintext relay",
        || handshake_failures(&daemon) > before,
        || format!("{}\n{}", daemon.log(), plain.log()),
    );
    plain.kill9();

    // 4. A valid certificate for tls-a claiming machine tls-victim: refused
    //    with the reason; the relay gives up (77, like a bad token).
    let mut impostor = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-a")),
            ..RelayOpts::synthetic("tls-victim", RATE)
        },
    );
    let status = wait_exited(&mut impostor, &daemon, "the impostor to be refused");
    assert_eq!(status.code(), Some(77), "{}", impostor.log());
    assert!(
        impostor.log().contains("certificate-identity-mismatch")
            && impostor.log().contains("tls-victim"),
        "{}",
        impostor.log()
    );
    assert!(
        daemon.log().contains("certificate-identity-mismatch"),
        "{}",
        daemon.log()
    );

    // 5. The token is still checked under TLS.
    let mut no_token = Relay::start_to(
        daemon.data_addr,
        "not-the-token",
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-b")),
            ..RelayOpts::synthetic("tls-b", RATE)
        },
    );
    wait_exited(
        &mut no_token,
        &daemon,
        "the relay with a bad token to be refused",
    );
    assert!(no_token.log().contains("bad token"), "{}", no_token.log());

    // The good relay was never disturbed; no one else got in.
    let status = daemon.wait_connected(&["tls-good"], WAIT);
    for name in ["tls-rogue", "tls-plain", "tls-victim", "tls-b"] {
        assert!(
            process::machine(&status, name).is_none(),
            "{name} got in: {status}"
        );
    }
    let status = good.stop();
    assert!(status.success(), "relay exit: {status}\n{}", good.log());
    let status = daemon.stop();
    assert!(status.success(), "daemon exit: {status}\n{}", daemon.log());

    let check = check_output(&daemon.output);
    let machine = check
        .machine_named("tls-good")
        .unwrap_or_else(|| panic!("no machine named tls-good:\n{}", check.summary()));
    assert_ne!(machine, 0);
    for name in ["tls-rogue", "tls-plain", "tls-victim", "tls-b", "tls-a"] {
        assert!(check.machine_named(name).is_none(), "{name} in the output");
    }
    assert_eq!(check.missing(), 0, "{}", check.summary());
    assert_eq!(check.duplicates(), 0, "{}", check.summary());
    assert!(
        check.source_of("tls-good", 1).is_some(),
        "no synthetic packets of tls-good:\n{}",
        check.summary()
    );
}

#[test]
fn a_certificate_binds_the_raw_machine_id_when_it_carries_one() {
    // A certificate with tracesync:machine-id/<id> binds the raw id too; a
    // relay's raw id comes from its boot id, so one that does not match is
    // refused with the reason.
    let pki = Pki::new();
    let ca_key = std::fs::read_to_string(pki.ca.join("ca.key")).expect("ca.key");
    let pinned = pki::relay_cert(&ca_key, "tls-pinned", Some(1)).expect("issue");
    pki::write(&pki.ca, "tls-pinned", &pinned).expect("write");
    let mut daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let mut relay = Relay::start(
        &daemon,
        RelayOpts {
            tls: Some(pki.relay(&pki.ca, "tls-pinned")),
            ..RelayOpts::synthetic("tls-pinned", RATE)
        },
    );
    wait_exited(
        &mut relay,
        &daemon,
        "the relay with an unbound raw id to be refused",
    );
    assert!(
        relay
            .log()
            .contains("certificate-identity-mismatch: Hello claims raw machine id"),
        "{}",
        relay.log()
    );
    let status = daemon.stop();
    assert!(status.success(), "daemon exit: {status}\n{}", daemon.log());
}

#[test]
fn plaintext_works_only_when_configured_and_warns() {
    let mut daemon = Daemon::start(DaemonOpts::default()); // --tls off
    let mut relay = Relay::start(&daemon, RelayOpts::synthetic("plain-relay", RATE));
    daemon.wait_connected(&["plain-relay"], WAIT);
    assert!(
        daemon.log().contains("plaintext relay connections"),
        "{}",
        daemon.log()
    );
    assert!(
        relay.log().contains("plaintext connection to the daemon"),
        "{}",
        relay.log()
    );
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status}\n{}", relay.log());
    let status = daemon.stop();
    assert!(status.success(), "daemon exit: {status}\n{}", daemon.log());
}

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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(ca).expect("ca.crt") {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let chain = rustls_pki_types::CertificateDer::pem_file_iter(dir.join(format!("{cert}.crt")))
        .expect("cert")
        .collect::<Result<Vec<_>, _>>()
        .expect("cert PEM");
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(dir.join(format!("{cert}.key")))
        .expect("key");
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client auth");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let sock = TcpStream::connect(daemon.data_addr).expect("connect");
    sock.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let hello = v1::Frame {
        body: Some(v1::frame::Body::Hello(v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            token: daemon.token.clone(),
            relay_instance_id: 0x5a0a_77e4_0000_0001,
            boot_id: "squatter".into(),
            machine_name: machine.into(),
            machine_raw_id: raw_id,
            ..v1::Hello::default()
        })),
    }
    .encode_to_vec();
    let mut bytes = (hello.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&hello);
    tls.write_all(&bytes).expect("send Hello");
    tls.flush().expect("flush");
    let mut len = [0u8; 4];
    tls.read_exact(&mut len).expect("the daemon's answer");
    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
    tls.read_exact(&mut frame).expect("the daemon's answer");
    v1::Frame::decode(frame.as_slice())
        .expect("a frame")
        .body
        .expect("a body")
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
        v1::frame::Body::Refused(r) => {
            assert_eq!(r.code, "certificate_identity_mismatch", "{r:?}");
            assert!(
                r.reason.contains(&format!(
                    "raw machine id {raw_id} belongs to machine \"tls-sq-a\""
                )),
                "{r:?}"
            );
        }
        other => panic!("the squatter was not refused: {other:?}"),
    }
    daemon.wait_status("the refusal counted", WAIT, |s| {
        s["relays_refused"]["certificate_identity_mismatch"] == 1
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

/// One free loopback port for the metrics endpoint.
fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
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
    let metrics = free_addr();
    let mut daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        extra_args: vec![
            "--tls-crl".into(),
            crl.display().to_string(),
            "--metrics-listen".into(),
            metrics.to_string(),
        ],
        ..DaemonOpts::default()
    });
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
    let cert = tracesync_common::tls::der::certificate(der.as_ref()).expect("DER");
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
    let ca_fields = tracesync_common::tls::der::certificate(ca.as_ref()).expect("DER");
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

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
