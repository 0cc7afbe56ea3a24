//! What converting non-protobuf inputs (Chrome JSON, systrace) counted:
//! the entries they add to the merge's `--stats`, shared by both
//! converters (JSON's `systemTraceEvents` lines are systrace lines).

use std::sync::{Arc, Mutex};

use serde::Serialize;

/// What a conversion counted; added into the merge's `--stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JsonStats {
    /// Events the trace processor's tokenizer rejects (no `ph`, a `ts`
    /// that is no number, no `ts` outside `M`).
    pub json_tokenizer_failure: u64,
    /// Events its parser rejects (an X without `dur`, a C without args, an
    /// async event without id, ...).
    pub json_parser_failure: u64,
    /// `displayTimeUnit` keys: ignored, as by the trace processor.
    pub json_display_time_unit: u64,
    /// Events of phases not converted (samples, objects, thread states, ...).
    pub json_events_not_converted: u64,
    /// `systemTraceEvents` values that are no string, not converted (a
    /// string's lines are converted as a systrace's, counted under the
    /// systrace stats).
    pub json_system_trace_events_not_converted: u64,
    /// Events before the start of the file's clock.
    pub json_negative_timestamp_dropped: u64,
    /// Packets written out of order: the file's disorder exceeded the
    /// reordering window (the trace processor still sorts them).
    pub json_events_out_of_window: u64,
    /// Complete events that partially overlap an open one on their thread,
    /// moved to a spill track of the thread as the trace processor moves
    /// them.
    pub slice_spill_overlapping_complete_event: u64,
    /// Flow events (`s`, `t`, `f`) whose id is no integer or hexadecimal
    /// string, dropped as the trace processor drops them.
    pub flow_invalid_id: u64,
    /// Systrace lines that are no event line (or whose event's arguments
    /// do not parse): Perfetto's `systrace_parse_failure`.
    pub systrace_parse_failure: u64,
    /// Systrace events of kinds not converted (only tracing_mark_write and
    /// print, sched_switch, sched_waking, sched_wakeup, cpu_frequency and
    /// cpu_idle are).
    pub systrace_events_not_converted: u64,
}

impl JsonStats {
    pub fn add(&mut self, o: &JsonStats) {
        self.json_tokenizer_failure += o.json_tokenizer_failure;
        self.json_parser_failure += o.json_parser_failure;
        self.json_display_time_unit += o.json_display_time_unit;
        self.json_events_not_converted += o.json_events_not_converted;
        self.json_system_trace_events_not_converted += o.json_system_trace_events_not_converted;
        self.json_negative_timestamp_dropped += o.json_negative_timestamp_dropped;
        self.json_events_out_of_window += o.json_events_out_of_window;
        self.slice_spill_overlapping_complete_event += o.slice_spill_overlapping_complete_event;
        self.flow_invalid_id += o.flow_invalid_id;
        self.systrace_parse_failure += o.systrace_parse_failure;
        self.systrace_events_not_converted += o.systrace_events_not_converted;
    }
}

/// Where a reader's counts are left when it is dropped.
pub type StatsSlot = Arc<Mutex<JsonStats>>;
