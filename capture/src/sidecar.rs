//! The `.sync.jsonl` sidecar beside each trace file: the raw probe
//! samples the daemon took while the file was current, one
//! [`ProbeSample`] JSON object a line, appended as they come. A torn or
//! foreign line is skipped by readers, never an error: the samples only
//! refine what the trace file already holds.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use tracesync_core::sync::ProbeSample;

pub use crate::names::SIDECAR_SUFFIX;

/// The sidecar's name of trace file `file_name`.
pub fn sidecar_name(file_name: &str) -> String {
    format!("{file_name}{SIDECAR_SUFFIX}")
}

/// The sidecar's path of the trace file at `trace`.
pub fn sidecar_path(trace: &Path) -> PathBuf {
    let mut name = OsString::from(trace.as_os_str());
    name.push(SIDECAR_SUFFIX);
    PathBuf::from(name)
}

/// One line of a sidecar, if it is a probe sample.
pub fn parse_line(line: &[u8]) -> Option<ProbeSample> {
    serde_json::from_slice(line).ok()
}

/// One sample as its sidecar line, newline included.
pub fn encode_line(sample: &ProbeSample, out: &mut Vec<u8>) -> serde_json::Result<()> {
    serde_json::to_writer(&mut *out, sample)?;
    out.push(b'\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_reads_back_from_its_line_and_junk_does_not() {
        let sample = ProbeSample {
            machine_raw_id: 3,
            session_id: 7,
            t1: 10,
            t2: 20,
            t3: 25,
            t4: 40,
            boottime_minus_monotonic_ns: -5,
        };
        let mut line = Vec::new();
        encode_line(&sample, &mut line).expect("encode");
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(parse_line(&line), Some(sample));
        assert_eq!(parse_line(b"{\"machine_raw_id\":3"), None);
        assert_eq!(
            sidecar_path(Path::new("d/tracesync-x.pftrace")),
            Path::new("d/tracesync-x.pftrace.sync.jsonl")
        );
        assert_eq!(sidecar_name("a.pftrace"), "a.pftrace.sync.jsonl");
    }
}
