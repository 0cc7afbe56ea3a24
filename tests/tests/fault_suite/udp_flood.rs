//! A flood of junk datagrams at the daemon's sync port
//! (docs/reliability-hostile.md, "A UDP flood at the sync port"): the
//! relay's probes keep their kernel receive stamps and are taken from
//! behind the junk at once, so its bound stays honest during the flood and
//! is back to normal within seconds after. Prints its figures on a
//! `hostile-peers:` line. Traffic goes to loopback only and stops by itself.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracesync_tests::faults;
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts};

const NAME: &str = "probed";

/// (bound now, probe timeouts, probes sent) of the relay, from the status.
fn sync_of(daemon: &Daemon) -> Option<(u64, u64, u64)> {
    let status = daemon.status().ok()?;
    let machine = status["machines"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == NAME)?
        .clone();
    let sync = &machine["sync"];
    Some((
        sync["bound_now_ns"].as_u64()?,
        sync["probes"]["timeouts"].as_u64().unwrap_or(0),
        sync["probes"]["probes_sent"].as_u64().unwrap_or(0),
    ))
}

/// Sends 64-byte junk datagrams to `to` from two sockets as fast as they
/// go until `stop`; counts them.
fn flood(to: std::net::SocketAddr, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let junk = [0x5a_u8; 64];
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..256 {
            if socket.send_to(&junk, to).is_ok() {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[test]
fn a_udp_flood_at_the_sync_port_leaves_the_bound_honest_and_it_recovers_within_seconds() {
    const TEST: &str = "a_udp_flood_at_the_sync_port";
    const FLOOD: Duration = Duration::from_secs(10);
    let _one = faults::one_at_a_time();
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut relay = Relay::start_synced(&daemon, &[NAME.to_owned()], |_, n| {
        RelayOpts::synthetic(n, 200)
    })
    .pop()
    .expect("one relay");
    // The bound before: settled for a few seconds.
    std::thread::sleep(Duration::from_secs(5));
    let (before, timeouts_before, sent_before) = sync_of(&daemon).expect("synced");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..2)
        .map(|_| {
            let (stop, sent, to) = (stop.clone(), sent.clone(), daemon.sync_addr);
            std::thread::spawn(move || flood(to, stop, sent))
        })
        .collect();
    let started = Instant::now();
    let mut worst_during = 0;
    while started.elapsed() < FLOOD {
        std::thread::sleep(Duration::from_millis(250));
        if let Some((bound, _, _)) = sync_of(&daemon) {
            worst_during = worst_during.max(bound);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().expect("flooder");
    }
    let flooded = started.elapsed();
    let rate = sent.load(Ordering::Relaxed) as f64 / flooded.as_secs_f64();
    let (_, timeouts_after, sent_after) = sync_of(&daemon).expect("still synced");
    let ended = Instant::now();
    // Back to normal: within twice the bound before (or 1 ms).
    let normal = (2 * before).max(1_000_000);
    let mut recovered = None;
    let mut last = u64::MAX;
    while ended.elapsed() < Duration::from_secs(30) {
        if let Some((bound, _, _)) = sync_of(&daemon) {
            last = bound;
            if bound <= normal {
                recovered = Some(ended.elapsed());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let probes = sent_after.saturating_sub(sent_before).max(1);
    let timed_out = timeouts_after.saturating_sub(timeouts_before);
    eprintln!(
        "hostile-peers: {TEST}: {:.0} junk datagrams/s for {:.1} s; bound before {:.1} us, \
         worst during {:.1} us; {timed_out} of {probes} probes timed out ({:.1}%); bound back \
         under {:.1} us {} after the flood (last {:.1} us)",
        rate,
        flooded.as_secs_f64(),
        before as f64 / 1e3,
        worst_during as f64 / 1e3,
        100.0 * timed_out as f64 / probes as f64,
        normal as f64 / 1e3,
        recovered.map_or_else(
            || "not within 30 s".to_owned(),
            |d| format!("{:.2} s", d.as_secs_f64())
        ),
        last as f64 / 1e3,
    );
    let recovered = recovered.expect("the bound recovers after the flood");
    assert!(recovered < Duration::from_secs(5), "{recovered:?}");
    assert!(relay.stop().success());
    assert!(daemon.stop().success());
}
