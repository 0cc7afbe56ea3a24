//! A TrackEvent packet framed with debug annotations already encoded (by
//! the fast path, `fast_event`): the same bytes prost writes for the
//! packet with those annotations as messages.

use prost::Message;
use tracesync_protocol::perfetto::TrackEvent;

/// Appends the record of a packet at `ts` on `sequence` holding `event`
/// (as `convert::packet` makes it), with the
/// encoded debug annotations `annotations` added to the event: the bytes
/// prost writes for the same annotations (prost writes fields by their
/// lowest tag: debug_annotations, 4, first in a TrackEvent; track_event,
/// timestamp, then the sequence in a packet).
pub fn frame_annotated(
    ts: i64,
    event: &TrackEvent,
    annotations: &[u8],
    sequence: u32,
    out: &mut Vec<u8>,
) {
    use prost::encoding::{encode_varint, encoded_len_varint};
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
