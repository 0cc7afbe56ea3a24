//! Small builders for Perfetto trace packets (prost types of
//! `tracesync_protocol::perfetto`), for tests.
//!
//! Each returns a plain [`TracePacket`]; set further fields on it directly, or
//! chain [`on_machine`] / [`on_sequence`]:
//!
//! ```ignore
//! let pkts = vec![
//!     clock_snapshot(&[(clock_ids::BOOTTIME, 1_000), (clock_ids::MONOTONIC, 400)]),
//!     on_sequence(track_descriptor(10, "t", None), 1),
//!     slice_begin(500, clock_ids::MONOTONIC, 1, 10, "work"),
//!     slice_end(700, clock_ids::MONOTONIC, 1, 10),
//! ];
//! std::fs::write(path, encode_trace(&pkts))?;
//! ```

use prost::Message;
use tracesync_protocol::perfetto::{
    ClockSnapshot, SystemInfo, Trace, TracePacket, TrackDescriptor, TrackEvent, Utsname,
    clock_snapshot, trace_packet, track_event,
};

/// An empty packet.
pub fn packet() -> TracePacket {
    TracePacket::default()
}

/// Sets `machine_id` (0 is the host; trace processor's `machine.raw_id`).
pub fn on_machine(mut p: TracePacket, machine_id: u32) -> TracePacket {
    p.machine_id = Some(machine_id);
    p
}

/// Sets `trusted_packet_sequence_id`.
pub fn on_sequence(mut p: TracePacket, seq: u32) -> TracePacket {
    p.optional_trusted_packet_sequence_id =
        Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq));
    p
}

/// A ClockSnapshot packet with `(clock_id, timestamp_ns)` pairs.
pub fn clock_snapshot(clocks: &[(u32, u64)]) -> TracePacket {
    let snap = ClockSnapshot {
        clocks: clocks
            .iter()
            .map(|&(clock_id, timestamp)| clock_snapshot::Clock {
                clock_id: Some(clock_id),
                timestamp: Some(timestamp),
                ..Default::default()
            })
            .collect(),
        primary_trace_clock: None,
    };
    TracePacket {
        data: Some(trace_packet::Data::ClockSnapshot(snap)),
        ..packet()
    }
}

/// A SystemInfo packet with just `utsname` (sysname, release, machine).
pub fn system_info(sysname: &str, release: &str, machine: &str) -> TracePacket {
    let info = SystemInfo {
        utsname: Some(Utsname {
            sysname: Some(sysname.into()),
            release: Some(release.into()),
            machine: Some(machine.into()),
            version: None,
        }),
        ..Default::default()
    };
    TracePacket {
        data: Some(trace_packet::Data::SystemInfo(info)),
        ..packet()
    }
}

/// A TrackDescriptor packet.
pub fn track_descriptor(uuid: u64, name: &str, parent_uuid: Option<u64>) -> TracePacket {
    TracePacket {
        data: Some(trace_packet::Data::TrackDescriptor(TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name.into()),
            parent_uuid,
            ..Default::default()
        })),
        ..packet()
    }
}

/// A TrackEvent packet at `ts` on `clock` in sequence `seq`.
pub fn track_event(ts: u64, clock: u32, seq: u32, event: TrackEvent) -> TracePacket {
    let p = TracePacket {
        timestamp: Some(ts),
        timestamp_clock_id: Some(clock),
        data: Some(trace_packet::Data::TrackEvent(event)),
        ..packet()
    };
    on_sequence(p, seq)
}

fn event(kind: track_event::Type, track: u64, name: Option<&str>) -> TrackEvent {
    TrackEvent {
        r#type: Some(kind as i32),
        track_uuid: Some(track),
        name_field: name.map(|n| track_event::NameField::Name(n.into())),
        ..Default::default()
    }
}

/// Begins a slice named `name` on track `track`.
pub fn slice_begin(ts: u64, clock: u32, seq: u32, track: u64, name: &str) -> TracePacket {
    track_event(
        ts,
        clock,
        seq,
        event(track_event::Type::SliceBegin, track, Some(name)),
    )
}

/// Ends the innermost open slice on track `track`.
pub fn slice_end(ts: u64, clock: u32, seq: u32, track: u64) -> TracePacket {
    track_event(
        ts,
        clock,
        seq,
        event(track_event::Type::SliceEnd, track, None),
    )
}

/// An instant event (a zero-duration slice).
pub fn instant(ts: u64, clock: u32, seq: u32, track: u64, name: &str) -> TracePacket {
    track_event(
        ts,
        clock,
        seq,
        event(track_event::Type::Instant, track, Some(name)),
    )
}

/// Encodes packets as a trace file (`Trace.packet`, field 1, repeated).
pub fn encode_trace(packets: &[TracePacket]) -> Vec<u8> {
    Trace {
        packet: packets.to_vec(),
    }
    .encode_to_vec()
}

/// One clock of a [`clock_snapshot_ext`] snapshot.
#[derive(Clone, Copy, Debug)]
pub struct SnapshotClockSpec {
    pub clock: u32,
    pub value: u64,
    pub unit_multiplier_ns: Option<u64>,
    pub incremental: bool,
}

impl SnapshotClockSpec {
    /// A clock in nanoseconds.
    pub fn ns(clock: u32, value: u64) -> Self {
        Self {
            clock,
            value,
            unit_multiplier_ns: None,
            incremental: false,
        }
    }

    /// A clock counting in units of `unit` ns.
    pub fn unit(clock: u32, value: u64, unit: u64) -> Self {
        Self {
            unit_multiplier_ns: Some(unit),
            ..Self::ns(clock, value)
        }
    }

    /// An incremental clock (packets carry deltas) in units of `unit` ns.
    pub fn incremental(clock: u32, value: u64, unit: u64) -> Self {
        Self {
            incremental: true,
            ..Self::unit(clock, value, unit)
        }
    }
}

/// A ClockSnapshot on sequence `seq` with units, incremental flags and an
/// optional `primary_trace_clock`.
pub fn clock_snapshot_ext(
    seq: u32,
    clocks: &[SnapshotClockSpec],
    primary: Option<u32>,
) -> TracePacket {
    let snap = ClockSnapshot {
        clocks: clocks
            .iter()
            .map(|c| clock_snapshot::Clock {
                clock_id: Some(c.clock),
                timestamp: Some(c.value),
                is_incremental: c.incremental.then_some(true),
                unit_multiplier_ns: c.unit_multiplier_ns,
            })
            .collect(),
        primary_trace_clock: primary.map(|p| p as i32),
    };
    let p = TracePacket {
        data: Some(trace_packet::Data::ClockSnapshot(snap)),
        ..packet()
    };
    on_sequence(p, seq)
}

/// A RemoteClockSync packet (as a relay host writes it) on sequence `seq`:
/// one `synced_clocks` entry per `(client BOOTTIME, host BOOTTIME)` pair.
pub fn remote_clock_sync(seq: u32, pairs: &[(u64, u64)]) -> TracePacket {
    use tracesync_protocol::perfetto::RemoteClockSync;
    use tracesync_protocol::perfetto::remote_clock_sync::SyncedClocks;
    let boottime = |value| ClockSnapshot {
        clocks: vec![clock_snapshot::Clock {
            clock_id: Some(tracesync_protocol::clock_ids::BOOTTIME),
            timestamp: Some(value),
            ..Default::default()
        }],
        primary_trace_clock: None,
    };
    let synced_clocks = pairs
        .iter()
        .map(|&(c, h)| SyncedClocks {
            client_clocks: Some(boottime(c)),
            host_clocks: Some(boottime(h)),
        })
        .collect();
    let p = TracePacket {
        data: Some(trace_packet::Data::RemoteClockSync(RemoteClockSync {
            synced_clocks,
        })),
        ..packet()
    };
    on_sequence(p, seq)
}
