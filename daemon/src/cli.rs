//! The `tracesync` command line.
use std::process::ExitCode;

pub fn main() -> ExitCode {
    eprintln!("tracesync: in progress");
    ExitCode::from(crate::exit::SOFTWARE)
}
