//! The probe channel with the real `tracesyncd` and `tracesync-relay`:
//! the per-session key travels in Welcome and the relay syncs over its own
//! TCP connection to the sync port, chosen explicitly (`--sync-transport
//! tcp`) or by `auto` when only TCP passes (as over `adb reverse`).
//! relay/tests/probe_channel.rs covers forged and replayed packets.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, process};

const OFFSET_NS: i64 = 3_000_000_000;
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// The relay's estimated offset is its simulated one, within the reported
/// bound (plus slack for the simulated clock's own reads).
fn assert_synced(status: &serde_json::Value, name: &str) {
    let machine = process::machine(status, name).expect("machine in status");
    let offset = machine["offset_ns"].as_i64().expect("offset_ns");
    let bound = machine["error_bound_ns"].as_u64().expect("error_bound_ns");
    let error = (offset - OFFSET_NS).unsigned_abs();
    eprintln!("{name}: offset {offset} ns, error {error} ns, bound {bound} ns");
    assert!(
        error <= bound.max(200_000),
        "{name}: offset {offset} ns is {error} ns off, bound {bound} ns"
    );
}

fn sync_stats(status: &serde_json::Value) -> &serde_json::Value {
    &status["sync"]
}

fn relay_opts(name: &str, extra: &[&str]) -> RelayOpts {
    RelayOpts {
        clock_offset_ns: Some(OFFSET_NS),
        extra_args: extra.iter().map(|s| (*s).to_owned()).collect(),
        ..RelayOpts::synthetic(name, 200)
    }
}

#[test]
fn tcp_transport_syncs_a_relay() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut relay = Relay::start(
        &daemon,
        relay_opts("tcp-probe", &["--sync-transport", "tcp"]),
    );
    let status = daemon.wait_status("tcp-probe synced over TCP", SYNC_TIMEOUT, |s| {
        process::machine(s, "tcp-probe").is_some_and(|m| m["error_bound_ns"].is_u64())
            && sync_stats(s)["replies_accepted"].as_u64() >= Some(12)
    });
    assert_synced(&status, "tcp-probe");
    let sync = sync_stats(&status);
    assert!(sync["tcp_connections"].as_u64() >= Some(1), "{sync}");
    assert_eq!(sync["bad_mac"], 0, "{sync}");
    assert_eq!(sync["malformed"], 0, "{sync}");
    assert_eq!(sync["nonce_mismatch"], 0, "{sync}");
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
    assert_eq!(daemon.stop().code(), Some(0), "{}", daemon.log());
}

/// A TCP-only link in front of the daemon (what `adb reverse` gives a
/// phone): TCP to `ip:port` is piped to the daemon's `127.0.0.1:port`, for
/// the data and the sync port; UDP to `ip` reaches nothing.
struct TcpOnlyLink {
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    threads: Vec<JoinHandle<()>>,
}

impl TcpOnlyLink {
    fn start(ip: &str, targets: &[SocketAddr]) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for target in targets {
            let listener = TcpListener::bind((ip, target.port()))?;
            listener.set_nonblocking(true)?;
            let (stop, streams, target) = (stop.clone(), streams.clone(), *target);
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((inbound, _)) => pipe(inbound, target, &streams),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(_) => return,
                    }
                }
            }));
        }
        Ok(Self {
            stop,
            streams,
            threads,
        })
    }
}

fn pipe(inbound: TcpStream, target: SocketAddr, streams: &Mutex<Vec<TcpStream>>) {
    let Ok(outbound) = TcpStream::connect(target) else {
        return;
    };
    let _ = inbound.set_nonblocking(false);
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (Ok(in2), Ok(out2)) = (inbound.try_clone(), outbound.try_clone()) else {
        return;
    };
    if let (Ok(in3), Ok(out3), Ok(mut list)) =
        (inbound.try_clone(), outbound.try_clone(), streams.lock())
    {
        list.push(in3);
        list.push(out3);
    }
    for (mut from, mut to) in [(inbound, outbound), (out2, in2)] {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(std::net::Shutdown::Both);
        });
    }
}

impl Drop for TcpOnlyLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(list) = self.streams.lock() {
            for s in list.iter() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn auto_falls_back_to_tcp_when_only_tcp_passes() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    // 127.0.0.2 is loopback too, but the daemon's UDP sync socket is bound
    // to 127.0.0.1 only, so the relay's datagrams to 127.0.0.2 go nowhere.
    let front = "127.0.0.2";
    let link = match TcpOnlyLink::start(front, &[daemon.data_addr, daemon.sync_addr]) {
        Ok(link) => link,
        Err(e) => {
            eprintln!("skipped: cannot listen on {front} ({e}); this test needs 127.0.0.0/8 on lo");
            return;
        }
    };
    let host = SocketAddr::new(front.parse().expect("ip"), daemon.data_addr.port());
    let mut relay = Relay::start_to(host, &daemon.token, relay_opts("adb-phone", &[]));
    let status = daemon.wait_status("adb-phone synced over TCP", SYNC_TIMEOUT, |s| {
        process::machine(s, "adb-phone").is_some_and(|m| m["error_bound_ns"].is_u64())
            && sync_stats(s)["replies_accepted"].as_u64() >= Some(12)
    });
    assert_synced(&status, "adb-phone");
    let sync = sync_stats(&status);
    assert!(sync["tcp_connections"].as_u64() >= Some(1), "{sync}");
    assert_eq!(sync["bad_mac"], 0, "{sync}");
    assert!(
        relay.log().contains("trying TCP"),
        "the relay says it fell back:\n{}",
        relay.log()
    );
    assert_eq!(relay.stop().code(), Some(0), "{}", relay.log());
    drop(link);
    assert_eq!(daemon.stop().code(), Some(0), "{}", daemon.log());
}
