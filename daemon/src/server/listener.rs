//! Binding the data socket and accepting relay connections, at most
//! `limits.max-relays` at a time.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracesync_protocol::relay::RefusalCode;

use futures_util::SinkExt;
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::codec::Framed;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::engine::ProbeRegistry;
use super::events::IngestEvent;
use super::{Counter, Shared, session};
use crate::tls::{DataStream, DataTls};

/// Connections being refused at once (over max-relays); past it a new one
/// is closed without a reason, so refusals cannot pile up.
const MAX_REFUSING: usize = 64;

/// Dead relays (power cut, cable pulled) are noticed within about 25 s.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;

/// Binds the relay data listener. SO_REUSEADDR so a restarted daemon can
/// bind while old connections linger in TIME_WAIT. Needs a tokio runtime.
pub fn bind_data(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

fn tune(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_RETRIES);
    SockRef::from(stream).set_tcp_keepalive(&keepalive)
}

/// Accepts until shutdown; every session runs on `tracker`. Each session
/// gets its own clone of `events`; this loop drops the original on return,
/// so the ingest loop sees the channel close once every session is done.
pub async fn accept_loop<P: ProbeRegistry>(
    listener: TcpListener,
    events: mpsc::Sender<IngestEvent>,
    shared: Arc<Shared<P>>,
    tracker: TaskTracker,
) {
    let relays = Arc::new(Semaphore::new(shared.settings.max_relays));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut backoff = Duration::from_millis(10);
    loop {
        let accepted = tokio::select! {
            () = shared.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => {
                backoff = Duration::from_millis(10);
                pair
            }
            Err(e) => {
                // Usually out of file descriptors: wait, do not spin.
                shared.counters.bump(Counter::AcceptErrors);
                warn!("cannot accept a relay connection: {e}; retrying in {backoff:?}");
                tokio::select! {
                    () = shared.shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        shared.counters.bump(Counter::ConnectionsAccepted);
        if let Err(e) = tune(&stream) {
            debug!(%peer, "cannot set TCP options: {e}");
        }
        match relays.clone().try_acquire_owned() {
            Ok(permit) => {
                let events = events.clone();
                let shared = shared.clone();
                match shared.settings.tls.clone() {
                    None => {
                        tracker.spawn(session::run(stream, peer, events, shared, permit));
                    }
                    Some(tls) => {
                        tracker.spawn(async move {
                            if let Some(stream) = handshake(&tls, stream, peer, &shared).await {
                                session::run(stream, peer, events, shared, permit).await;
                            }
                        });
                    }
                }
            }
            Err(_) => {
                shared.counters.bump(Counter::RefusedMaxRelays);
                let Ok(permit) = refusing.clone().try_acquire_owned() else {
                    continue; // dropping the stream closes it
                };
                let reason = format!(
                    "daemon at max-relays={}; raise limits.max-relays",
                    shared.settings.max_relays
                );
                let shared = shared.clone();
                tracker.spawn(async move {
                    match shared.settings.tls.clone() {
                        None => {
                            refuse_and_close(stream, peer, RefusalCode::MaxRelays, &reason, &shared)
                                .await
                        }
                        Some(tls) => {
                            if let Some(stream) = handshake(&tls, stream, peer, &shared).await {
                                refuse_and_close(
                                    stream,
                                    peer,
                                    RefusalCode::MaxRelays,
                                    &reason,
                                    &shared,
                                )
                                .await;
                            }
                        }
                    }
                    drop(permit);
                });
            }
        }
    }
}

/// The server side of the TLS handshake, bounded by the hello timeout. A
/// relay without a certificate from `tls.client-ca` fails here: counted,
/// logged, closed (the relay sees the TLS alert).
async fn handshake<P>(
    tls: &DataTls,
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Shared<P>,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let limit = shared.settings.hello_timeout;
    let failed = |why: String| {
        shared.counters.bump(Counter::TlsHandshakeFailures);
        warn!(%peer, "TLS handshake with relay failed: {why}");
    };
    match tokio::time::timeout(limit, tls.acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            failed(e.to_string());
            None
        }
        Err(_) => {
            failed(format!("not done within {} ms", limit.as_millis()));
            None
        }
    }
}

async fn refuse_and_close<P, S: DataStream>(
    stream: S,
    peer: SocketAddr,
    code: RefusalCode,
    reason: &str,
    shared: &Shared<P>,
) {
    let codec = session::codec(shared.settings.max_frame_bytes);
    let mut link = Framed::new(stream, codec);
    session::refuse(&mut link, peer, code, reason).await;
    let _ = SinkExt::<bytes::Bytes>::close(&mut link).await;
}
