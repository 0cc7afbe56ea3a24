//! How a converted JSON packet's time is written into the merged trace.
//!
//! A JSON file's private clock means nothing to a reader of the merged
//! trace (the trace processor v52 has no such clock), so a converted
//! packet is written in a clock every version reads, at its resolved
//! time: on trace time's machine, on trace time's clock; on another
//! machine, on that machine's BOOTTIME with a sync point tying it to trace
//! time at the packet (the writer emits one whenever the machine's
//! mapping changes). The value is appended as a second `timestamp` field:
//! the last of a non-repeated field wins, so the converted bytes stay as
//! they are.

use tracesync_core::clock::ClockNode;
use tracesync_core::clock::timeline::Timeline;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC_RAW};

use crate::merge::machines::MachineIdx;
use crate::merge::second_pass::Head;

/// The clock and value to write a converted packet with; the head's
/// BOOTTIME (and trace-time domain) set for the writer's sync point when
/// the packet is not on trace time's machine. None when trace time is a
/// clock a reader may not know (a file's own clock): written as is.
pub fn written_time(
    head: &mut Head,
    trace_machine: MachineIdx,
    trace_clock: u32,
) -> Option<(u32, u64)> {
    // Builtin POSIX clocks and BOOTTIME: what the writer declares.
    let known = trace_clock == BOOTTIME || (1..=MONOTONIC_RAW).contains(&trace_clock);
    if !known || head.ts < 0 {
        return None;
    }
    if head.machine == trace_machine {
        return Some((trace_clock, head.ts as u64));
    }
    head.boottime = Some(head.ts);
    head.domain = (trace_clock != BOOTTIME).then_some(head.ts);
    Some((BOOTTIME, head.ts as u64))
}

/// The time of a converted ftrace event (systrace): ftrace events are read
/// on their machine's BOOTTIME, so a packet written on another clock of
/// the trace-time machine (`clock`, `ts`) has its event at that
/// machine's BOOTTIME value; with no path to BOOTTIME the writer equates
/// the two at zero (see `output`), so the value is kept.
pub fn ftrace_event_time(timeline: &mut Timeline, clock: u32, ts: u64) -> u64 {
    if clock == BOOTTIME {
        return ts;
    }
    let trace = timeline.trace_clock();
    let boottime = ClockNode {
        clock: BOOTTIME,
        seq: 0,
        ..trace
    };
    match timeline.graph_mut().convert(trace, ts, boottime) {
        Ok(v) if v >= 0 => v as u64,
        _ => ts,
    }
}
