//! Fault injection suite, bounded CI edition (scripts/fault-suite.sh runs
//! the long edition: the same scenarios with more cycles).
//!
//! - disk full: the daemon's output is a small tmpfs in a private mount
//!   namespace; filled mid-stream, the daemon stops acknowledging (relays
//!   keep their data), says so in its status, and resumes once space
//!   returns.
//! - random faults (seeded, printed): kill -9 of the daemon and of relays
//!   at random points, SIGSTOP of either, a silent partition and a reset of
//!   a relay's link (through a userspace forwarder), forward relay clock
//!   steps, and a stuck tail subscriber all along.
//! - a reconnect storm: 64 relays reconnecting at once after a daemon
//!   restart.
//! - hostile peers (`hostile`, at the end): a fake daemon lying in Welcome,
//!   unauthenticated 4 MiB frames, 300 idle connections, a trickled frame,
//!   Hellos with 1 MiB machine names.
//!
//! Every scenario counts the synthetic packets produced, written, lost and
//! duplicated by identity and requires lost = 0 and duplicated = 0; every
//! relay must stop with everything acknowledged, and every rolled file must
//! load alone in the trace processor.
//!
//! Knobs (environment): TRACESYNC_FAULT_SEED, TRACESYNC_FAULT_CYCLES (kill
//! -9 cycles, default 6), TRACESYNC_FAULT_DISK_EPISODES (default 1),
//! TRACESYNC_FAULT_STORMS (default 1), TRACESYNC_FAULT_STORM_RELAYS
//! (default 64), TRACESYNC_FAULT_BACKWARD_STEPS=1 (clock steps may go
//! back: the trace processor then counts invalid_clock_snapshots).

use std::time::Duration;

use tracesync_tests::faults::{self, Cluster, ClusterOpts, Rng, SmallDisk, env_u64};
use tracesync_tests::live::DaemonOpts;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[test]
fn disk_full_stops_acks_then_resumes_losing_nothing() {
    const TEST: &str = "disk_full_stops_acks_then_resumes_losing_nothing";
    const RATE: u64 = 2000;
    let _one = faults::one_at_a_time();
    if !faults::disk::require_or_skip(TEST) {
        return;
    }
    let rng = Rng::from_env(TEST);
    let episodes = env_u64("TRACESYNC_FAULT_DISK_EPISODES", 1).max(1);
    let disk = SmallDisk::mount(48 << 20).unwrap_or_else(|e| panic!("{e}"));
    let out = disk.dir.join("out");
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "disk".into(),
        relays: 2,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(100),
            // Rotations fall into the full-disk episodes too.
            rotate_bytes: Some(1 << 20),
            output_dir: Some(out.clone()),
            command_prefix: disk.command_prefix(),
            ..DaemonOpts::default()
        },
        output_view: Some(disk.view(&out)),
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.wait_progress(RATE / 2);
    for episode in 1..=episodes {
        let filled = disk.fill().unwrap_or_else(|e| panic!("fill: {e}"));
        c.tally.add("disk-full");
        let s = c
            .daemon
            .wait_status("the output to fail", Duration::from_secs(30), |s| {
                s["output"]["failing"] == true
            });
        eprintln!(
            "{TEST}: episode {episode}: filled {filled} bytes; daemon: {}",
            s["output"]
        );
        // Full for a while: the relays keep generating into their spools.
        std::thread::sleep(Duration::from_secs(2));
        let s = c.daemon.status().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s["output"]["failing"], true, "{}", s["output"]);
        assert!(
            disk.free_bytes().unwrap_or(0) < 64 << 10,
            "the disk is not full"
        );
        disk.release().unwrap_or_else(|e| panic!("release: {e}"));
        let s = c
            .daemon
            .wait_status("the output to recover", Duration::from_secs(30), |s| {
                s["output"]["failing"] == false
            });
        assert!(
            s["output"]["episodes"].as_u64() >= Some(episode)
                && s["output"]["errors"].as_u64() >= Some(1),
            "status does not count the episode: {}",
            s["output"]
        );
        c.wait_progress(RATE / 2);
    }
    // One error line and one recovery line per episode, however many
    // retries failed.
    let s = c.daemon.status().unwrap_or_else(|e| panic!("{e}"));
    let counted = s["output"]["episodes"].as_u64().unwrap_or(0);
    let log = c.daemon.log();
    let said = log.matches("relays are not acknowledged and wait").count() as u64;
    let recovered = log.matches("the output is writable again").count() as u64;
    assert!(
        counted >= episodes && said == counted && recovered == counted,
        "{counted} episodes in status, {said} error lines, {recovered} recovery lines:\n{log}"
    );
    let (row, check) = c.finish(TEST, rng.seed, true);
    assert!(row.tally.faults["disk-full"] >= 1);
    assert!(check.files.len() >= 2, "{}", check.summary());
}

/// One fault of the random plan.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill9,
    FreezeDaemon,
    FreezeRelay,
    Partition,
    Cut,
    ClockStep,
}

#[test]
fn random_kills_partitions_freezes_and_clock_steps_lose_nothing() {
    const TEST: &str = "random_kills_partitions_freezes_and_clock_steps_lose_nothing";
    const RATE: u64 = 1000;
    const RELAYS: usize = 3;
    let _one = faults::one_at_a_time();
    let mut rng = Rng::from_env(TEST);
    let kills = env_u64("TRACESYNC_FAULT_CYCLES", 6).max(1);
    let backward_steps = env_u64("TRACESYNC_FAULT_BACKWARD_STEPS", 0) != 0;
    let others = (kills / 5).max(1);
    let mut plan = vec![Fault::Kill9; kills as usize];
    for f in [
        Fault::FreezeDaemon,
        Fault::FreezeRelay,
        Fault::Partition,
        Fault::Cut,
        Fault::ClockStep,
    ] {
        plan.extend(std::iter::repeat_n(f, others as usize));
    }
    rng.shuffle(&mut plan);

    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "mix".into(),
        relays: RELAYS,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(100),
            rotate_bytes: Some(4 << 20),
            ..DaemonOpts::default()
        },
        forwarders: true,
        time_namespace_s: Some(1000),
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.hold_stuck_tail();
    c.wait_progress(RATE / 2);
    for (i, fault) in plan.iter().enumerate() {
        // A random point mid-stream.
        std::thread::sleep(ms(rng.range(0, 700)));
        let relay = rng.below(RELAYS);
        match fault {
            Fault::Kill9 => match rng.below(3) {
                0 => c.kill9_daemon(ms(rng.range(0, 1000))),
                1 => c.kill9_relay(relay, ms(rng.range(0, 1000))),
                _ => {
                    // Both at once: the relay comes back first or last.
                    c.relays[relay].kill9();
                    c.tally.add("kill9-relay");
                    c.kill9_daemon(ms(rng.range(0, 500)));
                    std::thread::sleep(ms(rng.range(0, 500)));
                    c.relays[relay].restart();
                }
            },
            Fault::FreezeDaemon => c.freeze_daemon(ms(rng.range(500, 3000))),
            Fault::FreezeRelay => c.freeze_relay(relay, ms(rng.range(500, 3000))),
            Fault::Partition => c.partition(relay, ms(rng.range(500, 3000))),
            Fault::Cut => c.cut(relay),
            // Forward only: BOOTTIME and MONOTONIC never go back within
            // one boot, and a relay that did would give the trace
            // processor non-monotonic clock snapshots
            // (invalid_clock_snapshots), whatever the daemon does.
            // TRACESYNC_FAULT_BACKWARD_STEPS=1 allows backward steps (to
            // reproduce that).
            Fault::ClockStep => {
                let step = rng.range(100, 5000) as i64 * 1_000_000;
                let back = backward_steps && rng.below(2) == 0;
                c.step_clock(relay, if back { -step } else { step });
            }
        }
        eprintln!(
            "{TEST}: fault {}/{}: {fault:?} (relay {relay})",
            i + 1,
            plan.len()
        );
        c.wait_progress(RATE / 5);
    }
    let seed = rng.seed;
    let (row, _) = c.finish(TEST, seed, true);
    assert!(row.tally.total() as usize > plan.len());
}

#[test]
fn reconnect_storm_of_64_relays_loses_nothing() {
    const TEST: &str = "reconnect_storm_of_64_relays_loses_nothing";
    const RATE: u64 = 20;
    let relays = env_u64("TRACESYNC_FAULT_STORM_RELAYS", 64) as usize;
    let _one = faults::one_at_a_time();
    let mut rng = Rng::from_env(TEST);
    let storms = env_u64("TRACESYNC_FAULT_STORMS", 1).max(1);
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "storm".into(),
        relays,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(200),
            max_relays: Some(128),
            ..DaemonOpts::default()
        },
        // Low-rate relays batch longer (fewer, larger batches).
        relay_args: vec!["--linger-ms".into(), "200".into()],
        ..ClusterOpts::default()
    });
    let first = c.wait_connected();
    eprintln!("{TEST}: {relays} relays connected in {first:?}");
    c.wait_progress(RATE / 2);
    for storm in 1..=storms {
        // Down long enough that every relay is retrying, then all at once.
        c.kill9_daemon(ms(rng.range(1000, 2000)));
        c.tally.add("reconnect-storm-64");
        let took = c.wait_connected();
        eprintln!("{TEST}: storm {storm}: all {relays} relays back in {took:?}");
        c.wait_progress(RATE / 2);
    }
    let seed = rng.seed;
    c.finish(TEST, seed, true);
}

// ---- hostile peers (docs/reliability.md "Before authentication") ----
//
// A fake daemon that lies in Welcome, and peers that cost the daemon
// memory, slots or time before (or right after) authenticating. Each prints
// its figures on a `hostile-peers:` line.

mod hostile {
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
        let metrics = peer::free_addr();
        let mut opts = RelayOpts::synthetic("lied-to", RATE);
        opts.extra_args = vec!["--metrics-listen".into(), metrics.to_string()];
        let mut relay = Relay::start_to(liar.addr, &daemon.token, opts);
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
        let metrics = peer::free_addr();
        let mut daemon = Daemon::start(DaemonOpts {
            extra_args: vec!["--metrics-listen".into(), metrics.to_string()],
            ..DaemonOpts::default()
        });
        let idle: Vec<TcpStream> = (0..IDLE)
            .map(|_| TcpStream::connect(daemon.data_addr).expect("connect"))
            .collect();
        let (mut accepted, mut closed) = (0.0, 0.0);
        wait_for(
            "every idle connection accepted",
            Duration::from_secs(30),
            || {
                let page = peer::http_get(metrics, "/metrics")?;
                accepted =
                    peer::metric(&page, "tracesync_connections_accepted_total").unwrap_or(0.0);
                closed = peer::metric(
                    &page,
                    "tracesync_connections_failed_total{reason=\"unauthenticated_limit\"}",
                )
                .unwrap_or(0.0);
                if accepted >= IDLE as f64 {
                    Ok(())
                } else {
                    Err(format!("{accepted} accepted"))
                }
            },
        );
        let started = Instant::now();
        let mut relay = Relay::start(&daemon, RelayOpts::synthetic("first-try", 200));
        daemon.wait_connected(&["first-try"], Duration::from_secs(30));
        let took = started.elapsed();
        let log = last_run(&relay);
        let attempts = log.matches("connected to daemon").count();
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
        let metrics = peer::free_addr();
        let daemon = Daemon::start(DaemonOpts {
            extra_args: vec!["--metrics-listen".into(), metrics.to_string()],
            ..DaemonOpts::default()
        });
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
        peer::write_frame(&mut s, &peer::hello(&daemon.token, evil, 0x3e71, 0x3e71))
            .expect("Hello");
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
        let out = Command::new(bin("tracesync"))
            .arg("status")
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
}
