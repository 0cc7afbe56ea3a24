//! `tracesync tail`: the live merged stream from the daemon (`live.rs`),
//! or the rolling files of a capture directory read back and followed
//! (`dir.rs`); both take [`TailOptions`].

mod dir;
mod live;
mod options;

pub use dir::run_dir;
pub use live::run_socket;
pub use options::{MAX_LINES, TailOptions};
