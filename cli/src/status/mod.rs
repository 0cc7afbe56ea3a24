//! `tracesync status`: the daemon's per-machine report, as a table or JSON.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::connect::{self, Target};
use tracesync_common::exit;
use tracesync_core::control::Request;
use tracesync_core::control::human_ns;
use tracesync_core::status::{MachineStatus, OutputStatus, StatusReport};
use tracesync_core::sync::sessions::MachineSync;
use tracesync_protocol::text::escape_control;

/// Longest status line accepted.
const MAX_REPORT_BYTES: u64 = 16 << 20;

mod compact;

pub use compact::{LEGEND, WIDTH, compact, wrap_into};

/// `verbose` (`-v`): the legend, every column and every counter.
pub fn run(target: &Target, json: bool, verbose: bool) -> u8 {
    let conn = match connect::open(target, &Request::Status) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = Vec::new();
    if let Err(e) = BufReader::new(conn)
        .take(MAX_REPORT_BYTES)
        .read_until(b'\n', &mut line)
    {
        return connect::unreachable(target, &format!("no status report: {e}"));
    }
    if let Some(refused) = connect::refusal(&line) {
        eprintln!("tracesync: the daemon refused the request: {refused}");
        return exit::UNAVAILABLE;
    }
    let report: StatusReport = match serde_json::from_slice(&line) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "tracesync: the daemon at {} sent a bad status report: {e}; are the daemon and this tool the same version?",
                target.display()
            );
            return exit::DATAERR;
        }
    };
    let text = if json {
        let mut s = serde_json::to_string_pretty(&report).unwrap_or_default();
        s.push('\n');
        s
    } else {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if verbose {
            format!("{LEGEND}\n{}", table(&report, now_ms))
        } else {
            compact(&report, now_ms)
        }
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => exit::OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("tracesync: cannot write to standard output: {e}");
            exit::IOERR
        }
    }
}

const COLUMNS: [&str; 14] = [
    "MACHINE", "ID", "CONN", "PACKETS", "BYTES", "DROPS", "LATE", "PENDING", "OFFSET", "PPM",
    "BOUND", "MAXERR", "RTT", "SEEN",
];

/// The report as an aligned table with every column (`status -v`), then
/// every counter line.
pub fn table(report: &StatusReport, now_unix_ms: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tracesyncd {}  data {}  sync {}  writing {}",
        report.version,
        report.data_addr.as_deref().unwrap_or("-"),
        report.sync_addr.as_deref().unwrap_or("-"),
        report.current_file.as_deref().unwrap_or("-"),
    );
    let rows: Vec<[String; 14]> = report
        .machines
        .iter()
        .map(|m| row(m, now_unix_ms))
        .collect();
    // Names left, numbers right.
    aligned(&mut out, COLUMNS, &rows, |i| i == 0 || i == 2, "  ");
    for p in problems(report, true) {
        let _ = writeln!(out, "{p}");
    }
    out
}

/// Writes the header `columns` and `rows` as a table: each column as wide
/// as its widest cell, the columns `left` picks left-aligned and the others
/// right-aligned, cells separated by `gap`.
fn aligned<const N: usize>(
    out: &mut String,
    columns: [&str; N],
    rows: &[[String; N]],
    left: impl Fn(usize) -> bool,
    gap: &str,
) {
    let mut widths = columns.map(str::len);
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if left(i) {
                let _ = write!(l, "{cell:<w$}{gap}");
            } else {
                let _ = write!(l, "{cell:>w$}{gap}");
            }
        }
        let _ = writeln!(out, "{}", l.trim_end());
    };
    line(&columns.map(String::from));
    for r in rows {
        line(r);
    }
}

/// The lines below the table: drops by reason, watermark holds, refused
/// relays, failed TLS handshakes, output trouble; with `verbose` also each
/// machine's probe session and the prober's counters.
fn problems(report: &StatusReport, verbose: bool) -> Vec<String> {
    let mut lines = machine_problems(report, verbose);
    peer_problems(report, verbose, &mut lines);
    output_problems(&report.output, &mut lines);
    lines
}

/// Per machine: drops by reason, watermark holds, sources that read
/// nothing; with `verbose` every source and the probe session.
fn machine_problems(report: &StatusReport, verbose: bool) -> Vec<String> {
    let mut lines = Vec::new();
    for m in &report.machines {
        let reasons: Vec<String> = m
            .drops
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(reason, n)| format!("{reason}={n}"))
            .collect();
        if !reasons.is_empty() {
            lines.push(format!("drops on {}: {}", name(m), reasons.join(", ")));
        }
    }
    for m in &report.machines {
        if m.clock_stalls > 0 || m.clocks_refused > 0 {
            lines.push(format!(
                "watermark on {}: clock_stalls={}, clocks_refused={}",
                name(m),
                m.clock_stalls,
                m.clocks_refused
            ));
        }
    }
    for m in &report.machines {
        if m.future_packets > 0 {
            lines.push(format!(
                "timestamps from the future on {}: future_packets={} (written at once, apart from the merge)",
                name(m),
                m.future_packets
            ));
        }
    }
    for m in &report.machines {
        // A relay's source that reads nothing (a missing file, a closed
        // stdin) is a problem; `-v` lists every source.
        for src in m.sources.iter().filter(|s| verbose || !s.is_reading()) {
            let detail = match src.detail.as_str() {
                "" => String::new(),
                d => format!(": {}", escape_control(d)),
            };
            lines.push(format!(
                "source on {}: {} {}{detail}",
                name(m),
                escape_control(&src.spec),
                escape_control(&src.state)
            ));
        }
    }
    for m in report.machines.iter().filter(|_| verbose) {
        if let Some(sync) = &m.sync {
            lines.push(format!("sync on {}: {}", name(m), sync_line(sync)));
        }
    }
    lines
}

/// The prober's counters (with `verbose`), refused relays, failed TLS handshakes.
fn peer_problems(report: &StatusReport, verbose: bool, lines: &mut Vec<String>) {
    if let Some(p) = report.sync.as_ref().filter(|_| verbose) {
        lines.push(format!(
            "sync probes: sent={} accepted={} timeouts={} rejected: bad_mac={} replayed={} \
             nonce_mismatch={} unknown_session={} malformed={}; after_end={} bursts={} \
             tcp_connections={}",
            p.probes_sent,
            p.replies_accepted,
            p.probe_timeouts,
            p.bad_mac,
            p.replayed,
            p.nonce_mismatch,
            p.unknown_session,
            p.malformed,
            p.after_end,
            p.bursts,
            p.tcp_connections
        ));
    }
    let ring: Vec<String> = report
        .machines
        .iter()
        .filter(|m| m.mode.as_deref() == Some("ring"))
        .map(|m| m.name.clone().unwrap_or_else(|| m.raw_id.to_string()))
        .collect();
    if !ring.is_empty() {
        lines.push(format!(
            "ring mode (kept on the relay, shipped on a trigger): {}",
            ring.join(", ")
        ));
    }
    for m in &report.machines {
        if let Some(fill) = &m.ring {
            let who = m.name.clone().unwrap_or_else(|| m.raw_id.to_string());
            lines.push(format!(
                "ring on {}: {}",
                escape_control(&who),
                ring_line(fill)
            ));
        }
    }
    if !report.relays_refused.is_empty() {
        let refused: Vec<String> = report
            .relays_refused
            .iter()
            .map(|(code, n)| format!("{code}={n}"))
            .collect();
        lines.push(format!("relays refused: {}", refused.join(", ")));
    }
    if !report.handshake_failures.is_empty() {
        let failed: Vec<String> = report
            .handshake_failures
            .iter()
            .map(|(reason, n)| format!("{reason}={n}"))
            .collect();
        lines.push(format!("TLS handshakes failed: {}", failed.join(", ")));
    }
}

/// A failing, recovered, vanished or symlinked output.
fn output_problems(o: &OutputStatus, lines: &mut Vec<String>) {
    if o.failing {
        lines.push(format!(
            "OUTPUT NOT WRITABLE ({}); relays are not acknowledged and keep their spools; \
             {} failed attempts, episode {}",
            o.last_error.as_deref().unwrap_or("?"),
            o.errors,
            o.episodes
        ));
    } else if o.episodes > 0 {
        lines.push(format!(
            "output writable again after {} write-error episode(s) ({} failed attempts)",
            o.episodes, o.errors
        ));
    }
    if o.vanished > 0 {
        lines.push(format!(
            "the output file or directory vanished {} time(s); what was not yet durable went \
             to a new file",
            o.vanished
        ));
    }
    if o.symlinks_refused > 0 {
        lines.push(format!(
            "{} symbolic link(s) in the output directory refused (never followed; see the log)",
            o.symlinks_refused
        ));
    }
}

/// A machine's probe session in one line: state, route and rate, the
/// estimate now, the session's probe counters.
fn sync_line(s: &MachineSync) -> String {
    let mut line = format!(
        "{} via {} at {:.1} probes/s",
        s.state.as_str(),
        s.route.map_or("-", |r| r.as_str()),
        s.probe_rate_hz
    );
    if let (Some(epoch), Some(samples)) = (s.epoch, s.samples) {
        let _ = write!(line, "; epoch {epoch}, {samples} samples");
    }
    if let Some(age) = s.last_sample_age_ns {
        let _ = write!(line, ", last {} ago", human_ns(age));
    }
    if let Some(bound) = s.bound_now_ns {
        let _ = write!(line, "; bound now ±{}", human_ns(bound));
    }
    if let Some(sigma) = s.sigma_ns {
        let _ = write!(line, ", sigma {}", human_ns(sigma));
    }
    if let Some(freq) = s.freq_bound_ppm {
        let _ = write!(line, ", freq ±{freq:.3}ppm");
    }
    let p = &s.probes;
    let _ = write!(
        line,
        "; probes sent={} replies={} timeouts={} bad_mac={} replayed={} nonce_mismatch={} \
         rejected={} bursts={}",
        p.probes_sent,
        p.replies,
        p.timeouts,
        p.bad_mac,
        p.replayed,
        p.nonce_mismatch,
        p.replies_rejected,
        p.bursts
    );
    line
}

/// A machine's name as relays announced it, control characters escaped
/// (a name must not break the table or write to the terminal).
pub(crate) fn name(m: &MachineStatus) -> String {
    match (&m.name, m.raw_id) {
        (Some(n), _) => escape_control(n).into_owned(),
        (None, 0) => "host".into(),
        (None, id) => format!("#{id}"),
    }
}

fn row(m: &MachineStatus, now_ms: u64) -> [String; 14] {
    let dash = || "-".to_owned();
    [
        name(m),
        m.raw_id.to_string(),
        if m.connected { "yes" } else { "no" }.into(),
        m.packets.to_string(),
        human_bytes(m.bytes),
        m.drops.values().sum::<u64>().to_string(),
        m.late_packets.to_string(),
        m.pending.to_string(),
        m.offset_ns.map_or_else(dash, |o| {
            let sign = if o < 0 { "-" } else { "+" };
            format!("{sign}{}", human_ns(o.unsigned_abs()))
        }),
        m.drift_ppm.map_or_else(dash, |d| format!("{d:+.2}ppm")),
        m.error_bound_ns
            .map_or_else(dash, |b| format!("±{}", human_ns(b))),
        if m.max_err_ns > 0 {
            human_ns(m.max_err_ns)
        } else {
            dash()
        },
        m.rtt_ns.map_or_else(dash, human_ns),
        m.last_seen_unix_ms.map_or_else(dash, |t| {
            format!("{:.1}s ago", now_ms.saturating_sub(t) as f64 / 1e3)
        }),
    ]
}

/// `42% full, 12.3MiB of 256.0MiB, 6000 packets, oldest 58 s ago (keeps
/// 120 s)`, and the windows it owes.
fn ring_line(fill: &tracesync_core::status::RingStatus) -> String {
    let oldest = match (fill.oldest_age_ns, fill.packets_held) {
        (_, 0) => "empty".to_owned(),
        (Some(age), _) => format!("oldest {:.0} s ago", age as f64 / 1e9),
        (None, _) => "oldest not placed yet (no clock estimate)".to_owned(),
    };
    let owed = match fill.windows_owed {
        0 => String::new(),
        n => format!("; {n} window(s) owed"),
    };
    // A ring that holds something is never shown as empty.
    let percent = match fill.percent() {
        p if p > 0.0 && p < 1.0 => "<1".to_owned(),
        p => format!("{p:.0}"),
    };
    format!(
        "{percent}% full, {} of {}, {} packets, {oldest} (keeps {} s){owed}",
        human_bytes(fill.bytes_held),
        human_bytes(fill.bytes_limit),
        fill.packets_held,
        fill.seconds_limit
    )
}

/// `512B`, `3.0MiB`: binary units, one decimal, no space (narrow columns).
fn human_bytes(b: u64) -> String {
    use humansize::{BINARY, format_size};
    if b < 1024 {
        // Whole bytes have no decimals.
        return format!("{b}B");
    }
    format_size(
        b,
        BINARY
            .decimal_places(1)
            .decimal_zeroes(1)
            .space_after_value(false),
    )
}

#[cfg(test)]
mod tests;
