//! Systrace lines as Perfetto ftrace events: one packet per line, one
//! `FtraceEventBundle` holding one `FtraceEvent`, which the trace processor
//! parses as it parses the same event recorded by Perfetto's ftrace data
//! source.
//!
//! Invariant (the merge's writer relies on it): every packet made here
//! starts with the bundle, its event first in it and the event's
//! timestamp first in that, written as a 10-byte varint at
//! [`EVENT_TS_OFFSET`]; the lengths before it are 3-byte varints. The
//! writer overwrites those 10 bytes in place with the resolved time
//! (padded varints are valid protobuf), so no length changes. The packet's
//! own `timestamp` (after the bundle) carries the same value on the
//! input's clock, for the merge's passes.

use tracesync_protocol::wire::{WireType, put_len_field, put_tag, put_varint_field};

use super::line::{Line, arg, raw_prev_state};

/// Where a packet's event timestamp is: packet tag, 3-byte bundle length,
/// event tag, 3-byte event length, timestamp tag.
pub const EVENT_TS_OFFSET: usize = 9;
/// Width of the event timestamp varint.
pub const EVENT_TS_LEN: usize = 10;
/// The longest arguments a line may have: its bundle length must fit 3
/// varint bytes.
pub const MAX_ARGS: usize = 1 << 20;

/// The one packet sequence of a converted file.
const SEQUENCE: u64 = 1;

mod tag {
    pub const PACKET_FTRACE_EVENTS: u32 = 1;
    pub const PACKET_TIMESTAMP: u32 = 8;
    pub const PACKET_SEQUENCE_ID: u32 = 10;
    pub const BUNDLE_CPU: u32 = 1;
    pub const BUNDLE_EVENT: u32 = 2;
    pub const EVENT_TIMESTAMP: u32 = 1;
    pub const EVENT_PID: u32 = 2;
    pub const PRINT: u32 = 3;
    pub const SCHED_SWITCH: u32 = 4;
    pub const CPU_FREQUENCY: u32 = 11;
    pub const CPU_IDLE: u32 = 13;
    pub const SCHED_WAKEUP: u32 = 17;
    pub const SCHED_WAKING: u32 = 20;
}

/// Appends `v` as a varint of exactly `width` bytes (`v` must fit).
pub fn put_padded_varint(out: &mut Vec<u8>, mut v: u64, width: usize) {
    for _ in 1..width {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8 & 0x7f);
}

/// Why a line was not converted.
#[derive(Debug, PartialEq, Eq)]
pub enum Skip {
    /// An event this converter does not carry.
    Unsupported,
    /// A supported event whose arguments do not parse.
    BadArgs,
}

/// The framed packet (a `Trace.packet` record) of one line.
pub fn line_packet(line: &Line<'_>) -> Result<Vec<u8>, Skip> {
    if line.args.len() > MAX_ARGS {
        return Err(Skip::BadArgs);
    }
    let (field, payload) = payload(line)?;
    let mut event = Vec::with_capacity(payload.len() + 24);
    put_tag(&mut event, tag::EVENT_TIMESTAMP, WireType::Varint);
    put_padded_varint(&mut event, line.ts as u64, EVENT_TS_LEN);
    put_varint_field(&mut event, tag::EVENT_PID, u64::from(line.pid));
    put_len_field(&mut event, field, &payload);

    let mut bundle = Vec::with_capacity(event.len() + 8);
    put_tag(&mut bundle, tag::BUNDLE_EVENT, WireType::Len);
    put_padded_varint(&mut bundle, event.len() as u64, 3);
    bundle.extend_from_slice(&event);
    put_varint_field(&mut bundle, tag::BUNDLE_CPU, u64::from(line.cpu));

    let mut packet = Vec::with_capacity(bundle.len() + 24);
    put_tag(&mut packet, tag::PACKET_FTRACE_EVENTS, WireType::Len);
    put_padded_varint(&mut packet, bundle.len() as u64, 3);
    packet.extend_from_slice(&bundle);
    put_varint_field(&mut packet, tag::PACKET_TIMESTAMP, line.ts as u64);
    put_varint_field(&mut packet, tag::PACKET_SEQUENCE_ID, SEQUENCE);

    let mut framed = Vec::with_capacity(packet.len() + 4);
    put_len_field(&mut framed, 1, &packet);
    Ok(framed)
}

/// Whether `packet` (unframed) is laid out as [`line_packet`] makes it.
pub fn is_ftrace_packet(packet: &[u8]) -> bool {
    packet.len() > EVENT_TS_OFFSET + EVENT_TS_LEN
        && packet[0] == 0x0a
        && packet[4] == 0x12
        && packet[8] == 0x08
}

/// [`is_ftrace_packet`] of the packet `head` then `tail`, not joined.
pub fn is_ftrace_parts(head: &[u8], tail: &[u8]) -> bool {
    let byte = |i: usize| head.get(i).or_else(|| tail.get(i - head.len())).copied();
    head.len() + tail.len() > EVENT_TS_OFFSET + EVENT_TS_LEN
        && byte(0) == Some(0x0a)
        && byte(4) == Some(0x12)
        && byte(8) == Some(0x08)
}

/// Overwrites the event timestamp of a packet laid out as [`line_packet`]
/// makes it; false (nothing written) if it is not.
pub fn set_event_ts(packet: &mut [u8], ts: u64) -> bool {
    if !is_ftrace_packet(packet) {
        return false;
    }
    let mut padded = Vec::with_capacity(EVENT_TS_LEN);
    put_padded_varint(&mut padded, ts, EVENT_TS_LEN);
    packet[EVENT_TS_OFFSET..EVENT_TS_OFFSET + EVENT_TS_LEN].copy_from_slice(&padded);
    true
}

fn int(args: &str, key: &str) -> Option<i64> {
    arg(args, key)?.parse().ok()
}

/// A number the trace processor reads as a double and stores as an
/// unsigned 32-bit state.
fn state(args: &str, key: &str) -> Option<u64> {
    let v: f64 = arg(args, key)?.parse().ok()?;
    (v >= 0.0 && v <= f64::from(u32::MAX)).then_some(v as u64)
}

/// The event's field number and message.
fn payload(line: &Line<'_>) -> Result<(u32, Vec<u8>), Skip> {
    let a = line.args;
    let mut m = Vec::with_capacity(a.len() + 16);
    let field = match line.event {
        "tracing_mark_write" | "print" | "0" => {
            put_len_field(&mut m, 2, a.as_bytes());
            tag::PRINT
        }
        "sched_switch" => {
            let (Some(prev_pid), Some(prev_prio), Some(next_pid), Some(next_prio)) = (
                int(a, "prev_pid"),
                int(a, "prev_prio"),
                int(a, "next_pid"),
                int(a, "next_prio"),
            ) else {
                return Err(Skip::BadArgs);
            };
            put_len_field(&mut m, 1, arg(a, "prev_comm").unwrap_or("").as_bytes());
            put_varint_field(&mut m, 2, prev_pid as u64);
            put_varint_field(&mut m, 3, prev_prio as u64);
            let prev_state = raw_prev_state(arg(a, "prev_state").unwrap_or(""));
            put_varint_field(&mut m, 4, prev_state as u64);
            put_len_field(&mut m, 5, arg(a, "next_comm").unwrap_or("").as_bytes());
            put_varint_field(&mut m, 6, next_pid as u64);
            put_varint_field(&mut m, 7, next_prio as u64);
            tag::SCHED_SWITCH
        }
        "sched_waking" | "sched_wakeup" => {
            let Some(pid) = int(a, "pid") else {
                return Err(Skip::BadArgs);
            };
            put_len_field(&mut m, 1, arg(a, "comm").unwrap_or("").as_bytes());
            put_varint_field(&mut m, 2, pid as u64);
            if let Some(prio) = int(a, "prio") {
                put_varint_field(&mut m, 3, prio as u64);
            }
            if let Some(success) = int(a, "success") {
                put_varint_field(&mut m, 4, success as u64);
            }
            if let Some(cpu) = int(a, "target_cpu") {
                put_varint_field(&mut m, 5, cpu as u64);
            }
            if line.event == "sched_waking" {
                tag::SCHED_WAKING
            } else {
                tag::SCHED_WAKEUP
            }
        }
        "cpu_frequency" | "cpu_idle" => {
            let (Some(value), Some(cpu)) = (state(a, "state"), int(a, "cpu_id")) else {
                return Err(Skip::BadArgs);
            };
            put_varint_field(&mut m, 1, value);
            put_varint_field(&mut m, 2, cpu as u64);
            if line.event == "cpu_idle" {
                tag::CPU_IDLE
            } else {
                tag::CPU_FREQUENCY
            }
        }
        _ => return Err(Skip::Unsupported),
    };
    Ok((field, m))
}
