//! What stops a demo, each with the path or the process it names.

use std::io;
use std::path::PathBuf;

use crate::check::CheckError;
use crate::merge::MergeError;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot find my own path: {0}")]
    OwnPath(io::Error),
    #[error("{name} not found next to {}; build all binaries first: cargo build --release --bins", beside.display())]
    NoBinary { name: String, beside: PathBuf },
    #[error("tracesyncd did not start; see {}", log.display())]
    DaemonDidNotStart { log: PathBuf },
    /// What went wrong stopping the daemon and the relays, `; ` between.
    #[error("{}", .0.join("; "))]
    Stopping(Vec<String>),
    #[error("{0}")]
    Check(#[from] CheckError),
    #[error("{0}")]
    Merge(#[from] MergeError),
    #[error("bad jsonl: {0}")]
    Jsonl(serde_json::Error),
    #[error("interrupted: stopped tracesyncd and the relays; what they wrote is in {}", out.display())]
    Interrupted { out: PathBuf },
    /// A process of the demo ended before it was stopped.
    #[error("{name} ended by itself ({status}); see {}", log.display())]
    Ended {
        name: String,
        status: std::process::ExitStatus,
        log: PathBuf,
    },
    /// Standard output was closed: stopped quietly.
    #[error("standard output closed")]
    ReaderGone,
    #[error("cannot watch for Ctrl-C: {0}")]
    Signals(io::Error),
}

impl DemoError {
    /// The exit code: 130 for Ctrl-C (as a shell gives a process that
    /// SIGINT ended), 70 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            DemoError::Interrupted { .. } => 130,
            DemoError::ReaderGone => tracesync_common::exit::OK,
            _ => tracesync_common::exit::SOFTWARE,
        }
    }
}

impl DemoError {
    /// An I/O error of `action` on `path`, for `map_err`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| DemoError::Io {
            action,
            path,
            source,
        }
    }
}
