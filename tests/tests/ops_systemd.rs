//! tracesyncd under systemd: the shipped unit files pass
//! `systemd-analyze verify`; the real daemon's notifications on a
//! NOTIFY_SOCKET this test owns come as READY=1 (only once the data
//! listener accepts), WATCHDOG=1, STOPPING=1, in that order; SIGTERM under
//! load loses nothing, counted by the synthetic identities.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, bin, check_output};
use tracesync_tests::tp::repo_root;

const UNITS: [&str; 2] = ["tracesyncd.service", "tracesync-relay.service"];

/// `systemd-analyze`, or why the verify test cannot run.
fn systemd_analyze() -> Result<PathBuf, String> {
    let out = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .map_err(|e| {
            format!(
                "systemd-analyze is not installed ({e}); scripts/setup-test-deps.sh installs it"
            )
        })?;
    if !out.status.success() {
        return Err(format!("systemd-analyze --version failed: {}", out.status));
    }
    Ok(PathBuf::from("systemd-analyze"))
}

#[test]
fn unit_files_pass_systemd_analyze_verify() {
    let analyze = match systemd_analyze() {
        Ok(a) => a,
        Err(reason) => {
            eprintln!("SKIP unit_files_pass_systemd_analyze_verify: {reason}");
            return;
        }
    };
    // verify insists that ExecStart binaries exist: check copies whose
    // /usr/bin/ paths point at the binaries of this build, in a directory
    // named like the units (verify resolves the unit name from the file).
    let dir = tempfile::tempdir().expect("tempdir");
    bin("tracesync-relay"); // built, for the relay unit's ExecStart
    let mut copies = Vec::new();
    for unit in UNITS {
        let text = std::fs::read_to_string(repo_root().join("systemd").join(unit))
            .unwrap_or_else(|e| panic!("systemd/{unit}: {e}"));
        let built = bin("tracesyncd")
            .parent()
            .expect("target dir")
            .display()
            .to_string();
        let copy = dir.path().join(unit);
        std::fs::write(&copy, text.replace("/usr/bin/", &format!("{built}/")))
            .expect("write unit copy");
        copies.push(copy);
    }
    let out = Command::new(&analyze)
        .arg("verify")
        .args(&copies)
        .current_dir(dir.path())
        .output()
        .expect("run systemd-analyze verify");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {}\n{stderr}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn unit_files_have_what_the_operations_docs_promise() {
    let daemon = std::fs::read_to_string(repo_root().join("systemd/tracesyncd.service"))
        .expect("systemd/tracesyncd.service");
    for line in [
        "Type=notify",
        "WatchdogSec=",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "StateDirectory=tracesync",
        "RuntimeDirectory=tracesync",
        "User=tracesync",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=\n",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "SystemCallFilter=@system-service",
        "TimeoutStopSec=",
        "ExecStart=/usr/bin/tracesyncd --config /etc/tracesync/daemon.toml\n",
    ] {
        assert!(daemon.contains(line), "tracesyncd.service lacks {line:?}");
    }
    let relay = std::fs::read_to_string(repo_root().join("systemd/tracesync-relay.service"))
        .expect("systemd/tracesync-relay.service");
    assert!(
        relay.contains("ExecStart=/usr/bin/tracesync-relay --config /etc/tracesync/relay.toml\n")
    );
    // Every exit of the relay can pass (a network fault never ends it), so
    // every exit is restarted, and restarts are never stopped for good.
    for line in ["Restart=always\n", "StartLimitIntervalSec=0\n"] {
        assert!(
            relay.contains(line),
            "tracesync-relay.service lacks {line:?}"
        );
    }
    assert!(
        !relay.contains("RestartPreventExitStatus"),
        "tracesync-relay.service must restart the relay after 77 and 78"
    );
    let sysusers = std::fs::read_to_string(repo_root().join("systemd/tracesync.sysusers"))
        .expect("systemd/tracesync.sysusers");
    assert!(sysusers.lines().any(|l| l.starts_with("u tracesync ")));
    let preset = std::fs::read_to_string(repo_root().join("systemd/50-tracesync.preset"))
        .expect("systemd/50-tracesync.preset");
    assert!(preset.lines().any(|l| l == "enable tracesyncd.service"));
}

/// A tracesyncd started as systemd would (NOTIFY_SOCKET, WATCHDOG_USEC);
/// killed on drop.
struct Notified {
    child: Child,
    socket: UnixDatagram,
    dir: tempfile::TempDir,
}

impl Drop for Notified {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Notified {
    fn start(watchdog: Option<Duration>) -> Notified {
        let dir = tempfile::tempdir().expect("tempdir");
        let notify = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&notify).expect("bind the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        let log = std::fs::File::create(dir.path().join("tracesyncd.log")).expect("log file");
        let mut cmd = Command::new(bin("tracesyncd"));
        match watchdog {
            Some(w) => cmd.env("WATCHDOG_USEC", w.as_micros().to_string()),
            None => cmd.env_remove("WATCHDOG_USEC"),
        };
        let child = cmd
            .args(["--listen", "127.0.0.1:0", "--sync-listen", "127.0.0.1:0"])
            .args(["--tls", "off"])
            .arg("--control")
            .arg(dir.path().join("control.sock"))
            .arg("--output")
            .arg(dir.path().join("out"))
            .env("NOTIFY_SOCKET", &notify)
            .env_remove("WATCHDOG_PID")
            .env_remove("RUST_LOG")
            .env_remove("TRACESYNC_TOKEN")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn tracesyncd");
        Notified { child, socket, dir }
    }

    /// The next datagram, as its lines.
    fn next(&self) -> Vec<String> {
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).unwrap_or_else(|e| {
            panic!(
                "no notification within 30 s ({e}); tracesyncd output:\n{}",
                self.log()
            )
        });
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tracesyncd.log")).unwrap_or_default()
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid"))
    }

    fn output_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }
}

/// The first `data=ADDR` in a STATUS= line.
fn data_addr(lines: &[String]) -> Option<SocketAddr> {
    let status = lines.iter().find_map(|l| l.strip_prefix("STATUS="))?;
    status
        .split_whitespace()
        .find_map(|w| w.strip_prefix("data="))?
        .parse()
        .ok()
}

fn has_pftrace(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().extension().is_some_and(|x| x == "pftrace"))
    })
}

#[test]
fn notify_socket_gets_ready_then_watchdog_then_stopping() {
    let daemon = Notified::start(Some(Duration::from_millis(600)));
    let mut order: Vec<String> = Vec::new();

    // READY first, and the data listener accepts the moment it arrives.
    let first = daemon.next();
    assert!(
        first.iter().any(|l| l == "READY=1"),
        "first notification must be READY=1, got {first:?}"
    );
    let addr = data_addr(&first).unwrap_or_else(|| panic!("READY without STATUS data=: {first:?}"));
    TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("READY=1 sent but {addr} does not accept: {e}"));
    assert!(
        has_pftrace(&daemon.output_dir()),
        "READY=1 sent before the output file is open"
    );
    order.push("READY=1".into());

    // Keep-alives at half the interval: a few within a couple of seconds.
    let mut watchdogs = 0;
    let started = Instant::now();
    while watchdogs < 3 {
        let lines = daemon.next();
        assert!(
            !lines.iter().any(|l| l == "READY=1" || l == "STOPPING=1"),
            "unexpected {lines:?} while running"
        );
        if lines.iter().any(|l| l == "WATCHDOG=1") {
            watchdogs += 1;
            order.push("WATCHDOG=1".into());
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "too few WATCHDOG=1 keep-alives"
        );
    }

    kill(daemon.pid(), Signal::SIGTERM).expect("SIGTERM");
    loop {
        let lines = daemon.next();
        assert!(
            !lines.iter().any(|l| l == "READY=1"),
            "READY=1 again: {lines:?}"
        );
        if lines.iter().any(|l| l == "STOPPING=1") {
            order.push("STOPPING=1".into());
            break;
        }
    }
    let mut daemon = daemon;
    let status = daemon.child.wait().expect("wait tracesyncd");
    assert!(
        status.success(),
        "tracesyncd exit {status}; output:\n{}",
        daemon.log()
    );
    assert_eq!(
        order,
        [
            "READY=1",
            "WATCHDOG=1",
            "WATCHDOG=1",
            "WATCHDOG=1",
            "STOPPING=1"
        ]
    );
}

#[test]
fn no_watchdog_keep_alives_without_watchdog_usec() {
    let mut daemon = Notified::start(None);
    let first = daemon.next();
    assert!(first.iter().any(|l| l == "READY=1"), "{first:?}");
    // Nothing more until SIGTERM, and then only STOPPING=1.
    std::thread::sleep(Duration::from_millis(500));
    kill(daemon.pid(), Signal::SIGTERM).expect("SIGTERM");
    assert_eq!(daemon.next(), ["STOPPING=1"]);
    let status = daemon.child.wait().expect("wait tracesyncd");
    assert!(status.success(), "{status}; output:\n{}", daemon.log());
}

const RATE: u64 = 2000;
const NAMES: [&str; 2] = ["term-a", "term-b"];

#[test]
fn sigterm_under_load_loses_nothing() {
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(100),
        ..DaemonOpts::default()
    });
    let mut relays: Vec<Relay> = NAMES
        .iter()
        .map(|name| Relay::start(&daemon, RelayOpts::synthetic(name, RATE)))
        .collect();
    daemon.wait_connected(&NAMES, Duration::from_secs(30));
    daemon.wait_progress(&NAMES, RATE);

    for round in 0..2 {
        // SIGTERM while the relays stream: drain, commit, final acks, exit 0.
        let status = daemon.stop();
        assert!(
            status.success(),
            "round {round}: tracesyncd exit {status}; output:\n{}",
            daemon.log()
        );
        assert!(
            daemon.log().contains("stopped"),
            "round {round}: no clean stop line:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(500));
        daemon.restart();
        daemon.wait_connected(&NAMES, Duration::from_secs(30));
        daemon.wait_progress(&NAMES, RATE);
    }

    for r in &mut relays {
        let status = r.stop();
        assert!(status.success(), "relay {} exit: {status}", r.name());
    }
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd exit: {status}");
    let check = check_output(&daemon.output);
    eprintln!("sigterm_under_load_loses_nothing: {}", check.summary());
    check.assert_complete();
    for n in NAMES {
        let src = check
            .source_of(n, 1)
            .unwrap_or_else(|| panic!("no events of {n}:\n{}", check.summary()));
        assert!(
            src.events >= 3 * RATE,
            "{n}: only {} events:\n{}",
            src.events,
            check.summary()
        );
    }
    // Every start begins a new file; a SIGTERM closes it complete.
    assert!(check.files.len() >= 3, "{}", check.summary());
    assert!(
        check.index.iter().all(|e| e["complete"] == true),
        "a SIGTERM left a file incomplete: {:?}",
        check.index
    );
}
