//! The feeder's batches: one template of small TrackEvent packets in the
//! wire form of `Batch.packets`, encoded once, copied and patched per batch.
//!
//! Every packet carries the synthetic identity annotations the capture
//! checker reads (`tracesync_src`, `tracesync_n`, `tracesync_truth_ns`), so
//! loss and duplication are counted per packet. The fields that change from
//! batch to batch (the timestamp, the counter, the truth) are varints
//! written at a fixed width (protobuf readers accept the redundant
//! continuation bytes), so a batch is the template copied plus three
//! stores per packet: nothing is scanned or re-encoded, and the feeder's
//! CPU per packet stays a small fraction of the daemon's.

use bytes::Bytes;
use tracesync_protocol::wire::{self, WireType};

/// TracePacket and TrackEvent field numbers (Perfetto's).
const PACKET_TIMESTAMP: u32 = 8;
const PACKET_SEQUENCE_ID: u32 = 10;
const PACKET_TRACK_EVENT: u32 = 11;
const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
const EVENT_TYPE: u32 = 9;
const ANNOTATION_NAME: u32 = 10;
const ANNOTATION_UINT: u32 = 3;
const ANNOTATION_STRING: u32 = 6;
/// `Batch.packets`.
const BATCH_PACKETS: u32 = 3;
/// TrackEvent.Type INSTANT.
const TYPE_INSTANT: u64 = 3;

/// Widths of the patched varints: 9 bytes hold 63 bits (any BOOTTIME),
/// 5 bytes 35 bits (34 G packets per source).
const TS_WIDTH: usize = 9;
const N_WIDTH: usize = 5;
/// The largest counter a 5-byte varint holds.
pub const MAX_COUNTER: u64 = (1 << (7 * N_WIDTH)) - 1;

/// Where one packet's varying fields are in the template.
#[derive(Clone, Copy, Debug)]
struct Slots {
    ts: usize,
    n: usize,
    truth: usize,
}

/// A batch's packets, ready for `OutFrame::batch`.
#[derive(Clone, Debug)]
pub struct Made {
    pub wire: Bytes,
    pub packets: u64,
    /// The last packet's timestamp.
    pub last_ts: u64,
}

/// The encoded packets and where to patch them.
#[derive(Clone, Debug)]
pub struct Template {
    wire: Vec<u8>,
    slots: Vec<Slots>,
}

impl Template {
    /// `packets` TrackEvents of source `src`, spread round-robin over the
    /// relay sequence ids `sequences` (at least one).
    pub fn new(src: &str, packets: usize, sequences: &[u32]) -> Self {
        let mut wire = Vec::new();
        let mut slots = Vec::with_capacity(packets);
        let mut src_annotation = Vec::new();
        wire::put_len_field(&mut src_annotation, ANNOTATION_NAME, b"tracesync_src");
        wire::put_len_field(&mut src_annotation, ANNOTATION_STRING, src.as_bytes());
        for i in 0..packets {
            let sequence = sequences.get(i % sequences.len().max(1)).copied();
            let (packet, at) = encode_packet(&src_annotation, sequence.unwrap_or(2));
            wire::put_tag(&mut wire, BATCH_PACKETS, WireType::Len);
            wire::put_varint(&mut wire, packet.len() as u64);
            let base = wire.len();
            slots.push(Slots {
                ts: base + at.ts,
                n: base + at.n,
                truth: base + at.truth,
            });
            wire.extend_from_slice(&packet);
        }
        Self { wire, slots }
    }

    pub fn packets(&self) -> usize {
        self.slots.len()
    }

    /// Packet bytes of one batch (the `Batch.packets` fields).
    pub fn wire_len(&self) -> usize {
        self.wire.len()
    }

    /// A batch whose packets carry counters from `first_n` and timestamps
    /// spread evenly over `(from_ts, to_ts]` (the feeder runs on the
    /// host, so each packet's truth is its own timestamp). Counters past
    /// [`MAX_COUNTER`] are not representable: None.
    pub fn make(&self, first_n: u64, from_ts: u64, to_ts: u64) -> Option<Made> {
        let count = self.slots.len() as u64;
        if first_n.checked_add(count)? > MAX_COUNTER {
            return None;
        }
        let mut wire = self.wire.clone();
        let span = to_ts.saturating_sub(from_ts);
        let mut last_ts = from_ts;
        for (i, slot) in (0u64..).zip(&self.slots) {
            let ts = from_ts + span * (i + 1) / count;
            put_fixed_varint(&mut wire, slot.ts, TS_WIDTH, ts);
            put_fixed_varint(&mut wire, slot.truth, TS_WIDTH, ts);
            put_fixed_varint(&mut wire, slot.n, N_WIDTH, first_n + i);
            last_ts = ts;
        }
        Some(Made {
            wire: Bytes::from(wire),
            packets: count,
            last_ts,
        })
    }
}

/// Offsets of the varying fields within one packet.
struct PacketSlots {
    ts: usize,
    n: usize,
    truth: usize,
}

/// One packet with zeroed varying fields, and where they are.
fn encode_packet(src_annotation: &[u8], sequence: u32) -> (Vec<u8>, PacketSlots) {
    let mut event = Vec::new();
    wire::put_len_field(&mut event, EVENT_DEBUG_ANNOTATIONS, src_annotation);
    let n_at = put_uint_annotation(&mut event, b"tracesync_n", N_WIDTH);
    let truth_at = put_uint_annotation(&mut event, b"tracesync_truth_ns", TS_WIDTH);
    wire::put_varint_field(&mut event, EVENT_TYPE, TYPE_INSTANT);
    let mut packet = Vec::new();
    wire::put_tag(&mut packet, PACKET_TIMESTAMP, WireType::Varint);
    let ts = packet.len();
    packet.extend_from_slice(&[0; TS_WIDTH]);
    put_fixed_varint(&mut packet, ts, TS_WIDTH, 0);
    wire::put_tag(&mut packet, PACKET_TRACK_EVENT, WireType::Len);
    wire::put_varint(&mut packet, event.len() as u64);
    let event_at = packet.len();
    packet.extend_from_slice(&event);
    wire::put_varint_field(&mut packet, PACKET_SEQUENCE_ID, u64::from(sequence));
    let slots = PacketSlots {
        ts,
        n: event_at + n_at,
        truth: event_at + truth_at,
    };
    (packet, slots)
}

/// Appends a DebugAnnotation {name, uint_value} whose value is a varint
/// of `width` bytes; returns where that varint starts.
fn put_uint_annotation(event: &mut Vec<u8>, name: &[u8], width: usize) -> usize {
    let mut body = Vec::new();
    wire::put_len_field(&mut body, ANNOTATION_NAME, name);
    wire::put_tag(&mut body, ANNOTATION_UINT, WireType::Varint);
    let value_at = body.len();
    body.extend_from_slice(&[0; 10][..width]);
    put_fixed_varint(&mut body, value_at, width, 0);
    wire::put_tag(event, EVENT_DEBUG_ANNOTATIONS, WireType::Len);
    wire::put_varint(event, body.len() as u64);
    let at = event.len() + value_at;
    event.extend_from_slice(&body);
    at
}

/// Writes `value` as a varint of exactly `width` bytes at `at` (high bits
/// beyond `7 * width` are dropped: callers keep values in range).
#[inline]
fn put_fixed_varint(buf: &mut [u8], at: usize, width: usize, value: u64) {
    if let Some(bytes) = buf.get_mut(at..at + width) {
        let last = width - 1;
        for (i, byte) in bytes.iter_mut().enumerate() {
            let group = ((value >> (7 * i)) & 0x7f) as u8;
            *byte = if i == last { group } else { group | 0x80 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_protocol::scan::scan_packet;

    /// The packets of a `Batch.packets` wire buffer.
    fn packets(wire: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < wire.len() {
            let tag = wire::read_varint(wire, &mut pos).unwrap();
            assert_eq!(tag, u64::from(BATCH_PACKETS << 3 | 2));
            let len = wire::read_varint(wire, &mut pos).unwrap() as usize;
            out.push(&wire[pos..pos + len]);
            pos += len;
        }
        out
    }

    #[test]
    fn a_made_batch_carries_fresh_identities_and_spread_timestamps() {
        let template = Template::new("feeder-1/1", 6, &[2, 3]);
        let made = template.make(100, 1_000, 1_600).unwrap();
        assert_eq!(made.packets, 6);
        assert_eq!(made.last_ts, 1_600);
        let packets = packets(&made.wire);
        assert_eq!(packets.len(), 6);
        for (i, packet) in (0u64..).zip(&packets) {
            let id = tracesync_cli::check::identity(packet).unwrap();
            assert_eq!(id.src, "feeder-1/1");
            assert_eq!(id.n, 100 + i);
            let fields = scan_packet(packet).unwrap();
            assert_eq!(fields.timestamp, Some(1_000 + 100 * (i + 1)));
            assert_eq!(id.truth_ns, 1_000 + 100 * (i + 1));
            let sequence = if i % 2 == 0 { 2 } else { 3 };
            assert_eq!(fields.trusted_packet_sequence_id, Some(sequence));
        }
    }

    #[test]
    fn wide_values_round_trip_and_counters_stop_at_the_width() {
        let template = Template::new("f/1", 2, &[7]);
        let big = (1 << 62) + 12_345;
        let made = template.make(MAX_COUNTER - 2, big, big + 2).unwrap();
        let packets = packets(&made.wire);
        let id = tracesync_cli::check::identity(packets[1]).unwrap();
        assert_eq!((id.n, id.truth_ns), (MAX_COUNTER - 1, big + 2));
        assert!(template.make(MAX_COUNTER - 1, big, big).is_none());
    }
}
