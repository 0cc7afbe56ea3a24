//! Hostile peers (docs/reliability-hostile.md "Before authentication"): a fake
//! daemon that lies in Welcome, and peers that cost the daemon memory,
//! slots or time before (or right after) authenticating. Each prints its
//! figures on a `hostile-peers:` line.

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use tracesync_protocol::relay::v1;
use tracesync_tests::faults::peer::{self, FakeDaemon};
use tracesync_tests::faults::{self, Counts};
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, bin, check_output};

/// Polls `f` every 100 ms until it holds, for at most `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => {
                panic!("waited {timeout:?} for {what}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The daemon's peak resident memory (KiB).
fn hwm(daemon: &Daemon) -> u64 {
    let pid = daemon.pid().expect("daemon running");
    peer::memory_kib(pid).expect("/proc/PID/status").0
}

/// The relay's log since its last (re)start.
fn last_run(relay: &Relay) -> String {
    let log = relay.log();
    log.rsplit("---- restart ----")
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn wait_log(relay: &Relay, needle: &str) -> String {
    let mut last = String::new();
    wait_for(
        &format!("{needle:?} in the relay's log"),
        Duration::from_secs(10),
        || {
            last = last_run(relay);
            if last.contains(needle) {
                Ok(())
            } else {
                Err(last.clone())
            }
        },
    );
    last
}

#[test]
fn a_daemon_that_lies_in_welcome_loses_the_relay_nothing() {
    const TEST: &str = "a_daemon_that_lies_in_welcome_loses_the_relay_nothing";
    const RATE: u64 = 1000;
    let _one = faults::one_at_a_time();
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(100),
        ..DaemonOpts::default()
    });
    // Something on the relay's daemon port that welcomes it with every
    // batch acknowledged.
    let liar = FakeDaemon::start(u64::MAX);
    let mut opts = RelayOpts::synthetic("lied-to", RATE);
    opts.extra_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    let mut relay = Relay::start_to(liar.addr, &daemon.token, opts);
    let metrics = peer::logged_metrics_addr(|| relay.log());
    let started = Instant::now();
    let series = "tracesync_relay_invalid_acks_total{frame=\"welcome\"}";
    let mut counted = 0.0;
    wait_for("three lies counted", Duration::from_secs(60), || {
        let page = peer::http_get(metrics, "/metrics")?;
        counted = peer::metric(&page, series).ok_or(format!("no {series}"))?;
        let hellos = liar.seen().hellos.len();
        if counted >= 3.0 && hellos >= 3 {
            Ok(())
        } else {
            Err(format!("{counted} counted, {hellos} Hellos"))
        }
    });
    let lied_for = started.elapsed();
    let seen = liar.seen();
    assert!(
        seen.hellos.iter().all(|&oldest| oldest == 1),
        "the spool freed batches on the lie: {seen:?}"
    );
    assert_eq!(seen.batches, 0, "no batch is sent after a lie: {seen:?}");
    assert!(relay.exited().is_none(), "the relay keeps retrying");
    let log = wait_log(&relay, "Welcome acknowledges batch 18446744073709551615");
    assert!(log.contains("nothing is freed from the spool"), "{log}");
    // Stopped: what it generated stays spooled.
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status}");
    let log = wait_log(&relay, "batches unacknowledged");
    let unacked: u64 = log
        .split("stopped with ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no unacknowledged count in:\n{log}"));
    assert!(unacked > 0, "{log}");
    let seen = liar.seen();
    drop(liar);

    // The same spool against the real daemon: everything arrives.
    relay.host = daemon.data_addr;
    relay.restart();
    daemon.wait_connected(&["lied-to"], Duration::from_secs(60));
    daemon.wait_synced(&["lied-to"], Duration::from_secs(60));
    daemon.wait_progress(&["lied-to"], RATE / 2);
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status}");
    wait_log(&relay, "everything acknowledged");
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd exit: {status}");
    let check = check_output(&daemon.output);
    let counts = Counts::of(&check);
    eprintln!(
        "hostile-peers: {TEST}: lied to for {:.1} s ({} connections, {} Hellos, all with \
         oldest_unacked_batch 1; tracesync_relay_invalid_acks_total{{frame=\"welcome\"}} \
         {counted}); stopped with {unacked} batches spooled; then against tracesyncd: \
         produced {}, written {}, lost {}, duplicated {}",
        lied_for.as_secs_f64(),
        seen.connections,
        seen.hellos.len(),
        counts.produced,
        counts.written,
        counts.lost,
        counts.duplicated
    );
    assert!(
        counts.lost == 0 && counts.duplicated == 0 && counts.written == counts.produced,
        "{counts:?}\n{}",
        check.summary()
    );
    // What the first run generated while lied to is in the output.
    assert!(
        counts.produced as f64 >= RATE as f64 * lied_for.as_secs_f64() / 2.0,
        "{counts:?} after {lied_for:?} of lies"
    );
    check.assert_complete();
}

#[test]
fn unauthenticated_4_mib_frames_cost_the_daemon_little_memory() {
    const TEST: &str = "unauthenticated_4_mib_frames_cost_the_daemon_little_memory";
    const CONNECTIONS: usize = 100;
    const FRAME: usize = 4 << 20;
    let _one = faults::one_at_a_time();
    let daemon = Daemon::start(DaemonOpts::default());
    std::thread::sleep(Duration::from_secs(1));
    let before = hwm(&daemon);
    let addr = daemon.data_addr;
    // Each announces a 4 MiB first frame and sends as much of it as the
    // daemon takes (a daemon that sized its buffer by the announcement
    // would take it all), then holds the connection.
    let peers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).expect("connect");
                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                let _ = s.write_all(&(FRAME as u32).to_be_bytes());
                let chunk = vec![0x5a; 64 << 10];
                let mut sent = 0;
                while sent < FRAME - 1 {
                    let n = chunk.len().min(FRAME - 1 - sent);
                    match s.write(&chunk[..n]) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => sent += n,
                    }
                }
                (s, sent)
            })
        })
        .collect();
    let held: Vec<(TcpStream, usize)> =
        peers.into_iter().map(|p| p.join().expect("peer")).collect();
    std::thread::sleep(Duration::from_secs(1));
    let after = hwm(&daemon);
    let body_bytes: usize = held.iter().map(|(_, n)| n).sum();
    let status = daemon.wait_status("the refusals counted", Duration::from_secs(30), |s| {
        s["relays_refused"]["hello_too_large"].as_u64() == Some(CONNECTIONS as u64)
    });
    eprintln!(
        "hostile-peers: {TEST}: {CONNECTIONS} connections announcing {} MiB each ({:.1} MiB \
         of body written in all): daemon VmHWM {:.1} MiB before, {:.1} MiB after (+{:.1} MiB); \
         relays_refused {}",
        FRAME >> 20,
        body_bytes as f64 / f64::from(1 << 20),
        mib(before),
        mib(after),
        mib(after.saturating_sub(before)),
        status["relays_refused"]
    );
    assert!(
        after.saturating_sub(before) <= 64 << 10,
        "the daemon grew by {:.1} MiB",
        mib(after - before)
    );
    drop(held);
}

#[test]
fn idle_connections_do_not_keep_a_relay_out() {
    const TEST: &str = "idle_connections_do_not_keep_a_relay_out";
    const IDLE: usize = 300;
    let _one = faults::one_at_a_time();
    let mut daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
        ..DaemonOpts::default()
    });
    let metrics = peer::logged_metrics_addr(|| daemon.log());
    let idle: Vec<TcpStream> = (0..IDLE)
        .map(|_| TcpStream::connect(daemon.data_addr).expect("connect"))
        .collect();
    let (mut accepted, mut closed) = (0.0, 0.0);
    wait_for(
        "every idle connection accepted, those past the limit closed",
        Duration::from_secs(30),
        || {
            let page = peer::http_get(metrics, "/metrics")?;
            accepted = peer::metric(&page, "tracesync_connections_accepted_total").unwrap_or(0.0);
            // All from 127.0.0.1: closed at the per-source limit (128).
            closed = ["unauthenticated_limit", "unauthenticated_per_source"]
                .iter()
                .map(|reason| {
                    let series =
                        format!("tracesync_connections_failed_total{{reason=\"{reason}\"}}");
                    peer::metric(&page, &series).unwrap_or(0.0)
                })
                .sum();
            // The closures at the limit are counted just after the
            // accepts: wait for both.
            if accepted >= IDLE as f64 && closed >= (IDLE - 128) as f64 {
                Ok(())
            } else {
                Err(format!("{accepted} accepted, {closed} closed at the limit"))
            }
        },
    );
    let started = Instant::now();
    let mut relay = Relay::start(&daemon, RelayOpts::synthetic("first-try", 200));
    daemon.wait_connected(&["first-try"], Duration::from_secs(30));
    let took = started.elapsed();
    let log = last_run(&relay);
    let attempts = log.matches("welcomed relay instance").count();
    let status = daemon.status().unwrap_or_default();
    eprintln!(
        "hostile-peers: {TEST}: {IDLE} idle TCP connections ({accepted} accepted, {closed} \
         closed at the unauthenticated limit), then a relay: welcomed {:.2} s after its start \
         at attempt {attempts}; relays_refused {}",
        took.as_secs_f64(),
        status["relays_refused"]
    );
    assert_eq!(attempts, 1, "{log}");
    assert!(!log.contains("reconnecting"), "{log}");
    assert!(closed >= (IDLE - 128) as f64, "{closed}");
    assert!(status["relays_refused"]["max_relays"].is_null(), "{status}");
    assert!(
        took < Duration::from_secs(5),
        "longer than the hello timeout"
    );
    drop(idle);
    assert!(relay.stop().success());
    assert!(daemon.stop().success());
}

#[test]
fn a_relay_trickling_a_frame_is_closed_within_the_frame_timeout() {
    const TEST: &str = "a_relay_trickling_a_frame_is_closed_within_the_frame_timeout";
    const BOUND: Duration = Duration::from_secs(3);
    let _one = faults::one_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("daemon.toml");
    std::fs::write(
        &config,
        format!("[limits]\nframe-timeout-ms = {}\n", BOUND.as_millis()),
    )
    .expect("write config");
    let daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--config".into(), config.display().to_string()],
        ..DaemonOpts::default()
    });
    let mut s = TcpStream::connect(daemon.data_addr).expect("connect");
    peer::write_frame(
        &mut s,
        &peer::hello(&daemon.token, "trickler", 0x7717, 0x7717),
    )
    .expect("Hello");
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    assert!(
        matches!(
            peer::read_frame(&mut s),
            Ok(Some(v1::frame::Body::Welcome(_)))
        ),
        "not welcomed"
    );
    // The prefix of a 100-byte frame, then a byte a second.
    let mut w = s.try_clone().expect("clone");
    let started = Instant::now();
    w.write_all(&100u32.to_be_bytes()).expect("prefix");
    let trickle = std::thread::spawn(move || {
        let mut sent = 0;
        for _ in 0..60 {
            std::thread::sleep(Duration::from_secs(1));
            if w.write_all(&[0x22]).is_err() {
                break;
            }
            sent += 1;
        }
        sent
    });
    let frames = peer::frames_until_closed(&mut s, Duration::from_secs(60));
    let took = started.elapsed();
    let trickled = trickle.join().expect("trickle");
    let status = daemon.wait_status("the refusal counted", Duration::from_secs(10), |s| {
        s["relays_refused"]["frame_timeout"].as_u64() == Some(1)
    });
    eprintln!(
        "hostile-peers: {TEST}: Hello, then a 100-byte frame at 1 byte/s: closed {:.2} s \
         after its first byte (limits.frame-timeout-ms = {}; {trickled} bytes trickled); \
         answer {:?}; relays_refused {}",
        took.as_secs_f64(),
        BOUND.as_millis(),
        peer::refused(&frames),
        status["relays_refused"]
    );
    let (code, _) = peer::refused(&frames).expect("a Refused frame");
    assert_eq!(code, "frame_timeout");
    assert!(
        took >= BOUND && took < BOUND + Duration::from_secs(2),
        "closed after {took:?}"
    );
}

#[test]
fn a_hello_with_a_1_mib_machine_name_is_refused_and_status_still_works() {
    const TEST: &str = "a_hello_with_a_1_mib_machine_name_is_refused_and_status_still_works";
    const HUGE: usize = 20;
    let _one = faults::one_at_a_time();
    let daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
        ..DaemonOpts::default()
    });
    let metrics = peer::logged_metrics_addr(|| daemon.log());
    std::thread::sleep(Duration::from_secs(1));
    let before = hwm(&daemon);
    let refuse = |name: String, instance: u64| {
        let mut s = TcpStream::connect(daemon.data_addr).expect("connect");
        let mut w = s.try_clone().expect("clone");
        let hello = peer::hello(&daemon.token, &name, instance, instance as u32);
        // Written on the side: the daemon answers on the prefix.
        let writer = std::thread::spawn(move || peer::write_frame(&mut w, &hello).is_ok());
        let frames = peer::frames_until_closed(&mut s, Duration::from_secs(10));
        let _ = writer.join();
        peer::refused(&frames).expect("a Refused frame")
    };
    let mut reasons = Vec::new();
    for i in 0..HUGE {
        let (code, reason) = refuse("m".repeat(1 << 20), 0x1000 + i as u64);
        assert_eq!(code, "hello_too_large", "{reason}");
        reasons.push(reason);
    }
    // Within the 64 KiB frame, over the 255-byte name limit.
    let (code, reason) = refuse("n".repeat(60_000), 0x2000);
    assert_eq!(code, "hello_too_large", "{reason}");
    assert!(
        reason.starts_with("Hello.machine_name of 60000 bytes"),
        "{reason}"
    );
    reasons.push(reason);
    // A short name with control characters is welcomed, and printed
    // escaped.
    let evil = "evil\n\u{1b}[2Jname";
    let mut s = TcpStream::connect(daemon.data_addr).expect("connect");
    peer::write_frame(&mut s, &peer::hello(&daemon.token, evil, 0x3e71, 0x3e71)).expect("Hello");
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    assert!(
        matches!(
            peer::read_frame(&mut s),
            Ok(Some(v1::frame::Body::Welcome(_)))
        ),
        "not welcomed"
    );
    daemon.wait_status("the machine in the status", Duration::from_secs(10), |s| {
        s["machines"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["name"] == evil))
    });
    let json = daemon.status_cli().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        json["relays_refused"]["hello_too_large"].as_u64(),
        Some(HUGE as u64 + 1),
        "{json}"
    );
    let started = Instant::now();
    // `-v`: the default view cuts names to 16 characters (80 columns);
    // the verbose one shows them whole, escaped.
    let out = Command::new(bin("tracesync"))
        .arg("status")
        .arg("-v")
        .arg("--connect")
        .arg(&daemon.control)
        .output()
        .expect("run tracesync status");
    let status_took = started.elapsed();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.contains("evil\\n\\u{1b}[2Jname"), "{table}");
    assert!(!table.contains('\u{1b}'), "{table:?}");
    let page = peer::http_get(metrics, "/metrics").expect("scrape");
    assert!(!page.contains('\u{1b}'));
    let after = hwm(&daemon);
    eprintln!(
        "hostile-peers: {TEST}: {HUGE} Hellos with 1 MiB machine names and one with 60000 \
         bytes: all refused hello_too_large ({:?}); daemon VmHWM {:.1} MiB before, {:.1} MiB \
         after (+{:.1} MiB); `tracesync status` {} bytes in {:.2} s, metrics page {} bytes",
        reasons.first(),
        mib(before),
        mib(after),
        mib(after.saturating_sub(before)),
        table.len(),
        status_took.as_secs_f64(),
        page.len()
    );
    assert!(after.saturating_sub(before) <= 64 << 10);
    assert!(page.len() < 1 << 20);
    drop(s);
}
