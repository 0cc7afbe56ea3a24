//! The `tracesyncd` binary's contract: config checking, the startup line,
//! and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn tracesyncd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tracesyncd"))
}

#[test]
fn check_config_accepts_the_shipped_example() {
    // The example requires TLS with files under /etc/tracesync/tls: give it
    // a lab PKI made here in their place.
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/daemon.toml");
    let pki = tempfile::tempdir().unwrap();
    tracesync_common::tls::pki::init(pki.path(), &["localhost".into()]).unwrap();
    let out = tracesyncd()
        .args(["--config", config, "--check-config"])
        .arg("--tls-cert")
        .arg(pki.path().join("daemon.crt"))
        .arg("--tls-key")
        .arg(pki.path().join("daemon.key"))
        .arg("--tls-client-ca")
        .arg(pki.path().join("ca.crt"))
        .output()
        .expect("run tracesyncd");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{config}: ok")
    );
}

#[test]
fn check_config_reports_an_unreadable_certificate_at_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("daemon.toml");
    let missing = dir.path().join("missing.crt");
    std::fs::write(
        &file,
        format!(
            "[tls]\nmode = \"required\"\nclient-ca = \"{}\"\n",
            missing.display()
        ),
    )
    .unwrap();
    let out = tracesyncd()
        .args(["--config", file.to_str().unwrap(), "--check-config"])
        .output()
        .expect("run tracesyncd");
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "{}:3:13: tls.client-ca: cannot read {}",
        file.display(),
        missing.display()
    );
    assert!(err.contains(&expected), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn plaintext_is_refused_unless_configured() {
    // No config, no flags: TLS is required and the default files are absent
    // (on a machine without /etc/tracesync/tls).
    if std::path::Path::new("/etc/tracesync/tls/ca.crt").exists() {
        eprintln!("skipped: /etc/tracesync/tls exists here");
        return;
    }
    let out = tracesyncd().arg("--check-config").output().unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tls.client-ca") && err.contains("--tls off"),
        "{err}"
    );
    let out = tracesyncd()
        .args(["--check-config", "--tls", "off"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn check_config_reports_the_position_and_exits_78() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("daemon.toml");
    std::fs::write(
        &file,
        "[listen]\ndata = \"127.0.0.1:1\"\n\n[limits]\nmax-relay = 3\n",
    )
    .unwrap();
    let out = tracesyncd()
        .args(["--config", file.to_str().unwrap(), "--check-config"])
        .output()
        .expect("run tracesyncd");
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    let expected = format!("{}:5:1: unknown field `max-relay`", file.display());
    assert!(err.contains(&expected), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn bad_flag_is_a_usage_error() {
    let out = tracesyncd().args(["--max-relays", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn starts_announces_its_addresses_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("run/control.sock");
    let output = dir.path().join("out");
    let mut child = tracesyncd()
        .args(["--listen", "127.0.0.1:0", "--sync-listen", "127.0.0.1:0"])
        .args(["--tls", "off"])
        .arg("--control")
        .arg(&control)
        .arg("--output")
        .arg(&output)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tracesyncd");
    let stderr = child.stderr.take().unwrap();
    let mut stderr = BufReader::new(stderr);
    let mut line = String::new();
    // Warnings (e.g. no token configured) may come first.
    while stderr.read_line(&mut line).unwrap() > 0 && !line.starts_with("tracesyncd: listening") {
        line.clear();
    }
    assert!(
        line.starts_with("tracesyncd: listening data=127.0.0.1:"),
        "{line}"
    );
    let data = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("data="))
        .expect("data address");
    assert!(!data.ends_with(":0"), "the bound port, not 0: {line}");
    assert!(
        line.contains(&format!("control={}", control.display())),
        "{line}"
    );
    assert!(control.exists(), "control socket created");
    std::net::TcpStream::connect(data).expect("data port accepts");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "stops within 15 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    assert!(!control.exists(), "control socket removed");
    let index = std::fs::read_to_string(output.join("index.jsonl")).unwrap();
    assert!(index.contains("\"complete\":true"), "{index}");
}
