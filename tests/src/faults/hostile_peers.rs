//! Hostile peers kept present around a cluster under mutual TLS, for as
//! long as a test runs and across every restart of the daemon:
//!
//! - a connection flood: idle TCP connections at a steady rate ([`Flood`]);
//! - a squatter: a valid certificate (`squatter`) whose Hello claims a
//!   victim relay's raw id, again every second; it must never be welcomed;
//! - a liar: a valid certificate (`liar`) whose Hello and Heartbeats say
//!   BOOTTIME = 1 ns while it answers probes truthfully; it reconnects
//!   whenever its session ends, so it stays connected throughout.
//!
//! Each runs on its own thread and stops when [`HostilePeers`] is dropped.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracesync_protocol::probe::ProbeKey;
use tracesync_protocol::relay::{name_bound_raw_id, v1};

use super::flood::Flood;
use super::liar::{LiarStats, answer_probes, lie};
use super::tls_peer::{self, FrameBuffer, send};

/// Names of the hostile certificates (issued by [`HostilePeers::issue`]).
pub const SQUATTER: &str = "squatter";
pub const LIAR: &str = "liar";

/// Who the peers attack and how hard.
#[derive(Clone, Debug)]
pub struct HostileOpts {
    pub data: SocketAddr,
    /// The lab CA's directory (`ca.crt`, `<name>.crt`, `<name>.key`).
    pub ca_dir: PathBuf,
    pub token: String,
    /// The relay whose raw id the squatter claims.
    pub victim: String,
    pub flood_per_second: u64,
}

/// What the peers did so far.
#[derive(Debug, Default)]
pub struct HostileCounts {
    pub squats: AtomicU64,
    pub squats_refused: AtomicU64,
    /// Must stay 0.
    pub squats_welcomed: AtomicU64,
    pub liar_sessions: AtomicU64,
    pub liar: Arc<LiarStats>,
}

/// See the module docs.
pub struct HostilePeers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    flood: Flood,
    pub counts: Arc<HostileCounts>,
}

impl HostilePeers {
    /// Certificates of the lab CA in `ca_dir` for the squatter and the liar.
    pub fn issue(ca_dir: &Path) -> Result<(), String> {
        for name in [SQUATTER, LIAR] {
            tracesync_common::tls::pki::issue(ca_dir, name, None)
                .map_err(|e| format!("issue {name}: {e}"))?;
        }
        Ok(())
    }

    pub fn start(opts: HostileOpts) -> HostilePeers {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(HostileCounts::default());
        let flood = Flood::start(opts.data, opts.flood_per_second, Duration::from_secs(10));
        let mut threads = Vec::new();
        let (o, s, c) = (opts.clone(), stop.clone(), counts.clone());
        threads.push(spawn("squatter", move || squat(&o, &s, &c)));
        let (o, s, c) = (opts, stop.clone(), counts.clone());
        threads.push(spawn("liar", move || lie_on(&o, &s, &c)));
        HostilePeers {
            stop,
            threads,
            flood,
            counts,
        }
    }

    /// One line of figures.
    pub fn summary(&self) -> String {
        let c = &self.counts;
        format!(
            "flood {} connections ({:.0}/s, {} failed); squatter {} claims, {} refused, {} \
             welcomed; liar {} sessions, {} heartbeats, {} probes answered",
            self.flood.opened(),
            self.flood.rate(),
            self.flood.failed(),
            c.squats.load(Ordering::Relaxed),
            c.squats_refused.load(Ordering::Relaxed),
            c.squats_welcomed.load(Ordering::Relaxed),
            c.liar_sessions.load(Ordering::Relaxed),
            c.liar.heartbeats.load(Ordering::Relaxed),
            c.liar.probes_answered.load(Ordering::Relaxed),
        )
    }
}

impl Drop for HostilePeers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .unwrap_or_else(|e| panic!("spawn {name}: {e}"))
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn hello(opts: &HostileOpts, name: &str, raw_id: u32, clock_ns: Option<u64>) -> v1::Hello {
    v1::Hello {
        token: opts.token.clone(),
        relay_instance_id: u64::from(raw_id) << 16 | 0x5157,
        boot_id: boot_id(),
        machine_name: name.into(),
        machine_raw_id: raw_id,
        oldest_unacked_batch: 1,
        clocks: clock_ns.map(lie),
        ..v1::Hello::default()
    }
}

/// Claims the victim's raw id with the squatter's certificate every second.
fn squat(opts: &HostileOpts, stop: &AtomicBool, counts: &HostileCounts) {
    let victim_raw_id = name_bound_raw_id(&boot_id(), &opts.victim);
    while !stop.load(Ordering::Relaxed) {
        let attempt = || -> io::Result<v1::frame::Body> {
            let hello = hello(opts, SQUATTER, victim_raw_id, None);
            let ca = opts.ca_dir.join("ca.crt");
            tls_peer::hello(opts.data, &ca, &opts.ca_dir, SQUATTER, hello).map(|(a, _)| a)
        };
        counts.squats.fetch_add(1, Ordering::Relaxed);
        match attempt() {
            Ok(v1::frame::Body::Welcome(_)) => {
                counts.squats_welcomed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(v1::frame::Body::Refused(_)) => {
                counts.squats_refused.fetch_add(1, Ordering::Relaxed);
            }
            // The daemon down (killed by the test) or busy: try again.
            _ => {}
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// One liar session after another until stopped.
fn lie_on(opts: &HostileOpts, stop: &AtomicBool, counts: &HostileCounts) {
    while !stop.load(Ordering::Relaxed) {
        if liar_session(opts, stop, counts).is_err() {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Hello with the lie, then a heartbeat with it every 250 ms and probes
/// answered truthfully on another thread, until the session ends.
fn liar_session(opts: &HostileOpts, stop: &AtomicBool, counts: &HostileCounts) -> io::Result<()> {
    const HEARTBEAT_EVERY: Duration = Duration::from_millis(250);
    let raw_id = name_bound_raw_id(&boot_id(), LIAR);
    let ca = opts.ca_dir.join("ca.crt");
    let (answer, mut tls) = tls_peer::hello(
        opts.data,
        &ca,
        &opts.ca_dir,
        LIAR,
        hello(opts, LIAR, raw_id, Some(1)),
    )?;
    let v1::frame::Body::Welcome(welcome) = answer else {
        return Err(io::Error::other("the liar was not welcomed"));
    };
    counts.liar_sessions.fetch_add(1, Ordering::Relaxed);
    let key = ProbeKey::new(&welcome.probe_key)
        .ok_or_else(|| io::Error::other("Welcome without a probe key"))?;
    let sync = SocketAddr::new(
        opts.data.ip(),
        u16::try_from(welcome.sync_udp_port).unwrap_or(0),
    );
    let socket = UdpSocket::bind((opts.data.ip(), 0))?;
    socket.set_read_timeout(Some(Duration::from_millis(100)))?;
    let session_over = Arc::new(AtomicBool::new(false));
    let (over, stats) = (session_over.clone(), counts.liar.clone());
    let prober = spawn("liar-probes", move || {
        answer_probes(&socket, sync, &key, welcome.session_id, &over, &stats);
    });
    tls.sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut frames = FrameBuffer::default();
    let mut next_heartbeat = Instant::now();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        if Instant::now() >= next_heartbeat {
            let heartbeat = v1::frame::Body::Heartbeat(v1::Heartbeat {
                clocks: Some(lie(1)),
                last_batch_sent: 0,
                sources: Vec::new(),
                ring: None,
            });
            if let Err(e) = send(&mut tls, heartbeat) {
                break Err(e);
            }
            counts.liar.heartbeats.fetch_add(1, Ordering::Relaxed);
            next_heartbeat = Instant::now() + HEARTBEAT_EVERY;
        }
        // Acks and the like are read and dropped; a Refused or EOF ends it.
        match frames.next(&mut tls) {
            Ok(Some(v1::Frame {
                body: Some(v1::frame::Body::Refused(r)),
            })) => break Err(io::Error::other(format!("refused: {}", r.code))),
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    session_over.store(true, Ordering::Relaxed);
    let _ = prober.join();
    result
}
