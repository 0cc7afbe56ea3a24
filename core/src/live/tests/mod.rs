//! Sans-IO tests of the live core with hand-built packets.

use bytes::Bytes;
use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC};
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{
    ClockSnapshot, RemoteClockSync, SystemInfo, TracePacket, TracePacketDefaults, TrackEvent,
};
use tracesync_protocol::relay::v1::RelayClocks;

use super::*;

mod future;
mod ordering;
mod quality;
mod resolution;
mod sessions;
mod stalls;
mod stamping;
mod sync_points;

const HOST_NAME: &str = "host";

fn config() -> LiveConfig {
    LiveConfig {
        merge_window_ns: 100,
        host_name: Some(HOST_NAME.into()),
        ..LiveConfig::default()
    }
}

fn core() -> LiveCore {
    core_with(config())
}

/// A core with `config` (usually `..config()` with a bound changed).
fn core_with(config: LiveConfig) -> LiveCore {
    LiveCore::new(config, Recovered::default())
}

fn hello(instance: u64, raw_id: u32, name: &str) -> HelloInfo {
    HelloInfo {
        relay_instance: instance,
        boot_id: format!("boot-{instance}"),
        machine_name: name.into(),
        machine_raw_id: raw_id,
        oldest_unacked_batch: 1,
        clocks: None,
        ring: false,
    }
}

fn clocks(boottime_ns: u64) -> Option<RelayClocks> {
    Some(RelayClocks {
        boottime_ns,
        monotonic_ns: boottime_ns,
        realtime_ns: boottime_ns,
        monotonic_raw_ns: boottime_ns,
    })
}

/// An estimate with a constant offset (relay minus host).
fn estimate(offset_ns: i64) -> SyncEstimate {
    SyncEstimate {
        epoch: 1,
        ref_relay_ns: 0,
        offset_ns,
        freq_ppm: 0.0,
        error_bound_ns: 40,
        sigma_ns: 10,
        rtt_ns: 80,
        samples: 8,
        ..SyncEstimate::default()
    }
}

fn on_seq(mut p: TracePacket, seq: u32) -> TracePacket {
    p.optional_trusted_packet_sequence_id = Some(
        OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
    );
    p
}

/// A TrackEvent at `ts` (relay BOOTTIME unless a clock is set) on `seq`.
fn event(seq: u32, ts: u64) -> TracePacket {
    on_seq(
        TracePacket {
            timestamp: Some(ts),
            data: Some(Data::TrackEvent(TrackEvent::default())),
            ..Default::default()
        },
        seq,
    )
}

fn event_on_clock(seq: u32, clock: u32, ts: u64) -> TracePacket {
    let mut p = event(seq, ts);
    p.timestamp_clock_id = Some(clock);
    p
}

fn snapshot(seq: u32, clocks: &[(u32, u64)]) -> TracePacket {
    on_seq(
        TracePacket {
            timestamp: clocks.iter().find(|c| c.0 == BOOTTIME).map(|c| c.1),
            data: Some(Data::ClockSnapshot(ClockSnapshot {
                clocks: clocks
                    .iter()
                    .map(|&(id, ts)| Clock {
                        clock_id: Some(id),
                        timestamp: Some(ts),
                        ..Default::default()
                    })
                    .collect(),
                primary_trace_clock: None,
            })),
            ..Default::default()
        },
        seq,
    )
}

fn encode(packets: &[TracePacket]) -> Vec<Bytes> {
    packets
        .iter()
        .map(|p| Bytes::from(p.encode_to_vec()))
        .collect()
}

fn decode(p: &OutPacket) -> TracePacket {
    TracePacket::decode(&p.bytes.to_vec()[..]).expect("output packets decode")
}

/// Output packets that came from relays (no sync points, no host packets).
fn relayed(out: &[OutPacket]) -> Vec<&OutPacket> {
    out.iter().filter(|p| p.origin.is_some()).collect()
}

fn ts_of(out: &[OutPacket]) -> Vec<i64> {
    relayed(out).iter().map(|p| p.ts).collect()
}

/// A connected, synced relay on `raw_id` with a constant offset.
fn synced_relay(core: &mut LiveCore, instance: u64, raw_id: u32, offset: i64) -> RelaySlot {
    let c = core
        .connect(hello(instance, raw_id, &format!("m{raw_id}")), 0)
        .expect("connects");
    core.sync(c.slot, estimate(offset)).expect("slot is known");
    c.slot
}

fn drop_count(core: &LiveCore, raw_id: u32, reason: &str) -> u64 {
    core.status(0, 0)
        .into_iter()
        .find(|m| m.raw_id == raw_id)
        .and_then(|m| m.drops.get(reason).copied())
        .unwrap_or(0)
}
