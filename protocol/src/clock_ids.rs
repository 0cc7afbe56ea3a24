//! Perfetto clock ids: builtin (<= 63), sequence-scoped (64..=127) and global (>= 128).

pub const UNKNOWN: u32 = 0;
pub const REALTIME: u32 = 1;
pub const REALTIME_COARSE: u32 = 2;
pub const MONOTONIC: u32 = 3;
pub const MONOTONIC_COARSE: u32 = 4;
pub const MONOTONIC_RAW: u32 = 5;
pub const BOOTTIME: u32 = 6;
pub const TSC: u32 = 9;
pub const PERF: u32 = 10;
/// Synthetic per-file clock: the private timeline of a file with no absolute clock.
pub const TRACE_FILE: u32 = 11;
pub const BUILTIN_MAX: u32 = 63;

/// Which of Perfetto's three id ranges a clock id falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockRange {
    /// 0..=63: POSIX clocks and friends, snapshotted by the tracing service.
    Builtin,
    /// 64..=127: valid only on the packet sequence that defined it.
    Sequence,
    /// >= 128: shared by every sequence of the trace.
    Global,
}

pub const fn range_of(clock_id: u32) -> ClockRange {
    if clock_id <= BUILTIN_MAX {
        ClockRange::Builtin
    } else if clock_id < 128 {
        ClockRange::Sequence
    } else {
        ClockRange::Global
    }
}

pub const fn is_sequence_clock(clock_id: u32) -> bool {
    matches!(range_of(clock_id), ClockRange::Sequence)
}

/// A global clock id for a fully qualified clock domain name.
///
/// Perfetto publishes two formulas: its docs say `FNV-1a(name) | 0x80000000`,
/// the comment in clock_snapshot.proto says `hash(name) & ~127`. We follow the
/// docs, with 32-bit FNV-1a (clock ids are uint32): setting the top bit always
/// lands in the global range, while `& ~127` can yield 0 or another id below
/// 128 for small hashes, which would be a builtin or sequence clock.
pub fn named_global_clock_id(name: &str) -> u32 {
    const OFFSET_BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    let hash = name
        .bytes()
        .fold(OFFSET_BASIS, |h, b| (h ^ u32::from(b)).wrapping_mul(PRIME));
    hash | 0x8000_0000
}

/// Perfetto's names of the builtin POSIX clocks (as used by manifests and
/// the clock_snapshot table).
pub const fn builtin_name(clock_id: u32) -> Option<&'static str> {
    Some(match clock_id {
        REALTIME => "REALTIME",
        REALTIME_COARSE => "REALTIME_COARSE",
        MONOTONIC => "MONOTONIC",
        MONOTONIC_COARSE => "MONOTONIC_COARSE",
        MONOTONIC_RAW => "MONOTONIC_RAW",
        BOOTTIME => "BOOTTIME",
        TSC => "TSC",
        PERF => "PERF",
        TRACE_FILE => "TRACE_FILE",
        _ => return None,
    })
}

/// The clock names a `perfetto_manifest` accepts.
pub fn manifest_clock_id(name: &str) -> Option<u32> {
    Some(match name {
        "REALTIME" => REALTIME,
        "REALTIME_COARSE" => REALTIME_COARSE,
        "MONOTONIC" => MONOTONIC,
        "MONOTONIC_COARSE" => MONOTONIC_COARSE,
        "MONOTONIC_RAW" => MONOTONIC_RAW,
        "BOOTTIME" => BOOTTIME,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(range_of(6), ClockRange::Builtin);
        assert_eq!(range_of(63), ClockRange::Builtin);
        assert_eq!(range_of(64), ClockRange::Sequence);
        assert_eq!(range_of(127), ClockRange::Sequence);
        assert_eq!(range_of(128), ClockRange::Global);
    }

    #[test]
    fn named_ids_are_global_and_fnv1a() {
        // FNV-1a 32 of "" is the offset basis; of "a" is 0xe40c292c.
        assert_eq!(named_global_clock_id(""), 0x811c_9dc5 | 0x8000_0000);
        assert_eq!(named_global_clock_id("a"), 0xe40c_292c);
        let id = named_global_clock_id("com.example.my_subsystem");
        assert_eq!(range_of(id), ClockRange::Global);
    }
}
