//! The relay-to-host clock mapping the live core consumes: the sync
//! module's estimate (`to_host`, `offset_at`, error figures for status and
//! jsonl).

pub use crate::sync::SyncEstimate;
