//! The live core's cost per small packet, end to end inside the core:
//! four synced relays send batches of small TrackEvents (eight sequences
//! each, a quarter stamped on MONOTONIC), the core stages, resolves, orders
//! and drains them through the merge window, and every drain is
//! acknowledged. No IO: what the daemon's ingest thread spends besides
//! reading frames and writing the file (docs/performance.md, "The live
//! core per packet").

use bytes::Bytes;
use divan::{Bencher, black_box};
use prost::Message;
use tracesync_core::live::{HelloInfo, LiveConfig, LiveCore, OutPacket, Recovered, SyncEstimate};
use tracesync_core::sync::CheckedSample;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC};
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{ClockSnapshot, TracePacket, TrackEvent, track_event};

const RELAYS: u64 = 4;
const SEQUENCES: u32 = 8;
const BATCH_PACKETS: usize = 512;
/// Relay time one batch of each relay covers (ns): 4 x 512 packets per
/// 5 ms is the ~400 k packets/s per relay of the live benchmark.
const BATCH_SPAN_NS: u64 = 5_000_000;
const ROUNDS: u64 = 320;
/// A new estimate per relay every this many rounds (250 ms: 4 Hz probes).
const ESTIMATE_EVERY: u64 = 50;
const START_NS: u64 = 1_000_000_000_000;

fn main() {
    divan::main();
}

fn packet(relay: u64, i: usize, ts: u64) -> Bytes {
    let seq = 1 + (i as u32 % SEQUENCES);
    let monotonic = i % 4 == 3;
    let p = TracePacket {
        timestamp: Some(ts),
        timestamp_clock_id: monotonic.then_some(MONOTONIC),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        ),
        data: Some(Data::TrackEvent(TrackEvent {
            r#type: Some(track_event::Type::SliceBegin as i32),
            track_uuid: Some(relay * 100 + u64::from(seq)),
            name_field: Some(track_event::NameField::Name(format!("slice {}", i % 64))),
            ..Default::default()
        })),
        ..Default::default()
    };
    Bytes::from(p.encode_to_vec())
}

/// A ClockSnapshot relating MONOTONIC to BOOTTIME (the same at `ts`), as
/// relays send one now and then.
fn snapshot(ts: u64) -> Bytes {
    let clock = |id| Clock {
        clock_id: Some(id),
        timestamp: Some(ts),
        ..Default::default()
    };
    let p = TracePacket {
        timestamp: Some(ts),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(SEQUENCES + 1),
        ),
        data: Some(Data::ClockSnapshot(ClockSnapshot {
            clocks: vec![clock(BOOTTIME), clock(MONOTONIC)],
            primary_trace_clock: None,
        })),
        ..Default::default()
    };
    Bytes::from(p.encode_to_vec())
}

/// Every relay's batches, encoded once: `[round][relay]`; each relay's
/// first batch of every [`ESTIMATE_EVERY`] rounds starts with a snapshot.
fn batches() -> Vec<Vec<Vec<Bytes>>> {
    (0..ROUNDS)
        .map(|round| {
            (0..RELAYS)
                .map(|relay| {
                    let from = START_NS + round * BATCH_SPAN_NS;
                    let snapshots = (round % ESTIMATE_EVERY == 0).then(|| snapshot(from));
                    snapshots
                        .into_iter()
                        .chain((0..BATCH_PACKETS).map(|i| {
                            let ts = from + i as u64 * BATCH_SPAN_NS / BATCH_PACKETS as u64;
                            packet(relay, i, ts)
                        }))
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// An estimate at relay time `at` whose newest checked sample is there
/// (offset 0, the relays' clocks are the host's).
fn estimate(at: u64) -> SyncEstimate {
    SyncEstimate {
        epoch: 1,
        ref_relay_ns: at,
        error_bound_ns: 150_000,
        sigma_ns: 2_000,
        rtt_ns: 100_000,
        samples: 64,
        freq_bound_ppm: 0.2,
        covered_through_relay_ns: at,
        checked: Some(CheckedSample {
            relay_ns: at,
            offset_ns: 0,
            half_width_ns: 50_000,
        }),
        ..SyncEstimate::default()
    }
}

/// Runs the whole workload through a fresh core; the packets written.
fn run(batches: Vec<Vec<Vec<Bytes>>>) -> usize {
    let mut core = LiveCore::new(LiveConfig::default(), Recovered::default());
    let slots: Vec<_> = (0..RELAYS)
        .map(|r| {
            let hello = HelloInfo {
                relay_instance: 100 + r,
                boot_id: format!("boot-{r}"),
                machine_name: format!("relay-{r}"),
                machine_raw_id: 10 + r as u32,
                oldest_unacked_batch: 1,
                clocks: None,
                ring: false,
            };
            let slot = core.connect(hello, START_NS).expect("connects").slot;
            core.sync(slot, estimate(START_NS)).expect("known slot");
            slot
        })
        .collect();
    let mut out: Vec<OutPacket> = Vec::new();
    let mut written = 0;
    let mut index = vec![0u64; RELAYS as usize];
    for (round, relays) in (0u64..).zip(batches) {
        let now = START_NS + (round + 1) * BATCH_SPAN_NS;
        if round % ESTIMATE_EVERY == ESTIMATE_EVERY - 1 {
            for &slot in &slots {
                core.sync(slot, estimate(now)).expect("known slot");
            }
        }
        for ((&slot, packets), first) in slots.iter().zip(relays).zip(&mut index) {
            let n = packets.len() as u64;
            core.batch(slot, round + 1, *first, packets, None, now)
                .expect("accepted");
            *first += n;
        }
        core.drain(now, &mut out);
        written += out.len();
        out.clear();
        black_box(core.committed());
    }
    core.flush_all(&mut out);
    written + out.len()
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn small_packets(bencher: Bencher) {
    let input = batches();
    let packets = ROUNDS * RELAYS * BATCH_PACKETS as u64;
    let written = run(input.clone());
    assert!(written as u64 >= packets, "{written} of {packets} written");
    bencher
        .counter(divan::counter::ItemsCount::new(packets))
        .with_inputs(|| input.clone())
        .bench_local_values(run);
}
