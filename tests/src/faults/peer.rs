//! Hostile peers of the real binaries, hand-driven over blocking sockets:
//! frames of the relay protocol written and read by the test, a fake daemon
//! that lies in Welcome, and what a process costs (`/proc/PID/status`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;
use tracesync_protocol::relay::{PROTOCOL_VERSION, v1};

/// Writes one frame (4-byte big-endian length, then the bytes).
pub fn write_frame(s: &mut impl Write, frame: &v1::Frame) -> std::io::Result<()> {
    let body = frame.encode_to_vec();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    s.write_all(&out)
}

/// Reads one frame; None at EOF (or a torn frame).
pub fn read_frame(s: &mut impl Read) -> std::io::Result<Option<v1::frame::Body>> {
    let mut head = [0u8; 4];
    match s.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > tracesync_protocol::relay::MAX_FRAME_BYTES {
        return Err(std::io::Error::other(format!("{len}-byte frame announced")));
    }
    let mut body = vec![0; len];
    match s.read_exact(&mut body) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let frame = v1::Frame::decode(&body[..]).map_err(std::io::Error::other)?;
    Ok(frame.body)
}

/// Frames until the peer closes (a reset ends the list too).
pub fn frames_until_closed(s: &mut TcpStream, within: Duration) -> Vec<v1::frame::Body> {
    let _ = s.set_read_timeout(Some(within));
    let mut out = Vec::new();
    while let Ok(Some(body)) = read_frame(s) {
        out.push(body);
    }
    out
}

/// The `(code, reason)` of the first Refused among `frames`.
pub fn refused(frames: &[v1::frame::Body]) -> Option<(String, String)> {
    frames.iter().find_map(|f| match f {
        v1::frame::Body::Refused(r) => Some((r.code.clone(), r.reason.clone())),
        _ => None,
    })
}

/// A Hello as a relay would send it.
pub fn hello(token: &str, name: &str, instance: u64, raw_id: u32) -> v1::Frame {
    v1::Frame {
        body: Some(v1::frame::Body::Hello(v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            token: token.into(),
            relay_instance_id: instance,
            boot_id: format!("hostile-boot-{instance:x}"),
            machine_name: name.into(),
            machine_raw_id: raw_id,
            oldest_unacked_batch: 1,
            clocks: None,
            mode: String::new(),
        })),
    }
}

/// What a fake daemon saw.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub connections: u64,
    /// `oldest_unacked_batch` of every Hello, in order.
    pub hellos: Vec<u64>,
    /// Batches received after a Welcome (the relay believed the lie).
    pub batches: u64,
}

/// A TCP listener that answers every Hello with a Welcome acknowledging
/// `acked_through` (a daemon that lies, or anything else on the port).
pub struct FakeDaemon {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
}

impl FakeDaemon {
    pub fn start(acked_through: u64) -> FakeDaemon {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake daemon");
        let addr = listener.local_addr().expect("local addr");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen_in, stop_in) = (seen.clone(), stop.clone());
        let session = Arc::new(AtomicU64::new(1));
        std::thread::spawn(move || {
            while !stop_in.load(Ordering::Relaxed) {
                let stream = match listener.accept() {
                    Ok((stream, _)) => stream,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                let _ = stream.set_nonblocking(false);
                if let Ok(mut seen) = seen_in.lock() {
                    seen.connections += 1;
                }
                let (seen, stop, session) = (seen_in.clone(), stop_in.clone(), session.clone());
                std::thread::spawn(move || {
                    lie_to(stream, acked_through, &seen, &stop, &session);
                });
            }
        });
        FakeDaemon { addr, seen, stop }
    }

    pub fn seen(&self) -> Seen {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn lie_to(
    mut stream: TcpStream,
    acked_through: u64,
    seen: &Mutex<Seen>,
    stop: &AtomicBool,
    session: &AtomicU64,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    while !stop.load(Ordering::Relaxed) {
        let body = match read_frame(&mut stream) {
            Ok(Some(body)) => body,
            Ok(None) => return,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => return,
        };
        match body {
            v1::frame::Body::Hello(h) => {
                if let Ok(mut seen) = seen.lock() {
                    seen.hellos.push(h.oldest_unacked_batch);
                }
                let welcome = v1::Frame {
                    body: Some(v1::frame::Body::Welcome(v1::Welcome {
                        protocol_version: PROTOCOL_VERSION,
                        acked_through_batch: acked_through,
                        session_id: session.fetch_add(1, Ordering::Relaxed),
                        sync_udp_port: 0,
                        probe_key: vec![7u8; 32].into(),
                        takes_windows: false,
                        takes_trigger_requests: false,
                    })),
                };
                if write_frame(&mut stream, &welcome).is_err() {
                    return;
                }
            }
            v1::frame::Body::Batch(_) => {
                if let Ok(mut seen) = seen.lock() {
                    seen.batches += 1;
                }
            }
            _ => {}
        }
    }
}

/// `VmHWM` and `VmRSS` of a process, in KiB (peak and current resident
/// memory).
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// The metrics address a process started with `--metrics-listen
/// 127.0.0.1:0` logged (`metrics: Prometheus text on http://ADDR/metrics`),
/// read from `log` within 30 s. A port picked beforehand and bound later
/// can be taken meanwhile (an ephemeral port of any connection on the box).
pub fn logged_metrics_addr(log: impl Fn() -> String) -> SocketAddr {
    const MARK: &str = "Prometheus text on http://";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = log();
        if let Some(addr) = text
            .split(MARK)
            .nth(1)
            .and_then(|rest| rest.split('/').next()?.parse::<SocketAddr>().ok())
        {
            return addr;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no metrics address logged:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One plain HTTP/1.0 GET; the body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| format!("read {addr}: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP header end in {text:?}"))?;
    if !head.starts_with("HTTP/1.") || !head.contains(" 200") {
        return Err(format!("not 200: {head}"));
    }
    Ok(body.to_owned())
}

/// The value of the series `series` (as rendered, labels included) on a
/// Prometheus text page.
pub fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}
