//! Counters of one merge, written by `--stats` as JSON. Names follow
//! Perfetto's stats where one exists.

use serde::Serialize;

use super::chrome_json::JsonStats;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MergeStats {
    pub inputs: u64,
    pub inputs_with_errors: u64,
    pub machines: u64,
    pub packets_read: u64,
    pub bytes_read: u64,
    pub packets_written: u64,
    pub bytes_written: u64,
    /// Packets whose framing was intact but whose fields were malformed.
    pub packets_malformed: u64,
    /// Packets with no place on the timeline (sum of the clock stats below).
    pub packets_dropped: u64,
    pub clock_sync_failure_unknown_source_clock: u64,
    pub clock_sync_failure_no_path: u64,
    pub clock_sync_unrelatable_clock_domains: u64,
    pub trace_sorter_negative_timestamp_dropped: u64,
    pub invalid_clock_snapshots: u64,
    pub clock_sync_cache_miss: u64,
    /// Input RemoteClockSync packets, replaced by tracesync's sync points.
    pub remote_clock_sync_replaced: u64,
    /// Input SystemInfo packets, merged into one per machine.
    pub system_info_merged: u64,
    pub sync_points_written: u64,
    /// Remote packets whose clock has no path to their machine's BOOTTIME:
    /// Perfetto cannot apply sync points to them.
    pub remote_packets_without_boottime: u64,
    /// Remote packets with no clock id, no sequence default and no default
    /// clock of their machine: taken as already in trace time, as Perfetto
    /// does.
    pub remote_packets_as_trace_time: u64,
    /// What the conversion of Chrome JSON inputs counted.
    #[serde(flatten)]
    pub json: JsonStats,
}

impl MergeStats {
    /// What Perfetto's `util merge --strict` validation sums.
    pub fn strict_failures(&self) -> u64 {
        self.clock_sync_unrelatable_clock_domains
            + self.clock_sync_failure_no_path
            + self.trace_sorter_negative_timestamp_dropped
    }
}
