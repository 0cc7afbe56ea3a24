//! One packet of the merged output, as handed to the rolling writer and to
//! tail subscribers.

use bytes::Bytes;

/// TracePacket.track_descriptor.
const TRACK_DESCRIPTOR: u32 = 60;

/// What a packet is for the rolling writer's preamble (DESIGN.md §4): the
/// writer replays the latest packets of these roles at the start of every
/// file so each file opens alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// An ordinary packet: written once, never replayed.
    Data,
    /// SystemInfo of a machine: the latest per machine is replayed.
    SystemInfo,
    /// A ClockSnapshot: the latest per (machine, output sequence) is replayed.
    ClockSnapshot,
    /// A RemoteClockSync sync point: the latest per machine is replayed.
    SyncPoint,
    /// Clears its sequence's incremental state (SEQ_INCREMENTAL_STATE_CLEARED
    /// or incremental_state_cleared): starts the replayed state of the
    /// sequence afresh. Also a data packet.
    IncrementalStateCleared,
    /// Carries interned_data or trace_packet_defaults after the last clear:
    /// replayed with it. Also a data packet.
    IncrementalState,
}

impl Role {
    /// The role of a scanned packet: snapshots and SystemInfo first, then
    /// incremental state, else data.
    pub fn of(fields: &tracesync_protocol::scan::PacketFields<'_>) -> Self {
        if fields.clock_snapshot.is_some() {
            Role::ClockSnapshot
        } else if fields.system_info.is_some() {
            Role::SystemInfo
        } else if fields.remote_clock_sync.is_some() {
            Role::SyncPoint
        } else if fields.clears_incremental_state() {
            Role::IncrementalStateCleared
        } else if fields.has_interned_data
            || fields.trace_packet_defaults.is_some()
            // Producers re-emit track descriptors after each clear: a file
            // without them loses its tracks.
            || fields.data_field == Some(TRACK_DESCRIPTOR)
        {
            Role::IncrementalState
        } else {
            Role::Data
        }
    }
}

/// Where a relayed packet came from, for de-duplication of resent batches:
/// within one relay sequence packets are never reordered, so "written up to
/// index i" per (relay instance, relay sequence) says exactly what is in the
/// output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The relay's persistent instance id (Hello.relay_instance_id).
    pub relay_instance: u64,
    /// The relay's sequence id (trusted_packet_sequence_id as the relay sent it).
    pub relay_sequence: u32,
    /// Relay-wide packet index (Batch.first_packet_index + position).
    pub index: u64,
}

/// A resolved packet ready for output.
#[derive(Clone, Debug)]
pub struct OutPacket {
    /// Resolved trace time (host BOOTTIME, ns).
    pub ts: i64,
    /// Perfetto machine id stamped on the packet (0 = the host).
    pub machine_raw_id: u32,
    /// Machine name for tail/jsonl (None for an unnamed host).
    pub machine_name: Option<std::sync::Arc<str>>,
    /// Output trusted_packet_sequence_id stamped on the packet.
    pub seq: u32,
    /// Clock the packet's timestamp was read in, and its raw value; both 0
    /// for a packet without timestamp (it takes its stream's last time).
    pub clock: u32,
    pub clock_ts: u64,
    /// Error bound of `ts` (0 within the host machine).
    pub err_ns: u64,
    /// Payload field number (`kind` in jsonl), None if the packet has none.
    pub data_field: Option<u32>,
    /// Relay source label (`src` in jsonl), e.g. "phone/file:/data/trace".
    pub src: std::sync::Arc<str>,
    pub role: Role,
    /// None for packets the daemon made itself (its own snapshots,
    /// SystemInfo, sync points).
    pub origin: Option<Origin>,
    /// The stamped TracePacket bytes, without Trace framing.
    pub bytes: Bytes,
}
