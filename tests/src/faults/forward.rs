//! A userspace TCP hop between relays and the daemon, for partitions
//! without iptables or network namespaces: [`Forwarder::partition`] stops
//! moving bytes both ways (connections stay open, buffers fill, nothing is
//! refused: a silent network), [`Forwarder::heal`] resumes them, and
//! [`Forwarder::cut`] resets every connection (a middlebox dropping state).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const POLL: Duration = Duration::from_millis(20);

#[derive(Default)]
struct Shared {
    paused: AtomicBool,
    stop: AtomicBool,
    /// Both ends of every connection, for `cut`.
    conns: Mutex<Vec<TcpStream>>,
    accepted: AtomicU64,
}

/// See the module docs. Stops (and resets its connections) on drop.
pub struct Forwarder {
    /// Where relays connect.
    pub addr: SocketAddr,
    pub target: SocketAddr,
    shared: Arc<Shared>,
}

impl Forwarder {
    /// Listens on a free loopback port and forwards to `target`.
    pub fn start(target: SocketAddr) -> io::Result<Forwarder> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::spawn(move || accept_loop(&listener, target, &s));
        Ok(Forwarder {
            addr,
            target,
            shared,
        })
    }

    /// Stops moving bytes (both ways, every connection, new ones too).
    pub fn partition(&self) {
        self.shared.paused.store(true, Ordering::SeqCst);
    }

    /// Moves bytes again.
    pub fn heal(&self) {
        self.shared.paused.store(false, Ordering::SeqCst);
    }

    /// Resets every connection open now.
    pub fn cut(&self) {
        let conns = std::mem::take(&mut *lock(&self.shared.conns));
        for c in conns {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.cut();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn accept_loop(listener: &TcpListener, target: SocketAddr, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                if let Err(e) = connect_pair(client, target, shared) {
                    // The daemon is down: the relay sees its connection
                    // close, as it would without the hop.
                    let _ = e;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

fn connect_pair(client: TcpStream, target: SocketAddr, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&target, Duration::from_secs(2))?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(POLL))?;
        s.set_write_timeout(Some(POLL))?;
    }
    {
        let mut conns = lock(&shared.conns);
        conns.retain(|c| c.peer_addr().is_ok());
        conns.push(client.try_clone()?);
        conns.push(server.try_clone()?);
    }
    let (c2, s2) = (client.try_clone()?, server.try_clone()?);
    let (sh1, sh2) = (shared.clone(), shared.clone());
    std::thread::spawn(move || pump(client, server, &sh1));
    std::thread::spawn(move || pump(s2, c2, &sh2));
    Ok(())
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Copies `from` to `to` while not paused; ends both on EOF or error.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buf = vec![0u8; 64 << 10];
    'outer: while !shared.stop.load(Ordering::SeqCst) {
        if shared.paused.load(Ordering::SeqCst) {
            std::thread::sleep(POLL);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if timed_out(&e) => continue,
            Err(_) => break,
        };
        let mut done = 0;
        while done < n {
            if shared.stop.load(Ordering::SeqCst) {
                break 'outer;
            }
            if shared.paused.load(Ordering::SeqCst) {
                std::thread::sleep(POLL);
                continue;
            }
            match to.write(&buf[done..n]) {
                Ok(0) => break 'outer,
                Ok(k) => done += k,
                Err(e) if timed_out(&e) => {}
                Err(_) => break 'outer,
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_pauses_and_cuts() {
        let echo = TcpListener::bind("127.0.0.1:0").expect("bind");
        let target = echo.local_addr().expect("addr");
        std::thread::spawn(move || {
            for s in echo.incoming() {
                let Ok(mut s) = s else { break };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let f = Forwarder::start(target).expect("start");
        let mut c = TcpStream::connect(f.addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut buf = [0u8; 5];
        c.write_all(b"hello").expect("write");
        c.read_exact(&mut buf).expect("echo");
        assert_eq!(&buf, b"hello");
        f.partition();
        c.write_all(b"again").expect("write");
        assert!(c.read_exact(&mut buf).is_err(), "partitioned: no echo");
        f.heal();
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        c.read_exact(&mut buf).expect("echo after heal");
        assert_eq!(&buf, b"again");
        f.cut();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        assert!(rest.is_empty());
        assert_eq!(f.accepted(), 1);
    }
}
