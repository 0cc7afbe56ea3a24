//! The server with the real live core and rolling writer: a relay's batches
//! land in the output file and are acknowledged after the commit.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use tokio::net::TcpStream;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::timeout;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;
use tracesync_protocol::relay::{MAX_FRAME_BYTES, PROTOCOL_VERSION, v1};
use tracesync_protocol::scan::scan_packet;

use super::ingest::IngestSettings;
use super::run::{Parts, start};
use super::*;
use crate::rolling::{RollingConfig, RollingWriter};
use tracesync_core::live::{LiveConfig, LiveCore, OutPacket};
use tracesync_core::status::StatusReport;
use tracesync_core::sync::{SyncEstimate, SyncUpdate};

const RAW_ID: u32 = 0x5eed;

/// A TracePacket: timestamp (8), trusted_packet_sequence_id (10) and an
/// empty track_event (11).
fn trace_packet(ts: u64, sequence: u32) -> Bytes {
    let mut p = vec![0x40];
    put_varint(&mut p, ts);
    p.push(0x50);
    put_varint(&mut p, u64::from(sequence));
    p.extend_from_slice(&[0x5a, 0x00]);
    Bytes::from(p)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn clocks(boottime_ns: u64) -> Option<v1::RelayClocks> {
    Some(v1::RelayClocks {
        boottime_ns,
        monotonic_ns: boottime_ns,
        realtime_ns: 0,
        monotonic_raw_ns: boottime_ns,
    })
}

async fn send(
    relay: &mut Framed<TcpStream, tokio_util::codec::LengthDelimitedCodec>,
    body: v1::frame::Body,
) {
    let bytes = v1::Frame { body: Some(body) }.encode_to_vec();
    relay.send(Bytes::from(bytes)).await.unwrap();
}

async fn recv(
    relay: &mut Framed<TcpStream, tokio_util::codec::LengthDelimitedCodec>,
) -> Option<v1::frame::Body> {
    let frame = timeout(Duration::from_secs(10), relay.next())
        .await
        .expect("the daemon answers within 10 s")?;
    v1::Frame::decode(frame.ok()?).unwrap().body
}

/// Packets of the output files with our relay's machine id, and their
/// sequence ids.
fn relay_packets_in(dir: &std::path::Path) -> usize {
    let mut found = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pftrace") {
            continue;
        }
        let mut reader = tracesync_protocol::reader::TraceReader::new();
        reader.push(&std::fs::read(&path).unwrap());
        while let Some(packet) = reader.next_packet().unwrap() {
            let fields = scan_packet(packet.bytes).unwrap();
            // The relay's track events, not the daemon's sync-quality ones.
            if fields.machine_id == Some(RAW_ID)
                && fields.data_field == Some(11)
                && !tracesync_core::sync_quality::is_quality_sample(&fields)
            {
                found += 1;
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_reach_the_output_file_and_are_acked_after_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (writer, recovered) = RollingWriter::open(RollingConfig::new(dir.path())).unwrap();
    let core = LiveCore::new(
        LiveConfig {
            merge_window_ns: 10_000_000,
            ..LiveConfig::default()
        },
        recovered.clone(),
    );
    let (sync_tx, sync_updates) = mpsc::channel(4);
    let parts = Parts {
        core,
        writer,
        probes: NoProbes,
        sync_updates,
        packets: broadcast::channel::<Arc<OutPacket>>(64).0,
        status: watch::channel(Arc::new(StatusReport::default())).0,
        preamble_requests: None,
        trigger_requests: None,
    };
    let shutdown = CancellationToken::new();
    let settings = SessionSettings {
        max_relays: 4,
        hello_timeout: Duration::from_secs(5),
        max_frame_bytes: MAX_FRAME_BYTES,
        frame_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(60),
        sync_udp_port: 0,
        final_ack_timeout: Duration::from_secs(5),
        tls: None,
    };
    let listener = listener::bind_data("127.0.0.1:0".parse().unwrap()).unwrap();
    let running = start(
        listener,
        settings,
        None,
        IngestSettings::new(Duration::from_millis(20)),
        parts,
        shutdown.clone(),
    )
    .unwrap();

    let stream = TcpStream::connect(running.data_addr).await.unwrap();
    let mut relay = Framed::new(stream, session::codec(MAX_FRAME_BYTES));
    let now = tracesync_common::clock::boottime_ns();
    send(
        &mut relay,
        v1::frame::Body::Hello(v1::Hello {
            protocol_version: PROTOCOL_VERSION,
            token: String::new(),
            relay_instance_id: 99,
            boot_id: "boot".into(),
            machine_name: "relay-a".into(),
            machine_raw_id: RAW_ID,
            oldest_unacked_batch: 1,
            clocks: clocks(now),
            mode: String::new(),
        }),
    )
    .await;
    let Some(v1::frame::Body::Welcome(welcome)) = recv(&mut relay).await else {
        panic!("expected Welcome");
    };
    assert_eq!(welcome.acked_through_batch, 0);
    // The relay's clock is the host's (offset 0): the first slot is 1.
    sync_tx
        .send(SyncUpdate {
            slot: 1,
            session_id: welcome.session_id,
            estimate: SyncEstimate {
                ref_relay_ns: now,
                samples: 8,
                ..SyncEstimate::default()
            },
            samples: Vec::new(),
        })
        .await
        .unwrap();
    for seq in 1..=3u64 {
        let ts = tracesync_common::clock::boottime_ns();
        send(
            &mut relay,
            v1::frame::Body::Batch(v1::Batch {
                seq,
                first_packet_index: (seq - 1) * 2,
                packets: vec![trace_packet(ts, 2), trace_packet(ts + 1, 2)],
                clocks: clocks(ts + 2),
            }),
        )
        .await;
    }
    // Heartbeats move the relay's clock on, so the watermark passes the packets.
    let mut acked = 0;
    while acked < 3 {
        send(
            &mut relay,
            v1::frame::Body::Heartbeat(v1::Heartbeat {
                clocks: clocks(tracesync_common::clock::boottime_ns()),
                last_batch_sent: 3,
                sources: Vec::new(),
                ring: None,
            }),
        )
        .await;
        match timeout(Duration::from_millis(100), relay.next()).await {
            Ok(Some(Ok(frame))) => match v1::Frame::decode(frame).unwrap().body {
                Some(v1::frame::Body::Ack(ack)) => {
                    assert!(ack.through_batch > acked, "acks grow");
                    acked = ack.through_batch;
                }
                other => panic!("expected Ack, got {other:?}"),
            },
            Ok(other) => panic!("connection ended: {other:?}"),
            Err(_) => {} // no ack yet
        }
    }
    // Acked means committed: every packet is in the file.
    assert_eq!(relay_packets_in(dir.path()), 6);

    shutdown.cancel();
    let summary = running.stopped().await.unwrap();
    assert!(summary.packets_written >= 6, "{summary:?}");
    assert!(recv(&mut relay).await.is_none(), "closed on shutdown");
    let index = std::fs::read_to_string(dir.path().join("index.jsonl")).unwrap();
    assert!(index.contains("\"complete\":true"), "{index}");
}
