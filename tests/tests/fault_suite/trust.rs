//! Identity and trust (docs/reliability-hostile.md, "A lie after a relay
//! restart" and "A relay instance taken over in plaintext"): what a relay
//! believes of a daemon across its own restarts, and how it recovers when
//! a daemon's record of it was poisoned.
//! Each prints its figures on a `hostile-peers:` line.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use tracesync_protocol::relay::v1;
use tracesync_tests::faults::peer::{self, FakeDaemon};
use tracesync_tests::faults::{self, Counts};
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, check_output};

use crate::hostile::wait_for;

/// A relay spools with no daemon reachable, restarts, and meets a fake
/// daemon whose Welcome acknowledges batch 200 of those never-sent
/// batches. Before the sent mark, the limit was "what was spooled before
/// this run" and the lie freed 200 batches (4,283 events lost in the
/// issue's run); now the relay rejects it and loses nothing.
#[test]
fn a_welcome_lie_after_a_restart_on_never_sent_batches_loses_nothing() {
    const TEST: &str = "a_welcome_lie_after_a_restart_on_never_sent_batches_loses_nothing";
    const RATE: u64 = 1000;
    const LIE: u64 = 200;
    let _one = faults::one_at_a_time();
    // A port with nothing behind it: connection refused.
    let nowhere = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(100),
        ..DaemonOpts::default()
    });
    let mut opts = RelayOpts::synthetic("restarted", RATE);
    opts.extra_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    let mut relay = Relay::start_to(nowhere, &daemon.token, opts);
    // Long enough to spool well over LIE batches (linger-cut batches).
    std::thread::sleep(Duration::from_secs(8));
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status}");

    let liar = FakeDaemon::start(LIE);
    relay.host = liar.addr;
    relay.restart();
    let metrics = peer::logged_metrics_addr(|| {
        relay
            .log()
            .rsplit("---- restart ----")
            .next()
            .unwrap_or_default()
            .to_owned()
    });
    let series = "tracesync_relay_invalid_acks_total{frame=\"welcome\"}";
    let started = Instant::now();
    let mut counted = 0.0;
    wait_for("two lies counted", Duration::from_secs(60), || {
        let page = peer::http_get(metrics, "/metrics")?;
        counted = peer::metric(&page, series).ok_or(format!("no {series}"))?;
        if counted >= 2.0 {
            Ok(())
        } else {
            Err(format!("{counted} counted"))
        }
    });
    let seen = liar.seen();
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status}");
    drop(liar);
    assert!(
        seen.hellos.iter().all(|&oldest| oldest == 1),
        "the spool freed batches on the lie: {seen:?}"
    );

    relay.host = daemon.data_addr;
    relay.restart();
    daemon.wait_connected(&["restarted"], Duration::from_secs(60));
    daemon.wait_progress(&["restarted"], RATE / 2);
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status}");
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd exit: {status}");
    let check = check_output(&daemon.output);
    let counts = Counts::of(&check);
    eprintln!(
        "hostile-peers: {TEST}: spooled 8 s with no daemon, restarted against a daemon \
         welcoming with acked_through {LIE}: {} Hellos in {:.1} s, all with \
         oldest_unacked_batch 1 ({series} {counted}); then against tracesyncd: produced {}, \
         written {}, lost {}, duplicated {}",
        seen.hellos.len(),
        started.elapsed().as_secs_f64(),
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
    assert!(counts.produced >= RATE * 4, "{counts:?}");
}

/// Plaintext mode: a stranger who learnt a relay's instance id resumes its
/// session and pushes the daemon's ack point to 10^12; the real relay's
/// next Welcomes acknowledge batches it never sent. Before, it rejected
/// every Welcome for good and delivered nothing again; now, after
/// `NEW_INSTANCE_AFTER` (3) rejections in a row it continues as a new
/// relay instance with its whole spool, and loses nothing.
#[test]
fn a_poisoned_ack_point_does_not_lock_a_relay_out() {
    const TEST: &str = "a_poisoned_ack_point_does_not_lock_a_relay_out";
    const RATE: u64 = 1000;
    const POISON: u64 = 1_000_000_000_000;
    let _one = faults::one_at_a_time();
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(100),
        ..DaemonOpts::default()
    });
    let mut opts = RelayOpts::synthetic("victim", RATE);
    opts.extra_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    let mut relay = Relay::start(&daemon, opts);
    let metrics = peer::logged_metrics_addr(|| relay.log());
    let status = daemon.wait_connected(&["victim"], Duration::from_secs(60));
    daemon.wait_progress(&["victim"], RATE / 2);
    let raw_id = tracesync_tests::live::process::machine(&status, "victim")
        .and_then(|m| m["raw_id"].as_u64())
        .and_then(|id| u32::try_from(id).ok())
        .unwrap_or_else(|| panic!("no raw id of victim: {status}"));
    // What the stranger knows (the test reads it; the spool is owner-only
    // now and the logs show 4 hex digits, but an older relay's were not).
    let instance = std::fs::read_to_string(relay.spool.join("instance-id"))
        .ok()
        .and_then(|t| u64::from_str_radix(t.trim(), 16).ok())
        .expect("the relay's instance id");

    // Frozen meanwhile, so it does not take its session straight back.
    let pid = relay.pid().expect("relay running").to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    let mut stranger = std::net::TcpStream::connect(daemon.data_addr).expect("connect");
    stranger
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    peer::write_frame(
        &mut stranger,
        &peer::hello(&daemon.token, "victim", instance, raw_id),
    )
    .expect("Hello");
    let welcome = peer::read_frame(&mut stranger).expect("an answer");
    assert!(
        matches!(welcome, Some(v1::frame::Body::Welcome(_))),
        "the stranger was not welcomed: {welcome:?}"
    );
    let poisoned_at = Instant::now();
    let batch = v1::Frame {
        body: Some(v1::frame::Body::Batch(v1::Batch {
            seq: POISON,
            first_packet_index: 0,
            packets: Vec::new(),
            clocks: Some(v1::RelayClocks {
                boottime_ns: 1_000_000_000,
                monotonic_ns: 1_000_000_000,
                realtime_ns: 1_000_000_000,
                monotonic_raw_ns: 0,
            }),
        })),
    };
    peer::write_frame(&mut stranger, &batch).expect("Batch");
    let mut acked = 0;
    let mut seen = Vec::new();
    while acked < POISON && poisoned_at.elapsed() < Duration::from_secs(10) {
        match peer::read_frame(&mut stranger) {
            Ok(Some(v1::frame::Body::Ack(ack))) => acked = ack.through_batch,
            Ok(Some(other)) => seen.push(format!("{other:?}")),
            other => {
                seen.push(format!("{other:?}"));
                break;
            }
        }
    }
    drop(stranger);
    signal("-CONT");
    assert_eq!(
        acked, POISON,
        "the daemon did not take the poison: {seen:?}"
    );

    // The real relay: Welcomes of 10^12 rejected, then a new instance.
    wait_for(
        "the relay to continue as a new instance",
        Duration::from_secs(60),
        || {
            let log = relay.log();
            if log.contains("continuing as relay instance") {
                Ok(())
            } else {
                Err(log.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
            }
        },
    );
    let renewed_after = poisoned_at.elapsed();
    let series = "tracesync_relay_instance_renewals_total";
    let mut renewals = 0.0;
    wait_for("the renewal counted", Duration::from_secs(10), || {
        let page = peer::http_get(metrics, "/metrics")?;
        renewals = peer::metric(&page, series).ok_or(format!("no {series}"))?;
        if renewals >= 1.0 {
            Ok(())
        } else {
            Err(format!("{renewals}"))
        }
    });
    daemon.wait_progress(&["victim"], RATE);
    let delivering_after = poisoned_at.elapsed();
    let rejected = relay
        .log()
        .matches(&format!("Welcome acknowledges batch {POISON}"))
        .count();
    let status = relay.stop();
    assert!(status.success(), "relay exit: {status}");
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd exit: {status}");
    let check = check_output(&daemon.output);
    let counts = Counts::of(&check);
    eprintln!(
        "hostile-peers: {TEST}: ack point pushed to {POISON} by a stranger with the instance \
         id; the relay rejected {rejected} Welcomes, continued as a new instance {:.1} s \
         after the poison ({series} {renewals}) and delivered again by {:.1} s; produced {}, \
         written {}, lost {}, duplicated {}",
        renewed_after.as_secs_f64(),
        delivering_after.as_secs_f64(),
        counts.produced,
        counts.written,
        counts.lost,
        counts.duplicated
    );
    assert_eq!(counts.lost, 0, "{counts:?}\n{}", check.summary());
}
