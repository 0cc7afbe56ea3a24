//! A relay pointed at the wrong peer, through the real binaries on
//! loopback: TLS on one side only, the sync port instead of the data port,
//! a daemon certificate from another CA, a relay certificate the daemon
//! refuses. Each gives one error line naming the cause and the fix, the
//! relay backs off (a handful of attempts, never "connected"), and exits
//! 78 (77 for a refused certificate) after `--give-up-after-seconds`;
//! `--keep-retrying` keeps it going. A peer that closes without a word
//! (the sync port; also a daemon shedding a flood) is named the same way
//! but never ends the relay: that can pass by itself. The daemon counts the failed
//! handshakes by reason and `tracesync status` lists them in 80 columns;
//! a plaintext daemon names a TLS relay in its log and its status.

#![allow(clippy::too_many_lines, reason = "a test reads top to bottom")]

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tracesync_tests::live::{Daemon, DaemonOpts, bin};

const GIVE_UP: u64 = 2;

use tracesync_tests::live::lab_pki::TwoCaPki as Pki;

/// Runs a relay to `host` until it exits by itself (at most 30 s).
fn relay_until_exit(host: SocketAddr, extra: &[String]) -> (i32, String, Duration) {
    let spool = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let mut child = Command::new(bin("tracesync-relay"))
        .arg("--host")
        .arg(host.to_string())
        .args(["--name", "r1", "--source", "synthetic:10"])
        .arg("--spool")
        .arg(spool.path())
        .args(["--give-up-after-seconds", &GIVE_UP.to_string()])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn relay");
    let deadline = started + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the relay did not give up within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read stderr");
    (status.code().unwrap_or(-1), err, took)
}

/// The relay said `message` about `host` once as an error, backed off,
/// gave up with `code` after the give-up time and never said it connected.
fn assert_fault(case: &str, host: SocketAddr, extra: &[String], message: &str, code: i32) {
    let (got, err, took) = relay_until_exit(host, extra);
    let errors: Vec<&str> = err.lines().filter(|l| l.contains(" ERROR ")).collect();
    let first = format!(
        "tracesync_relay::uplink: daemon {host}: {message}; retrying with backoff, exiting \
         {code} in {GIVE_UP} s unless fixed"
    );
    let attempts: u32 = errors
        .get(1)
        .and_then(|l| l.split(" s and ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    eprintln!(
        "ops-messages: {case}: exit {got} after {:.1} s, {attempts} attempts: {message}",
        took.as_secs_f64()
    );
    assert_eq!(got, code, "{case}:\n{err}");
    assert_eq!(
        errors.len(),
        2,
        "{case}: one fault line, one giving-up line:\n{err}"
    );
    assert!(
        errors[0].ends_with(&first),
        "{case}: {}\nwant {first}",
        errors[0]
    );
    assert!(
        errors[1].ends_with(&format!(
            "tracesync_relay::agent: giving up after {GIVE_UP} s and {attempts} attempts: \
             daemon {host}: {message} (--keep-retrying retries forever)"
        )),
        "{case}: {}",
        errors[1]
    );
    // Backoff: a handful of attempts in the give-up time, not a busy loop.
    assert!((2..=20).contains(&attempts), "{case}: {attempts} attempts");
    assert!(
        took >= Duration::from_secs(GIVE_UP) && took < Duration::from_secs(GIVE_UP + 8),
        "{case}: {took:?}"
    );
    assert!(!err.contains("connected to daemon"), "{case}:\n{err}");
    assert!(!err.contains("reconnecting"), "{case}:\n{err}");
}

/// A peer that closes without a word may be a daemon shedding a flood, or
/// a forwarder whose daemon is not up yet: the relay says `message` once
/// and keeps retrying well past the give-up time, never exiting.
fn assert_retries_on(case: &str, host: SocketAddr, extra: &[String], message: &str) {
    let spool = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bin("tracesync-relay"))
        .arg("--host")
        .arg(host.to_string())
        .args(["--name", "r1", "--source", "synthetic:10"])
        .arg("--spool")
        .arg(spool.path())
        .args(["--give-up-after-seconds", &GIVE_UP.to_string()])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn relay");
    std::thread::sleep(Duration::from_secs(GIVE_UP + 3));
    let running = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    eprintln!(
        "ops-messages: {case}: still running after {} s: {running}",
        GIVE_UP + 3
    );
    assert!(running, "{case}: the relay exited:\n{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains(" ERROR ")).collect();
    let want = format!(
        "tracesync_relay::uplink: daemon {host}: {message}; retrying with backoff for as long \
         as it lasts"
    );
    assert_eq!(errors.len(), 1, "{case}: said once:\n{err}");
    assert!(
        errors[0].ends_with(&want),
        "{case}: {}\nwant {want}",
        errors[0]
    );
    assert!(!err.contains("giving up"), "{case}:\n{err}");
}

#[test]
fn relay_configuration_faults_are_named_and_end_in_sysexits_codes() {
    let pki = Pki::new();
    let tls_daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let plain_daemon = Daemon::start(DaemonOpts::default());
    let off = vec!["--tls".to_owned(), "off".to_owned()];

    assert_fault(
        "plaintext relay, TLS daemon",
        tls_daemon.data_addr,
        &off,
        "the daemon speaks TLS and this relay plaintext: drop --tls off / [tls] mode = \"off\" \
         and give --tls-ca, --tls-cert, --tls-key (tracesync pki issue)",
        78,
    );
    assert_fault(
        "TLS relay, plaintext daemon",
        plain_daemon.data_addr,
        &pki.relay_flags("ca", "ca"),
        "the daemon speaks plaintext (its [tls] mode = \"off\") and this relay TLS: turn TLS \
         on at the daemon, or run this relay with --tls off",
        78,
    );
    let not_data_port = "the peer closed the connection without a word: this is not the \
                         daemon's data port (7410 by default; is it the sync port, 7411?), or a \
                         forwarder (adb reverse, ssh -L) with no daemon behind it, or a daemon \
                         shedding a flood of connections; fix --host, or start tracesyncd";
    assert_retries_on(
        "TLS relay, sync port",
        tls_daemon.sync_addr,
        &pki.relay_flags("ca", "ca"),
        not_data_port,
    );
    assert_retries_on(
        "plaintext relay, sync port",
        plain_daemon.sync_addr,
        &off,
        not_data_port,
    );
    assert_fault(
        "wrong CA",
        tls_daemon.data_addr,
        &pki.relay_flags("other", "ca"),
        "the daemon's certificate is not signed by this relay's CA: give the daemon's ca.crt \
         as --tls-ca / [tls] ca",
        78,
    );
    assert_fault(
        "certificate from another CA",
        tls_daemon.data_addr,
        &pki.relay_flags("ca", "other"),
        "the daemon refused this relay's certificate: check --tls-cert and --tls-key, and that \
         the daemon's client-ca issued them (tracesync pki issue --name NAME)",
        77,
    );

    // The daemon counted the failed handshakes by reason and said the fix.
    let status = tls_daemon.status().expect("status");
    let failed = &status["handshake_failures"];
    eprintln!("ops-messages: the TLS daemon's handshake_failures: {failed}");
    for reason in [
        "plaintext_relay",
        "relay_refused_daemon_certificate",
        "unknown_client_ca",
    ] {
        assert!(
            failed[reason].as_u64().unwrap_or(0) >= 2,
            "{reason}: {status}"
        );
    }
    assert!(
        tls_daemon.log().contains(
            "TLS handshake with relay failed (plaintext_relay): received corrupt message of \
             type InvalidContentType; the relay speaks plaintext"
        ),
        "{}",
        tls_daemon.log()
    );
    let status_cli = Command::new(bin("tracesync"))
        .args(["status", "--connect"])
        .arg(&tls_daemon.control)
        .output()
        .expect("tracesync status");
    let text = String::from_utf8_lossy(&status_cli.stdout);
    assert!(
        text.contains("TLS handshakes failed: plaintext_relay="),
        "{text}"
    );
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "wider than 80 columns: {line}");
    }

    // The plaintext daemon told its side too: the cause, the fix, a count.
    assert!(
        plain_daemon.log().contains(
            "a relay with TLS on reached this plaintext daemon (tls.mode = \"off\"): give \
             both the same mode"
        ),
        "{}",
        plain_daemon.log()
    );
    let plain = plain_daemon.status().expect("status");
    assert!(
        plain["relays_refused"]["tls_relay"].as_u64().unwrap_or(0) >= 2,
        "{plain}"
    );
}

#[test]
fn keep_retrying_never_gives_up() {
    let pki = Pki::new();
    let daemon = Daemon::start(DaemonOpts::default());
    let spool = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(bin("tracesync-relay"))
        .arg("--host")
        .arg(daemon.data_addr.to_string())
        .args(["--name", "r1", "--source", "synthetic:10"])
        .args(pki.relay_flags("ca", "ca"))
        .arg("--spool")
        .arg(spool.path())
        .args(["--give-up-after-seconds", "1", "--keep-retrying"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn relay");
    std::thread::sleep(Duration::from_secs(4));
    let running = child.try_wait().expect("wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    assert!(running, "the relay exited:\n{err}");
    assert!(
        err.contains("or run this relay with --tls off; retrying with backoff (--keep-retrying)"),
        "{err}"
    );
    assert_eq!(err.matches(" ERROR ").count(), 1, "said once:\n{err}");
}
