//! The hand-written TrackEvent packets: their field numbers, the debug
//! annotations, and the one-pass encoder of a TrackEvent packet.

use tracesync_protocol::perfetto::track_event;
use tracesync_protocol::scan::SEQ_NEEDS_INCREMENTAL_STATE;
use tracesync_protocol::wire::{self, WireType, put_tag, put_varint, put_varint_field};

use super::{ANNOTATION_N, ANNOTATION_TRUTH};

/// Field numbers of the hand-written TrackEvent packets (Perfetto's).
mod fields {
    pub const PACKET_TIMESTAMP: u32 = 8;
    pub const PACKET_SEQUENCE_ID: u32 = 10;
    pub const PACKET_TRACK_EVENT: u32 = 11;
    pub const PACKET_SEQUENCE_FLAGS: u32 = 13;
    pub const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
    pub const EVENT_TYPE: u32 = 9;
    pub const EVENT_NAME_IID: u32 = 10;
    pub const EVENT_TRACK_UUID: u32 = 11;
    pub const EVENT_COUNTER_VALUE: u32 = 30;
    pub const ANNOTATION_NAME: u32 = 10;
    pub const ANNOTATION_UINT: u32 = 3;
    pub const ANNOTATION_STRING: u32 = 6;
}

/// Appends a DebugAnnotation {name, string_value} as a TrackEvent field.
pub(super) fn put_string_annotation(out: &mut Vec<u8>, name: &str, value: &str) {
    let mut body = Vec::with_capacity(name.len() + value.len() + 8);
    wire::put_len_field(&mut body, fields::ANNOTATION_NAME, name.as_bytes());
    wire::put_len_field(&mut body, fields::ANNOTATION_STRING, value.as_bytes());
    wire::put_len_field(out, fields::EVENT_DEBUG_ANNOTATIONS, &body);
}

#[inline]
fn tag_len(field: u32) -> usize {
    wire::varint_len(u64::from(field) << 3)
}

/// Body length of a DebugAnnotation {name, uint_value}.
#[inline]
fn uint_annotation_body_len(name: &str, value: u64) -> usize {
    let name_len = tag_len(fields::ANNOTATION_NAME) + wire::varint_len(name.len() as u64);
    name_len + name.len() + tag_len(fields::ANNOTATION_UINT) + wire::varint_len(value)
}

/// Length of a DebugAnnotation {name, uint_value} as a TrackEvent field.
#[inline]
fn uint_annotation_len(name: &str, value: u64) -> usize {
    let body = uint_annotation_body_len(name, value);
    tag_len(fields::EVENT_DEBUG_ANNOTATIONS) + wire::varint_len(body as u64) + body
}

/// Appends a DebugAnnotation {name, uint_value} as a TrackEvent field.
#[inline]
fn put_uint_annotation(out: &mut Vec<u8>, name: &str, value: u64) {
    let body_len = uint_annotation_body_len(name, value);
    put_tag(out, fields::EVENT_DEBUG_ANNOTATIONS, WireType::Len);
    put_varint(out, body_len as u64);
    wire::put_len_field(out, fields::ANNOTATION_NAME, name.as_bytes());
    put_varint_field(out, fields::ANNOTATION_UINT, value);
}

/// One TrackEvent's varying parts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Event {
    /// Carries the identity (and pad) annotations.
    pub(super) identity: bool,
    pub(super) sequence: u32,
    pub(super) ts: u64,
    pub(super) n: u64,
    pub(super) truth: u64,
    pub(super) kind: track_event::Type,
    pub(super) track: u64,
    pub(super) name_iid: Option<u64>,
    pub(super) counter_value: Option<i64>,
}

/// The annotations every identity-carrying TrackEvent of a generator
/// repeats, encoded once: its `tracesync_src` and its padding.
#[derive(Clone, Copy, Debug)]
pub(super) struct Constant<'a> {
    pub(super) src_annotation: &'a [u8],
    pub(super) pad_annotation: &'a [u8],
}

/// Appends one TrackEvent packet to `p`, in one pass: the TrackEvent's
/// length is computed first, so its bytes go straight in.
#[inline]
pub(super) fn encode_event(p: &mut Vec<u8>, e: &Event, constant: Constant<'_>) {
    let varint_field_len = |field: u32, v: u64| tag_len(field) + wire::varint_len(v);
    let annotations_len = if e.identity {
        constant.src_annotation.len()
            + uint_annotation_len(ANNOTATION_N, e.n)
            + uint_annotation_len(ANNOTATION_TRUTH, e.truth)
            + constant.pad_annotation.len()
    } else {
        0
    };
    let event_len = annotations_len
        + varint_field_len(fields::EVENT_TYPE, e.kind as u64)
        + e.name_iid
            .map_or(0, |iid| varint_field_len(fields::EVENT_NAME_IID, iid))
        + varint_field_len(fields::EVENT_TRACK_UUID, e.track)
        + e.counter_value.map_or(0, |v| {
            varint_field_len(fields::EVENT_COUNTER_VALUE, v as u64)
        });
    put_varint_field(p, fields::PACKET_TIMESTAMP, e.ts);
    put_tag(p, fields::PACKET_TRACK_EVENT, WireType::Len);
    put_varint(p, event_len as u64);
    let event_start = p.len();
    if e.identity {
        p.extend_from_slice(constant.src_annotation);
        put_uint_annotation(p, ANNOTATION_N, e.n);
        put_uint_annotation(p, ANNOTATION_TRUTH, e.truth);
        p.extend_from_slice(constant.pad_annotation);
    }
    put_varint_field(p, fields::EVENT_TYPE, e.kind as u64);
    if let Some(iid) = e.name_iid {
        put_varint_field(p, fields::EVENT_NAME_IID, iid);
    }
    put_varint_field(p, fields::EVENT_TRACK_UUID, e.track);
    if let Some(v) = e.counter_value {
        put_varint_field(p, fields::EVENT_COUNTER_VALUE, v as u64);
    }
    debug_assert_eq!(p.len() - event_start, event_len);
    put_varint_field(p, fields::PACKET_SEQUENCE_ID, u64::from(e.sequence));
    let flags = u64::from(SEQ_NEEDS_INCREMENTAL_STATE);
    put_varint_field(p, fields::PACKET_SEQUENCE_FLAGS, flags);
}
