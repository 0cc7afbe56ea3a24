//! `tracesync status` without `-v`: one row per machine in at most 80
//! columns (like `chronyc sources`), then the problems only, each wrapped
//! to 80 columns. `-v` adds the legend ([`LEGEND`]) and the full table.

use tracesync_core::control::human_ns;
use tracesync_core::status::{MachineStatus, StatusReport};

use super::{aligned, name, problems};

/// Terminal width the default view keeps to.
pub const WIDTH: usize = 80;

/// Longest machine name shown whole in the default view (longer ones end
/// in `~`; `-v` and `--json` show them whole).
const NAME_WIDTH: usize = 16;

const COLUMNS: [&str; 10] = [
    "MACHINE", "CONN", "PACKETS", "DROPS", "LATE", "OFFSET", "PPM", "BOUND", "MAXERR", "SEEN",
];

/// What every column of both views means, printed by `status -v` above
/// the table (as `chronyc sources -v` does).
pub const LEGEND: &str = "\
  MACHINE   name the relay announced (host: this machine; #ID: no Hello yet)
  ID        raw machine id (Perfetto's machine_id)
  CONN      yes: a relay session is connected now
  PACKETS   packets written to the output (k = 1000, M = 1000000)
  BYTES     bytes of those packets
  DROPS     packets dropped, all reasons (listed by reason below the table)
  LATE      packets that came after the watermark passed them (written late)
  PENDING   packets waiting for a clock that resolves them
  OFFSET    machine's clock minus the host's (BOOTTIME), latest estimate
  PPM       frequency error of the machine's clock against the host's
  BOUND     error bound of the estimate now (+-)
  MAXERR    largest error bound a written packet of this machine had
  RTT       probe round trip of the latest sample
  SEEN      how long ago the machine was last heard from
";

/// The default view: header, rows, then the lines about problems.
pub fn compact(report: &StatusReport, now_unix_ms: u64) -> String {
    let mut out = String::new();
    let head = format!(
        "tracesyncd {}  data {}  sync {}",
        report.version,
        report.data_addr.as_deref().unwrap_or("-"),
        report.sync_addr.as_deref().unwrap_or("-"),
    );
    wrap_into(&mut out, &head);
    if let Some(file) = &report.current_file {
        wrap_into(&mut out, &format!("writing {file}"));
    }
    let rows: Vec<[String; 10]> = report
        .machines
        .iter()
        .map(|m| row(m, now_unix_ms))
        .collect();
    aligned(&mut out, COLUMNS, &rows, |i| i <= 1, " ");
    for p in problems(report, false) {
        wrap_into(&mut out, &p);
    }
    out
}

fn row(m: &MachineStatus, now_ms: u64) -> [String; 10] {
    let dash = || "-".to_owned();
    let mut shown = name(m);
    if shown.chars().count() > NAME_WIDTH {
        shown = shown.chars().take(NAME_WIDTH - 1).collect::<String>() + "~";
    }
    [
        shown,
        if m.connected { "yes" } else { "no" }.into(),
        human_count(m.packets),
        human_count(m.drops.values().sum::<u64>()),
        human_count(m.late_packets),
        m.offset_ns.map_or_else(dash, |o| {
            let sign = if o < 0 { "-" } else { "+" };
            format!("{sign}{}", human_ns(o.unsigned_abs()))
        }),
        m.drift_ppm.map_or_else(dash, |d| format!("{d:+.1}")),
        m.error_bound_ns.map_or_else(dash, human_ns),
        if m.max_err_ns > 0 {
            human_ns(m.max_err_ns)
        } else {
            dash()
        },
        m.last_seen_unix_ms.map_or_else(dash, |t| {
            let s = now_ms.saturating_sub(t) as f64 / 1e3;
            if s < 100.0 {
                format!("{s:.1}s")
            } else if s < 6000.0 {
                format!("{:.0}m", s / 60.0)
            } else {
                format!("{:.0}h", s / 3600.0)
            }
        }),
    ]
}

/// 1234 -> "1234", 12345 -> "12.3k", 12345678 -> "12.3M".
pub fn human_count(n: u64) -> String {
    match n {
        0..10_000 => n.to_string(),
        10_000..10_000_000 => format!("{:.1}k", n as f64 / 1e3),
        10_000_000..10_000_000_000 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.1}G", n as f64 / 1e9),
    }
}

/// Appends `text` as lines of at most [`WIDTH`] columns, broken at spaces
/// (continuations indented by two); a word longer than a line stays whole.
pub fn wrap_into(out: &mut String, text: &str) {
    let mut line = String::new();
    let mut fresh = true;
    for word in text.split(' ') {
        let len = line.chars().count();
        if !fresh && len + 1 + word.chars().count() > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = String::from("  ");
            fresh = true;
        }
        if !fresh {
            line.push(' ');
        }
        line.push_str(word);
        fresh = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
}
