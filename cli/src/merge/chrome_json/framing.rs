//! How converted packets are framed: each one a `packet` field of a Trace,
//! on the file's one sequence; a TrackEvent packet may carry debug
//! annotations already encoded (by the fast path, `fast_event`), framed
//! to the same bytes prost writes for them as messages.

use prost::Message;
use tracesync_protocol::perfetto::trace_packet::{Data, OptionalTrustedPacketSequenceId};
use tracesync_protocol::perfetto::{TracePacket, TrackEvent};

/// The one packet sequence of a converted file.
pub const SEQUENCE: u32 = 1;

/// A packet framed as one `packet` field of a Trace.
pub fn framed(packet: &TracePacket) -> Vec<u8> {
    let mut out = Vec::with_capacity(packet.encoded_len() + 6);
    frame_into(packet, &mut out);
    out
}

/// Appends `packet` as a record of a trace (field 1, length-delimited).
pub fn frame_into(packet: &TracePacket, out: &mut Vec<u8>) {
    out.push(0x0a);
    // Writing into a Vec cannot run out of room.
    let _ = packet.encode_length_delimited(out);
}

/// A packet of the file's sequence.
pub fn packet(ts: Option<i64>, data: Data) -> TracePacket {
    TracePacket {
        timestamp: ts.map(|t| t as u64),
        data: Some(data),
        optional_trusted_packet_sequence_id: Some(
            OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(SEQUENCE),
        ),
        ..Default::default()
    }
}

/// Appends the record of a packet at `ts` holding `event` (as [`packet`]
/// makes it), with the encoded debug annotations `annotations` added to
/// the event: the bytes
/// prost writes for the same annotations (prost writes fields by their
/// lowest tag: debug_annotations, 4, first in a TrackEvent; track_event,
/// timestamp, then the sequence in a packet).
pub fn frame_annotated(ts: i64, event: &TrackEvent, annotations: &[u8], out: &mut Vec<u8>) {
    use prost::encoding::{encode_varint, encoded_len_varint};
    let sequence = SEQUENCE;
    let event_len = event.encoded_len() + annotations.len();
    let packet_len = 1
        + encoded_len_varint(ts as u64)
        + 1
        + encoded_len_varint(event_len as u64)
        + event_len
        + 1
        + encoded_len_varint(u64::from(sequence));
    out.push(0x0a);
    encode_varint(packet_len as u64, out);
    out.push(0x5a);
    encode_varint(event_len as u64, out);
    out.extend_from_slice(annotations);
    event.encode_raw(out);
    out.push(0x40);
    encode_varint(ts as u64, out);
    out.push(0x50);
    encode_varint(u64::from(sequence), out);
}
