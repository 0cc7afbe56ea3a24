//! `tracesync merge` (in progress).
