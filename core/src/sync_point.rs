//! Sync points: how Perfetto sees a remote machine's alignment
//! (docs/format.md). A RemoteClockSync packet relates the machine's BOOTTIME to the
//! host's; Perfetto reads them in stream order.

use prost::Message;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::perfetto::clock_snapshot::Clock;
use tracesync_protocol::perfetto::remote_clock_sync::SyncedClocks;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync, TracePacket};

/// A RemoteClockSync packet for `machine_id` with two identical entries
/// {client BOOTTIME `client`, host BOOTTIME `host`} (Perfetto takes the
/// offset `client - host` from it), on sequence `sequence_id`. Shared by the
/// offline merger and the live core.
pub fn sync_point_packet(machine_id: u32, sequence_id: u32, client: u64, host: u64) -> Vec<u8> {
    let snapshot = |value| ClockSnapshot {
        clocks: vec![Clock {
            clock_id: Some(BOOTTIME),
            timestamp: Some(value),
            ..Default::default()
        }],
        primary_trace_clock: None,
    };
    let entry = SyncedClocks {
        client_clocks: Some(snapshot(client)),
        host_clocks: Some(snapshot(host)),
    };
    let packet = TracePacket {
        data: Some(Data::RemoteClockSync(RemoteClockSync {
            synced_clocks: vec![entry.clone(), entry],
        })),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(sequence_id),
        ),
        machine_id: Some(machine_id),
        ..Default::default()
    };
    packet.encode_to_vec()
}

/// Client and host values of a sync edge with the given client-minus-host
/// offset, both non-negative and non-zero, at or after client value `c`.
pub fn offset_pair(c: u64, offset: i64) -> (u64, u64) {
    let min_client = if offset > 0 { offset as u64 + 1 } else { 1 };
    let client = c.max(min_client);
    let host = (i128::from(client) - i128::from(offset)) as u64;
    (client, host)
}
