//! The control socket's protocol, shared by `tracesyncd` (which serves it)
//! and `tracesync status`/`tail` (which speak it), and how a tail shows a
//! packet, also for `tracesync tail DIR` and `merge --format jsonl` of a
//! capture, so a packet reads the same live and from the files.
//!
//! The client sends one JSON line, a [`Request`]; the daemon answers
//! `{"cmd":"status"}` with one JSON line (a
//! [`StatusReport`](crate::status::StatusReport)) and `{"cmd":"tail",...}`
//! with a stream: text or jsonl lines, or a raw Perfetto Trace byte stream
//! that a lagging client sees end with a notice record
//! ([`NOTICE_FIELD`]). A refused request gets one `{"error":"..."}` line.

pub mod format;
pub mod request;

pub use format::{MachineFilter, PacketFormatter, human_ns, wall_minus_boot_of, write_time};
pub use request::{
    HISTORY_PACKETS, MAX_REQUEST_BYTES, NOTICE_FIELD, Request, Since, TailFormat, TimeMode,
    TriggerAnswer, error_line, lag_notice_record,
};
