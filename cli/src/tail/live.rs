//! `tracesync tail` against the daemon: its live merged stream over the
//! control socket.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::time::Duration;

use tracesync_protocol::wire;

use super::options::{self, TailOptions, known_list, write_all};
use crate::connect::{self, Target};
use crate::merge::window::TimeSpec;
use tracesync_common::exit;
use tracesync_core::control::{HISTORY_PACKETS, NOTICE_FIELD, Request, Since, TailFormat};

/// Follows the daemon's stream until it ends.
pub fn run_socket(target: &Target, opts: TailOptions) -> u8 {
    if let Some((unknown, known)) = unknown_to_daemon(target, &opts.machines) {
        for name in unknown {
            eprintln!(
                "tracesync: warning: the daemon knows no machine {name:?} (known: {}); showing \
                 its packets if it connects",
                known_list(&known)
            );
        }
    }
    if opts.lines.is_some_and(|n| n > HISTORY_PACKETS as u64) {
        eprintln!(
            "tracesync: warning: -n: the daemon holds at most its last {HISTORY_PACKETS} packets; \
             showing those (tracesync tail DIR -n N reads further back in the rolled files)"
        );
    }
    let format = opts.format;
    let request = Request::Tail {
        format,
        machines: opts.machines,
        time: opts.time,
        lines: opts.lines,
        since: opts.since.map(|spec| match spec {
            TimeSpec::Trace(ns) => Since::TraceNs(ns),
            TimeSpec::Wall(ns) => Since::WallNs(i64::try_from(ns).unwrap_or(i64::MAX)),
            TimeSpec::BeforeEnd(ago) => Since::AgoNs(ago),
        }),
    };
    let mut conn = match connect::open(target, &request) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut buf = vec![0u8; 64 << 10];
    let mut first = true;
    let mut framing = PerfettoFraming::default();
    let mut pass = Vec::with_capacity(buf.len());
    loop {
        let n = match conn.read(&mut buf) {
            Ok(0) => {
                eprintln!("tracesync: the daemon closed the stream");
                return exit::OK;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return connect::unreachable(target, &format!("stream broken: {e}")),
        };
        let chunk = &buf[..n];
        if first {
            first = false;
            // A refusal is one JSON line before any data; a perfetto stream
            // never starts with `{`, and jsonl records have no "error" key.
            if chunk.first() == Some(&b'{') {
                let line = chunk.split(|&b| b == b'\n').next().unwrap_or(chunk);
                if let Some(refused) = connect::refusal(line) {
                    eprintln!("tracesync: the daemon refused the tail: {refused}");
                    return exit::UNAVAILABLE;
                }
            }
        }
        let data: &[u8] = if format == TailFormat::Perfetto {
            pass.clear();
            match framing.feed(chunk, &mut pass) {
                Ok(None) => &pass,
                Ok(Some(notice)) => {
                    let _ = write_all(&mut out, &pass);
                    eprintln!(
                        "tracesync: this perfetto stream fell behind and the daemon ended it ({notice}); \
                         a gap cannot be spliced into a trace: restart the tail, or follow the rolling files (tracesync tail DIR)"
                    );
                    return exit::IOERR;
                }
                Err(e) => {
                    eprintln!("tracesync: bad perfetto stream from the daemon: {e}");
                    return exit::DATAERR;
                }
            }
        } else {
            chunk
        };
        if let Err(code) = write_all(&mut out, data) {
            return code;
        }
    }
}

/// The `--machine` values no machine of the daemon's status report
/// matches (by name, raw id, or `host` for machine 0), and the machines it
/// knows. None when the report cannot be had (the tail then says why).
type Unknown = (Vec<String>, BTreeMap<u32, Option<String>>);

fn unknown_to_daemon(target: &Target, wanted: &[String]) -> Option<Unknown> {
    if wanted.is_empty() {
        return None;
    }
    let conn = connect::open_quiet(target, &Request::Status).ok()?;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = Vec::new();
    if io::BufRead::read_until(
        &mut io::BufReader::new(conn).take(16 << 20),
        b'\n',
        &mut line,
    )
    .is_err()
    {
        return None;
    }
    let report = serde_json::from_slice::<tracesync_core::status::StatusReport>(&line).ok()?;
    let known: BTreeMap<u32, Option<String>> = report
        .machines
        .iter()
        .map(|m| (m.raw_id, m.name.clone()))
        .collect();
    Some((options::unknown_machines(wanted, &known), known))
}

/// Splits the daemon's perfetto stream into Trace records: packet records
/// pass through unchanged, the notice record (field [`NOTICE_FIELD`]) ends
/// the stream.
#[derive(Debug, Default)]
struct PerfettoFraming {
    /// A record header being assembled.
    header: Vec<u8>,
    /// Bytes of the current packet record still to pass through.
    passing: u64,
    /// The notice record's body being collected, and its length.
    notice: Option<(Vec<u8>, usize)>,
}

/// Longest notice accepted.
const MAX_NOTICE: u64 = 4096;

impl PerfettoFraming {
    /// Appends the packet bytes of `chunk` to `out`; returns the notice
    /// once it is complete.
    fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<u8>) -> Result<Option<String>, String> {
        while !chunk.is_empty() {
            if self.passing > 0 {
                let n = (self.passing.min(chunk.len() as u64)) as usize;
                out.extend_from_slice(&chunk[..n]);
                self.passing -= n as u64;
                chunk = &chunk[n..];
                continue;
            }
            if let Some((body, len)) = &mut self.notice {
                let n = (*len - body.len()).min(chunk.len());
                body.extend_from_slice(&chunk[..n]);
                chunk = &chunk[n..];
                if body.len() == *len {
                    return Ok(Some(String::from_utf8_lossy(body).into_owned()));
                }
                continue;
            }
            self.header.push(chunk[0]);
            chunk = &chunk[1..];
            let Ok((tag, tag_len)) = wire::decode_varint(&self.header) else {
                if self.header.len() > 10 {
                    return Err("malformed record header".into());
                }
                continue;
            };
            let Ok((len, len_len)) = wire::decode_varint(&self.header[tag_len..]) else {
                if self.header.len() > 20 {
                    return Err("malformed record header".into());
                }
                continue;
            };
            debug_assert_eq!(tag_len + len_len, self.header.len());
            if tag == (1 << 3) | 2 {
                out.extend_from_slice(&self.header);
                self.passing = len;
            } else if tag == (u64::from(NOTICE_FIELD) << 3) | 2 && len <= MAX_NOTICE {
                self.notice = Some((Vec::new(), len as usize));
                if len == 0 {
                    return Ok(Some(String::new()));
                }
            } else {
                return Err(format!("unexpected record tag {tag} of {len} bytes"));
            }
            self.header.clear();
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracesync_core::control::lag_notice_record;

    #[test]
    fn framing_passes_packets_and_stops_at_the_notice() {
        let mut stream = Vec::new();
        wire::put_trace_packet(&mut stream, &[0x40, 0x01]);
        wire::put_trace_packet(&mut stream, &vec![7u8; 300]);
        let packets = stream.clone();
        stream.extend_from_slice(&lag_notice_record(42));
        // Byte by byte: headers and bodies split anywhere.
        let mut framing = PerfettoFraming::default();
        let mut out = Vec::new();
        let mut notice = None;
        for b in &stream {
            if let Some(n) = framing
                .feed(std::slice::from_ref(b), &mut out)
                .expect("feed")
            {
                notice = Some(n);
            }
        }
        assert_eq!(out, packets);
        assert_eq!(notice.as_deref(), Some("{\"lagged\":42}"));
    }

    #[test]
    fn framing_rejects_other_records() {
        let mut framing = PerfettoFraming::default();
        let err = framing.feed(&[0x08, 0x01], &mut Vec::new());
        assert!(err.is_err());
    }
}
