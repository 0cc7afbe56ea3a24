//! The rolling writer (DESIGN.md §4): size/time rotation, retention,
//! index.jsonl, self-contained files (preamble replay), a commit journal
//! for de-duplication state, recovery of a torn file on restart.
//!
//! Blocking API: the daemon runs it on its own thread.
