//! The scan of a TracePacket: [`scan_packet`] reads the top-level fields
//! tracesync acts on into [`PacketFields`], borrowed, in one pass.

use super::field;
use super::kind::{Kind, is_metadata_field};
use super::layout::StampLayout;
use super::{
    FieldValue, Fields, RawField, SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE,
    ScanError,
};
use crate::wire::{self, WireError};

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
    /// Where the fields [`stamp_scanned`](super::stamp_scanned) replaces are.
    pub stamp_layout: StampLayout,
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

    /// Name of the payload field for reports (`"track_event"`, or `"field_<n>"`).
    pub fn kind(&self) -> Kind {
        Kind(self.data_field)
    }
}

/// Reads the top-level fields tracesync acts on. Never allocates.
///
/// Inlined, so the fields are written where the caller keeps them: as a
/// returned value (~200 bytes) they were copied once more per packet, by a
/// `memcpy` call that was 6% of `tracesync merge`'s CPU with small packets.
/// Where the copy into the caller's variable stays, per packet on a hot
/// path, [`scan_packet_into`] writes into the caller's own.
#[inline]
pub fn scan_packet(packet: &[u8]) -> Result<PacketFields<'_>, ScanError> {
    let mut out = PacketFields::default();
    scan_packet_into(packet, &mut out)?;
    Ok(out)
}

/// [`scan_packet`] into `out`, which must hold the defaults
/// (`PacketFields::default()`); on error `out` holds the fields before the
/// malformed one.
pub fn scan_packet_into<'a>(packet: &'a [u8], out: &mut PacketFields<'a>) -> Result<(), ScanError> {
    walk_fields_into(packet, out)
}

/// What a walk over a packet's top-level fields ([`walk_fields_into`])
/// keeps of them: [`PacketFields`] what tracesync acts on; a caller that
/// needs less keeps less, with the same walk, so the same packets are
/// malformed, at the same offsets.
pub trait FieldSink<'a> {
    /// A varint field (wire type 0) and its value.
    fn varint(&mut self, number: u32, value: u64);
    /// Whether [`Self::varint`] needs the value of varint field `number`;
    /// the walk only skips the others (their length read, the same errors)
    /// and calls [`Self::fixed`] for them instead: a sink that keeps few
    /// values saves decoding the rest.
    #[inline(always)]
    fn wants_value(&self, _number: u32) -> bool {
        true
    }
    /// A length-delimited field (wire type 2) and its bytes.
    fn len(&mut self, number: u32, bytes: &'a [u8]);
    /// A fixed-width field (wire types 1 and 5).
    fn fixed(&mut self, number: u32);
    /// The field just read lies at `start..end` of the packet (kept by
    /// a sink that stamps: [`PacketFields::stamp_layout`]).
    #[inline(always)]
    fn span(&mut self, _number: u32, _start: usize, _end: usize) {}
}

/// Notes field `number` as the packet's payload if it is the first field
/// that is no metadata (what [`PacketFields::data_field`] holds).
#[inline(always)]
pub fn note_payload(data_field: &mut Option<u32>, number: u32) {
    if data_field.is_none() && !is_metadata_field(number) {
        *data_field = Some(number);
    }
}

/// Walks `packet`'s top-level fields into `out`, stopping at the first
/// malformed one.
///
/// The hot path of the data plane: a hand-rolled loop over the fields
/// (same results and errors as walking [`Fields`]), with wire types tested
/// by plain branches, which predict better than a jump table.
#[inline]
pub fn walk_fields_into<'a, S: FieldSink<'a>>(
    packet: &'a [u8],
    out: &mut S,
) -> Result<(), ScanError> {
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
            if out.wants_value(number) {
                let (v, m) = wire::decode_varint(body).map_err(fail)?;
                pos += n + m;
                out.varint(number, v);
            } else {
                pos += n + wire::skip_varint(body).map_err(fail)?;
                out.fixed(number);
            }
        } else if wire_type == 2 {
            let (len, m) = wire::decode_varint(body).map_err(fail)?;
            let value = &body[m..];
            if len > value.len() as u64 {
                let available = value.len() as u64;
                return Err(fail(WireError::LengthPastEnd { len, available }));
            }
            pos += n + m + len as usize;
            out.len(number, &value[..len as usize]);
        } else if wire_type == 1 || wire_type == 5 {
            let size = if wire_type == 1 { 8 } else { 4 };
            if body.len() < size {
                return Err(fail(WireError::Truncated));
            }
            pos += n + size;
            out.fixed(number);
        } else {
            return Err(fail(WireError::BadWireType(wire_type)));
        }
        out.span(number, start, pos);
    }
    Ok(())
}

impl<'a> FieldSink<'a> for PacketFields<'a> {
    #[inline(always)]
    fn varint(&mut self, number: u32, v: u64) {
        match number {
            field::TIMESTAMP => self.timestamp = Some(v),
            field::TRUSTED_PACKET_SEQUENCE_ID => self.trusted_packet_sequence_id = Some(v as u32),
            field::SEQUENCE_FLAGS => self.sequence_flags = v as u32,
            field::TIMESTAMP_CLOCK_ID => self.timestamp_clock_id = Some(v as u32),
            field::INCREMENTAL_STATE_CLEARED => self.incremental_state_cleared = v != 0,
            field::PREVIOUS_PACKET_DROPPED => self.previous_packet_dropped = v as u32,
            field::MACHINE_ID => self.machine_id = Some(v as u32),
            _ => self.fixed(number),
        }
    }

    #[inline(always)]
    fn len(&mut self, number: u32, b: &'a [u8]) {
        match number {
            field::TRACE_PACKET_DEFAULTS => self.trace_packet_defaults = Some(b),
            field::CLOCK_SNAPSHOT => self.clock_snapshot = Some(b),
            field::SYSTEM_INFO => self.system_info = Some(b),
            field::REMOTE_CLOCK_SYNC => self.remote_clock_sync = Some(b),
            field::COMPRESSED_PACKETS => self.compressed_packets = Some(b),
            _ => {}
        }
        self.fixed(number);
    }

    /// Flags and payload kind: what any field, of any wire type, says.
    #[inline(always)]
    fn fixed(&mut self, number: u32) {
        match number {
            field::TRUSTED_UID => self.has_trusted_uid = true,
            field::TRUSTED_PID => self.has_trusted_pid = true,
            field::INTERNED_DATA => self.has_interned_data = true,
            n => note_payload(&mut self.data_field, n),
        }
    }

    #[inline(always)]
    fn span(&mut self, number: u32, start: usize, end: usize) {
        self.stamp_layout.note(number, start, end);
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
