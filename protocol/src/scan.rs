//! Zero-copy scan of a TracePacket's top-level fields, and stamping of
//! top-level fields into a copy of the packet's bytes.
//!
//! Only the fields the relay and the daemon act on are read (DESIGN.md §2);
//! everything else, nested timestamps included, passes through untouched.

use crate::wire::{self, WireError};

/// TracePacket field numbers tracesync reads or writes.
pub mod field {
    pub const TRUSTED_UID: u32 = 3;
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const INCREMENTAL_STATE_CLEARED: u32 = 41;
    pub const PREVIOUS_PACKET_DROPPED: u32 = 42;
    pub const SYSTEM_INFO: u32 = 45;
    pub const COMPRESSED_PACKETS: u32 = 50;
    pub const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const TRACE_PACKET_DEFAULTS: u32 = 59;
    pub const TRUSTED_PID: u32 = 79;
    pub const FIRST_PACKET_ON_SEQUENCE: u32 = 87;
    pub const MACHINE_ID: u32 = 98;
    pub const REMOTE_CLOCK_SYNC: u32 = 107;
}

/// TracePacket.sequence_flags bits.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

/// The top-level fields of one packet, borrowed from its bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketFields<'a> {
    pub timestamp: Option<u64>,
    pub timestamp_clock_id: Option<u32>,
    pub trusted_packet_sequence_id: Option<u32>,
    pub has_trusted_uid: bool,
    pub has_trusted_pid: bool,
    pub sequence_flags: u32,
    pub incremental_state_cleared: bool,
    pub previous_packet_dropped: u32,
    pub machine_id: Option<u32>,
    pub has_interned_data: bool,
    pub trace_packet_defaults: Option<&'a [u8]>,
    pub clock_snapshot: Option<&'a [u8]>,
    pub system_info: Option<&'a [u8]>,
    pub remote_clock_sync: Option<&'a [u8]>,
    pub compressed_packets: Option<&'a [u8]>,
    /// Field number of the packet's payload (its `data` oneof member), if any.
    pub data_field: Option<u32>,
}

impl PacketFields<'_> {
    /// Whether this packet clears the incremental state of its sequence.
    pub fn clears_incremental_state(&self) -> bool {
        self.incremental_state_cleared || self.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED != 0
    }

    /// Whether this packet needs the incremental state of its sequence.
    pub fn needs_incremental_state(&self) -> bool {
        self.sequence_flags & SEQ_NEEDS_INCREMENTAL_STATE != 0
    }

    /// Name of the payload field for reports ("track_event", or "field_<n>").
    pub fn kind(&self) -> Kind {
        Kind(self.data_field)
    }
}

/// A packet's payload kind, printed as Perfetto's field name where we know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind(pub Option<u32>);

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => f.write_str("none"),
            Some(n) => match data_field_name(n) {
                Some(name) => f.write_str(name),
                None => write!(f, "field_{n}"),
            },
        }
    }
}

/// Perfetto's names for the TracePacket `data` oneof members we recognise.
pub const fn data_field_name(field_number: u32) -> Option<&'static str> {
    Some(match field_number {
        1 => "ftrace_events",
        2 => "process_tree",
        5 => "chrome_events",
        6 => "clock_snapshot",
        7 => "sys_stats",
        9 => "process_stats",
        11 => "track_event",
        33 => "trace_config",
        34 => "ftrace_stats",
        35 => "trace_stats",
        36 => "synchronization_marker",
        43 => "process_descriptor",
        44 => "thread_descriptor",
        45 => "system_info",
        50 => "compressed_packets",
        60 => "track_descriptor",
        69 => "service_event",
        107 => "remote_clock_sync",
        _ => return None,
    })
}

/// Top-level fields that are packet metadata, not the `data` payload.
const fn is_metadata_field(n: u32) -> bool {
    matches!(
        n,
        field::TRUSTED_UID
            | field::TIMESTAMP
            | field::TRUSTED_PACKET_SEQUENCE_ID
            | field::INTERNED_DATA
            | field::SEQUENCE_FLAGS
            | field::INCREMENTAL_STATE_CLEARED
            | field::PREVIOUS_PACKET_DROPPED
            | field::TIMESTAMP_CLOCK_ID
            | field::TRACE_PACKET_DEFAULTS
            | field::TRUSTED_PID
            | field::FIRST_PACKET_ON_SEQUENCE
            | field::MACHINE_ID
    )
}

/// A malformed packet: what is wrong and at which byte of the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error} at packet byte {offset}")]
pub struct ScanError {
    pub offset: usize,
    pub error: WireError,
}

/// One top-level field: number, wire type, and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawField<'a> {
    pub number: u32,
    /// Byte range of the whole field (tag included) in the message.
    pub start: usize,
    pub end: usize,
    pub value: FieldValue<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValue<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Len(&'a [u8]),
}

/// Iterates the top-level fields of a protobuf message without allocating.
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn read_field(&mut self) -> Result<RawField<'a>, WireError> {
        let start = self.pos;
        let tag = wire::read_varint(self.buf, &mut self.pos)?;
        let number = u32::try_from(tag >> 3).map_err(|_| WireError::BadWireType(0))?;
        if number == 0 {
            return Err(WireError::FieldZero);
        }
        let value = match (tag & 7) as u8 {
            0 => FieldValue::Varint(wire::read_varint(self.buf, &mut self.pos)?),
            1 => {
                let bytes = self.take(8)?;
                FieldValue::Fixed64(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
            }
            2 => {
                let len = wire::read_varint(self.buf, &mut self.pos)?;
                let available = (self.buf.len() - self.pos) as u64;
                if len > available {
                    return Err(WireError::LengthPastEnd { len, available });
                }
                FieldValue::Len(self.take(len as usize)?)
            }
            5 => {
                let bytes = self.take(4)?;
                FieldValue::Fixed32(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
            }
            other => return Err(WireError::BadWireType(other)),
        };
        Ok(RawField {
            number,
            start,
            end: self.pos,
            value,
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<RawField<'a>, ScanError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let start = self.pos;
        match self.read_field() {
            Ok(f) => Some(Ok(f)),
            Err(error) => {
                self.pos = self.buf.len(); // stop after the first error
                Some(Err(ScanError {
                    offset: start,
                    error,
                }))
            }
        }
    }
}

/// Reads the top-level fields tracesync acts on. Never allocates.
pub fn scan_packet(packet: &[u8]) -> Result<PacketFields<'_>, ScanError> {
    let mut out = PacketFields::default();
    for f in Fields::new(packet) {
        let f = f?;
        match (f.number, f.value) {
            (field::TIMESTAMP, FieldValue::Varint(v)) => out.timestamp = Some(v),
            (field::TIMESTAMP_CLOCK_ID, FieldValue::Varint(v)) => {
                out.timestamp_clock_id = Some(v as u32);
            }
            (field::TRUSTED_PACKET_SEQUENCE_ID, FieldValue::Varint(v)) => {
                out.trusted_packet_sequence_id = Some(v as u32);
            }
            (field::TRUSTED_UID, _) => out.has_trusted_uid = true,
            (field::TRUSTED_PID, _) => out.has_trusted_pid = true,
            (field::SEQUENCE_FLAGS, FieldValue::Varint(v)) => out.sequence_flags = v as u32,
            (field::INCREMENTAL_STATE_CLEARED, FieldValue::Varint(v)) => {
                out.incremental_state_cleared = v != 0;
            }
            (field::PREVIOUS_PACKET_DROPPED, FieldValue::Varint(v)) => {
                out.previous_packet_dropped = v as u32;
            }
            (field::MACHINE_ID, FieldValue::Varint(v)) => out.machine_id = Some(v as u32),
            (field::INTERNED_DATA, _) => out.has_interned_data = true,
            (field::TRACE_PACKET_DEFAULTS, FieldValue::Len(b)) => {
                out.trace_packet_defaults = Some(b);
            }
            (n, value) => {
                if let FieldValue::Len(b) = value {
                    match n {
                        field::CLOCK_SNAPSHOT => out.clock_snapshot = Some(b),
                        field::SYSTEM_INFO => out.system_info = Some(b),
                        field::REMOTE_CLOCK_SYNC => out.remote_clock_sync = Some(b),
                        field::COMPRESSED_PACKETS => out.compressed_packets = Some(b),
                        _ => {}
                    }
                }
                if !is_metadata_field(n) && out.data_field.is_none() {
                    out.data_field = Some(n);
                }
            }
        }
    }
    Ok(out)
}

/// Reads `TracePacketDefaults.timestamp_clock_id` (field 58) from its bytes.
pub fn defaults_timestamp_clock_id(defaults: &[u8]) -> Result<Option<u32>, ScanError> {
    let mut clock = None;
    for f in Fields::new(defaults) {
        if let RawField {
            number: field::TIMESTAMP_CLOCK_ID,
            value: FieldValue::Varint(v),
            ..
        } = f?
        {
            clock = Some(v as u32);
        }
    }
    Ok(clock)
}

/// Top-level edits applied by [`stamp_into`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    /// Replace (or add) `machine_id`; `Some(0)` removes it (0 means the host).
    pub machine_id: Option<u32>,
    /// Replace (or add) `trusted_packet_sequence_id`.
    pub trusted_packet_sequence_id: Option<u32>,
    /// Set `timestamp_clock_id` if the packet has none.
    pub default_timestamp_clock_id: Option<u32>,
    /// Remove fields only the tracing service may write (trusted_uid,
    /// trusted_pid, machine_id, trusted_packet_sequence_id), as Perfetto's
    /// service does to producer packets.
    pub strip_trusted: bool,
}

/// Appends `packet` with the edits of `stamp` to `out` (the body only, no
/// Trace framing). Fields not edited keep their bytes and order.
pub fn stamp_into(packet: &[u8], stamp: &Stamp, out: &mut Vec<u8>) -> Result<(), ScanError> {
    let mut has_clock_id = false;
    let mut copied_from = 0;
    // Copy runs of kept fields, skipping removed ones.
    for f in Fields::new(packet) {
        let f = f?;
        let remove = match f.number {
            field::MACHINE_ID => stamp.machine_id.is_some() || stamp.strip_trusted,
            field::TRUSTED_PACKET_SEQUENCE_ID => {
                stamp.trusted_packet_sequence_id.is_some() || stamp.strip_trusted
            }
            field::TRUSTED_UID | field::TRUSTED_PID => stamp.strip_trusted,
            field::TIMESTAMP_CLOCK_ID => {
                has_clock_id = true;
                false
            }
            _ => false,
        };
        if remove {
            out.extend_from_slice(&packet[copied_from..f.start]);
            copied_from = f.end;
        }
    }
    out.extend_from_slice(&packet[copied_from..]);
    if let Some(seq) = stamp.trusted_packet_sequence_id {
        wire::put_varint_field(out, field::TRUSTED_PACKET_SEQUENCE_ID, u64::from(seq));
    }
    if let Some(machine) = stamp.machine_id.filter(|&m| m != 0) {
        wire::put_varint_field(out, field::MACHINE_ID, u64::from(machine));
    }
    if let (false, Some(clock)) = (has_clock_id, stamp.default_timestamp_clock_id) {
        wire::put_varint_field(out, field::TIMESTAMP_CLOCK_ID, u64::from(clock));
    }
    Ok(())
}
