//! A relay session's frames: reading one under the frame clock, decoding,
//! counting a Batch's packets without decoding it, sending with a write
//! timeout, and refusing.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use tokio::time::{Sleep, timeout};
use tracesync_protocol::relay::{MAX_BATCH_PACKETS, MAX_HELLO_FRAME_BYTES, RefusalCode, v1};
use tracesync_protocol::text::Escaped;
use tracing::{debug, info, warn};

use super::peer_bytes::Account;
use super::{Link, WRITE_TIMEOUT};
use crate::server::fault_log::PEER_FAULTS;
use crate::server::{Counter, Failed, Refused, Shared};
use crate::tls::DataStream;

/// How long a frame may take once it has begun: its first byte (read from
/// the socket, before TLS decryption) starts the clock, and the frame must
/// be whole within `limit`, however slowly the rest trickles in. Time the
/// session does not read (paused, waiting for the ingest loop) does not
/// count: the clock restarts after every frame and when reading resumes.
pub(super) struct FrameClock {
    pub(super) limit: Duration,
    /// Bytes read from the socket when the clock last restarted.
    mark: u64,
    /// Armed once a frame has begun.
    deadline: Option<Pin<Box<Sleep>>>,
}

/// A frame began more than the frame timeout ago and is not whole yet.
pub(super) struct Stalled;

impl FrameClock {
    pub(super) fn new<S: DataStream>(limit: Duration, link: &Link<S>) -> Self {
        Self {
            limit,
            mark: link.get_ref().bytes_received(),
            deadline: None,
        }
    }

    pub(super) fn restart<S: DataStream>(&mut self, link: &Link<S>) {
        self.mark = link.get_ref().bytes_received();
        self.deadline = None;
    }
}

/// After Hello, how long a session may receive nothing at all (not a
/// byte: a frame trickling in is the frame clock's). Time the session does
/// not read (paused) does not count: the caller restarts it on resuming.
/// Nor does the daemon's own stop: a deadline noticed more than
/// [`IDLE_LATE_SLACK`] late (the daemon was stopped or starved, and what
/// the relay sent meanwhile is still unread) restarts the clock.
pub(super) struct IdleClock {
    limit: Duration,
    /// Bytes read from the socket when the clock last restarted.
    mark: u64,
    deadline: Pin<Box<Sleep>>,
}

/// How late an idle deadline may be noticed and still count.
const IDLE_LATE_SLACK: Duration = Duration::from_secs(1);

impl IdleClock {
    pub(super) fn new<S: DataStream>(limit: Duration, link: &Link<S>) -> Self {
        Self {
            limit,
            mark: link.get_ref().bytes_received(),
            deadline: Box::pin(tokio::time::sleep(limit)),
        }
    }

    pub(super) fn restart<S: DataStream>(&mut self, link: &Link<S>) {
        self.mark = link.get_ref().bytes_received();
        let at = tokio::time::Instant::now() + self.limit;
        self.deadline.as_mut().reset(at);
    }

    /// Completes when the limit has passed since the last restart.
    pub(super) async fn elapsed(&mut self) {
        self.deadline.as_mut().await;
    }

    /// After [`IdleClock::elapsed`]: Err (the reason) if nothing arrived
    /// meanwhile, else restarted.
    pub(super) fn check<S: DataStream>(&mut self, link: &Link<S>) -> Result<(), String> {
        let late = tokio::time::Instant::now().saturating_duration_since(self.deadline.deadline());
        if link.get_ref().bytes_received() == self.mark && late <= IDLE_LATE_SLACK {
            return Err(format!(
                "nothing received for {} ms after Hello (limits.idle-timeout-ms)",
                self.limit.as_millis()
            ));
        }
        self.restart(link);
        Ok(())
    }
}

pub(super) type Read = Option<std::io::Result<BytesMut>>;

/// The next frame (or the end of the stream), its bytes counted in the
/// peers' budget as they arrive.
pub(super) async fn next_counted<S: DataStream>(link: &mut Link<S>, account: &Account) -> Read {
    std::future::poll_fn(|cx| {
        let polled = link.poll_next_unpin(cx);
        account.set(link.read_buffer().len());
        polled
    })
    .await
}

/// The next frame (or the end of the stream), under the frame clock, its
/// bytes counted in the peers' budget as they arrive.
pub(super) async fn next_frame<S: DataStream>(
    link: &mut Link<S>,
    clock: &mut FrameClock,
    account: &Account,
) -> Result<Read, Stalled> {
    std::future::poll_fn(|cx| {
        let polled = link.poll_next_unpin(cx);
        account.set(link.read_buffer().len());
        if let Poll::Ready(read) = polled {
            clock.restart(link);
            return Poll::Ready(Ok(read));
        }
        let begun = !link.read_buffer().is_empty() || link.get_ref().bytes_received() != clock.mark;
        if begun {
            let limit = clock.limit;
            let deadline = clock
                .deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(Stalled));
            }
        }
        Poll::Pending
    })
    .await
}

pub(super) fn decode(bytes: &[u8]) -> Result<v1::frame::Body, String> {
    decode_frame(bytes)
}

/// Decodes a frame; from a `Bytes` buffer, the `bytes` fields (packets)
/// are zero-copy slices of it.
pub(super) fn decode_frame(bytes: impl bytes::Buf) -> Result<v1::frame::Body, String> {
    let len = bytes.remaining();
    match v1::Frame::decode(bytes) {
        Ok(v1::Frame { body: Some(body) }) => Ok(body),
        Ok(v1::Frame { body: None }) => {
            Err("malformed frame: no message in it; relay and daemon versions must match".into())
        }
        Err(e) => Err(format!(
            "malformed frame ({len} bytes): {e}; relay and daemon versions must match"
        )),
    }
}

/// Packets in a Batch or Window frame (0 for other frames or bytes that
/// do not parse), counted without decoding, and the most such a frame may
/// hold; stops counting past the limit.
pub(super) fn batch_packet_count(frame: &[u8]) -> (usize, usize) {
    use tracesync_protocol::scan::{FieldValue, Fields};
    const BATCH: u32 = 4;
    const PACKETS: u32 = 3;
    // A Window part: its packets and its preamble (first part), each at
    // most MAX_BATCH_PACKETS from a relay; counted together against
    // twice that.
    const WINDOW: u32 = 8;
    const WINDOW_PACKETS: u32 = 4;
    const WINDOW_PREAMBLE: u32 = 8;
    let mut count = 0;
    for field in Fields::new(frame).map_while(Result::ok) {
        let (number, FieldValue::Len(body)) = (field.number, field.value) else {
            continue;
        };
        let (counted, scale) = match number {
            BATCH => ([PACKETS, PACKETS], 1),
            WINDOW => ([WINDOW_PACKETS, WINDOW_PREAMBLE], 2),
            _ => continue,
        };
        let limit = MAX_BATCH_PACKETS * scale;
        for inner in Fields::new(body).map_while(Result::ok) {
            if counted.contains(&inner.number) {
                count += 1;
                if count > limit {
                    return (count, limit);
                }
            }
        }
        return (count, limit);
    }
    (count, MAX_BATCH_PACKETS)
}

pub(super) fn kind(body: &v1::frame::Body) -> &'static str {
    match body {
        v1::frame::Body::Hello(_) => "Hello",
        v1::frame::Body::Welcome(_) => "Welcome",
        v1::frame::Body::Refused(_) => "Refused",
        v1::frame::Body::Batch(_) => "Batch",
        v1::frame::Body::Ack(_) => "Ack",
        v1::frame::Body::Heartbeat(_) => "Heartbeat",
        v1::frame::Body::Trigger(_) => "Trigger",
        v1::frame::Body::Window(_) => "Window",
        v1::frame::Body::WindowAck(_) => "WindowAck",
        v1::frame::Body::TriggerRequest(_) => "TriggerRequest",
        v1::frame::Body::TriggerResult(_) => "TriggerResult",
    }
}

pub(super) async fn send<S: DataStream>(
    link: &mut Link<S>,
    body: v1::frame::Body,
) -> std::io::Result<()> {
    let frame = v1::Frame { body: Some(body) };
    let bytes = Bytes::from(frame.encode_to_vec());
    match timeout(WRITE_TIMEOUT, link.send(bytes)).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "relay stopped reading",
        )),
    }
}

/// Sends Refused with its code and a one-line reason and logs it (escaped:
/// a reason may quote what the relay sent); the caller closes.
pub(in crate::server) async fn refuse<S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    code: RefusalCode,
    reason: &str,
) {
    if let Some(suppressed) = PEER_FAULTS.admit(code.as_str()) {
        warn!(%peer, %code, "refusing relay: {}{suppressed}", Escaped(reason));
    }
    let refused = v1::frame::Body::Refused(v1::Refused {
        reason: reason.to_owned(),
        code: code.as_str().to_owned(),
    });
    if let Err(e) = send(link, refused).await {
        debug!(%peer, "cannot send Refused: {e}");
    }
}

/// Counts `why` and sends Refused with its code (one value gives both) and
/// a one-line reason; the caller closes. A counter without a code is only
/// counted: nothing is due to the relay.
pub(super) async fn refuse_counted<P, S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    shared: &Shared<P>,
    why: impl Into<Counter>,
    reason: &str,
) {
    let counter = why.into();
    shared.counters.bump(counter);
    match counter.code() {
        Some(code) => refuse(link, peer, code, reason).await,
        None => {
            let label = counter.series().1.unwrap_or("closed");
            if let Some(suppressed) = PEER_FAULTS.admit(label) {
                info!(%peer, "closing relay connection: {}{suppressed}", Escaped(reason));
            }
        }
    }
}

/// A read error: an oversized frame is the relay's fault and gets a reason;
/// anything else is the network's. `first`: the frame was to be the Hello.
pub(super) async fn read_failed<P, S: DataStream>(
    link: &mut Link<S>,
    peer: SocketAddr,
    e: std::io::Error,
    shared: &Shared<P>,
    first: bool,
) {
    let oversized = e
        .get_ref()
        .is_some_and(|inner| inner.is::<tokio_util::codec::LengthDelimitedCodecError>());
    if oversized && first {
        let reason = format!(
            "first frame larger than {MAX_HELLO_FRAME_BYTES} bytes: a Hello is far smaller; \
             relay and daemon versions must match"
        );
        refuse_counted(link, peer, shared, Refused::HelloTooLarge, &reason).await;
    } else if oversized {
        let reason = format!(
            "frame larger than limits.max-frame-bytes={}; raise it on the daemon or upgrade the relay",
            shared.settings.max_frame_bytes
        );
        refuse_counted(link, peer, shared, Failed::FrameTooLarge, &reason).await;
    } else {
        debug!(%peer, "relay connection failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(body: v1::frame::Body) -> Vec<u8> {
        v1::Frame { body: Some(body) }.encode_to_vec()
    }

    #[test]
    fn batch_and_window_packets_are_counted_against_their_limits() {
        let tiny = |n: usize| vec![Bytes::from_static(b"x"); n];
        let batch = encoded(v1::frame::Body::Batch(v1::Batch {
            packets: tiny(3),
            ..v1::Batch::default()
        }));
        assert_eq!(batch_packet_count(&batch), (3, MAX_BATCH_PACKETS));
        // A window's first part: its packets and its preamble.
        let window = encoded(v1::frame::Body::Window(v1::Window {
            packets: tiny(MAX_BATCH_PACKETS),
            preamble: tiny(5),
            ..v1::Window::default()
        }));
        let (count, limit) = batch_packet_count(&window);
        assert_eq!(
            (count, limit),
            (MAX_BATCH_PACKETS + 5, 2 * MAX_BATCH_PACKETS)
        );
        let hostile = encoded(v1::frame::Body::Window(v1::Window {
            packets: tiny(2 * MAX_BATCH_PACKETS + 1),
            ..v1::Window::default()
        }));
        let (count, limit) = batch_packet_count(&hostile);
        assert!(count > limit);
        let heartbeat = encoded(v1::frame::Body::Heartbeat(v1::Heartbeat::default()));
        assert_eq!(batch_packet_count(&heartbeat).0, 0);
    }
}
