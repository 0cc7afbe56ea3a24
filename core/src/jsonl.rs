//! The jsonl record of one resolved packet (docs/format.md), shared by
//! `merge --format jsonl` and `tail --format jsonl`.

use std::fmt::Write as _;

use tracesync_protocol::scan::Kind;

/// One jsonl record (docs/format.md), shared by `merge --format jsonl` and
/// `tail --format jsonl`. Strings arrive already JSON-encoded (quotes
/// included, or `null`) so callers can encode each name once, not per packet.
#[derive(Clone, Copy, Debug)]
pub struct JsonlRecord<'a> {
    /// Trace time (ns); negative values print as 0.
    pub ts: i64,
    pub machine_json: &'a str,
    pub raw_id: u64,
    /// Clock id and raw value the timestamp was read in; None: no timestamp.
    pub clock: Option<(u32, u64)>,
    pub seq: u32,
    pub src_json: &'a str,
    pub kind: Kind,
    pub size: usize,
    /// Error bound of `ts`; None where it is not known (printed as null).
    pub err_ns: Option<u64>,
}

/// Appends `record` as one JSON line (newline included) to `line`.
pub fn write_jsonl_record(line: &mut String, record: &JsonlRecord<'_>) {
    // Writing to a String cannot fail.
    let _ = write!(
        line,
        "{{\"ts\":{},\"machine\":{},\"raw_id\":{},",
        record.ts.max(0),
        record.machine_json,
        record.raw_id,
    );
    let _ = match record.clock {
        Some((c, v)) => write!(line, "\"clock\":{c},\"clock_ts\":{v},"),
        None => write!(line, "\"clock\":null,\"clock_ts\":null,"),
    };
    let _ = write!(
        line,
        "\"seq\":{},\"src\":{},\"kind\":\"{}\",\"size\":{},",
        record.seq, record.src_json, record.kind, record.size,
    );
    let _ = match record.err_ns {
        Some(e) => writeln!(line, "\"err_ns\":{e}}}"),
        None => writeln!(line, "\"err_ns\":null}}"),
    };
}

/// JSON encoding of an optional name: a quoted, escaped string or `null`.
pub fn json_name(name: Option<&str>) -> String {
    serde_json::to_string(&name).unwrap_or_else(|_| "null".into())
}
