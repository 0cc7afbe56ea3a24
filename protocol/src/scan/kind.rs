//! A packet's payload kind: Perfetto's names for the TracePacket `data`
//! oneof members, and which top-level fields are metadata instead.

use super::field;

/// A packet's payload kind, printed as Perfetto's field name where we know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind(pub Option<u32>);

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => f.write_str("none"),
            Some(n) => match data_field_name(n) {
                Some(name) => f.write_str(name),
                None => write!(f, "field_{n}"),
            },
        }
    }
}

/// Perfetto's names for the TracePacket `data` oneof members we recognise.
pub const fn data_field_name(field_number: u32) -> Option<&'static str> {
    Some(match field_number {
        1 => "ftrace_events",
        2 => "process_tree",
        4 => "inode_file_map",
        5 => "chrome_events",
        6 => "clock_snapshot",
        7 => "sys_stats",
        9 => "process_stats",
        11 => "track_event",
        33 => "trace_config",
        34 => "ftrace_stats",
        35 => "trace_stats",
        36 => "synchronization_marker",
        37 => "profile_packet",
        38 => "battery",
        39 => "android_log",
        40 => "power_rails",
        43 => "process_descriptor",
        44 => "thread_descriptor",
        45 => "system_info",
        46 => "trigger",
        47 => "packages_list",
        48 => "chrome_benchmark_metadata",
        49 => "perfetto_metatrace",
        50 => "compressed_packets",
        51 => "chrome_metadata",
        52 => "gpu_counter_event",
        53 => "gpu_render_stage_event",
        54 => "streaming_profile_packet",
        57 => "graphics_frame_event",
        60 => "track_descriptor",
        61 => "module_symbols",
        62 => "vulkan_memory_event",
        63 => "gpu_log",
        64 => "deobfuscation_mapping",
        65 => "vulkan_api_event",
        66 => "perf_sample",
        67 => "cpu_info",
        68 => "smaps_packet",
        69 => "service_event",
        70 => "initial_display_state",
        71 => "gpu_mem_total_event",
        72 => "extension_descriptor",
        73 => "memory_tracker_snapshot",
        74 => "streaming_allocation",
        75 => "streaming_free",
        77 => "android_energy_estimation_breakdown",
        78 => "ui_state",
        82 => "translation_table",
        83 => "android_game_intervention_list",
        84 => "statsd_atom",
        86 => "android_system_property",
        89 => "trace_uuid",
        90 => "track_event_range_of_interest",
        91 => "entity_state_residency",
        95 => "etw_events",
        107 => "remote_clock_sync",
        109 => "chrome_trigger",
        133 => "zstd_compressed_packets",
        900 => "for_testing",
        _ => return None,
    })
}

/// Top-level fields that are packet metadata, not the `data` payload.
pub const fn is_metadata_field(n: u32) -> bool {
    matches!(
        n,
        field::TRUSTED_UID
            | field::TIMESTAMP
            | field::TRUSTED_PACKET_SEQUENCE_ID
            | field::INTERNED_DATA
            | field::SEQUENCE_FLAGS
            | field::INCREMENTAL_STATE_CLEARED
            | field::PREVIOUS_PACKET_DROPPED
            | field::TIMESTAMP_CLOCK_ID
            | field::TRACE_PACKET_DEFAULTS
            | field::TRUSTED_PID
            | field::FIRST_PACKET_ON_SEQUENCE
            | field::MACHINE_ID
    )
}
