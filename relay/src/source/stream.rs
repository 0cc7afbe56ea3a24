//! `unix:PATH` (a listening socket, one stream per producer connection) and
//! `stdin`: Trace-framed packets from local producers.
//!
//! These producers are not a tracing service: whatever field 10 they write
//! is theirs, so each stream (connection) gets its own relay sequences, one
//! per distinct field-10 value plus one for packets without it. Streams
//! cannot be resumed after a relay restart (their cursor is `None`).

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::Condition;
use super::pipeline::Pipeline;
use super::{Cursor, SourceBatch, SourceContext, send_batch};

/// Producer connections served at once per socket; more are closed at once
/// and counted in `connections_refused`.
pub const MAX_CONNECTIONS: usize = 64;

/// Bytes read per call.
const READ_CHUNK: usize = 64 << 10;

/// How long to wait before binding again after a failure.
const BIND_RETRY: Duration = Duration::from_secs(1);

pub(crate) async fn run_unix(
    path: PathBuf,
    label: String,
    index: u16,
    ctx: SourceContext,
    tx: mpsc::Sender<SourceBatch>,
) {
    let Some(listener) = bind(&path, &label, index, &ctx).await else {
        return;
    };
    let mut connections = JoinSet::new();
    let mut next_peer = 0u64;
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        ctx.stats.report(format!("source {index} ({label}): accept failed: {e}"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if connections.len() >= MAX_CONNECTIONS {
                    ctx.stats.connections_refused.fetch_add(1, Ordering::Relaxed);
                    ctx.stats.report(format!(
                        "source {index} ({label}): {MAX_CONNECTIONS} producers connected; \
                         closing a new connection"
                    ));
                    continue;
                }
                ctx.stats.connections.fetch_add(1, Ordering::Relaxed);
                next_peer += 1;
                let name = format!("{label} connection {next_peer}");
                connections.spawn(pump(stream, name, index, ctx.clone(), tx.clone()));
            }
        }
    }
    connections.shutdown().await;
    // Ours to remove: bind() made it.
    let _ = std::fs::remove_file(&path);
}

/// Binds the socket, replacing a stale socket file; retries until it
/// works or shutdown (None).
async fn bind(
    path: &std::path::Path,
    label: &str,
    index: u16,
    ctx: &SourceContext,
) -> Option<UnixListener> {
    let mut reported = false;
    loop {
        let error = match std::fs::symlink_metadata(path) {
            Ok(meta) if !std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) => {
                Some("exists and is not a socket; remove it or choose another path".to_owned())
            }
            other => {
                if other.is_ok() {
                    // A socket file left by an earlier run: nobody listens on it
                    // if connecting fails.
                    if std::os::unix::net::UnixStream::connect(path).is_err() {
                        let _ = std::fs::remove_file(path);
                    }
                }
                match UnixListener::bind(path) {
                    Ok(l) => return Some(l),
                    Err(e) => Some(format!("cannot listen: {e}; retrying every second")),
                }
            }
        };
        if let (Some(e), false) = (error, reported) {
            reported = true;
            ctx.stats.report(format!("source {index} ({label}): {e}"));
        }
        tokio::select! {
            () = ctx.shutdown.cancelled() => return None,
            () = tokio::time::sleep(BIND_RETRY) => {}
        }
    }
}

pub(crate) async fn run_stdin(
    label: String,
    index: u16,
    ctx: SourceContext,
    tx: mpsc::Sender<SourceBatch>,
) {
    // A blocking read of fd 0 on tokio's blocking pool (as tokio's own stdin
    // does): a runtime that shuts down while stdin is quiet should use
    // `shutdown_timeout`.
    let stdin = std::io::stdin().as_fd().try_clone_to_owned();
    match stdin {
        Ok(fd) => {
            let file = tokio::fs::File::from_std(std::fs::File::from(fd));
            let stats = ctx.stats.clone();
            pump(file, label, index, ctx, tx).await;
            stats.set_state(Condition::Ended, "standard input closed");
        }
        Err(e) => {
            let detail = format!("cannot read standard input: {e}");
            ctx.stats.set_state(Condition::Failed, detail.clone());
            ctx.stats
                .report(format!("source {index} ({label}): {detail}"));
        }
    }
}

/// Reads one stream to its end, sending its packets. Bad framing or a
/// stream ending inside a packet is reported and ends the stream.
pub(crate) async fn pump<R: AsyncRead + Unpin>(
    mut input: R,
    name: String,
    index: u16,
    ctx: SourceContext,
    tx: mpsc::Sender<SourceBatch>,
) {
    let mut pipeline = Pipeline::new(ctx.sequences.clone(), 0);
    let mut buf = vec![0u8; READ_CHUNK];
    let fail = |what: String| {
        ctx.stats.stream_errors.fetch_add(1, Ordering::Relaxed);
        ctx.stats.report(format!("source {index} ({name}): {what}"));
    };
    loop {
        let n = tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            read = input.read(&mut buf) => match read {
                Ok(n) => n,
                Err(e) => {
                    let at = pipeline.input_end();
                    fail(format!("read error at byte offset {at}: {e}; stream closed"));
                    return;
                }
            },
        };
        if n == 0 {
            if let Err(e) = pipeline.finish() {
                fail(format!("{e}; the producer stopped inside a packet"));
            }
            return;
        }
        pipeline.push(&buf[..n]);
        loop {
            let batch = match pipeline.next_batch(&ctx.stats) {
                Ok(b) if b.packets.is_empty() => break,
                Ok(b) => b,
                Err(e) => {
                    fail(format!("{e}; expected Trace-framed packets, stream closed"));
                    return;
                }
            };
            ctx.fire_packet_triggers(&format!("source {index} ({name})"), &batch.triggers);
            let batch = SourceBatch {
                source: index,
                packets: batch.packets,
                cursor: Cursor::None,
            };
            if !send_batch(&tx, &ctx, batch).await {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tokio::io::AsyncWriteExt;
    use tokio::net::UnixStream;

    use super::*;
    use crate::source::test_support::{context, framed, receive};
    use crate::source::{SourceSpec, spawn};

    async fn connect(path: &std::path::Path) -> UnixStream {
        for _ in 0..200 {
            if let Ok(s) = UnixStream::connect(path).await {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("socket never listened");
    }

    #[tokio::test]
    async fn two_producers_at_once_get_their_own_sequences() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.sock");
        // A stale socket file from an earlier run is replaced.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let ctx = context();
        let (tx, mut rx) = mpsc::channel(64);
        let task = spawn(
            SourceSpec::Unix(path.clone()),
            2,
            ctx.clone(),
            Cursor::None,
            tx,
        );

        let mut a = connect(&path).await;
        let mut b = connect(&path).await;
        // Interleaved writes that cut packets; both write field 10 = 1.
        let bytes_a = framed(0..20, Some(1));
        let bytes_b = framed(100..120, Some(1));
        for (ca, cb) in bytes_a.chunks(11).zip(bytes_b.chunks(11)) {
            a.write_all(ca).await.unwrap();
            b.write_all(cb).await.unwrap();
        }
        // Packets without field 10 on connection a: one more sequence.
        a.write_all(&framed(50..55, None)).await.unwrap();
        drop(a);
        drop(b);
        let (got, cursor) = receive(&mut rx, 45).await;
        assert_eq!(cursor, Cursor::None);
        let mut by_seq: HashMap<u32, Vec<u64>> = HashMap::new();
        for (ts, seq) in got {
            by_seq.entry(seq).or_default().push(ts);
        }
        let mut streams: Vec<_> = by_seq.into_values().collect();
        streams.sort();
        assert_eq!(
            streams,
            [
                (0..20).collect::<Vec<_>>(),
                (50..55).collect(),
                (100..120).collect()
            ]
        );
        assert_eq!(ctx.stats.connections.load(Ordering::Relaxed), 2);

        // A producer that sends garbage is closed; the others go on.
        let mut bad = connect(&path).await;
        bad.write_all(b"\x10\x01junk").await.unwrap();
        let mut c = connect(&path).await;
        c.write_all(&framed(7..9, None)).await.unwrap();
        let (got, _) = receive(&mut rx, 2).await;
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [7, 8]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(ctx.stats.stream_errors.load(Ordering::Relaxed), 1);
        let error = ctx.stats.last_error().unwrap();
        assert!(error.contains("connection 3): byte offset 0:"), "{error}");

        ctx.shutdown.cancel();
        task.await.unwrap();
        assert!(!path.exists(), "the socket file is removed on shutdown");
    }

    #[tokio::test]
    async fn refuses_to_replace_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-a-socket");
        std::fs::write(&path, b"keep me").unwrap();
        let ctx = context();
        let (tx, _rx) = mpsc::channel(4);
        let task = spawn(
            SourceSpec::Unix(path.clone()),
            1,
            ctx.clone(),
            Cursor::None,
            tx,
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let error = ctx.stats.last_error().unwrap();
        assert!(error.contains("is not a socket"), "{error}");
        ctx.shutdown.cancel();
        task.await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    }

    #[tokio::test]
    async fn a_stream_ending_inside_a_packet_is_reported() {
        let ctx = context();
        let (tx, mut rx) = mpsc::channel(4);
        let mut bytes = framed(0..3, None);
        bytes.truncate(bytes.len() - 2);
        pump(&bytes[..], "stdin".into(), 1, ctx.clone(), tx).await;
        let (got, _) = receive(&mut rx, 2).await;
        assert_eq!(got.len(), 2);
        assert_eq!(ctx.stats.stream_errors.load(Ordering::Relaxed), 1);
        assert!(ctx.stats.last_error().unwrap().contains("inside a packet"));
    }
}
