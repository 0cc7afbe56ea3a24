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
    /// Where the fields [`stamp_scanned`] replaces are.
    pub stamp_layout: StampLayout,
}

/// Byte ranges of the top-level fields stamping replaces, found by the scan
/// so that stamping needs no second walk over the packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StampLayout {
    /// `trusted_packet_sequence_id` (field 10), any wire type.
    pub sequence_id: Option<(u32, u32)>,
    /// `machine_id` (field 98), any wire type.
    pub machine_id: Option<(u32, u32)>,
    /// Whether `timestamp_clock_id` (field 58) is present, any wire type.
    pub has_clock_id: bool,
    /// Field 10 or 98 appears more than once: stamping walks the packet.
    pub repeated: bool,
}

impl StampLayout {
    /// Notes a field at `start..end` if stamping cares about it.
    #[inline(always)]
    pub fn note(&mut self, number: u32, start: usize, end: usize) {
        let slot = match number {
            field::TRUSTED_PACKET_SEQUENCE_ID => &mut self.sequence_id,
            field::MACHINE_ID => &mut self.machine_id,
            field::TIMESTAMP_CLOCK_ID => {
                self.has_clock_id = true;
                return;
            }
            _ => return,
        };
        self.repeated |= slot.is_some();
        *slot = Some((start as u32, end as u32));
    }
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
        4 => "inode_file_map",
        5 => "chrome_events",
        6 => "clock_snapshot",
        7 => "sys_stats",
        9 => "process_stats",
        11 => "track_event",
        33 => "trace_config",
        34 => "ftrace_stats",
        35 => "trace_stats",
        36 => "synchronization_marker",
        37 => "profile_packet",
        38 => "battery",
        39 => "android_log",
        40 => "power_rails",
        43 => "process_descriptor",
        44 => "thread_descriptor",
        45 => "system_info",
        46 => "trigger",
        47 => "packages_list",
        48 => "chrome_benchmark_metadata",
        49 => "perfetto_metatrace",
        50 => "compressed_packets",
        51 => "chrome_metadata",
        52 => "gpu_counter_event",
        53 => "gpu_render_stage_event",
        54 => "streaming_profile_packet",
        57 => "graphics_frame_event",
        60 => "track_descriptor",
        61 => "module_symbols",
        62 => "vulkan_memory_event",
        63 => "gpu_log",
        64 => "deobfuscation_mapping",
        65 => "vulkan_api_event",
        66 => "perf_sample",
        67 => "cpu_info",
        68 => "smaps_packet",
        69 => "service_event",
        70 => "initial_display_state",
        71 => "gpu_mem_total_event",
        72 => "extension_descriptor",
        73 => "memory_tracker_snapshot",
        74 => "streaming_allocation",
        75 => "streaming_free",
        77 => "android_energy_estimation_breakdown",
        78 => "ui_state",
        82 => "translation_table",
        83 => "android_game_intervention_list",
        84 => "statsd_atom",
        86 => "android_system_property",
        89 => "trace_uuid",
        90 => "track_event_range_of_interest",
        91 => "entity_state_residency",
        95 => "etw_events",
        107 => "remote_clock_sync",
        109 => "chrome_trigger",
        133 => "zstd_compressed_packets",
        900 => "for_testing",
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
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    #[inline(always)]
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

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or(WireError::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<RawField<'a>, ScanError>;

    #[inline]
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
///
/// The hot path of the data plane: a hand-rolled loop over the fields
/// (same results and errors as walking [`Fields`]), with wire types tested
/// by plain branches, which predict better than a jump table.
pub fn scan_packet(packet: &[u8]) -> Result<PacketFields<'_>, ScanError> {
    let mut out = PacketFields::default();
    let mut pos = 0;
    while let Some(rest) = packet.get(pos..).filter(|r| !r.is_empty()) {
        let fail = |error| ScanError { offset: pos, error };
        let (tag, n) = wire::decode_varint(rest).map_err(fail)?;
        let number = u32::try_from(tag >> 3).map_err(|_| fail(WireError::BadWireType(0)))?;
        if number == 0 {
            return Err(fail(WireError::FieldZero));
        }
        let body = &rest[n..];
        let wire_type = (tag & 7) as u8;
        let start = pos;
        if wire_type == 0 {
            let (v, m) = wire::decode_varint(body).map_err(fail)?;
            pos += n + m;
            out.varint_field(number, v);
        } else if wire_type == 2 {
            let (len, m) = wire::decode_varint(body).map_err(fail)?;
            let value = &body[m..];
            if len > value.len() as u64 {
                let available = value.len() as u64;
                return Err(fail(WireError::LengthPastEnd { len, available }));
            }
            pos += n + m + len as usize;
            out.len_field(number, &value[..len as usize]);
        } else if wire_type == 1 || wire_type == 5 {
            let size = if wire_type == 1 { 8 } else { 4 };
            if body.len() < size {
                return Err(fail(WireError::Truncated));
            }
            pos += n + size;
            out.other_field(number);
        } else {
            return Err(fail(WireError::BadWireType(wire_type)));
        }
        out.stamp_layout.note(number, start, pos);
    }
    Ok(out)
}

impl<'a> PacketFields<'a> {
    #[inline(always)]
    fn varint_field(&mut self, number: u32, v: u64) {
        match number {
            field::TIMESTAMP => self.timestamp = Some(v),
            field::TRUSTED_PACKET_SEQUENCE_ID => self.trusted_packet_sequence_id = Some(v as u32),
            field::SEQUENCE_FLAGS => self.sequence_flags = v as u32,
            field::TIMESTAMP_CLOCK_ID => self.timestamp_clock_id = Some(v as u32),
            field::INCREMENTAL_STATE_CLEARED => self.incremental_state_cleared = v != 0,
            field::PREVIOUS_PACKET_DROPPED => self.previous_packet_dropped = v as u32,
            field::MACHINE_ID => self.machine_id = Some(v as u32),
            _ => self.other_field(number),
        }
    }

    #[inline(always)]
    fn len_field(&mut self, number: u32, b: &'a [u8]) {
        match number {
            field::TRACE_PACKET_DEFAULTS => self.trace_packet_defaults = Some(b),
            field::CLOCK_SNAPSHOT => self.clock_snapshot = Some(b),
            field::SYSTEM_INFO => self.system_info = Some(b),
            field::REMOTE_CLOCK_SYNC => self.remote_clock_sync = Some(b),
            field::COMPRESSED_PACKETS => self.compressed_packets = Some(b),
            _ => {}
        }
        self.other_field(number);
    }

    /// Flags and payload kind, for any wire type.
    #[inline(always)]
    fn other_field(&mut self, number: u32) {
        match number {
            field::TRUSTED_UID => self.has_trusted_uid = true,
            field::TRUSTED_PID => self.has_trusted_pid = true,
            field::INTERNED_DATA => self.has_interned_data = true,
            n if !is_metadata_field(n) && self.data_field.is_none() => self.data_field = Some(n),
            _ => {}
        }
    }
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
    append_stamped_fields(stamp, has_clock_id, out);
    Ok(())
}

/// The fields a stamp adds after the packet's kept bytes.
fn append_stamped_fields(stamp: &Stamp, has_clock_id: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(StampTail::new(&[], stamp, has_clock_id).as_slice());
}

/// [`stamp_into`] for a packet already scanned: uses the field positions the
/// scan found instead of walking the packet again. Same output.
pub fn stamp_scanned(
    packet: &[u8],
    fields: &PacketFields<'_>,
    stamp: &Stamp,
    out: &mut Vec<u8>,
) -> Result<(), ScanError> {
    let layout = &fields.stamp_layout;
    if stamp.strip_trusted || layout.repeated {
        return stamp_into(packet, stamp, out);
    }
    let cuts = replaced_fields(layout, stamp);
    let mut copied_from = 0;
    for (start, end) in cuts.into_iter().flatten() {
        out.extend_from_slice(&packet[copied_from..start as usize]);
        copied_from = end as usize;
    }
    out.extend_from_slice(&packet[copied_from..]);
    append_stamped_fields(stamp, layout.has_clock_id, out);
    Ok(())
}

/// Longest run of fields a [`Stamp`] appends: trusted_packet_sequence_id
/// (1-byte tag), machine_id and timestamp_clock_id (2-byte tags), each
/// with a varint of at most 5 bytes.
pub const STAMP_SUFFIX_MAX: usize = 20;

/// Most bytes of a packet [`stamp_split`] moves from after a replaced
/// field into the tail (a producer's sequence_flags after its sequence id).
pub const STAMP_MOVED_MAX: usize = 12;

/// Bytes that follow a packet's kept prefix once stamped, held inline (no
/// allocation): kept bytes from after a replaced field, then the fields
/// the stamp appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StampTail {
    buf: [u8; STAMP_MOVED_MAX + STAMP_SUFFIX_MAX],
    len: u8,
}

impl StampTail {
    /// The fields `stamp` appends to a packet that has (or has not) a
    /// `timestamp_clock_id` of its own, after `moved` (at most
    /// [`STAMP_MOVED_MAX`] bytes).
    fn new(moved: &[&[u8]], stamp: &Stamp, has_clock_id: bool) -> Self {
        let mut s = Self {
            buf: [0; STAMP_MOVED_MAX + STAMP_SUFFIX_MAX],
            len: 0,
        };
        for m in moved {
            let at = usize::from(s.len);
            s.buf[at..at + m.len()].copy_from_slice(m);
            s.len += m.len() as u8;
        }
        if let Some(seq) = stamp.trusted_packet_sequence_id {
            s.put_varint(u64::from(field::TRUSTED_PACKET_SEQUENCE_ID) << 3);
            s.put_varint(u64::from(seq));
        }
        if let Some(machine) = stamp.machine_id.filter(|&m| m != 0) {
            s.put_varint(u64::from(field::MACHINE_ID) << 3);
            s.put_varint(u64::from(machine));
        }
        if let (false, Some(clock)) = (has_clock_id, stamp.default_timestamp_clock_id) {
            s.put_varint(u64::from(field::TIMESTAMP_CLOCK_ID) << 3);
            s.put_varint(u64::from(clock));
        }
        s
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// Varints of at most 32 bits after a tag: within `buf` by construction.
    fn put_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf[usize::from(self.len)] = (v as u8) | 0x80;
            self.len += 1;
            v >>= 7;
        }
        self.buf[usize::from(self.len)] = v as u8;
        self.len += 1;
    }
}

/// The byte ranges of the fields `stamp` replaces (sequence id, machine
/// id), in packet order.
fn replaced_fields(layout: &StampLayout, stamp: &Stamp) -> [Option<(u32, u32)>; 2] {
    let sequence = layout
        .sequence_id
        .filter(|_| stamp.trusted_packet_sequence_id.is_some());
    let machine = layout.machine_id.filter(|_| stamp.machine_id.is_some());
    let mut cuts = [sequence, machine];
    if let [Some(a), Some(b)] = cuts
        && b.0 < a.0
    {
        cuts.swap(0, 1);
    }
    cuts
}

/// [`stamp_scanned`] without copying the packet where it allows: if the
/// stamped packet is `packet[..n]` followed by a short tail (the replaced
/// fields, if any, lie within the packet's last [`STAMP_MOVED_MAX`] kept
/// bytes, as a relay's appended sequence id or a producer's sequence id
/// and flags do), returns `n` and that tail. None where a replaced field
/// lies further inside the packet or stamping walks it.
pub fn stamp_split(
    packet: &[u8],
    fields: &PacketFields<'_>,
    stamp: &Stamp,
) -> Option<(usize, StampTail)> {
    let layout = &fields.stamp_layout;
    if stamp.strip_trusted || layout.repeated {
        return None;
    }
    let cuts = replaced_fields(layout, stamp);
    let [first, second] = cuts.map(|c| c.map(|(s, e)| (s as usize, e as usize)));
    let (head, moved): (usize, [&[u8]; 2]) = match (first, second) {
        (None, None) => (packet.len(), [&[], &[]]),
        (Some((s, e)), None) | (None, Some((s, e))) => (s, [&packet[e..], &[]]),
        (Some((s1, e1)), Some((s2, e2))) => (s1, [&packet[e1..s2], &packet[e2..]]),
    };
    if moved[0].len() + moved[1].len() > STAMP_MOVED_MAX {
        return None;
    }
    Some((head, StampTail::new(&moved, stamp, layout.has_clock_id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perfetto::{TracePacket, TracePacketDefaults, trace_packet};
    use prost::Message;

    fn packet() -> TracePacket {
        TracePacket {
            timestamp: Some(123_456_789),
            timestamp_clock_id: None,
            optional_trusted_uid: Some(trace_packet::OptionalTrustedUid::TrustedUid(1000)),
            optional_trusted_packet_sequence_id: Some(
                trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(7),
            ),
            trusted_pid: Some(42),
            sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
            previous_packet_dropped: Some(1),
            machine_id: Some(3),
            data: Some(trace_packet::Data::SystemInfo(Default::default())),
            ..Default::default()
        }
    }

    #[test]
    fn scan_reads_top_level_fields() {
        let mut p = packet();
        p.trace_packet_defaults = Some(TracePacketDefaults {
            timestamp_clock_id: Some(64),
        });
        p.timestamp_clock_id = Some(6);
        let bytes = p.encode_to_vec();
        let f = scan_packet(&bytes).unwrap();
        assert_eq!(f.timestamp, Some(123_456_789));
        assert_eq!(f.timestamp_clock_id, Some(6));
        assert_eq!(f.trusted_packet_sequence_id, Some(7));
        assert!(f.has_trusted_uid && f.has_trusted_pid);
        assert!(f.needs_incremental_state() && !f.clears_incremental_state());
        assert_eq!(f.previous_packet_dropped, 1);
        assert_eq!(f.machine_id, Some(3));
        assert_eq!(f.data_field, Some(field::SYSTEM_INFO));
        assert_eq!(f.system_info, Some(&[][..]));
        assert_eq!(f.kind().to_string(), "system_info");
        let defaults = f.trace_packet_defaults.unwrap();
        assert_eq!(defaults_timestamp_clock_id(defaults).unwrap(), Some(64));
    }

    #[test]
    fn scan_empty_and_unknown_payload() {
        assert_eq!(scan_packet(&[]).unwrap(), PacketFields::default());
        let mut b = Vec::new();
        wire::put_len_field(&mut b, 1234, b"x");
        wire::put_varint_field(&mut b, field::SEQUENCE_FLAGS, 1);
        let f = scan_packet(&b).unwrap();
        assert_eq!(f.data_field, Some(1234));
        assert!(f.clears_incremental_state());
        assert_eq!(f.kind().to_string(), "field_1234");
        assert_eq!(Kind(None).to_string(), "none");
    }

    #[test]
    fn fields_iterates_every_wire_type() {
        let mut b = Vec::new();
        wire::put_varint_field(&mut b, 1, 300);
        wire::put_tag(&mut b, 2, wire::WireType::Fixed64);
        b.extend_from_slice(&7u64.to_le_bytes());
        wire::put_tag(&mut b, 3, wire::WireType::Fixed32);
        b.extend_from_slice(&9u32.to_le_bytes());
        wire::put_len_field(&mut b, 4, b"abc");
        let fields: Vec<_> = Fields::new(&b).map(Result::unwrap).collect();
        let values: Vec<_> = fields.iter().map(|f| (f.number, f.value)).collect();
        assert_eq!(
            values,
            [
                (1, FieldValue::Varint(300)),
                (2, FieldValue::Fixed64(7)),
                (3, FieldValue::Fixed32(9)),
                (4, FieldValue::Len(b"abc")),
            ]
        );
        // Ranges tile the message.
        assert_eq!(fields[0].start, 0);
        for w in fields.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        assert_eq!(fields[3].end, b.len());
    }

    fn first_error(b: &[u8]) -> ScanError {
        Fields::new(b)
            .find_map(Result::err)
            .expect("malformed input must give an error")
    }

    #[test]
    fn fields_errors_have_kind_and_offset() {
        let ok = [0x08, 0x01]; // field 1 = 1
        let cases: [(&[u8], WireError); 6] = [
            (&[0x08], WireError::Truncated),
            (&[0xff; 11], WireError::VarintTooLong),
            (
                &[0x12, 0x05, 1, 2],
                WireError::LengthPastEnd {
                    len: 5,
                    available: 2,
                },
            ),
            (&[0x0b], WireError::BadWireType(3)),
            (&[0x00, 0x01], WireError::FieldZero),
            (&[0x09, 1, 2, 3], WireError::Truncated),
        ];
        for (bad, error) in cases {
            let b = [&ok[..], bad].concat();
            assert_eq!(first_error(&b), ScanError { offset: 2, error }, "{bad:?}");
            assert!(scan_packet(&b).is_err());
            assert!(stamp_into(&b, &Stamp::default(), &mut Vec::new()).is_err());
        }
        // The iterator stops after an error.
        let mut it = Fields::new(&[0x0b, 0x08, 0x01]);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    fn stamped(p: &TracePacket, stamp: &Stamp) -> (Vec<u8>, TracePacket) {
        let mut out = vec![0xAA]; // stamp_into appends
        stamp_into(&p.encode_to_vec(), stamp, &mut out).unwrap();
        assert_eq!(out[0], 0xAA);
        let out = out.split_off(1);
        let decoded = TracePacket::decode(&out[..]).unwrap();
        (out, decoded)
    }

    #[test]
    fn stamp_replaces_fields() {
        let p = packet();
        let stamp = Stamp {
            machine_id: Some(9),
            trusted_packet_sequence_id: Some(77),
            ..Stamp::default()
        };
        let (_, d) = stamped(&p, &stamp);
        let mut want = p.clone();
        want.machine_id = Some(9);
        want.optional_trusted_packet_sequence_id =
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(77));
        assert_eq!(d, want);
    }

    #[test]
    fn stamp_zero_machine_removes_it() {
        let p = packet();
        let stamp = Stamp {
            machine_id: Some(0),
            ..Stamp::default()
        };
        let (bytes, d) = stamped(&p, &stamp);
        assert_eq!(d.machine_id, None);
        assert_eq!(scan_packet(&bytes).unwrap().machine_id, None);
        let mut want = p.clone();
        want.machine_id = None;
        assert_eq!(d, want);
    }

    #[test]
    fn stamp_adds_missing_fields_and_clock_only_if_absent() {
        let mut p = packet();
        p.machine_id = None;
        p.optional_trusted_packet_sequence_id = None;
        let stamp = Stamp {
            machine_id: Some(5),
            trusted_packet_sequence_id: Some(8),
            default_timestamp_clock_id: Some(6),
            strip_trusted: false,
        };
        let (bytes, d) = stamped(&p, &stamp);
        let f = scan_packet(&bytes).unwrap();
        assert_eq!(
            (f.machine_id, f.trusted_packet_sequence_id),
            (Some(5), Some(8))
        );
        assert_eq!(d.timestamp_clock_id, Some(6));
        // The original bytes come first, unchanged.
        assert!(bytes.starts_with(&p.encode_to_vec()));

        p.timestamp_clock_id = Some(64);
        let (_, d) = stamped(&p, &stamp);
        assert_eq!(d.timestamp_clock_id, Some(64));
    }

    #[test]
    fn stamp_strip_trusted_keeps_other_bytes_in_order() {
        let p = packet();
        let original = p.encode_to_vec();
        let stamp = Stamp {
            strip_trusted: true,
            ..Stamp::default()
        };
        let (bytes, d) = stamped(&p, &stamp);
        let mut want = p.clone();
        want.optional_trusted_uid = None;
        want.trusted_pid = None;
        want.machine_id = None;
        want.optional_trusted_packet_sequence_id = None;
        assert_eq!(d, want);
        // Exactly the kept fields' bytes, in their original order.
        let kept: Vec<u8> = Fields::new(&original)
            .map(Result::unwrap)
            .filter(|f| {
                ![
                    field::TRUSTED_UID,
                    field::TRUSTED_PID,
                    field::MACHINE_ID,
                    field::TRUSTED_PACKET_SEQUENCE_ID,
                ]
                .contains(&f.number)
            })
            .flat_map(|f| original[f.start..f.end].to_vec())
            .collect();
        assert_eq!(bytes, kept);
    }

    #[test]
    fn stamp_default_is_identity() {
        let bytes = packet().encode_to_vec();
        let mut out = Vec::new();
        stamp_into(&bytes, &Stamp::default(), &mut out).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn data_field_names_are_perfettos() {
        for (n, name) in [
            (1, "ftrace_events"),
            (6, "clock_snapshot"),
            (11, "track_event"),
            (39, "android_log"),
            (43, "process_descriptor"),
            (50, "compressed_packets"),
            (60, "track_descriptor"),
            (66, "perf_sample"),
            (107, "remote_clock_sync"),
        ] {
            assert_eq!(data_field_name(n), Some(name));
        }
        assert_eq!(data_field_name(8), None); // timestamp is metadata
    }

    /// Packets as a relay sends them (its sequence id appended last) and
    /// as producers may write them (replaced fields anywhere, repeated).
    fn split_cases() -> Vec<Vec<u8>> {
        let body = |ts: Option<u64>, clock: Option<u32>| {
            TracePacket {
                timestamp: ts,
                timestamp_clock_id: clock,
                sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
                data: Some(trace_packet::Data::TrackEvent(Default::default())),
                ..Default::default()
            }
            .encode_to_vec()
        };
        let mut cases = Vec::new();
        for (ts, clock) in [(None, None), (Some(9), None), (Some(9), Some(64))] {
            let b = body(ts, clock);
            cases.push(b.clone());
            for tail in [
                vec![(10, 300)],
                vec![(98, 5)],
                vec![(10, 300), (98, 5)],
                vec![(98, 5), (10, 1 << 30)],
                vec![(10, 2), (10, 3)], // repeated: the walking path
            ] {
                let mut p = b.clone();
                for (f, v) in tail {
                    wire::put_varint_field(&mut p, f, v);
                }
                cases.push(p);
            }
            // Replaced fields inside the packet, or not adjacent at its end.
            let mut p = Vec::new();
            wire::put_varint_field(&mut p, 10, 4);
            p.extend_from_slice(&b);
            cases.push(p);
            let mut p = b.clone();
            wire::put_varint_field(&mut p, 98, 5);
            wire::put_varint_field(&mut p, 8, 1);
            wire::put_varint_field(&mut p, 10, 4);
            cases.push(p);
        }
        cases
    }

    #[test]
    fn split_stamp_is_the_copied_stamp_byte_for_byte() {
        let stamps = [
            Stamp::default(),
            Stamp {
                machine_id: Some(u32::MAX),
                trusted_packet_sequence_id: Some(u32::MAX),
                default_timestamp_clock_id: Some(u32::MAX),
                strip_trusted: false,
            },
            Stamp {
                machine_id: Some(0),
                trusted_packet_sequence_id: Some(2),
                default_timestamp_clock_id: Some(6),
                strip_trusted: false,
            },
            Stamp {
                machine_id: Some(7),
                trusted_packet_sequence_id: None,
                default_timestamp_clock_id: None,
                strip_trusted: false,
            },
        ];
        let mut split = 0;
        for p in split_cases() {
            let fields = scan_packet(&p).unwrap();
            for stamp in &stamps {
                let mut copied = Vec::new();
                stamp_scanned(&p, &fields, stamp, &mut copied).unwrap();
                let Some((n, suffix)) = stamp_split(&p, &fields, stamp) else {
                    continue;
                };
                split += 1;
                assert!(suffix.as_slice().len() <= STAMP_MOVED_MAX + STAMP_SUFFIX_MAX);
                assert_eq!(
                    [&p[..n], suffix.as_slice()].concat(),
                    copied,
                    "{p:?} {stamp:?}"
                );
            }
        }
        assert!(split > 20, "{split}");
        // A replaced field further inside the packet needs the copy.
        let mut p = Vec::new();
        wire::put_varint_field(&mut p, 10, 4);
        wire::put_len_field(&mut p, 11, &[0; STAMP_MOVED_MAX]);
        let stamp = Stamp {
            trusted_packet_sequence_id: Some(2),
            ..Stamp::default()
        };
        assert_eq!(stamp_split(&p, &scan_packet(&p).unwrap(), &stamp), None);
        // Only replaced: the kept prefix is empty.
        let p = &p[..2];
        let (n, suffix) = stamp_split(p, &scan_packet(p).unwrap(), &stamp).unwrap();
        assert_eq!((n, suffix.as_slice()), (0, &[0x50, 2][..]));
    }
}
