//! The sync port's two sockets: UDP for probes, and a TCP listener on the
//! same port number for relays whose link carries only TCP (adb).
//!
//! Invariant: both are bound before the daemon says it is listening, so a
//! relay started right after that line finds the TCP fallback there. With
//! an ephemeral sync port (port 0) the kernel picks the UDP port alone, and
//! that number may be taken for TCP by someone else: then another UDP port
//! is tried, so the pair is whole whenever a free pair exists.

use std::io;
use std::net::{SocketAddr, TcpListener};

use tokio::net::UdpSocket;

/// Ephemeral UDP ports tried for one whose number is free for TCP too.
const EPHEMERAL_ATTEMPTS: usize = 32;

/// The sync port's sockets, as handed to the prober.
pub struct SyncSockets {
    pub udp: UdpSocket,
    /// None (warned) when the port number is taken for TCP: relays on
    /// TCP-only links then get no clock sync.
    pub tcp: Option<TcpListener>,
}

impl SyncSockets {
    /// Binds both on `addr`; an error only when the UDP socket cannot be.
    pub async fn bind(addr: SocketAddr) -> io::Result<SyncSockets> {
        Self::bind_with(addr, |addr| async move { UdpSocket::bind(addr).await }).await
    }

    /// Adds the TCP fallback beside an already bound UDP socket.
    fn beside(udp: UdpSocket) -> SyncSockets {
        let tcp = match udp.local_addr().and_then(bind_tcp) {
            Ok(listener) => Some(listener),
            Err(error) => {
                warn_no_tcp(&error, udp.local_addr().ok());
                None
            }
        };
        SyncSockets { udp, tcp }
    }

    /// As [`Self::bind`], with the UDP binder given (tests steer which
    /// ports the "kernel" picks).
    async fn bind_with<F, Fut>(addr: SocketAddr, mut bind_udp: F) -> io::Result<SyncSockets>
    where
        F: FnMut(SocketAddr) -> Fut,
        Fut: std::future::Future<Output = io::Result<UdpSocket>>,
    {
        let attempts = if addr.port() == 0 {
            EPHEMERAL_ATTEMPTS
        } else {
            1
        };
        // Passed-over sockets stay open until the end, so the kernel does
        // not pick their ports again.
        let mut passed_over = Vec::new();
        for _ in 0..attempts {
            let udp = bind_udp(addr).await?;
            let bound = udp.local_addr()?;
            match bind_tcp(bound) {
                Ok(listener) => {
                    return Ok(SyncSockets {
                        udp,
                        tcp: Some(listener),
                    });
                }
                // Another ephemeral UDP port may have its TCP twin free.
                Err(error) if error.kind() == io::ErrorKind::AddrInUse && attempts > 1 => {
                    passed_over.push((udp, error));
                }
                Err(error) => {
                    warn_no_tcp(&error, Some(bound));
                    return Ok(SyncSockets { udp, tcp: None });
                }
            }
        }
        // Every ephemeral pick had its TCP twin taken: the last UDP alone.
        match passed_over.pop() {
            Some((udp, error)) => {
                warn_no_tcp(&error, udp.local_addr().ok());
                Ok(SyncSockets { udp, tcp: None })
            }
            None => Ok(Self::beside(bind_udp(addr).await?)),
        }
    }
}

fn bind_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn warn_no_tcp(error: &io::Error, addr: Option<SocketAddr>) {
    let addr = addr.map_or_else(|| "?".to_owned(), |a| a.to_string());
    tracing::warn!(%error, %addr, "sync: cannot listen for TCP probes on the sync port; relays on TCP-only links get no clock sync (free the port for TCP or choose another listen.sync)");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A loopback port free for UDP whose number is held for TCP (by the
    /// returned listener).
    async fn port_taken_for_tcp_only() -> (u16, TcpListener) {
        loop {
            let udp = UdpSocket::bind(loopback(0)).await.unwrap();
            let port = udp.local_addr().unwrap().port();
            drop(udp);
            if let Ok(tcp) = TcpListener::bind(loopback(port)) {
                return (port, tcp);
            }
        }
    }

    #[tokio::test]
    async fn an_ephemeral_port_taken_for_tcp_is_passed_over() {
        let (taken, _holder) = port_taken_for_tcp_only().await;
        let mut picks = 0;
        let sockets = SyncSockets::bind_with(loopback(0), |addr| {
            picks += 1;
            // The first pick is the port whose TCP twin is taken, as the
            // kernel may pick it; later picks are the kernel's own.
            let addr = if picks == 1 { loopback(taken) } else { addr };
            async move { UdpSocket::bind(addr).await }
        })
        .await
        .unwrap();
        let port = sockets.udp.local_addr().unwrap().port();
        assert_ne!(port, taken);
        let tcp = sockets.tcp.expect("the TCP fallback is bound");
        assert_eq!(tcp.local_addr().unwrap().port(), port);
        assert!(picks >= 2);
    }

    #[tokio::test]
    async fn an_explicit_port_taken_for_tcp_keeps_udp_alone() {
        let (taken, _holder) = port_taken_for_tcp_only().await;
        let sockets = SyncSockets::bind(loopback(taken)).await.unwrap();
        assert_eq!(sockets.udp.local_addr().unwrap().port(), taken);
        assert!(sockets.tcp.is_none());
    }

    #[tokio::test]
    async fn a_free_port_gets_both() {
        let sockets = SyncSockets::bind(loopback(0)).await.unwrap();
        let udp = sockets.udp.local_addr().unwrap();
        assert_eq!(sockets.tcp.unwrap().local_addr().unwrap(), udp);
    }

    #[tokio::test]
    async fn a_udp_port_in_use_is_an_error() {
        let held = UdpSocket::bind(loopback(0)).await.unwrap();
        let addr = held.local_addr().unwrap();
        assert!(SyncSockets::bind(addr).await.is_err());
    }
}
