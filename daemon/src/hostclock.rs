//! The host's clocks. The merged trace's time is the host's BOOTTIME.

use nix::time::{ClockId, clock_gettime};

fn read(id: ClockId) -> u64 {
    // clock_gettime cannot fail for these ids on Linux; 0 keeps it total.
    clock_gettime(id).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// Host BOOTTIME (ns): trace time of the live merged output.
pub fn boottime_ns() -> u64 {
    read(ClockId::CLOCK_BOOTTIME)
}

/// BOOTTIME, MONOTONIC, REALTIME and MONOTONIC_RAW read back to back, for
/// the host's own ClockSnapshot packets.
pub fn snapshot_ns() -> [(u32, u64); 4] {
    use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, MONOTONIC_RAW, REALTIME};
    [
        (BOOTTIME, read(ClockId::CLOCK_BOOTTIME)),
        (MONOTONIC, read(ClockId::CLOCK_MONOTONIC)),
        (REALTIME, read(ClockId::CLOCK_REALTIME)),
        (MONOTONIC_RAW, read(ClockId::CLOCK_MONOTONIC_RAW)),
    ]
}
