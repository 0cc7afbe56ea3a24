//! The forwarding side of `tracesync-impair`: UDP (the sync port) and TCP
//! (the data port) from a listen address to an upstream address, each
//! direction through its own seeded [`DirectionModel`].
//!
//! - UDP: one upstream socket per client address (so the upstream sees a
//!   distinct peer per client, like a NAT), every datagram released at its
//!   own deadline by the [`Scheduler`]: loss and reordering apply.
//! - TCP: per connection and direction a reader and a writer thread; each
//!   chunk read gets a delay, and its deadline is never earlier than the
//!   previous chunk's, so a stream is delayed but never reordered.
//!
//! "up" is client -> upstream (relay -> daemon), "down" the reverse.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use super::model::{Carrier, DirectionModel, Fate, Profile, Rng};
use super::sched::{Scheduler, now_ns};

const POLL: Duration = Duration::from_millis(100);

/// Counters of one direction of one protocol.
#[derive(Debug, Default)]
pub struct DirStats {
    pub units: AtomicU64,
    pub bytes: AtomicU64,
    pub lost: AtomicU64,
    /// Sum of modelled delays (ns), for the mean.
    pub delay_ns: AtomicU64,
}

impl DirStats {
    fn count(&self, bytes: usize, fate: Fate) {
        self.units.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        match fate {
            Fate::Lost => {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
            Fate::Deliver(d) => {
                self.delay_ns.fetch_add(d, Ordering::Relaxed);
            }
        }
    }

    fn json(&self) -> serde_json::Value {
        let units = self.units.load(Ordering::Relaxed);
        let lost = self.lost.load(Ordering::Relaxed);
        let delivered = units - lost;
        serde_json::json!({
            "units": units,
            "bytes": self.bytes.load(Ordering::Relaxed),
            "lost": lost,
            "mean_delay_ns": self.delay_ns.load(Ordering::Relaxed) / delivered.max(1),
        })
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    pub udp_up: DirStats,
    pub udp_down: DirStats,
    pub tcp_up: DirStats,
    pub tcp_down: DirStats,
    pub udp_clients: AtomicU64,
    pub tcp_connections: AtomicU64,
}

#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub profile: Profile,
    pub seed: u64,
    /// (listen, upstream) pairs.
    pub udp: Vec<(SocketAddr, SocketAddr)>,
    pub tcp: Vec<(SocketAddr, SocketAddr)>,
}

/// A running proxy. Dropping it (or [`Proxy::stop`]) stops accepting and
/// receiving; open TCP connections end when their peers close them.
pub struct Proxy {
    pub config: ProxyConfig,
    pub udp_addrs: Vec<SocketAddr>,
    pub tcp_addrs: Vec<SocketAddr>,
    sched: Scheduler,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Stream tags for [`Rng::derive`].
const TAG_UDP: u64 = 1;
const TAG_TCP: u64 = 2;
const TAG_UP: u64 = 1;
const TAG_DOWN: u64 = 2;

impl Proxy {
    pub fn start(config: ProxyConfig) -> io::Result<Proxy> {
        let (sched, sched_thread) = Scheduler::start();
        let mut p = Proxy {
            config: config.clone(),
            udp_addrs: Vec::new(),
            tcp_addrs: Vec::new(),
            sched,
            stats: Arc::new(Stats::default()),
            stop: Arc::new(AtomicBool::new(false)),
            threads: vec![sched_thread],
        };
        for (i, (listen, upstream)) in config.udp.iter().enumerate() {
            let socket = UdpSocket::bind(listen)?;
            socket.set_read_timeout(Some(POLL))?;
            p.udp_addrs.push(socket.local_addr()?);
            let ctx = p.context(i as u64);
            let upstream = *upstream;
            p.threads.push(spawn("impair-udp", move || {
                udp_listen(socket, upstream, ctx);
            })?);
        }
        for (i, (listen, upstream)) in config.tcp.iter().enumerate() {
            let listener = TcpListener::bind(listen)?;
            listener.set_nonblocking(true)?;
            p.tcp_addrs.push(listener.local_addr()?);
            let ctx = p.context(i as u64);
            let upstream = *upstream;
            p.threads.push(spawn("impair-tcp", move || {
                tcp_listen(listener, upstream, ctx);
            })?);
        }
        Ok(p)
    }

    fn context(&self, index: u64) -> Ctx {
        Ctx {
            profile: self.config.profile,
            seed: self.config.seed,
            index,
            sched: self.sched.clone(),
            stats: Arc::clone(&self.stats),
            stop: Arc::clone(&self.stop),
        }
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counters and the release thread's lateness, as JSON.
    pub fn stats_json(&self) -> serde_json::Value {
        let s = &self.stats;
        let l = self.sched.lateness();
        let (p50, p99, p999, max) = l.summary();
        serde_json::json!({
            "profile": self.config.profile.name,
            "seed": self.config.seed,
            "udp_clients": s.udp_clients.load(Ordering::Relaxed),
            "tcp_connections": s.tcp_connections.load(Ordering::Relaxed),
            "udp_up": s.udp_up.json(),
            "udp_down": s.udp_down.json(),
            "tcp_up": s.tcp_up.json(),
            "tcp_down": s.tcp_down.json(),
            "release_late_ns": {
                "count": l.count, "p50": p50, "p99": p99, "p999": p999, "max": max,
            },
        })
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.sched.stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name.into()).spawn(f)
}

#[derive(Clone)]
struct Ctx {
    profile: Profile,
    seed: u64,
    index: u64,
    sched: Scheduler,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn rng(&self, proto: u64, peer: u64, dir: u64) -> Rng {
        Rng::derive(self.seed, &[proto, self.index, peer, dir])
    }
}

fn unspecified_like(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    }
}

struct UdpClient {
    upstream: Arc<UdpSocket>,
    rng: Rng,
}

fn udp_listen(socket: UdpSocket, upstream: SocketAddr, ctx: Ctx) {
    let socket = Arc::new(socket);
    let mut clients: HashMap<SocketAddr, UdpClient> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    while !ctx.stopped() {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => continue, // ICMP errors of earlier sends and the like
        };
        let now = now_ns();
        if !clients.contains_key(&from) {
            match udp_client(&socket, from, upstream, clients.len() as u64, &ctx) {
                Ok(c) => {
                    clients.insert(from, c);
                }
                Err(e) => {
                    eprintln!("tracesync-impair: udp client {from}: {e}");
                    continue;
                }
            }
        }
        let Some(client) = clients.get_mut(&from) else {
            continue;
        };
        let fate = ctx.profile.up.draw(&mut client.rng, Carrier::Datagram);
        ctx.stats.udp_up.count(n, fate);
        if let Fate::Deliver(delay) = fate {
            let up = Arc::clone(&client.upstream);
            let bytes = buf[..n].to_vec();
            ctx.sched.at(now + delay, move || {
                let _ = up.send(&bytes);
            });
        }
    }
}

/// A new client: its own upstream socket and the thread taking replies back.
fn udp_client(
    listen: &Arc<UdpSocket>,
    client: SocketAddr,
    upstream: SocketAddr,
    k: u64,
    ctx: &Ctx,
) -> io::Result<UdpClient> {
    let up = UdpSocket::bind(unspecified_like(upstream))?;
    up.connect(upstream)?;
    up.set_read_timeout(Some(POLL))?;
    let up = Arc::new(up);
    ctx.stats.udp_clients.fetch_add(1, Ordering::Relaxed);
    let (reader, listen, c) = (Arc::clone(&up), Arc::clone(listen), ctx.clone());
    let mut rng = ctx.rng(TAG_UDP, k, TAG_DOWN);
    let down: DirectionModel = ctx.profile.down;
    spawn("impair-udp-down", move || {
        let mut buf = vec![0u8; 65_536];
        while !c.stopped() {
            let n = match reader.recv(&mut buf) {
                Ok(n) => n,
                Err(_) => continue,
            };
            let now = now_ns();
            let fate = down.draw(&mut rng, Carrier::Datagram);
            c.stats.udp_down.count(n, fate);
            if let Fate::Deliver(delay) = fate {
                let (listen, bytes) = (Arc::clone(&listen), buf[..n].to_vec());
                c.sched.at(now + delay, move || {
                    let _ = listen.send_to(&bytes, client);
                });
            }
        }
    })?;
    Ok(UdpClient {
        upstream: up,
        rng: ctx.rng(TAG_UDP, k, TAG_UP),
    })
}

fn tcp_listen(listener: TcpListener, upstream: SocketAddr, ctx: Ctx) {
    let mut k = 0u64;
    while !ctx.stopped() {
        let client = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(_) => continue,
        };
        let server = match TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tracesync-impair: tcp upstream {upstream}: {e}");
                continue; // dropping `client` closes it
            }
        };
        ctx.stats.tcp_connections.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = tcp_pair(client, server, k, &ctx) {
            eprintln!("tracesync-impair: tcp connection: {e}");
        }
        k += 1;
    }
}

fn tcp_pair(client: TcpStream, server: TcpStream, k: u64, ctx: &Ctx) -> io::Result<()> {
    client.set_nonblocking(false)?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
    }
    let up = Pipe {
        model: ctx.profile.up,
        rng: ctx.rng(TAG_TCP, k, TAG_UP),
        stats: Arc::clone(&ctx.stats),
        up: true,
    };
    let down = Pipe {
        model: ctx.profile.down,
        rng: ctx.rng(TAG_TCP, k, TAG_DOWN),
        stats: Arc::clone(&ctx.stats),
        up: false,
    };
    up.run(client.try_clone()?, server.try_clone()?)?;
    down.run(server, client)?;
    Ok(())
}

/// One direction of one TCP connection.
struct Pipe {
    model: DirectionModel,
    rng: Rng,
    stats: Arc<Stats>,
    up: bool,
}

impl Pipe {
    fn run(mut self, mut from: TcpStream, mut to: TcpStream) -> io::Result<()> {
        let (tx, rx) = mpsc::channel::<(u64, Vec<u8>)>();
        let from_again = from.try_clone()?;
        spawn("impair-tcp-read", move || {
            let mut buf = vec![0u8; 65_536];
            let mut last = 0u64;
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let now = now_ns();
                let fate = self.model.draw(&mut self.rng, Carrier::Stream);
                let stats = if self.up {
                    &self.stats.tcp_up
                } else {
                    &self.stats.tcp_down
                };
                stats.count(n, fate);
                let delay = match fate {
                    Fate::Deliver(d) => d,
                    Fate::Lost => 0, // streams never lose
                };
                // Never before the previous chunk: order is kept.
                last = last.max(now + delay);
                if tx.send((last, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        })?;
        spawn("impair-tcp-write", move || {
            let _ = nix::sys::prctl::set_timerslack(1);
            for (deadline, bytes) in rx {
                let now = now_ns();
                if deadline > now {
                    std::thread::sleep(Duration::from_nanos(deadline - now));
                }
                if to.write_all(&bytes).is_err() {
                    let _ = from_again.shutdown(Shutdown::Both);
                    return;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::impair::model::{Queueing, profile};

    fn local() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    fn with_models(up: DirectionModel, down: DirectionModel) -> Profile {
        Profile {
            name: "test",
            up,
            down,
            tcp_only: false,
        }
    }

    #[test]
    fn tcp_keeps_order_under_heavy_jitter_and_echoes_back() {
        let server = TcpListener::bind(local()).unwrap();
        let server_addr = server.local_addr().unwrap();
        // An echo server.
        std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            let mut r = s.try_clone().unwrap();
            let _ = std::io::copy(&mut r, &mut s);
        });
        let jittery = DirectionModel::queued(200_000, Queueing::Exp { mean_ns: 2e6 });
        let proxy = Proxy::start(ProxyConfig {
            profile: with_models(jittery, jittery),
            seed: 5,
            udp: vec![],
            tcp: vec![(local(), server_addr)],
        })
        .unwrap();
        let mut c = TcpStream::connect(proxy.tcp_addrs[0]).unwrap();
        let sent: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = c.try_clone().unwrap();
        let to_send = sent.clone();
        let writer = std::thread::spawn(move || {
            for chunk in to_send.chunks(97) {
                w.write_all(chunk).unwrap();
                std::thread::sleep(Duration::from_micros(50));
            }
            w.shutdown(Shutdown::Write).unwrap();
        });
        let start = now_ns();
        let mut got = Vec::new();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        c.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "bytes reordered or changed");
        // Both ways delayed at least by their bases.
        assert!(now_ns() - start >= 400_000);
        assert!(proxy.stats().tcp_up.units.load(Ordering::Relaxed) > 1);
        assert_eq!(proxy.stats().tcp_up.lost.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn udp_round_trip_is_delayed_by_both_bases_and_can_reorder() {
        let server = UdpSocket::bind(local()).unwrap();
        let server_addr = server.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok((n, from)) = server.recv_from(&mut buf) {
                let _ = server.send_to(&buf[..n], from);
            }
        });
        let up = DirectionModel {
            reorder_p: 0.3,
            reorder_ns: 3_000_000,
            ..DirectionModel::queued(1_000_000, Queueing::None)
        };
        let down = DirectionModel::queued(2_000_000, Queueing::None);
        let proxy = Proxy::start(ProxyConfig {
            profile: with_models(up, down),
            seed: 9,
            udp: vec![(local(), server_addr)],
            tcp: vec![],
        })
        .unwrap();
        let c = UdpSocket::bind(local()).unwrap();
        c.connect(proxy.udp_addrs[0]).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let start = now_ns();
        let mut sent_at = Vec::new();
        for i in 0..50u32 {
            sent_at.push(now_ns());
            c.send(&i.to_le_bytes()).unwrap();
            std::thread::sleep(Duration::from_micros(200));
        }
        let mut order = Vec::new();
        let mut buf = [0u8; 64];
        for _ in 0..50 {
            let n = c.recv(&mut buf).unwrap();
            let i = u32::from_le_bytes(buf[..n].try_into().unwrap());
            let rtt = now_ns() - sent_at[i as usize];
            assert!(rtt >= 3_000_000, "datagram {i}: round trip {rtt} ns");
            order.push(i);
        }
        assert!(now_ns() - start < 5_000_000_000);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>(), "none lost");
        assert_ne!(order, sorted, "some reordered");
        let l = proxy.sched.lateness();
        assert_eq!(l.count, 100);
    }

    #[test]
    fn every_named_profile_starts() {
        for name in crate::impair::model::profile_names() {
            let p = Proxy::start(ProxyConfig {
                profile: profile(name).unwrap(),
                seed: 1,
                udp: vec![(local(), local())],
                tcp: vec![(local(), local())],
            })
            .unwrap();
            assert_eq!(p.stats_json()["profile"], name);
        }
    }
}
