//! The rolling writer alone: how many small packets per second one thread
//! writes durably, and its CPU per packet, with nothing else running (no
//! sessions, no live core). Packets are stamped already, ~90 bytes with
//! the feeder's identity annotations, four machines and sixteen sequences,
//! in time order; a commit is requested every 100 ms as the daemon's
//! shipped `commit-interval-ms` does, its fdatasyncs on the writer's own
//! commit thread. What a sharded daemon's
//! writer spends besides merging the shards' runs, the tail and the
//! preamble (docs/performance.md, "The daemon alone: the feeder").
//!
//!   cargo run --release -p tracesync-daemon --example writer_alone -- [SECONDS] [DIR]
//!
//! DIR (default: a new directory in the system's temporary one) is
//! removed at the end.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tracesync_core::live::{Origin, OutPacket, Role};
use tracesync_daemon::rolling::{RollingConfig, RollingWriter};
use tracesync_protocol::wire::{self, WireType};

const POOL: usize = 4096;
const MACHINES: u32 = 4;
const SEQUENCES: u32 = 16;
const COMMIT_EVERY: Duration = Duration::from_millis(100);

/// A stamped TrackEvent packet of about 90 bytes (the feeder's kind).
fn packet_bytes(machine: u32, seq: u32, i: u64) -> Vec<u8> {
    let mut event = Vec::new();
    let mut annotation = Vec::new();
    wire::put_len_field(&mut annotation, 10, b"tracesync_src");
    wire::put_len_field(
        &mut annotation,
        6,
        format!("machine-{machine}/1").as_bytes(),
    );
    wire::put_len_field(&mut event, 4, &annotation);
    let mut annotation = Vec::new();
    wire::put_len_field(&mut annotation, 10, b"tracesync_n");
    wire::put_varint_field(&mut annotation, 3, i);
    wire::put_len_field(&mut event, 4, &annotation);
    let mut annotation = Vec::new();
    wire::put_len_field(&mut annotation, 10, b"tracesync_truth_ns");
    wire::put_varint_field(&mut annotation, 3, 1_000_000_000_000 + i);
    wire::put_len_field(&mut event, 4, &annotation);
    wire::put_varint_field(&mut event, 9, 3);
    let mut packet = Vec::new();
    wire::put_varint_field(&mut packet, 8, 1_000_000_000_000 + i);
    wire::put_tag(&mut packet, 11, WireType::Len);
    wire::put_varint(&mut packet, event.len() as u64);
    packet.extend_from_slice(&event);
    wire::put_varint_field(&mut packet, 10, u64::from(seq));
    wire::put_varint_field(&mut packet, 98, u64::from(machine));
    packet
}

fn pool() -> Vec<OutPacket> {
    let names: Vec<Arc<str>> = (1..=MACHINES)
        .map(|m| Arc::from(format!("machine-{m}")))
        .collect();
    (0..POOL as u64)
        .map(|i| {
            let machine = 1 + (i % u64::from(MACHINES)) as u32;
            let seq = 1 + (i % u64::from(SEQUENCES)) as u32;
            OutPacket {
                ts: 1_000_000_000_000 + i as i64,
                machine_raw_id: machine,
                machine_name: names.get(machine as usize - 1).cloned(),
                seq,
                clock: 6,
                clock_ts: 1_000_000_000_000 + i,
                err_ns: 50_000,
                data_field: Some(11),
                src: Arc::from("bench"),
                role: Role::Data,
                origin: Some(Origin {
                    relay_instance: u64::from(machine),
                    relay_sequence: seq,
                    index: i,
                }),
                bytes: packet_bytes(machine, seq, i).into(),
            }
        })
        .collect()
}

/// utime + stime of this process, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    // Fields 14 and 15 of the stat line; 100 ticks per second on Linux.
    ticks(11).unwrap_or(0.0) / 100.0 + ticks(12).unwrap_or(0.0) / 100.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().map_or(Ok(10.0), |s| s.parse())?;
    let dir = args.next().map_or_else(
        || std::env::temp_dir().join(format!("writer-alone-{}", std::process::id())),
        PathBuf::from,
    );
    let (mut writer, _) = RollingWriter::open(RollingConfig::new(&dir))?;
    let mut packets = pool();
    let bytes_per_packet = packets.iter().map(|p| p.bytes.len()).sum::<usize>() / POOL;
    let (start, cpu_start) = (Instant::now(), cpu_seconds());
    let run_for = Duration::from_secs_f64(seconds);
    let mut next_commit = start + COMMIT_EVERY;
    let mut written = 0u64;
    let mut ts = 1_000_000_000_000i64;
    let mut now = SystemTime::now();
    while start.elapsed() < run_for {
        for packet in &mut packets {
            ts += 1;
            packet.ts = ts;
            writer.write(packet, now)?;
        }
        written += POOL as u64;
        now = SystemTime::now();
        if Instant::now() >= next_commit {
            writer.request_commit()?;
            writer.poll_commits()?;
            next_commit += COMMIT_EVERY;
        }
    }
    writer.close()?;
    let (elapsed, cpu) = (start.elapsed().as_secs_f64(), cpu_seconds() - cpu_start);
    println!(
        "writer alone: {:.0} packets/s durable (~{bytes_per_packet} B), {:.3} us CPU per packet \
         (the writer and its commit and writeback threads), {:.1} s",
        written as f64 / elapsed,
        cpu / written as f64 * 1e6,
        elapsed
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
