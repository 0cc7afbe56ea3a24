//! `tracesync status`: the daemon's per-machine report, as a table or JSON.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::connect::{self, Target};
use tracesync_common::exit;
use tracesync_core::status::{MachineStatus, StatusReport};
use tracesync_core::sync::sessions::MachineSync;
use tracesync_daemon::control::Request;
use tracesync_daemon::control::format::human_ns;
use tracesync_protocol::text::escape_control;

/// Longest status line accepted.
const MAX_REPORT_BYTES: u64 = 16 << 20;

pub fn run(target: &Target, json: bool) -> u8 {
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
        table(&report, now_ms)
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

const COLUMNS: [&str; 12] = [
    "MACHINE",
    "ID",
    "CONN",
    "PACKETS",
    "BYTES",
    "DROPS",
    "PENDING",
    "OFFSET",
    "DRIFT",
    "BOUND",
    "RTT",
    "LAST SEEN",
];

/// The report as an aligned table, then the drops by reason.
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
    let rows: Vec<[String; 12]> = report
        .machines
        .iter()
        .map(|m| row(m, now_unix_ms))
        .collect();
    let mut widths = COLUMNS.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            // Names left, numbers right.
            if i == 0 || i == 2 {
                let _ = write!(l, "{cell:<w$}  ");
            } else {
                let _ = write!(l, "{cell:>w$}  ");
            }
        }
        let _ = writeln!(out, "{}", l.trim_end());
    };
    line(&COLUMNS.map(String::from));
    for r in &rows {
        line(r);
    }
    for m in &report.machines {
        let reasons: Vec<String> = m
            .drops
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(reason, n)| format!("{reason}={n}"))
            .collect();
        if !reasons.is_empty() {
            let _ = writeln!(out, "drops on {}: {}", name(m), reasons.join(", "));
        }
    }
    for m in &report.machines {
        if m.clock_stalls > 0 || m.clocks_refused > 0 {
            let _ = writeln!(
                out,
                "watermark on {}: clock_stalls={}, clocks_refused={}",
                name(m),
                m.clock_stalls,
                m.clocks_refused
            );
        }
    }
    for m in &report.machines {
        if let Some(sync) = &m.sync {
            let _ = writeln!(out, "sync on {}: {}", name(m), sync_line(sync));
        }
    }
    if let Some(p) = &report.sync {
        let _ = writeln!(
            out,
            "sync probes: sent={} accepted={} timeouts={} rejected: bad_mac={} replayed={} \
             nonce_mismatch={} unknown_session={} malformed={}; bursts={} tcp_connections={}",
            p.probes_sent,
            p.replies_accepted,
            p.probe_timeouts,
            p.bad_mac,
            p.replayed,
            p.nonce_mismatch,
            p.unknown_session,
            p.malformed,
            p.bursts,
            p.tcp_connections
        );
    }
    if !report.relays_refused.is_empty() {
        let refused: Vec<String> = report
            .relays_refused
            .iter()
            .map(|(code, n)| format!("{code}={n}"))
            .collect();
        let _ = writeln!(out, "relays refused: {}", refused.join(", "));
    }
    let o = &report.output;
    if o.failing {
        let _ = writeln!(
            out,
            "OUTPUT NOT WRITABLE ({}); relays are not acknowledged and keep their spools; \
             {} failed attempts, episode {}",
            o.last_error.as_deref().unwrap_or("?"),
            o.errors,
            o.episodes
        );
    } else if o.episodes > 0 {
        let _ = writeln!(
            out,
            "output writable again after {} write-error episode(s) ({} failed attempts)",
            o.episodes, o.errors
        );
    }
    if o.vanished > 0 {
        let _ = writeln!(
            out,
            "the output file or directory vanished {} time(s); what was not yet durable went \
             to a new file",
            o.vanished
        );
    }
    if o.symlinks_refused > 0 {
        let _ = writeln!(
            out,
            "{} symbolic link(s) in the output directory refused (never followed; see the log)",
            o.symlinks_refused
        );
    }
    out
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
fn name(m: &MachineStatus) -> String {
    match (&m.name, m.raw_id) {
        (Some(n), _) => escape_control(n).into_owned(),
        (None, 0) => "host".into(),
        (None, id) => format!("#{id}"),
    }
}

fn row(m: &MachineStatus, now_ms: u64) -> [String; 12] {
    let dash = || "-".to_owned();
    [
        name(m),
        m.raw_id.to_string(),
        if m.connected { "yes" } else { "no" }.into(),
        m.packets.to_string(),
        human_bytes(m.bytes),
        m.drops.values().sum::<u64>().to_string(),
        m.pending.to_string(),
        m.offset_ns.map_or_else(dash, |o| {
            let sign = if o < 0 { "-" } else { "+" };
            format!("{sign}{}", human_ns(o.unsigned_abs()))
        }),
        m.drift_ppm.map_or_else(dash, |d| format!("{d:+.2}ppm")),
        m.error_bound_ns
            .map_or_else(dash, |b| format!("±{}", human_ns(b))),
        m.rtt_ns.map_or_else(dash, human_ns),
        m.last_seen_unix_ms.map_or_else(dash, |t| {
            format!("{:.1}s ago", now_ms.saturating_sub(t) as f64 / 1e3)
        }),
    ]
}

fn human_bytes(b: u64) -> String {
    match b {
        0..1024 => format!("{b}B"),
        1024..1_048_576 => format!("{:.1}KiB", b as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1}MiB", b as f64 / 1_048_576.0),
        _ => format!("{:.2}GiB", b as f64 / 1_073_741_824.0),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn table_shows_every_column_and_drop_reasons() {
        let report = StatusReport {
            version: "0.1.0".into(),
            data_addr: Some("0.0.0.0:7410".into()),
            machines: vec![
                MachineStatus {
                    raw_id: 0,
                    connected: true,
                    packets: 12,
                    bytes: 2048,
                    ..Default::default()
                },
                MachineStatus {
                    name: Some("phone".into()),
                    raw_id: 3_000_000_000,
                    connected: false,
                    packets: 5,
                    bytes: 3 << 20,
                    drops: BTreeMap::from([("clock_sync_failure_no_path".into(), 4)]),
                    pending: 7,
                    offset_ns: Some(-2_500_000),
                    drift_ppm: Some(12.345),
                    error_bound_ns: Some(1_500),
                    rtt_ns: Some(80_000),
                    last_seen_unix_ms: Some(9_000),
                    late_packets: 0,
                    unprobed_packets: 0,
                    remapped_packets: 0,
                    clock_stalls: 0,
                    clocks_refused: 0,
                    max_err_ns: 0,
                    sync: Some(MachineSync {
                        session_id: 9,
                        state: tracesync_core::sync::sessions::SyncState::Steady,
                        route: Some(tracesync_core::sync::sessions::RouteKind::Udp),
                        probe_rate_hz: 8.0,
                        epoch: Some(0),
                        freq_bound_ppm: Some(0.25),
                        sigma_ns: Some(900),
                        bound_now_ns: Some(2_500),
                        samples: Some(32),
                        last_sample_age_ns: Some(120_000_000),
                        probes: tracesync_core::sync::sessions::SessionCounters {
                            probes_sent: 100,
                            replies: 97,
                            timeouts: 2,
                            bad_mac: 1,
                            bursts: 1,
                            ..Default::default()
                        },
                    }),
                },
            ],
            ..Default::default()
        };
        let t = table(&report, 10_500);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("data 0.0.0.0:7410"), "{t}");
        assert!(lines[1].starts_with("MACHINE"), "{t}");
        assert!(lines[2].starts_with("host "), "{t}");
        for cell in [
            "phone",
            "3000000000",
            "no",
            "3.0MiB",
            "4",
            "7",
            "-2.50ms",
            "+12.35ppm",
            "±1.5us",
            "80.0us",
            "1.5s ago",
        ] {
            assert!(lines[3].contains(cell), "{cell} missing in {}", lines[3]);
        }
        assert_eq!(lines[4], "drops on phone: clock_sync_failure_no_path=4");
        assert_eq!(
            lines[5],
            "sync on phone: steady via udp at 8.0 probes/s; epoch 0, 32 samples, last 120.00ms \
             ago; bound now ±2.5us, sigma 900ns, freq ±0.250ppm; probes sent=100 replies=97 \
             timeouts=2 bad_mac=1 replayed=0 nonce_mismatch=0 rejected=0 bursts=1"
        );
    }

    #[test]
    fn control_characters_in_names_are_escaped_in_every_line() {
        let evil = "ph\none\r\u{1b}[2J\u{202e}x";
        let report = StatusReport {
            machines: vec![MachineStatus {
                name: Some(evil.into()),
                raw_id: 9,
                connected: true,
                drops: BTreeMap::from([("duplicates_dropped".into(), 1)]),
                sync: Some(MachineSync {
                    session_id: 1,
                    state: tracesync_core::sync::sessions::SyncState::Steady,
                    route: None,
                    probe_rate_hz: 1.0,
                    epoch: None,
                    freq_bound_ppm: None,
                    sigma_ns: None,
                    bound_now_ns: None,
                    samples: None,
                    last_sample_age_ns: None,
                    probes: Default::default(),
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let t = table(&report, 0);
        let want = "ph\\none\\r\\u{1b}[2J\\u{202e}x";
        let lines: Vec<&str> = t.lines().collect();
        // Header line, column names, one row, one drops line, one sync line.
        assert_eq!(lines.len(), 5, "{t}");
        assert!(lines[2].starts_with(want), "{t}");
        assert!(lines[3].starts_with(&format!("drops on {want}: ")), "{t}");
        assert!(lines[4].starts_with(&format!("sync on {want}: ")), "{t}");
        assert!(
            !t.chars()
                .any(|c| c != '\n' && tracesync_protocol::text::needs_escape(c)),
            "{t:?}"
        );
        // Columns stay aligned: the escaped name sets the width.
        let name_width = lines[1].find("ID").unwrap();
        assert!(name_width > want.len(), "{t}");
    }

    #[test]
    fn an_unwritable_output_is_said_below_the_table() {
        let mut report = StatusReport {
            output: tracesync_core::status::OutputStatus {
                failing: true,
                errors: 3,
                episodes: 1,
                failing_since_unix_ms: Some(1),
                last_error: Some("cannot commit: No space left on device".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let t = table(&report, 2);
        let last = t.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("OUTPUT NOT WRITABLE (cannot commit: No space left on device)"),
            "{t}"
        );
        report.output.failing = false;
        let t = table(&report, 2);
        assert!(
            t.ends_with(
                "output writable again after 1 write-error episode(s) (3 failed attempts)\n"
            ),
            "{t}"
        );
        report.output.vanished = 1;
        report.output.symlinks_refused = 2;
        let t = table(&report, 2);
        assert!(t.contains("vanished 1 time(s)"), "{t}");
        assert!(
            t.ends_with(
                "2 symbolic link(s) in the output directory refused (never followed; see the \
                 log)\n"
            ),
            "{t}"
        );
    }

    #[test]
    fn clock_stalls_and_refused_clocks_get_a_line() {
        let report = StatusReport {
            machines: vec![
                MachineStatus {
                    name: Some("phone".into()),
                    raw_id: 3,
                    clock_stalls: 1,
                    clocks_refused: 12,
                    ..Default::default()
                },
                MachineStatus {
                    name: Some("quiet".into()),
                    raw_id: 4,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let text = table(&report, 0);
        assert!(
            text.contains("watermark on phone: clock_stalls=1, clocks_refused=12\n"),
            "{text}"
        );
        assert!(!text.contains("watermark on quiet"), "{text}");
        assert!(!text.contains("drops on phone"), "not drops: {text}");
    }
}
