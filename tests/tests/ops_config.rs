//! Operator-facing configuration of the real binaries: every shipped config
//! passes `--check-config`; errors are one `file:line:column: message` line
//! and exit 78; SIGHUP applies the log level without a restart and names
//! the changes that need one.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tracesync_tests::live::bin;
use tracesync_tests::tp::repo_root;

const EX_CONFIG: i32 = 78;

fn check_config(binary: &str, file: &Path) -> Output {
    check_config_with(binary, file, &["--tls", "off"])
}

fn check_config_with(binary: &str, file: &Path, extra: &[&str]) -> Output {
    Command::new(bin(binary))
        .arg("--config")
        .arg(file)
        .arg("--check-config")
        .args(extra)
        .env_remove("TRACESYNC_TOKEN")
        .output()
        .unwrap_or_else(|e| panic!("run {binary}: {e}"))
}

/// `--tls-*` flags naming a lab PKI made in `dir` (the shipped configs
/// require TLS with files under /etc/tracesync/tls).
fn pki_flags(binary: &str, dir: &Path) -> Vec<String> {
    if !dir.join("ca.crt").exists() {
        tracesync_common::tls::pki::init(dir, &["localhost".into()]).expect("pki init");
        tracesync_common::tls::pki::issue(dir, "relay", None).expect("pki issue");
    }
    let path = |name: &str| dir.join(name).display().to_string();
    if binary == "tracesyncd" {
        vec![
            "--tls-cert".into(),
            path("daemon.crt"),
            "--tls-key".into(),
            path("daemon.key"),
            "--tls-client-ca".into(),
            path("ca.crt"),
        ]
    } else {
        vec![
            "--tls-ca".into(),
            path("ca.crt"),
            "--tls-cert".into(),
            path("relay.crt"),
            "--tls-key".into(),
            path("relay.key"),
        ]
    }
}

/// The binary that reads a shipped config, by its file name.
fn binary_for(file: &Path) -> &'static str {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with("relay") {
        "tracesync-relay"
    } else {
        "tracesyncd"
    }
}

#[test]
fn every_shipped_config_passes_check_config() {
    let dir = repo_root().join("configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("configs/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let names: Vec<_> = files.iter().filter_map(|p| p.file_name()).collect();
    assert!(
        names.contains(&"daemon.toml".as_ref()) && names.contains(&"relay.toml".as_ref()),
        "configs/ must ship daemon.toml and relay.toml: {names:?}"
    );
    let pki = tempfile::tempdir().expect("tempdir");
    for file in &files {
        let binary = binary_for(file);
        let flags = pki_flags(binary, pki.path());
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let out = check_config_with(binary, file, &flags);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{binary} --check-config {}: {}\n{stdout}{}",
            file.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.trim(), format!("{}: ok", file.display()));
    }
}

/// Runs `--check-config` on `text` and returns the one error line.
fn error_line(binary: &str, text: &str) -> (String, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, text).expect("write config");
    let out = check_config(binary, &file);
    assert_eq!(
        out.status.code(),
        Some(EX_CONFIG),
        "{binary} must exit 78 on a bad config; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one error line, got:\n{stderr}");
    (lines[0].to_owned(), file, dir)
}

#[test]
fn daemon_unknown_key_is_one_exact_line() {
    let (line, file, _dir) = error_line("tracesyncd", "[merge]\nwindow-ms = 5\nno-such-key = 1\n");
    assert_eq!(
        line,
        format!(
            "tracesyncd: {}:3:1: unknown field `no-such-key`, expected one of `window-ms`, \
             `pending-packets`, `queue-bytes`, `ingest-shards`",
            file.display()
        )
    );
}

#[test]
fn daemon_wrong_type_is_one_exact_line() {
    let (line, file, _dir) = error_line("tracesyncd", "[limits]\nmax-relays = \"many\"\n");
    assert_eq!(
        line,
        format!(
            "tracesyncd: {}:2:14: invalid type: string \"many\", expected u64",
            file.display()
        )
    );
}

#[test]
fn daemon_bad_address_is_reported_at_the_value() {
    let (line, file, _dir) = error_line("tracesyncd", "[listen]\ndata = \"nowhere\"\n");
    let prefix = format!("tracesyncd: {}:2:8: ", file.display());
    assert!(line.starts_with(&prefix), "{line}");
}

#[test]
fn daemon_output_dir_that_is_a_file_fails_the_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let not_dir = dir.path().join("plain-file");
    std::fs::write(&not_dir, "").expect("write");
    let text = format!("[output]\ndir = {:?}\n", not_dir.display().to_string());
    let (line, file, _dir) = error_line("tracesyncd", &text);
    assert_eq!(
        line,
        format!(
            "tracesyncd: {}: [output] dir: {} exists and is not a directory",
            file.display(),
            not_dir.display()
        )
    );
}

#[test]
fn daemon_sync_out_of_range_is_one_exact_line_naming_the_key() {
    let (line, file, _dir) = error_line("tracesyncd", "[sync]\nmin-interval-ms = 5\n");
    assert_eq!(
        line,
        format!(
            "tracesyncd: {}:2:19: [sync] min-interval-ms must be in 10..=60000, got 5",
            file.display()
        )
    );
    let (line, file, _dir) = error_line("tracesyncd", "[sync]\nprobe-timeout-ms = 0\n");
    assert_eq!(
        line,
        format!(
            "tracesyncd: {}:2:20: [sync] probe-timeout-ms must be in 10..=60000, got 0",
            file.display()
        )
    );
}

#[test]
fn daemon_sync_intervals_out_of_order_are_one_exact_line() {
    let (line, file, _dir) = error_line(
        "tracesyncd",
        "[sync]\nmin-interval-ms = 300\nmax-interval-ms = 200\nsteady-interval-ms = 250\n",
    );
    assert_eq!(
        line,
        format!(
            "tracesyncd: {}: [sync] min-interval-ms (300) must not exceed max-interval-ms (200)",
            file.display()
        )
    );
    let (line, file, _dir) = error_line("tracesyncd", "[sync]\nsteady-interval-ms = 50\n");
    assert_eq!(
        line,
        format!(
            "tracesyncd: {}: [sync] steady-interval-ms (50) must be within \
             min-interval-ms..=max-interval-ms (100..=250)",
            file.display()
        )
    );
}

#[test]
fn relay_unknown_key_is_one_exact_line() {
    let (line, file, _dir) = error_line(
        "tracesync-relay",
        "host = \"127.0.0.1:7410\"\nno-such-key = 1\n",
    );
    // The rest of the line lists the valid keys (it grows with new options).
    let exact = format!(
        "tracesync-relay: {}:2:1: unknown field `no-such-key`, expected one of `host`, ",
        file.display()
    );
    assert!(line.starts_with(&exact), "{line}\nexpected: {exact}...");
}

#[test]
fn relay_wrong_type_is_one_exact_line() {
    let (line, file, _dir) = error_line("tracesync-relay", "linger-ms = \"soon\"\n");
    assert_eq!(
        line,
        format!(
            "tracesync-relay: {}:1:13: invalid type: string \"soon\", expected u64",
            file.display()
        )
    );
}

#[test]
fn relay_bad_address_is_reported_at_the_value() {
    let (line, file, _dir) = error_line("tracesync-relay", "\nhost = \"a:b:c\"\n");
    let prefix = format!("tracesync-relay: {}:2:8: ", file.display());
    assert!(line.starts_with(&prefix), "{line}");
}

#[test]
fn missing_config_file_exits_78() {
    for binary in ["tracesyncd", "tracesync-relay"] {
        let out = check_config(binary, Path::new("/nonexistent/tracesync/x.toml"));
        assert_eq!(out.status.code(), Some(EX_CONFIG), "{binary}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("/nonexistent/tracesync/x.toml"), "{stderr}");
    }
}

/// A tracesyncd on loopback with a config file; killed on drop.
struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config_text(dir: &Path, level: &str, data: &str, retain_bytes: u64) -> String {
    format!(
        "[listen]\ndata = \"{data}\"\nsync = \"127.0.0.1:0\"\ncontrol = {:?}\n\
         [output]\ndir = {:?}\nretain-bytes = {retain_bytes}\n[log]\nlevel = \"{level}\"\n\
         [tls]\nmode = \"off\"\n",
        dir.join("control.sock").display().to_string(),
        dir.join("out").display().to_string(),
    )
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("daemon.toml");
        std::fs::write(
            &config,
            config_text(dir.path(), "info", "127.0.0.1:0", 1 << 30),
        )
        .expect("write config");
        let mut child = Command::new(bin("tracesyncd"))
            .arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("TRACESYNC_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tracesyncd");
        let (tx, lines) = mpsc::channel();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut d = Daemon {
            child,
            lines,
            seen: Vec::new(),
            config,
            _dir: dir,
        };
        d.wait_line("the startup line", |l| {
            l.starts_with("tracesyncd: listening")
        });
        d
    }

    /// Waits for a stderr line matching `want`; panics with what was seen.
    fn wait_line(&mut self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "tracesyncd: no {what} within 30 s; output:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn hup(&self) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        kill(pid, Signal::SIGHUP).expect("SIGHUP");
    }
}

#[test]
fn sighup_changes_the_log_level_without_a_restart_and_names_what_needs_one() {
    let mut daemon = Daemon::start();
    let pid = daemon.child.id();
    let dir = daemon.config.parent().expect("dir").to_path_buf();

    // Debug level, other retention, and a new data address (restart only).
    std::fs::write(
        &daemon.config,
        config_text(&dir, "debug", "127.0.0.1:1", 1 << 20),
    )
    .expect("rewrite config");
    daemon.hup();
    let line = daemon.wait_line("the reload line", |l| l.contains("SIGHUP: reloaded"));
    assert!(
        line.ends_with(
            "applied: log.level, output.retain-bytes; need a restart (running values kept): \
             listen.data"
        ),
        "{line}"
    );
    // Debug lines now appear: the level changed in the running process.
    daemon.wait_line("a DEBUG line after the reload", |l| {
        l.contains("DEBUG") && l.contains("log level is now debug")
    });

    // A broken file: the running config stays, with the reason.
    std::fs::write(&daemon.config, "[log]\nlevel = \"loud\"\n").expect("rewrite config");
    daemon.hup();
    let line = daemon.wait_line("the refused reload", |l| {
        l.contains("SIGHUP: keeping the running config")
    });
    assert!(line.contains(":2:9: "), "{line}");

    // Back to info: debug lines stop (the reload line itself is INFO).
    std::fs::write(
        &daemon.config,
        config_text(&dir, "info", "127.0.0.1:1", 1 << 20),
    )
    .expect("rewrite config");
    daemon.hup();
    let line = daemon.wait_line("the second reload line", |l| l.contains("SIGHUP: reloaded"));
    // listen.data is still pending a restart, so it is named again.
    assert!(
        line.ends_with("applied: log.level; need a restart (running values kept): listen.data"),
        "{line}"
    );
    assert_eq!(daemon.child.id(), pid, "same process");
    assert!(
        daemon.child.try_wait().expect("try_wait").is_none(),
        "tracesyncd still runs"
    );
}

#[test]
fn sighup_applies_the_probe_schedule_and_names_the_threshold_for_a_restart() {
    let mut daemon = Daemon::start();
    let dir = daemon.config.parent().expect("dir").to_path_buf();
    let mut text = config_text(&dir, "info", "127.0.0.1:0", 1 << 30);
    text.push_str(
        "[sync]\nmax-interval-ms = 1000\nburst-probes = 4\nsync-point-threshold-ns = 10\n",
    );
    std::fs::write(&daemon.config, text).expect("rewrite config");
    daemon.hup();
    let line = daemon.wait_line("the reload line", |l| l.contains("SIGHUP: reloaded"));
    assert!(
        line.ends_with(
            "applied: sync.burst-probes, sync.max-interval-ms; need a restart (running values \
             kept): sync.sync-point-threshold-ns"
        ),
        "{line}"
    );
    // A schedule out of order is refused as a whole.
    std::fs::write(
        &daemon.config,
        format!(
            "{}[sync]\nmin-interval-ms = 2000\n",
            config_text(&dir, "info", "127.0.0.1:0", 1 << 30)
        ),
    )
    .expect("rewrite config");
    daemon.hup();
    let line = daemon.wait_line("the refused reload", |l| {
        l.contains("SIGHUP: keeping the running config")
    });
    assert!(
        line.ends_with("[sync] min-interval-ms (2000) must not exceed max-interval-ms (250)"),
        "{line}"
    );
    assert!(
        daemon.child.try_wait().expect("try_wait").is_none(),
        "tracesyncd still runs"
    );
}

/// SIGHUP reaches the prober: a connected relay's probe rate follows the
/// new `[sync]` schedule without a reconnect.
#[test]
fn sighup_changes_the_probe_rate_of_a_connected_relay() {
    use tracesync_tests::live::{self, DaemonOpts, Relay, RelayOpts};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("daemon.toml");
    std::fs::write(&config, "[sync]\ntrain-length = 2\n").expect("write config");
    let daemon = live::Daemon::start(DaemonOpts {
        extra_args: vec!["--config".into(), config.display().to_string()],
        ..DaemonOpts::default()
    });
    let mut relay = Relay::start(&daemon, RelayOpts::synthetic("hup-relay", 100));
    let rate = |status: &serde_json::Value| {
        live::process::machine(status, "hup-relay")
            .and_then(|m| m["sync"]["probe_rate_hz"].as_f64())
            .unwrap_or(0.0)
    };
    // Steady: 4..10 Hz with one follow-up each.
    let session = |status: &serde_json::Value| {
        live::process::machine(status, "hup-relay").map(|m| m["sync"]["session_id"].clone())
    };
    let before = daemon.wait_status("hup-relay probing steadily", Duration::from_secs(60), |s| {
        (8.0..=20.0).contains(&rate(s))
    });
    std::fs::write(
        &config,
        "[sync]\nsteady-interval-ms = 1000\nmin-interval-ms = 1000\nmax-interval-ms = 1000\n\
         train-length = 1\n",
    )
    .expect("rewrite config");
    let pid = Pid::from_raw(i32::try_from(daemon.pid().expect("running")).expect("pid"));
    kill(pid, Signal::SIGHUP).expect("SIGHUP");
    // One probe a second now (a burst in between would show 66.7 Hz).
    let status = daemon.wait_status("hup-relay probing at 1 Hz", Duration::from_secs(30), |s| {
        rate(s) == 1.0
    });
    assert_eq!(session(&status), session(&before), "the same probe session");
    assert!(relay.stop().success(), "relay:\n{}", relay.log());
}
