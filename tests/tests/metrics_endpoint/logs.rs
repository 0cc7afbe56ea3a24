//! The logs of the real binaries: SIGHUP with a changed `[log] level`
//! changes what is logged without a restart; the log shapes (journald,
//! JSON) are what docs/operations-metrics.md `## Logs` says.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tracesync_tests::live::{self, Daemon, DaemonOpts, Relay, RelayOpts};

use super::wait_for;

/// Lines of a log, for assertions.
fn lines_with(log: &str, needle: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}

#[test]
fn sighup_changes_the_log_level_without_a_restart() {
    if std::env::var_os("RUST_LOG").is_some() {
        eprintln!(
            "skipping sighup_changes_the_log_level_without_a_restart: RUST_LOG is set and \
             wins over [log] level by design; unset it to run this test"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("daemon.toml");
    std::fs::write(&config, "[log]\nlevel = \"warn\"\n").expect("write config");
    let mut daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--config".into(), config.display().to_string()],
        ..DaemonOpts::default()
    });
    let pid = daemon.pid().expect("daemon pid");
    let mut relays = vec![Relay::start(&daemon, RelayOpts::synthetic("phone", 500))];
    daemon.wait_connected(&["phone"], Duration::from_secs(60));
    let before = daemon.log();
    assert!(
        lines_with(&before, "relay phone (raw id").is_empty()
            && lines_with(&before, " INFO ").is_empty(),
        "at level warn no INFO line may appear:\n{before}"
    );

    std::fs::write(&config, "[log]\nlevel = \"debug\"\n").expect("rewrite config");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    wait_for("the reload line", Duration::from_secs(20), || {
        let log = daemon.log();
        if lines_with(&log, "SIGHUP: reloaded").is_empty() {
            return Err(log);
        }
        Ok(())
    });
    // INFO now shows: a second relay's connection is logged.
    relays.push(Relay::start(&daemon, RelayOpts::synthetic("guest-vm", 500)));
    daemon.wait_connected(&["phone", "guest-vm"], Duration::from_secs(60));
    wait_for(
        "an INFO line for the new relay",
        Duration::from_secs(20),
        || {
            let log = daemon.log();
            let connected = lines_with(&log, "relay guest-vm (raw id");
            if connected.iter().any(|l| l.contains(" INFO ")) {
                Ok(())
            } else {
                Err(log)
            }
        },
    );
    // DEBUG too: a tail client that goes away mid-stream is a debug line.
    wait_for("a DEBUG line", Duration::from_secs(30), || {
        let mut tail = daemon
            .control_request("{\"cmd\":\"tail\",\"format\":\"jsonl\"}\n")
            .map_err(|e| e.to_string())?;
        let mut first = String::new();
        let _ = tail.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = BufReader::new(&mut tail).read_line(&mut first);
        drop(tail);
        std::thread::sleep(Duration::from_millis(500));
        let log = daemon.log();
        if lines_with(&log, " DEBUG ").is_empty() {
            Err(log)
        } else {
            Ok(())
        }
    });
    // Same process all along: the pid did not change and it stops cleanly.
    assert_eq!(daemon.pid(), Some(pid));
    for r in &mut relays {
        assert!(r.stop().success(), "relay {}:\n{}", r.name(), r.log());
    }
    assert!(daemon.stop().success(), "tracesyncd:\n{}", daemon.log());
}

/// A tracesyncd writing its stderr into a pipe, killed on drop.
struct Logged {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    _dir: tempfile::TempDir,
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Logged {
    /// Starts tracesyncd with `args`; `journal`: JOURNAL_STREAM names the
    /// pipe, as systemd does for a service whose stderr is the journal.
    fn start(args: &[&str], journal: bool) -> Logged {
        let dir = tempfile::tempdir().expect("tempdir");
        let (reader, writer) = std::io::pipe().expect("pipe");
        let st = nix::sys::stat::fstat(&writer).expect("fstat pipe");
        let mut cmd = Command::new(live::bin("tracesyncd"));
        cmd.args(["--listen", "127.0.0.1:0", "--sync-listen", "127.0.0.1:0"])
            .args(["--tls", "off"])
            .arg("--control")
            .arg(dir.path().join("c.sock"))
            .arg("--output")
            .arg(dir.path().join("out"))
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(writer));
        if journal {
            cmd.env("JOURNAL_STREAM", format!("{}:{}", st.st_dev, st.st_ino));
        }
        let child = cmd.spawn().expect("spawn tracesyncd");
        drop(cmd); // closes our copy of the write end
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Logged {
            child,
            lines,
            _dir: dir,
        }
    }

    /// Lines up to and including the "ready" log line.
    fn until_ready(&self) -> Vec<String> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    let ready = line.contains("ready");
                    got.push(line);
                    if ready {
                        return got;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        }
        panic!("no ready line; got:\n{}", got.join("\n"));
    }
}

#[test]
fn logs_are_journald_friendly_under_systemd_and_json_on_request() {
    // Under systemd: <N> priority prefix, no timestamp, no colour codes.
    let journald = Logged::start(&[], true).until_ready();
    let logged: Vec<_> = journald
        .iter()
        .filter(|l| !l.starts_with("tracesyncd: listening"))
        .collect();
    assert!(!logged.is_empty(), "{journald:?}");
    for line in &logged {
        assert!(
            line.starts_with("<6>INFO ") || line.starts_with("<4>WARN "),
            "no syslog priority prefix: {line:?}"
        );
        assert!(!line.contains('\u{1b}'), "colour codes: {line:?}");
        assert!(
            !line.contains("Z "),
            "timestamp in a journald line: {line:?}"
        );
    }
    // Without the journal: text with timestamps.
    let text = Logged::start(&[], false).until_ready();
    let ready = text.iter().find(|l| l.contains("ready")).expect("ready");
    assert!(
        ready.contains(" INFO ") && !ready.starts_with('<'),
        "{ready:?}"
    );
    // JSON on request: every logged line is an object with level and message.
    let json = Logged::start(&["--log-format", "json"], true).until_ready();
    for line in json
        .iter()
        .filter(|l| !l.starts_with("tracesyncd: listening"))
    {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
}
