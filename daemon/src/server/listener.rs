//! Binding the data socket and accepting relay connections. A connection
//! is unauthenticated until its TLS handshake and Hello pass (at most
//! [`MAX_UNAUTHENTICATED`] at once, fewer per source, see
//! [`preauth`](super::preauth)); only then does it take one of the
//! `limits.max-relays` slots.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use super::engine::ProbeRegistry;
use super::events::EventSender;
use super::fault_log::PEER_FAULTS;
use super::handshake::HandshakeFailure;
use super::preauth::{
    Eviction, MAX_UNAUTHENTICATED, MAX_UNAUTHENTICATED_PER_SOURCE, PreAuth, Unauthenticated,
};
use super::{Counter, Failed, Shared, session};
use crate::tls::{DataTls, Metered, TlsSocket, tls_socket};

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

/// Accepts until shutdown; every connection runs on `tracker`. Each gets
/// its own clone of `events`; this loop drops the original on return, so
/// the ingest loop sees the channel close once every session is done.
pub async fn accept_loop<P: ProbeRegistry>(
    listener: TcpListener,
    events: EventSender,
    shared: Arc<Shared<P>>,
    tracker: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(shared.settings.max_relays));
    let unauthenticated = Unauthenticated::new(MAX_UNAUTHENTICATED, MAX_UNAUTHENTICATED_PER_SOURCE);
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
        let (ticket, evicted) = unauthenticated.admit(peer.ip());
        match evicted {
            Some(Eviction::Limit) => shared
                .counters
                .bump(Counter::Failed(Failed::UnauthenticatedLimit)),
            Some(Eviction::PerSource) => shared
                .counters
                .bump(Counter::Failed(Failed::UnauthenticatedPerSource)),
            None => {}
        }
        let pre = PreAuth {
            ticket,
            deadline: tokio::time::Instant::now() + shared.settings.hello_timeout,
            slots: slots.clone(),
        };
        tracker.spawn(connection(
            stream,
            peer,
            events.clone(),
            shared.clone(),
            pre,
        ));
    }
}

/// One connection: the TLS handshake (if any), then the session.
async fn connection<P: ProbeRegistry>(
    stream: TcpStream,
    peer: SocketAddr,
    events: EventSender,
    shared: Arc<Shared<P>>,
    pre: PreAuth,
) {
    let account = Arc::new(shared.peer_bytes.open());
    match shared.settings.tls.clone() {
        None => {
            if speaks_tls(&stream, &shared, &pre).await {
                session::refuse_tls_relay(Metered::new(stream), peer, &shared).await;
                return;
            }
            let stream =
                Metered::reporting(stream, pre.ticket.progress()).counted_in(account.clone());
            session::run(stream, peer, events, shared, pre, account).await;
        }
        Some(tls) => {
            let socket =
                Metered::reporting(stream, pre.ticket.progress()).counted_in(account.clone());
            let stream = tls_socket(socket);
            if let Some(stream) = handshake(&tls, stream, peer, &shared, &pre).await {
                session::run(stream, peer, events, shared, pre, account).await;
            }
        }
    }
}

/// Whether the peer's first bytes are a TLS handshake record (a relay with
/// TLS on), looked at without taking them; within the Hello's deadline.
async fn speaks_tls<P>(stream: &TcpStream, shared: &Shared<P>, pre: &PreAuth) -> bool {
    /// A TLS record header: handshake (22), version 3.x.
    const TLS_HANDSHAKE: [u8; 2] = [0x16, 0x03];
    let mut first = [0u8; 2];
    let peeked = tokio::select! {
        peeked = tokio::time::timeout_at(pre.deadline, stream.peek(&mut first)) => peeked,
        () = pre.ticket.evicted() => return false,
        () = shared.shutdown.cancelled() => return false,
    };
    matches!(peeked, Ok(Ok(2))) && first == TLS_HANDSHAKE
}

/// The server side of the TLS handshake, bounded by the hello timeout
/// (which the Hello shares). A relay without a certificate from
/// `tls.client-ca` fails here: counted, logged, closed (the relay sees the
/// TLS alert). A connection closed for a newer one at the unauthenticated
/// limit, or at shutdown, ends quietly (the accept loop counted it).
async fn handshake<P>(
    tls: &DataTls,
    stream: TlsSocket,
    peer: SocketAddr,
    shared: &Shared<P>,
    pre: &PreAuth,
) -> Option<tokio_rustls::server::TlsStream<TlsSocket>> {
    let limit = shared.settings.hello_timeout;
    let failed = |why: String, reason: HandshakeFailure| {
        shared.counters.bump(Counter::Failed(Failed::TlsHandshake));
        shared.counters.bump_handshake(reason);
        let Some(suppressed) = PEER_FAULTS.admit(reason.as_str()) else {
            return;
        };
        let fix = match reason.fix() {
            "" => String::new(),
            fix => format!("; {fix}"),
        };
        warn!(
            %peer,
            "TLS handshake with relay failed ({}): {why}{fix}{suppressed}",
            reason.as_str()
        );
    };
    let accepted = tokio::select! {
        accepted = tokio::time::timeout_at(pre.deadline, tls.acceptor.accept(stream)) => accepted,
        () = pre.ticket.evicted() => return None,
        () = shared.shutdown.cancelled() => return None,
    };
    match accepted {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            failed(e.to_string(), HandshakeFailure::of(&e));
            None
        }
        Err(_) => {
            failed(
                format!("not done within {} ms", limit.as_millis()),
                HandshakeFailure::Timeout,
            );
            None
        }
    }
}
