//! A fake relay that lies about its clock: it connects to a plaintext
//! daemon (`--tls off`) over a real TCP socket, says Hello, answers the
//! daemon's clock-sync probes truthfully (so the daemon has a sync estimate
//! for it, as it would for any relay), and sends a Heartbeat every 250 ms
//! whose clocks all say the same fixed value (BOOTTIME = 1 ns), with the
//! same value in its Hello. It sends no packets.
//!
//! Written with the protocol crate's message types on blocking std
//! sockets, one thread for the heartbeats, one reading the daemon's frames
//! and one answering probes over UDP.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracesync_common::clock::{Clock, SystemClock};
use tracesync_protocol::probe::{self, ProbeKey};
use tracesync_protocol::relay::v1::{
    self, ProbeRegister, ProbeReply, frame::Body, probe_body::Kind,
};
use tracesync_protocol::relay::{MAX_PROBE_DATAGRAM_BYTES, PROTOCOL_VERSION};

use super::peer::{read_frame, write_frame};

/// Heartbeat spacing (a real relay's idle heartbeat).
const HEARTBEAT_EVERY: Duration = Duration::from_millis(250);

/// What the liar says and who it is.
#[derive(Clone, Debug)]
pub struct LiarOpts {
    pub name: String,
    pub raw_id: u32,
    pub instance: u64,
    /// Every clock of its Hello and Heartbeats (ns).
    pub clock_ns: u64,
}

/// What it did so far.
#[derive(Debug, Default)]
pub struct LiarStats {
    pub heartbeats: AtomicU64,
    pub probes_answered: AtomicU64,
}

/// A running liar; stops when dropped.
pub struct LyingRelay {
    stop: Arc<AtomicBool>,
    stream: TcpStream,
    threads: Vec<JoinHandle<()>>,
    pub stats: Arc<LiarStats>,
    /// Welcome.session_id.
    pub session_id: u64,
}

pub(crate) fn lie(clock_ns: u64) -> v1::RelayClocks {
    v1::RelayClocks {
        boottime_ns: clock_ns,
        monotonic_ns: clock_ns,
        realtime_ns: clock_ns,
        monotonic_raw_ns: clock_ns,
    }
}

impl LyingRelay {
    /// Connects to the daemon's data address `data` with `token`, waits for
    /// Welcome, and starts lying.
    pub fn start(data: SocketAddr, token: &str, opts: LiarOpts) -> io::Result<Self> {
        let mut stream = TcpStream::connect(data)?;
        stream.set_nodelay(true)?;
        let hello = Body::Hello(v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            token: token.to_owned(),
            relay_instance_id: opts.instance,
            boot_id: format!("liar-boot-{:x}", opts.instance),
            machine_name: opts.name.clone(),
            machine_raw_id: opts.raw_id,
            oldest_unacked_batch: 1,
            clocks: Some(lie(opts.clock_ns)),
            mode: String::new(),
        });
        write_frame(&mut stream, &v1::Frame { body: Some(hello) })?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        let welcome = match read_frame(&mut stream)? {
            Some(Body::Welcome(w)) => w,
            other => return Err(io::Error::other(format!("expected Welcome, got {other:?}"))),
        };
        stream.set_read_timeout(None)?;
        let key = ProbeKey::new(&welcome.probe_key)
            .ok_or_else(|| io::Error::other("Welcome without a probe key"))?;
        let sync = SocketAddr::new(data.ip(), u16::try_from(welcome.sync_udp_port).unwrap_or(0));
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(LiarStats::default());
        let mut threads = Vec::new();

        // Heartbeats with the lie.
        let (mut writer, flag, counts) = (stream.try_clone()?, stop.clone(), stats.clone());
        threads.push(std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let heartbeat = Body::Heartbeat(v1::Heartbeat {
                    clocks: Some(lie(opts.clock_ns)),
                    last_batch_sent: 0,
                    sources: Vec::new(),
                    ring: None,
                });
                if write_frame(
                    &mut writer,
                    &v1::Frame {
                        body: Some(heartbeat),
                    },
                )
                .is_err()
                {
                    return;
                }
                counts.heartbeats.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(HEARTBEAT_EVERY);
            }
        }));

        // The daemon's frames (acks, a Refused), read and dropped.
        let mut reader = stream.try_clone()?;
        threads.push(std::thread::spawn(move || {
            while let Ok(Some(_)) = read_frame(&mut reader) {}
        }));

        // Probes answered with the true clock.
        let socket = UdpSocket::bind((data.ip(), 0))?;
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        let (flag, counts, session) = (stop.clone(), stats.clone(), welcome.session_id);
        threads.push(std::thread::spawn(move || {
            answer_probes(&socket, sync, &key, session, &flag, &counts);
        }));
        Ok(Self {
            stop,
            stream,
            threads,
            stats,
            session_id: welcome.session_id,
        })
    }

    pub fn heartbeats(&self) -> u64 {
        self.stats.heartbeats.load(Ordering::Relaxed)
    }

    pub fn probes_answered(&self) -> u64 {
        self.stats.probes_answered.load(Ordering::Relaxed)
    }
}

/// Registers the UDP address (every second until probed, then every 10 s,
/// as a relay does) and answers every probe with host BOOTTIME as t2/t3.
pub(crate) fn answer_probes(
    socket: &UdpSocket,
    daemon: SocketAddr,
    key: &ProbeKey,
    session: u64,
    stop: &AtomicBool,
    stats: &LiarStats,
) {
    let clock = SystemClock::new();
    let mut nonce = 0;
    let mut next_register = Instant::now();
    let mut probed = false;
    let mut buffer = [0u8; MAX_PROBE_DATAGRAM_BYTES + 1];
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next_register {
            nonce += 1;
            let register = probe::seal(key, session, Kind::Register(ProbeRegister { nonce }));
            let _ = socket.send_to(&register, daemon);
            let every = if probed { 10 } else { 1 };
            next_register = Instant::now() + Duration::from_secs(every);
        }
        let Ok((len, from)) = socket.recv_from(&mut buffer) else {
            continue;
        };
        let t2 = clock.boottime();
        let Ok(datagram) = probe::envelope(&buffer[..len]) else {
            continue;
        };
        let Ok(Kind::Probe(p)) = probe::open(key, &datagram) else {
            continue;
        };
        let now = clock.now();
        let reply = probe::seal(
            key,
            session,
            Kind::Reply(ProbeReply {
                nonce: p.nonce,
                t2_ns: t2,
                t3_ns: now.boottime,
                boottime_minus_monotonic_ns: now.suspend_offset(),
            }),
        );
        if socket.send_to(&reply, from).is_ok() {
            probed = true;
            stats.probes_answered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for LyingRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.stream.shutdown(Shutdown::Both);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
