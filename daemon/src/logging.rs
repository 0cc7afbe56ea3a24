//! Logging of `tracesyncd` and the `tracesync` tools: journald-friendly
//! text, plain text or JSON on stderr, the level from `[log] level` unless
//! `RUST_LOG` is set, changed at run time by [`set_level`] (SIGHUP).
//!
//! One source for both binaries: the relay's `relay/src/logging.rs` is
//! compiled into this crate as well (the daemon does not link the relay).

#[path = "../../relay/src/logging.rs"]
mod shared;

pub use shared::*;
