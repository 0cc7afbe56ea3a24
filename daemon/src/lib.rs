//! tracesync host side.
//!
//! - [`clock`]: the clock engine (sans-IO): a global graph of clocks
//!   qualified by machine, source and sequence; nearest-snapshot conversion;
//!   trace-time selection and placement of clocks with no path.
//! - [`merge`]: `tracesync merge`, the offline merger of recorded traces.
//! - [`exit`]: sysexits codes shared by the binaries.

pub mod cli;
pub mod clock;
pub mod demo;
pub mod exit;
pub mod merge;
