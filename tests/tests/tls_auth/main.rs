//! Mutual TLS between the real `tracesync-relay` and `tracesyncd` on
//! loopback, with a lab PKI made here (rcgen, through `tracesync_common::tls::pki`):
//! a relay without a certificate, with a certificate from another CA, or in
//! plaintext fails the handshake (the daemon logs and counts it); a relay
//! with a valid certificate for one machine cannot claim another
//! (`certificate-identity-mismatch`); the token is still checked; a correct
//! relay's packets arrive under its name, complete; plaintext warns.
//! `lifecycle`: bindings across restarts, revocation, expiry.

#![allow(clippy::too_many_lines, reason = "a test reads top to bottom")]

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

mod lifecycle;
mod squatters;
