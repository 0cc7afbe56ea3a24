//! `tracesync merge` (in progress).

pub mod inputs;
pub mod manifest;
