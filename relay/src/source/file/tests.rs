use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::source::SourceSpec;
use crate::source::test_support::{context, framed, receive, ts_seq};

const A: FileId = FileId { dev: 1, ino: 10 };
const B: FileId = FileId { dev: 1, ino: 11 };

#[test]
fn classify_growth_truncation_replacement() {
    assert_eq!(classify(A, 100, 100, Some(A)), Change::Unchanged);
    assert_eq!(classify(A, 100, 150, Some(A)), Change::Grew);
    assert_eq!(classify(A, 100, 40, Some(A)), Change::Truncated);
    assert_eq!(classify(A, 100, 100, Some(B)), Change::Replaced);
    // The old file is read to its end before the new one is followed.
    assert_eq!(classify(A, 100, 120, Some(B)), Change::Grew);
    // A deleted path: keep the open file.
    assert_eq!(classify(A, 100, 100, None), Change::Unchanged);
}

#[test]
fn cursor_applies_only_to_the_same_file() {
    let c = Cursor::File {
        dev: 1,
        ino: 10,
        offset: 70,
    };
    assert_eq!(start_offset(&c, A, 100), 70);
    assert_eq!(start_offset(&c, B, 100), 0);
    assert_eq!(
        start_offset(&c, A, 50),
        0,
        "shorter than the cursor: a new file"
    );
    assert_eq!(start_offset(&Cursor::None, A, 100), 0);
}

fn append(path: &std::path::Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

fn start(path: &std::path::Path, resume: Cursor) -> (SourceContext, mpsc::Receiver<SourceBatch>) {
    let ctx = context();
    let (tx, rx) = mpsc::channel(64);
    let spec = SourceSpec::File(path.to_owned());
    crate::source::spawn(spec, 1, ctx.clone(), resume, tx);
    (ctx, rx)
}

#[tokio::test]
async fn follows_growth_truncation_and_replacement() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pftrace");
    let (ctx, mut rx) = start(&path, Cursor::None);

    // The file appears later and grows in chunks that cut packets.
    let first = framed(0..100, Some(1));
    let writer = {
        let path = path.clone();
        let first = first.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(80));
            for chunk in first.chunks(37) {
                append(&path, chunk);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let (got, cursor) = receive(&mut rx, 100).await;
    writer.join().unwrap();
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..100).collect::<Vec<_>>()
    );
    let id = file_id(&path).unwrap();
    assert_eq!(
        cursor,
        Cursor::File {
            dev: id.dev,
            ino: id.ino,
            offset: first.len() as u64
        }
    );
    let first_seq = got[0].1;

    // Truncated and rewritten: read from the start, on a new sequence.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    append(&path, &framed(1000..1010, Some(1)));
    let (got, _) = receive(&mut rx, 10).await;
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (1000..1010).collect::<Vec<_>>()
    );
    assert_ne!(got[0].1, first_seq);

    // Replaced by rename: the new file is followed from its start.
    let new = dir.path().join("t.new");
    append(&new, &framed(2000..2010, Some(1)));
    std::fs::rename(&new, &path).unwrap();
    let (got, cursor) = receive(&mut rx, 10).await;
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (2000..2010).collect::<Vec<_>>()
    );
    let id = file_id(&path).unwrap();
    assert!(matches!(cursor, Cursor::File { dev, ino, .. } if dev == id.dev && ino == id.ino));
    assert_eq!(ctx.stats.restarts.load(Ordering::Relaxed), 2);
    assert_eq!(ctx.stats.packets.load(Ordering::Relaxed), 120);
    ctx.shutdown.cancel();
}

#[tokio::test]
async fn resumes_from_its_cursor_without_loss_or_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pftrace");
    append(&path, &framed(0..50, None));
    let (ctx, mut rx) = start(&path, Cursor::None);
    let (got, cursor) = receive(&mut rx, 50).await;
    assert_eq!(got.len(), 50);
    ctx.shutdown.cancel();

    append(&path, &framed(50..80, None));
    let (ctx, mut rx) = start(&path, cursor.clone());
    let (got, _) = receive(&mut rx, 30).await;
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (50..80).collect::<Vec<_>>()
    );
    ctx.shutdown.cancel();

    // A cursor of another file (same path, new inode) starts over.
    let other = dir.path().join("o");
    append(&other, &framed(0..80, None));
    std::fs::rename(&other, &path).unwrap();
    let (ctx, mut rx) = start(&path, cursor);
    let (got, _) = receive(&mut rx, 80).await;
    assert_eq!(got[0].0, 0);
    ctx.shutdown.cancel();
}

#[tokio::test]
async fn a_resumed_file_first_replays_its_incremental_state() {
    use prost::Message;
    use tracesync_protocol::perfetto::{InternedData, TracePacket, trace_packet};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pftrace");
    let clear = TracePacket {
        timestamp: Some(1),
        sequence_flags: Some(1),
        interned_data: Some(InternedData::default()),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(4),
        ),
        ..Default::default()
    };
    let mut bytes = Vec::new();
    tracesync_protocol::wire::put_trace_packet(&mut bytes, &clear.encode_to_vec());
    bytes.extend(framed(10..20, Some(4)));
    append(&path, &bytes);
    let (ctx, mut rx) = start(&path, Cursor::None);
    let (got, cursor) = receive(&mut rx, 11).await;
    let seq = got[0].1;
    ctx.shutdown.cancel();

    append(&path, &framed(20..25, Some(4)));
    let (ctx, mut rx) = start(&path, cursor.clone());
    let first = rx.recv().await.expect("the replay batch");
    assert_eq!(first.cursor, cursor, "the replay consumes nothing");
    assert_eq!(first.packets.len(), 1);
    let replayed = TracePacket::decode(first.packets[0].clone()).unwrap();
    assert_eq!(
        (replayed.sequence_flags, replayed.timestamp),
        (Some(1), None),
        "the clear, without its time"
    );
    assert_eq!(
        ts_seq(&first.packets[0]).1,
        seq,
        "on the same relay sequence"
    );
    let (got, _) = receive(&mut rx, 5).await;
    assert_eq!(got, (20..25).map(|t| (t, seq)).collect::<Vec<_>>());
    ctx.shutdown.cancel();
}

#[tokio::test]
async fn bad_bytes_stop_the_file_until_it_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pftrace");
    let mut bytes = framed(0..3, None);
    let good = bytes.len();
    bytes.extend_from_slice(b"\x10\x01garbage");
    append(&path, &bytes);
    let (ctx, mut rx) = start(&path, Cursor::None);
    let (got, _) = receive(&mut rx, 3).await;
    assert_eq!(got.len(), 3);
    tokio::time::sleep(POLL_INTERVAL * 2).await;
    assert_eq!(ctx.stats.stream_errors.load(Ordering::Relaxed), 1);
    let error = ctx.stats.last_error().unwrap();
    assert!(error.starts_with("source 1 (file:"), "{error}");
    assert!(error.contains(&format!("byte offset {good}:")), "{error}");
    assert!(!error.contains('\n'));

    let new = dir.path().join("t.new");
    append(&new, &framed(10..15, None));
    std::fs::rename(&new, &path).unwrap();
    let (got, _) = receive(&mut rx, 5).await;
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (10..15).collect::<Vec<_>>()
    );
    ctx.shutdown.cancel();
}
