//! A held TrackEvent packet moved to another track: its `track_uuid`
//! rewritten in place, the two enclosing lengths fixed, every other byte
//! copied (no decode and re-encode of the whole packet).
//!
//! Invariants: the result is the bytes prost writes for the packet read
//! back with the new uuid, because the packets held are prost's own
//! encoding (or `framing`'s, the same bytes) and only the value of one
//! varint changes; a record that is not laid out as expected (no event,
//! no uuid, a bad varint) is left to the caller's decoding path.

use prost::encoding::{encode_varint, encoded_len_varint};

/// `TracePacket.track_event`, length-delimited.
const PACKET_TRACK_EVENT: u64 = 11;
/// `TrackEvent.track_uuid`, a varint.
const EVENT_TRACK_UUID: u64 = 11;
const WIRE_VARINT: u64 = 0;
const WIRE_LEN: u64 = 2;

fn varint(buf: &[u8], pos: usize) -> Option<(u64, usize)> {
    let mut value = 0_u64;
    for i in 0..10 {
        let b = *buf.get(pos + i)?;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some((value, pos + i + 1));
        }
    }
    None
}

/// Finds field `number` of wire type `wire` at the top level of `msg`:
/// the offset of its value (after the tag) and the offset past it.
fn find(msg: &[u8], number: u64, wire: u64) -> Option<(usize, usize)> {
    let mut pos = 0;
    while pos < msg.len() {
        let (tag, at) = varint(msg, pos)?;
        let end = match tag & 7 {
            WIRE_VARINT => varint(msg, at)?.1,
            1 => at + 8,
            WIRE_LEN => {
                let (len, data) = varint(msg, at)?;
                data.checked_add(usize::try_from(len).ok()?)?
            }
            5 => at + 4,
            _ => return None,
        };
        if end > msg.len() {
            return None;
        }
        if tag >> 3 == number && tag & 7 == wire {
            return Some((at, end));
        }
        pos = end;
    }
    None
}

/// Appends the framed packet `record` (`0x0a`, length, packet) with its
/// TrackEvent's `track_uuid` set to `uuid`; false (nothing appended) if
/// the record is not a packet with a TrackEvent that has a uuid.
pub fn retrack(record: &[u8], uuid: u64, out: &mut Vec<u8>) -> bool {
    let Some(packet) = record.get(1..).and_then(|rest| {
        let (len, at) = varint(rest, 0)?;
        rest.get(at..at.checked_add(usize::try_from(len).ok()?)?)
    }) else {
        return false;
    };
    let Some((event_at, event_end)) = find(packet, PACKET_TRACK_EVENT, WIRE_LEN) else {
        return false;
    };
    let Some((event_len, body_at)) = varint(packet, event_at) else {
        return false;
    };
    let Some(event) = packet.get(body_at..event_end) else {
        return false;
    };
    let Some((uuid_at, uuid_end)) = find(event, EVENT_TRACK_UUID, WIRE_VARINT) else {
        return false;
    };
    let new_event_len = event.len() - (uuid_end - uuid_at) + encoded_len_varint(uuid);
    let new_packet_len = packet.len() - (body_at - event_at) - event.len()
        + encoded_len_varint(new_event_len as u64)
        + new_event_len;
    debug_assert_eq!(event_len as usize, event.len());
    out.push(0x0a);
    encode_varint(new_packet_len as u64, out);
    out.extend_from_slice(&packet[..event_at]);
    encode_varint(new_event_len as u64, out);
    out.extend_from_slice(&event[..uuid_at]);
    encode_varint(uuid, out);
    out.extend_from_slice(&event[uuid_end..]);
    out.extend_from_slice(&packet[event_end..]);
    true
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use tracesync_protocol::perfetto::trace_packet::Data;
    use tracesync_protocol::perfetto::{DebugAnnotation, TracePacket, TrackEvent, track_event};

    use super::super::super::framing::{frame_annotated, framed, packet};
    use super::*;

    /// What decoding, setting the uuid and encoding again gives.
    fn by_decoding(record: &[u8], uuid: u64) -> Vec<u8> {
        let mut p = TracePacket::decode_length_delimited(&record[1..]).unwrap();
        if let Some(Data::TrackEvent(e)) = &mut p.data {
            e.track_uuid = Some(uuid);
        }
        framed(&p)
    }

    fn event(track: u64) -> TrackEvent {
        TrackEvent {
            r#type: Some(track_event::Type::SliceBegin as i32),
            track_uuid: Some(track),
            name_field: Some(track_event::NameField::Name("n".repeat(200))),
            categories: vec!["cat".into()],
            flow_ids: vec![1, 1 << 40],
            debug_annotations: vec![DebugAnnotation::default(); 3],
            ..Default::default()
        }
    }

    #[test]
    fn same_bytes_as_decoding_for_any_uuid_size() {
        for (old, new) in [(1, 1 << 62), (1 << 62, 1), (300, 301), (u64::MAX, 5)] {
            let record = framed(&packet(Some(123_456_789), Data::TrackEvent(event(old))));
            let mut out = Vec::new();
            assert!(retrack(&record, new, &mut out));
            assert_eq!(out, by_decoding(&record, new), "{old} -> {new}");

            let mut annotated = Vec::new();
            let annotations = [0x22, 0x02, 0x08, 0x01];
            frame_annotated(77, &event(old), &annotations, &mut annotated);
            out.clear();
            assert!(retrack(&annotated, new, &mut out));
            assert_eq!(out, by_decoding(&annotated, new));
        }
    }

    #[test]
    fn other_records_are_left_alone() {
        let mut out = Vec::new();
        let no_uuid = TrackEvent::default();
        let record = framed(&packet(Some(1), Data::TrackEvent(no_uuid)));
        assert!(!retrack(&record, 5, &mut out));
        assert!(!retrack(&[0x0a, 0x05, 0x58], 5, &mut out));
        assert!(!retrack(&[], 5, &mut out));
        assert!(out.is_empty());
    }
}
