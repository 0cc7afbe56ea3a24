//! The writer thread's own ceiling with sharded ingest, without ingest:
//! runs of small packets (~60 B TrackEvents, as the feeder sends) from N
//! shards go through the merge (`tracesync_core::shard::ShardMerge`) and
//! into the rolling writer on the disk (fdatasync'ed commits on its sync
//! thread, one request per 16 runs), as `daemon/src/server/shards/writer.rs`
//! does. Packets per second here bound the daemon at any shard count
//! (docs/performance.md, "Sharded ingest").
//!
//!   cargo bench -p tracesync-daemon --bench shard_writer
//!   BENCH_DIR=/some/disk cargo bench ...   # where the output goes (default: the temp dir)

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use divan::Bencher;
use divan::counter::ItemsCount;
use prost::Message;
use tracesync_core::live::{Origin, OutPacket};
use tracesync_core::shard::{Run, ShardMerge};
use tracesync_daemon::rolling::{RollingConfig, RollingWriter, role_of};
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{TracePacket, TrackEvent, track_event};
use tracesync_protocol::scan;

/// Packets in all, whatever the shard count.
const PACKETS: usize = 1 << 19;
/// Packets of one run (a shard's drain round).
const RUN_PACKETS: usize = 4096;
/// Time one run covers (ns): ~4 M packets/s in all.
const RUN_SPAN_NS: i64 = 1_000_000;
const COMMIT_EVERY_RUNS: usize = 16;

fn main() {
    divan::main();
}

fn packet(shard: usize, index: u64, ts: i64) -> OutPacket {
    let machine = 10 + shard as u32;
    let p = TracePacket {
        timestamp: Some(ts as u64),
        sequence_flags: Some(2),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(100 + shard as u32),
        ),
        machine_id: Some(machine),
        data: Some(Data::TrackEvent(TrackEvent {
            track_uuid: Some(7),
            r#type: Some(track_event::Type::Instant as i32),
            name_field: Some(track_event::NameField::NameIid(1)),
            ..Default::default()
        })),
        ..Default::default()
    };
    let bytes = Bytes::from(p.encode_to_vec());
    let role = scan::scan_packet(&bytes).map_or(tracesync_core::live::Role::Data, |f| role_of(&f));
    OutPacket {
        ts,
        machine_raw_id: machine,
        machine_name: Some(Arc::from("bench")),
        seq: 100 + shard as u32,
        clock: 6,
        clock_ts: ts as u64,
        err_ns: 0,
        data_field: None,
        src: Arc::from("bench/feeder"),
        role,
        origin: Some(Origin {
            relay_instance: 1000 + shard as u64,
            relay_sequence: 1,
            index,
        }),
        bytes: bytes.into(),
    }
}

/// (shard, run) in the order the writer receives them: round robin, each
/// shard's run covering the same span, its watermark the span's end.
fn runs(shards: usize) -> Vec<(usize, Run<OutPacket>)> {
    let rounds = PACKETS / RUN_PACKETS / shards;
    let per_shard = RUN_PACKETS;
    let mut out = Vec::new();
    for round in 0..rounds {
        for shard in 0..shards {
            let start = round as i64 * RUN_SPAN_NS;
            let packets = (0..per_shard)
                .map(|i| {
                    let ts = start + (i as i64 * RUN_SPAN_NS) / per_shard as i64 + shard as i64;
                    packet(shard, (round * per_shard + i) as u64, ts)
                })
                .collect();
            let run = Run {
                packets,
                watermark: start + RUN_SPAN_NS,
                complete: true,
                position: round as u64,
            };
            out.push((shard, run));
        }
    }
    out
}

#[divan::bench(args = [1, 2, 8], sample_count = 5, sample_size = 1)]
fn merge_and_write(bencher: Bencher, shards: usize) {
    let dir_root = std::env::var_os("BENCH_DIR").map_or_else(std::env::temp_dir, Into::into);
    let total = (PACKETS / RUN_PACKETS / shards) * shards * RUN_PACKETS;
    bencher
        .counter(ItemsCount::new(total))
        .with_inputs(|| {
            let dir = tempfile::tempdir_in(&dir_root).expect("temp dir");
            let (writer, _) = RollingWriter::open(RollingConfig::new(dir.path())).expect("open");
            (dir, writer, runs(shards))
        })
        .bench_local_values(|(dir, mut writer, runs)| {
            let mut merge = ShardMerge::new(shards, 16 << 20);
            let mut out = Vec::with_capacity(RUN_PACKETS * 2);
            let now = SystemTime::now();
            for (i, (shard, run)) in runs.into_iter().enumerate() {
                merge.push(shard, run);
                merge.drain(&mut out);
                for p in out.drain(..) {
                    writer.write(&p, now).expect("write");
                }
                if i % COMMIT_EVERY_RUNS == 0 {
                    writer.request_commit().expect("commit");
                    writer.poll_commits().expect("poll");
                }
            }
            merge.flush_all(&mut out);
            for p in out.drain(..) {
                writer.write(&p, now).expect("write");
            }
            writer.commit().expect("commit");
            writer.close().expect("close");
            dir
        });
}
