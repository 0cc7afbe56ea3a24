//! A connection flood: one thread opening TCP connections to a target at a
//! steady rate, sending nothing (no TLS, no bytes) or a few bytes, and
//! holding each until it is `hold` old (the daemon may close it first).
//! What an attacker with one process and no credentials can do to a
//! daemon's data port.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// See the module docs. Stops (and closes what it holds) on drop.
pub struct Flood {
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    started: Instant,
    thread: Option<JoinHandle<()>>,
}

impl Flood {
    /// Opens `per_second` connections a second to `target`, sending nothing.
    pub fn start(target: SocketAddr, per_second: u64, hold: Duration) -> Flood {
        Self::sending(target, per_second, hold, Vec::new())
    }

    /// The same, each connection sending `payload` first.
    pub fn sending(target: SocketAddr, per_second: u64, hold: Duration, payload: Vec<u8>) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (s, o, f) = (stop.clone(), opened.clone(), failed.clone());
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("flood".into())
            .spawn(move || flood(target, per_second, hold, &payload, &s, &o, &f))
            .expect("spawn the flood thread");
        Flood {
            stop,
            opened,
            failed,
            started,
            thread: Some(thread),
        }
    }

    /// Connections opened so far.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Connection attempts that failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Connections opened per second since the start.
    pub fn rate(&self) -> f64 {
        self.opened() as f64 / self.started.elapsed().as_secs_f64().max(1e-9)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn flood(
    target: SocketAddr,
    per_second: u64,
    hold: Duration,
    payload: &[u8],
    stop: &AtomicBool,
    opened: &AtomicU64,
    failed: &AtomicU64,
) {
    let started = Instant::now();
    let mut held: VecDeque<(Instant, TcpStream)> = VecDeque::new();
    let mut attempts = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while held
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= hold)
        {
            held.pop_front();
        }
        let due = (now.duration_since(started).as_secs_f64() * per_second as f64) as u64;
        // Behind by more than a second (connects blocked): do not burst.
        attempts = attempts.max(due.saturating_sub(per_second));
        if attempts >= due {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        attempts += 1;
        match TcpStream::connect_timeout(&target, Duration::from_secs(1)) {
            Ok(mut s) => {
                opened.fetch_add(1, Ordering::Relaxed);
                if !payload.is_empty() {
                    let _ = s.write_all(payload);
                }
                held.push_back((now, s));
            }
            Err(_) => {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
