//! `tracesync tail`: the live merged stream from the daemon (`live.rs`),
//! or the rolling files of a capture directory read back and followed
//! (`dir.rs`), or one snapshot or rolled file printed (`file.rs`); all take the options (`options.rs`) that `command.rs` makes
//! of the command line.

mod command;
mod dir;
mod file;
mod live;
mod options;

pub use command::{TailArgs, run};
