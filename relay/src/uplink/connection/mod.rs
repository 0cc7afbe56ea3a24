//! One TCP (or TLS over TCP) connection to the daemon: the frame codec and the reader and
//! writer tasks. The uplink owns a [`Connection`]; dropping it ends both
//! tasks.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};
use tokio_util::codec::{Decoder, Encoder, FramedRead, LengthDelimitedCodec};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracesync_protocol::relay::MAX_FRAME_BYTES;
use tracesync_protocol::relay::v1::{Frame, RelayClocks};
use tracesync_protocol::wire::{self, WireType};

use super::misconfig::{self, FirstBytes, Misconfig, MisconfigError};
use super::unreachable::{self, ConnectFailure};
use crate::tls::ClientTls;

/// `Frame`s over tokio-util's length-delimited framing (4-byte big-endian
/// length, at most MAX_FRAME_BYTES). Encodes straight into the write buffer.
#[derive(Debug)]
pub struct FrameCodec {
    inner: LengthDelimitedCodec,
    /// The stream's first bytes were looked at (a TLS record there means
    /// the daemon speaks TLS to a plaintext relay).
    checked_start: bool,
}

impl Default for FrameCodec {
    fn default() -> Self {
        Self {
            inner: LengthDelimitedCodec::builder()
                .max_frame_length(MAX_FRAME_BYTES)
                .new_codec(),
            checked_start: false,
        }
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, io::Error> {
        if !self.checked_start && src.len() >= 2 {
            self.checked_start = true;
            if misconfig::looks_like_tls(src) {
                return Err(MisconfigError::io(Misconfig::DaemonWantsTls));
            }
        }
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

/// A frame ready to write: its length prefix and bytes in up to three
/// pieces, written with one vectored write. A batch's packets are the
/// spool's wire-form buffer itself (no re-encoding, no copy): only the few
/// bytes around them are encoded here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutFrame {
    parts: [Bytes; 3],
}

impl OutFrame {
    /// A whole frame, encoded (control frames: Hello, Heartbeat).
    pub fn encode(frame: &Frame) -> io::Result<Self> {
        let mut buf = BytesMut::new();
        FrameCodec::default().encode(frame.clone(), &mut buf)?;
        Ok(Self {
            parts: [buf.freeze(), Bytes::new(), Bytes::new()],
        })
    }

    /// `Frame { batch: Batch { seq, first_packet_index, packets, clocks } }`
    /// with the packets given in wire form (`Batch.packets` fields); the
    /// same bytes prost would write for that frame.
    pub fn batch(
        seq: u64,
        first_packet_index: u64,
        wire: Bytes,
        clocks: &RelayClocks,
    ) -> io::Result<Self> {
        let varint_field = |v: u64| if v == 0 { 0 } else { 1 + wire::varint_len(v) };
        let clocks_len = clocks.encoded_len();
        let batch_len = varint_field(seq)
            + varint_field(first_packet_index)
            + wire.len()
            + 1
            + wire::varint_len(clocks_len as u64)
            + clocks_len;
        let frame_len = 1 + wire::varint_len(batch_len as u64) + batch_len;
        if frame_len > MAX_FRAME_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {frame_len} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"),
            ));
        }
        let mut head = Vec::with_capacity(32);
        head.extend_from_slice(&(frame_len as u32).to_be_bytes());
        wire::put_tag(&mut head, FRAME_BATCH, WireType::Len);
        wire::put_varint(&mut head, batch_len as u64);
        if seq != 0 {
            wire::put_varint_field(&mut head, BATCH_SEQ, seq);
        }
        if first_packet_index != 0 {
            wire::put_varint_field(&mut head, BATCH_FIRST_PACKET_INDEX, first_packet_index);
        }
        let mut tail = Vec::with_capacity(clocks_len + 4);
        wire::put_tag(&mut tail, BATCH_CLOCKS, WireType::Len);
        wire::put_varint(&mut tail, clocks_len as u64);
        clocks
            .encode(&mut tail)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        Ok(Self {
            parts: [Bytes::from(head), wire, Bytes::from(tail)],
        })
    }

    /// Bytes on the wire (length prefix included).
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Field numbers of the relay protocol (proto/relay.proto) that
/// [`OutFrame::batch`] writes by hand.
const FRAME_BATCH: u32 = 4;
const BATCH_SEQ: u32 = 1;
const BATCH_FIRST_PACKET_INDEX: u32 = 2;
const BATCH_CLOCKS: u32 = 4;

/// What a connection reports to the uplink.
#[derive(Debug)]
pub enum ConnectionEvent {
    Connected {
        peer: SocketAddr,
    },
    Frame(Frame),
    /// No connection was made (refused, no answer, no route): the line
    /// that says so and what to check ([`unreachable::describe`]).
    Unreachable {
        reason: String,
    },
    Lost {
        reason: String,
        /// A cause retrying will not fix, if the failure showed one.
        misconfig: Option<Misconfig>,
    },
}

impl ConnectionEvent {
    fn lost(reason: String) -> Self {
        ConnectionEvent::Lost {
            reason,
            misconfig: None,
        }
    }

    fn misconfigured(peer: SocketAddr, m: Misconfig) -> Self {
        ConnectionEvent::Lost {
            reason: format!("daemon {peer}: {m}"),
            misconfig: Some(m),
        }
    }
}

/// A live (or connecting) connection. Frames queued with `send` go out in
/// order; events arrive on `events`.
#[derive(Debug)]
pub struct Connection {
    pub events: mpsc::Receiver<ConnectionEvent>,
    outgoing: mpsc::Sender<OutFrame>,
    /// Bytes of the frames queued and not written to the socket yet.
    queued: Arc<QueuedBytes>,
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
        let queued = Arc::new(QueuedBytes::default());
        tokio::spawn(run(
            host,
            connect_timeout,
            tls,
            event_tx,
            Outgoing {
                frames: outgoing_rx,
                queued: queued.clone(),
            },
            token.clone(),
        ));
        Self {
            events,
            outgoing,
            queued,
            token,
            _guard: guard,
        }
    }

    /// Queues a frame; false if the queue is full or the connection ended.
    pub fn send(&self, frame: OutFrame) -> bool {
        let len = frame.len();
        let sent = self.outgoing.try_send(frame).is_ok();
        if sent {
            self.queued.bytes.fetch_add(len, Ordering::Relaxed);
        }
        sent
    }

    /// Whether the writer has ended (the connection is closing): its reader
    /// reports why as [`ConnectionEvent::Lost`].
    pub fn is_closed(&self) -> bool {
        self.outgoing.is_closed()
    }

    /// Whether at least `LINK_QUEUE_BYTES` wait to be written.
    pub fn is_full(&self) -> bool {
        self.queued.bytes.load(Ordering::Relaxed) >= LINK_QUEUE_BYTES
    }

    /// What completes after the writer wrote some frames (at once if it
    /// did since the last wait).
    pub fn written(&self) -> Written {
        Written(self.queued.clone())
    }
}

/// See [`Connection::written`].
#[derive(Debug)]
pub struct Written(Arc<QueuedBytes>);

impl Written {
    pub async fn wait(&self) {
        self.0.written.notified().await;
    }
}

/// Frame bytes a connection holds in memory for its socket at most before
/// the uplink stops sending (two frames of the largest size): the rest of
/// the window stays in the spool instead of in a second copy here.
pub const LINK_QUEUE_BYTES: usize = 2 * MAX_FRAME_BYTES;

/// Frames queued for the writer, and how many bytes they hold.
#[derive(Debug, Default)]
struct QueuedBytes {
    bytes: AtomicUsize,
    /// Notified after every round of writes.
    written: Notify,
}

/// The writer's end of the queue.
struct Outgoing {
    frames: mpsc::Receiver<OutFrame>,
    queued: Arc<QueuedBytes>,
}

async fn run(
    host: String,
    connect_timeout: Duration,
    tls: Option<ClientTls>,
    events: mpsc::Sender<ConnectionEvent>,
    outgoing: Outgoing,
    token: CancellationToken,
) {
    let lost = ConnectionEvent::lost;
    let stream = tokio::select! {
        () = token.cancelled() => return,
        result = tokio::time::timeout(connect_timeout, TcpStream::connect(&host)) => result,
    };
    let failure = match stream {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(ConnectFailure::Io(e)),
        Err(_) => Err(ConnectFailure::TimedOut(connect_timeout)),
    };
    let stream = match failure {
        Ok(stream) => stream,
        Err(failure) => {
            let reason = unreachable::describe(&host, &failure);
            let _ = events.send(ConnectionEvent::Unreachable { reason }).await;
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
            let (stream, first) = FirstBytes::wrap(stream);
            let handshake = tokio::select! {
                () = token.cancelled() => return,
                result = tokio::time::timeout(
                    connect_timeout,
                    tls.connector.connect(tls.server_name.clone(), stream),
                ) => result,
            };
            let event = match handshake {
                Ok(Ok(stream)) => return serve(stream, peer, events, outgoing, token).await,
                Ok(Err(e)) => {
                    let seen = first.lock().map(|b| b.clone()).unwrap_or_default();
                    let named = misconfig::classify(&e).or_else(|| {
                        // A certificate error is named above; an EOF or a
                        // record that is not TLS is told by what came back.
                        matches!(
                            e.kind(),
                            io::ErrorKind::UnexpectedEof | io::ErrorKind::InvalidData
                        )
                        .then(|| misconfig::classify_handshake_bytes(&seen))
                        .flatten()
                    });
                    match named {
                        Some(m) => ConnectionEvent::misconfigured(peer, m),
                        None => lost(format!("TLS with daemon {peer}: {e}")),
                    }
                }
                Err(_) => lost(format!(
                    "TLS with daemon {peer}: no handshake within {connect_timeout:?}"
                )),
            };
            let _ = events.send(event).await;
        }
    }
}

/// Frames over an established stream, until it ends or `token` is cancelled.
/// Reports Connected first (after the TLS handshake, if any).
async fn serve<S: AsyncRead + AsyncWrite + Send + 'static>(
    stream: S,
    peer: SocketAddr,
    events: mpsc::Sender<ConnectionEvent>,
    outgoing: Outgoing,
    token: CancellationToken,
) {
    let lost = ConnectionEvent::lost;
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
        write,
        outgoing,
        events.clone(),
        token.clone(),
        peer,
    ));
    let mut reader = FramedRead::new(read, FrameCodec::default());
    let mut frames = 0u64;
    loop {
        let next = tokio::select! {
            () = token.cancelled() => break,
            next = reader.next() => next,
        };
        let event = match next {
            Some(Ok(frame)) => {
                frames += 1;
                ConnectionEvent::Frame(frame)
            }
            Some(Err(e)) => match misconfig::classify(&e) {
                Some(m) => ConnectionEvent::misconfigured(peer, m),
                None => lost(format!("daemon {peer}: {e}")),
            },
            // A daemon answers a Hello (Welcome or Refused); a peer that
            // closes without one frame is not a relay data port.
            None if frames == 0 && reader.read_buffer().is_empty() => {
                ConnectionEvent::misconfigured(peer, Misconfig::NotDataPort)
            }
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

async fn write_frames<W: AsyncWrite + Unpin + Send>(
    mut write: W,
    mut outgoing: Outgoing,
    events: mpsc::Sender<ConnectionEvent>,
    token: CancellationToken,
    peer: SocketAddr,
) {
    let mut chunks = VecDeque::new();
    loop {
        let frame = tokio::select! {
            () = token.cancelled() => return,
            frame = outgoing.frames.recv() => frame,
        };
        let Some(frame) = frame else { return };
        // Take what is waiting too, then write it all with vectored writes.
        let mut taken = frame.len();
        chunks.extend(frame.parts.into_iter().filter(|p| !p.is_empty()));
        while chunks.len() < MAX_CHUNKS_PER_WRITE
            && let Ok(frame) = outgoing.frames.try_recv()
        {
            taken += frame.len();
            chunks.extend(frame.parts.into_iter().filter(|p| !p.is_empty()));
        }
        let result = tokio::select! {
            () = token.cancelled() => return,
            result = write_chunks(&mut write, &mut chunks) => result,
        };
        outgoing.queued.bytes.fetch_sub(taken, Ordering::Relaxed);
        outgoing.queued.written.notify_one();
        if let Err(e) = result {
            let _ = events
                .send(ConnectionEvent::lost(format!("daemon {peer}: write: {e}")))
                .await;
            token.cancel();
            return;
        }
    }
}

/// Frames gathered into one round of vectored writes.
const MAX_CHUNKS_PER_WRITE: usize = 64;

/// Writes every chunk, in order, with as few writev calls as the socket
/// takes, then flushes (TLS).
async fn write_chunks<W: AsyncWrite + Unpin>(
    write: &mut W,
    chunks: &mut VecDeque<Bytes>,
) -> io::Result<()> {
    while !chunks.is_empty() {
        let slices: Vec<IoSlice<'_>> = chunks
            .iter()
            .take(MAX_CHUNKS_PER_WRITE)
            .map(|c| IoSlice::new(c))
            .collect();
        let mut written = write.write_vectored(&slices).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let Some(front) = chunks.front_mut() else {
                break;
            };
            if written >= front.len() {
                written -= front.len();
                chunks.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
    }
    write.flush().await
}

/// Completes when a full link's writer wrote frames; never without one.
pub async fn link_drained(full: Option<&Written>) {
    match full {
        Some(written) => written.wait().await,
        None => std::future::pending().await,
    }
}

/// The connection's next event; never without a connection (a task that
/// ended is a lost connection).
pub async fn next_event(connection: &mut Option<Connection>) -> ConnectionEvent {
    match connection {
        Some(connection) => connection
            .events
            .recv()
            .await
            .unwrap_or(ConnectionEvent::Lost {
                reason: "connection task ended".into(),
                misconfig: None,
            }),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
