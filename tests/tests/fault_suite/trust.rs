//! Identity and trust (docs/reliability-hostile.md, "A lie after a relay
//! restart"): what a relay believes of a daemon across its own restarts.
//! Each prints its figures on a `hostile-peers:` line.

use std::net::TcpListener;
use std::time::{Duration, Instant};

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
