//! Which lines of a systrace text are event lines, as Perfetto's systrace
//! reader decides: what comes before an atrace `TRACE:` marker in the first
//! [`LOOKAHEAD`] bytes and a trace-cmd `cpus=N` first line are skipped; an
//! HTML systrace (first byte `<`) holds its events in a
//! `<script class="trace-data" type="application/text">` section after a
//! `# ... TASK-PID` header line and ends at that section's `</script>`.
//! Process and cgroup dump sections of an HTML trace are skipped (Perfetto
//! reads process names from them; nothing else does).
//!
//! Invariant: a pure function of the lines in order; it holds one state,
//! never a line.

/// How far Perfetto looks for the format's marks (its
/// kGuessTraceMaxLookahead).
pub const LOOKAHEAD: usize = 128;

const TRACE_DATA: &str = r#"<script class="trace-data" type="application/text">"#;
const SCRIPT_END: &str = "</script>";

/// Whether the first bytes of a text are systrace, by Perfetto's rules:
/// `# tracer` or `TRACE:\n` in the first [`LOOKAHEAD`] bytes, or a start of
/// `<!doctype html>` or `<html>` (any case), `cpus=` or a space. (A first
/// byte of 0x0a is a protobuf trace's, which Perfetto tries first; text
/// with a blank first line still counts when `# tracer` starts it.)
pub fn looks_like_systrace(head: &[u8]) -> bool {
    let start = &head[..head.len().min(LOOKAHEAD)];
    let first_text = start
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map_or(&[][..], |i| &start[i..]);
    let after_marker = first_text.strip_prefix(b"TRACE:").unwrap_or(first_text);
    let after_marker = after_marker
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .map_or(&[][..], |i| &after_marker[i..]);
    if after_marker.starts_with(b"# tracer") {
        return true;
    }
    if start.first() == Some(&0x0a) {
        return false;
    }
    let lower = start.to_ascii_lowercase();
    contains(start, b"# tracer")
        || contains(start, b"TRACE:\n")
        || lower.starts_with(b"<!doctype html>")
        || lower.starts_with(b"<html>")
        || start.starts_with(b"cpus=")
        || start.starts_with(b" ")
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Bytes to skip at the start of a text whose first bytes are `head`: up
/// to and including a `TRACE:\n` marker in the first [`LOOKAHEAD`] bytes.
pub fn marker_end(head: &[u8]) -> usize {
    let start = &head[..head.len().min(LOOKAHEAD)];
    start
        .windows(7)
        .position(|w| w == b"TRACE:\n")
        .map_or(0, |i| i + 7)
}

/// Whether `line` is trace-cmd's `cpus=N` header line.
pub fn is_cpus_line(line: &str) -> bool {
    let line = line.trim_end_matches(['\n', '\r']);
    line.strip_prefix("cpus=")
        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Html,
    TraceData,
    Dump,
    Events,
    Ended,
}

/// What to do with a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    Event,
    Skip,
    /// The events have ended: nothing after this line is read.
    End,
}

/// The section state of one text.
#[derive(Debug)]
pub struct Sections {
    state: State,
}

impl Sections {
    /// For a text whose first byte (after the skipped start) is `first`.
    pub fn new(first: Option<u8>) -> Self {
        let state = if first == Some(b'<') {
            State::Html
        } else {
            State::Events
        };
        Self { state }
    }

    /// What `line` is, and the state after it.
    pub fn line(&mut self, line: &str) -> Use {
        match self.state {
            State::Html => {
                if line.contains(TRACE_DATA) {
                    self.state = State::TraceData;
                }
                Use::Skip
            }
            State::TraceData => {
                if line.starts_with('#') && line.contains("TASK-PID") {
                    self.state = State::Events;
                } else if line.starts_with("PROCESS DUMP") || line.starts_with("CGROUP DUMP") {
                    self.state = State::Dump;
                } else if line.contains(SCRIPT_END) {
                    self.state = State::Html;
                }
                Use::Skip
            }
            State::Dump => {
                if line.contains(SCRIPT_END) {
                    self.state = State::Html;
                }
                Use::Skip
            }
            State::Events if line.contains(SCRIPT_END) => {
                self.state = State::Ended;
                Use::End
            }
            State::Events => Use::Event,
            State::Ended => Use::End,
        }
    }
}
