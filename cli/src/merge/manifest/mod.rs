//! `perfetto_manifest` version 1: the document as parsed, and its errors.
//!
//! [`parse_manifest`] reads and validates the JSON alone (`parse`, with the
//! JSON value helpers in `json`); [`Manifest::check_against_inputs`] then
//! checks it against facts about the input files (`input_checks`). A file's
//! `clocks` override (`clocks`) has both halves: its parsing and its checks.

mod clocks;
mod input_checks;
mod json;
mod parse;

use std::fmt;

use tracesync_common::exit::DATAERR;

pub use clocks::{ClockOverride, SyncTo};
pub use input_checks::FileFacts;
pub use parse::parse_manifest;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    pub trace_time: Option<TraceTime>,
    pub files: Vec<FileEntry>,
    /// In key order; a key set twice keeps its last value.
    pub attributes: Vec<(String, AttributeValue)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceTime {
    /// Builtin clock id.
    pub clock: u32,
    pub file: Option<String>,
    pub machine: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub path: String,
    /// The whole file on one named machine.
    pub machine: Option<String>,
    /// Embedded machine id → name, in the order written.
    pub machines: Vec<(u32, String)>,
    pub clocks: Option<ClockOverride>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeValue {
    Str(String),
    Int(i64),
}

/// A manifest error: `key` is the JSON key path (empty for the document
/// itself), `message` says what is wrong and, where useful, what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub key: String,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "perfetto_manifest: {}", self.message)
        } else {
            write!(f, "perfetto_manifest: {}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ManifestError {}

impl ManifestError {
    /// A bad manifest is bad input data.
    pub fn exit_code(&self) -> u8 {
        DATAERR
    }
}

fn err(key: impl Into<String>, message: impl Into<String>) -> ManifestError {
    ManifestError {
        key: key.into(),
        message: message.into(),
    }
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}

#[cfg(test)]
mod tests;
