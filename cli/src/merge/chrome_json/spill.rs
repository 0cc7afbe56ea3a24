//! Complete (`X`) events that partially overlap an open one on their
//! thread: the trace processor cannot nest them on the thread's track and
//! puts them on an overflow track of the thread (counted as
//! `slice_spill_overlapping_complete_event`); the conversion does the same
//! with a child track of the thread's, so both readings keep every slice.
//!
//! Invariants: events are placed in the order they leave the window (time
//! order); each thread keeps, per track, the ends of its open complete
//! events (popped as later events start), at most `MAX_OPEN` of them;
//! a spilled begin's end follows it to the same track.

use super::fast_hash::FastMap;

use tracesync_protocol::perfetto::TrackDescriptor;
use tracesync_protocol::perfetto::trace_packet::Data;

use super::JsonStats;
use super::framing::{framed, packet};

/// Open complete events remembered per track: beyond it a thread's events
/// are no longer checked (they stay on the thread's track).
const MAX_OPEN: usize = 4096;

/// One open complete event: its end, and whether it is an instant.
#[derive(Clone, Copy)]
struct Open {
    end: i64,
    zero: bool,
}

/// The open complete events of one thread: its own track first, then its
/// spill tracks.
#[derive(Default)]
struct Thread {
    tracks: Vec<Vec<Open>>,
}

/// Where complete events go.
#[derive(Default)]
pub struct Spill {
    threads: FastMap<u64, Thread>,
    /// Spilled begins (by their number in the window) and their track.
    moved: FastMap<u64, u64>,
}

/// The uuid of spill track `index` (1-based) of the thread track `thread`.
fn spill_uuid(thread: u64, index: usize) -> u64 {
    let mut h = thread ^ 0x9e37_79b9_7f4a_7c15;
    h = h.wrapping_mul(0x0100_0000_01b3) ^ index as u64;
    h.wrapping_mul(0x0100_0000_01b3).max(1)
}

/// Pops the events of `stack` that end before `ts` (or at it, unless both
/// are instants), as the trace processor closes its stack; then whether an
/// event `dur` long at `ts` nests in what is left.
fn nests(stack: &mut Vec<Open>, ts: i64, dur: i64) -> bool {
    while let Some(top) = stack.last() {
        if top.end < ts || (top.end == ts && !(top.zero && dur == 0)) {
            stack.pop();
        } else {
            break;
        }
    }
    stack
        .last()
        .is_none_or(|top| !(ts < top.end && ts.saturating_add(dur) > top.end))
}

impl Spill {
    /// Places the begin (number `seq`) of a complete event at `ts`, `dur`
    /// long, on `thread`: None keeps it on the thread's track, Some is the
    /// spill track it moves to (its descriptor written to `out` first).
    pub fn place_begin(
        &mut self,
        thread: u64,
        seq: u64,
        ts: i64,
        dur: i64,
        out: &mut Vec<u8>,
        stats: &mut JsonStats,
    ) -> Option<u64> {
        let t = self.threads.entry(thread).or_default();
        if t.tracks.is_empty() {
            t.tracks.push(Vec::new());
        }
        let open = Open {
            end: ts.saturating_add(dur),
            zero: dur == 0,
        };
        if nests(&mut t.tracks[0], ts, dur) {
            push_bounded(&mut t.tracks[0], open);
            return None;
        }
        stats.slice_spill_overlapping_complete_event += 1;
        let index = match (1..t.tracks.len()).find(|&i| nests(&mut t.tracks[i], ts, dur)) {
            Some(i) => i,
            None => {
                t.tracks.push(Vec::new());
                let d = TrackDescriptor {
                    uuid: Some(spill_uuid(thread, t.tracks.len() - 1)),
                    parent_uuid: Some(thread),
                    ..Default::default()
                };
                out.extend(framed(&packet(None, Data::TrackDescriptor(d))));
                t.tracks.len() - 1
            }
        };
        push_bounded(&mut t.tracks[index], open);
        let uuid = spill_uuid(thread, index);
        self.moved.insert(seq, uuid);
        Some(uuid)
    }

    /// The spill track of the end of the complete event begun as `begin`.
    pub fn place_end(&mut self, begin: u64) -> Option<u64> {
        self.moved.remove(&begin)
    }

    /// No spilled begin waits for its end.
    #[cfg(test)]
    pub fn is_idle(&self) -> bool {
        self.moved.is_empty()
    }
}

fn push_bounded(stack: &mut Vec<Open>, open: Open) {
    if stack.len() < MAX_OPEN {
        stack.push(open);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_overlap_spills_nested_and_disjoint_do_not() {
        let mut s = Spill::default();
        let (mut out, mut stats) = (Vec::new(), JsonStats::default());
        assert_eq!(s.place_begin(7, 1, 100, 100, &mut out, &mut stats), None);
        assert_eq!(s.place_begin(7, 2, 110, 10, &mut out, &mut stats), None);
        let spilled = s.place_begin(7, 3, 150, 100, &mut out, &mut stats);
        assert!(
            spilled.is_some() && !out.is_empty(),
            "a spill track is described"
        );
        assert_eq!(s.place_end(3), spilled);
        assert_eq!(s.place_end(2), None);
        // After the first ends, an event at its end time nests again.
        assert_eq!(s.place_begin(7, 4, 200, 10, &mut out, &mut stats), None);
        assert_eq!(stats.slice_spill_overlapping_complete_event, 1);
    }
}
