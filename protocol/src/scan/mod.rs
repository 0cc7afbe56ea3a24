//! Zero-copy scan of a TracePacket's top-level fields, and stamping of
//! top-level fields into a copy of the packet's bytes.
//!
//! Only the fields the relay and the daemon act on are read (docs/format.md);
//! everything else, nested timestamps included, passes through untouched.
//!
//! The generic walk over a message's fields is in `fields`, the scan of a
//! packet's fields in `packet`, payload kind names in `kind`, where the
//! stamped fields are in `layout`, and stamping in `stamp`.

mod fields;
mod kind;
mod layout;
mod packet;
mod stamp;

pub use fields::{FieldValue, Fields, RawField, ScanError};
pub use kind::{Kind, data_field_name, is_metadata_field};
pub use layout::StampLayout;
pub use packet::{
    FieldSink, PacketFields, defaults_timestamp_clock_id, note_payload, scan_packet,
    scan_packet_into, walk_fields_into,
};
pub use stamp::{
    STAMP_MOVED_MAX, STAMP_SUFFIX_MAX, Stamp, StampSuffix, StampTail, stamp_by_layout, stamp_into,
    stamp_scanned, stamp_split, stamp_split_by_layout, stamp_split_moved,
    stamp_split_with_suffix_into, write_tail,
};

/// TracePacket field numbers tracesync reads or writes.
pub mod field {
    pub const TRUSTED_UID: u32 = 3;
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const INCREMENTAL_STATE_CLEARED: u32 = 41;
    pub const PREVIOUS_PACKET_DROPPED: u32 = 42;
    pub const SYSTEM_INFO: u32 = 45;
    pub const COMPRESSED_PACKETS: u32 = 50;
    pub const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const TRACE_PACKET_DEFAULTS: u32 = 59;
    pub const TRUSTED_PID: u32 = 79;
    pub const FIRST_PACKET_ON_SEQUENCE: u32 = 87;
    pub const MACHINE_ID: u32 = 98;
    pub const REMOTE_CLOCK_SYNC: u32 = 107;
}

/// TracePacket.sequence_flags bits.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

#[cfg(test)]
mod tests;
