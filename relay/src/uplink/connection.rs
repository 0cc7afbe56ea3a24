//! One TCP (or TLS over TCP) connection to the daemon: the frame codec and the reader and
//! writer tasks. The uplink owns a [`Connection`]; dropping it ends both
//! tasks.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::{Decoder, Encoder, FramedRead, FramedWrite, LengthDelimitedCodec};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracesync_protocol::relay::MAX_FRAME_BYTES;
use tracesync_protocol::relay::v1::Frame;

use crate::tls::ClientTls;

/// `Frame`s over tokio-util's length-delimited framing (4-byte big-endian
/// length, at most MAX_FRAME_BYTES). Encodes straight into the write buffer.
#[derive(Debug)]
pub struct FrameCodec {
    inner: LengthDelimitedCodec,
}

impl Default for FrameCodec {
    fn default() -> Self {
        Self {
            inner: LengthDelimitedCodec::builder()
                .max_frame_length(MAX_FRAME_BYTES)
                .new_codec(),
        }
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, io::Error> {
        match self.inner.decode(src)? {
            Some(bytes) => Frame::decode(bytes.freeze())
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad frame: {e}"))),
            None => Ok(None),
        }
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = io::Error;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), io::Error> {
        let len = frame.encoded_len();
        if len > MAX_FRAME_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {len} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"),
            ));
        }
        dst.reserve(4 + len);
        dst.put_u32(len as u32);
        frame
            .encode(dst)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }
}

/// What a connection reports to the uplink.
#[derive(Debug)]
pub enum ConnectionEvent {
    Connected { peer: SocketAddr },
    Frame(Frame),
    Lost { reason: String },
}

/// A live (or connecting) connection. Frames queued with `send` go out in
/// order; events arrive on `events`.
#[derive(Debug)]
pub struct Connection {
    pub events: mpsc::Receiver<ConnectionEvent>,
    outgoing: mpsc::Sender<Frame>,
    /// Cancelled when the connection is dropped; the probe responder of
    /// this connection runs under a child of it.
    pub token: CancellationToken,
    _guard: DropGuard,
}

impl Connection {
    /// Starts connecting to `host`. `queue` bounds the frames waiting to be
    /// written (the session's window plus a few control frames).
    pub fn open(
        host: String,
        connect_timeout: Duration,
        tls: Option<ClientTls>,
        queue: usize,
    ) -> Self {
        let (event_tx, events) = mpsc::channel(64);
        let (outgoing, outgoing_rx) = mpsc::channel(queue.max(1));
        let token = CancellationToken::new();
        let guard = token.clone().drop_guard();
        tokio::spawn(run(
            host,
            connect_timeout,
            tls,
            event_tx,
            outgoing_rx,
            token.clone(),
        ));
        Self {
            events,
            outgoing,
            token,
            _guard: guard,
        }
    }

    /// Queues a frame; false if the queue is full or the connection ended.
    pub fn send(&self, frame: Frame) -> bool {
        self.outgoing.try_send(frame).is_ok()
    }
}

async fn run(
    host: String,
    connect_timeout: Duration,
    tls: Option<ClientTls>,
    events: mpsc::Sender<ConnectionEvent>,
    outgoing: mpsc::Receiver<Frame>,
    token: CancellationToken,
) {
    let lost = |reason: String| ConnectionEvent::Lost { reason };
    let stream = tokio::select! {
        () = token.cancelled() => return,
        result = tokio::time::timeout(connect_timeout, TcpStream::connect(&host)) => result,
    };
    let stream = match stream {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            let _ = events.send(lost(format!("connect to {host}: {e}"))).await;
            return;
        }
        Err(_) => {
            let _ = events
                .send(lost(format!(
                    "connect to {host}: timed out after {connect_timeout:?}"
                )))
                .await;
            return;
        }
    };
    // Small frames (acks, heartbeats) must not wait for Nagle.
    let _ = stream.set_nodelay(true);
    let peer = match stream.peer_addr() {
        Ok(peer) => peer,
        Err(e) => {
            let _ = events.send(lost(format!("{host}: {e}"))).await;
            return;
        }
    };
    match tls {
        None => serve(stream, peer, events, outgoing, token).await,
        Some(tls) => {
            let handshake = tokio::select! {
                () = token.cancelled() => return,
                result = tokio::time::timeout(
                    connect_timeout,
                    tls.connector.connect(tls.server_name.clone(), stream),
                ) => result,
            };
            let reason = match handshake {
                Ok(Ok(stream)) => return serve(stream, peer, events, outgoing, token).await,
                Ok(Err(e)) => format!("TLS with daemon {peer}: {e}"),
                Err(_) => {
                    format!("TLS with daemon {peer}: no handshake within {connect_timeout:?}")
                }
            };
            let _ = events.send(lost(reason)).await;
        }
    }
}

/// Frames over an established stream, until it ends or `token` is cancelled.
/// Reports Connected first (after the TLS handshake, if any).
async fn serve<S: AsyncRead + AsyncWrite + Send + 'static>(
    stream: S,
    peer: SocketAddr,
    events: mpsc::Sender<ConnectionEvent>,
    outgoing: mpsc::Receiver<Frame>,
    token: CancellationToken,
) {
    let lost = |reason: String| ConnectionEvent::Lost { reason };
    if events
        .send(ConnectionEvent::Connected { peer })
        .await
        .is_err()
    {
        return;
    }
    let (read, write) = tokio::io::split(stream);
    // Reader and writer run apart so a full send buffer never stops acks
    // from being read.
    let writer = tokio::spawn(write_frames(
        FramedWrite::new(write, FrameCodec::default()),
        outgoing,
        events.clone(),
        token.clone(),
        peer,
    ));
    let mut reader = FramedRead::new(read, FrameCodec::default());
    loop {
        let next = tokio::select! {
            () = token.cancelled() => break,
            next = reader.next() => next,
        };
        let event = match next {
            Some(Ok(frame)) => ConnectionEvent::Frame(frame),
            Some(Err(e)) => lost(format!("daemon {peer}: {e}{}", alert_hint(&e))),
            None => lost(format!("daemon {peer} closed the connection")),
        };
        let end = matches!(event, ConnectionEvent::Lost { .. });
        if events.send(event).await.is_err() || end {
            break;
        }
    }
    token.cancel();
    let _ = writer.await;
}

/// A TLS alert from the daemon right after the handshake means it did not
/// accept this relay's certificate (TLS 1.3 checks it after our side is
/// done).
fn alert_hint(e: &io::Error) -> &'static str {
    let alert = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| matches!(tls, rustls::Error::AlertReceived(_)));
    if alert {
        " (the daemon did not accept this relay's certificate: check [tls] cert and key, \
         and that the daemon's client-ca issued them)"
    } else {
        ""
    }
}

async fn write_frames<W: AsyncWrite + Unpin + Send>(
    mut sink: FramedWrite<W, FrameCodec>,
    mut outgoing: mpsc::Receiver<Frame>,
    events: mpsc::Sender<ConnectionEvent>,
    token: CancellationToken,
    peer: SocketAddr,
) {
    loop {
        let frame = tokio::select! {
            () = token.cancelled() => return,
            frame = outgoing.recv() => frame,
        };
        let Some(frame) = frame else { return };
        // Queue what is waiting, then write it in one flush.
        let write = async {
            sink.feed(frame).await?;
            while let Ok(frame) = outgoing.try_recv() {
                sink.feed(frame).await?;
            }
            sink.flush().await
        };
        let result = tokio::select! {
            () = token.cancelled() => return,
            result = write => result,
        };
        if let Err(e) = result {
            let _ = events
                .send(ConnectionEvent::Lost {
                    reason: format!("daemon {peer}: write: {e}"),
                })
                .await;
            token.cancel();
            return;
        }
    }
}
