//! Helpers for tracesync's integration tests: building traces, running the
//! binaries, and asking a real Perfetto trace processor about the output.

pub mod archive;
pub mod build;
pub mod cases;
pub mod faults;
pub mod feeder;
pub mod fuzz;
pub mod impair;
pub mod live;
pub mod ring;
pub mod run;
pub mod tp;
pub mod vm;
