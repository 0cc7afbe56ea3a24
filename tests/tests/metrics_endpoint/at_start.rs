//! The promise of docs/operations-metrics.md `### Conventions`: "Series with
//! a fixed label set exist from startup at zero". The tables of the spec are
//! read from the markdown (not copied here), and the first scrape of each
//! binary, before any relay has connected, must hold every documented
//! series that has no `machine` label (those appear with the machine) and is
//! not the probe-RTT histogram (it fills from the first probe), with every
//! documented value of its fixed labels.

use std::net::TcpListener;

use tracesync_tests::faults::peer::{http_get, logged_metrics_addr};
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts};

use super::{samples, series_name};

const SPEC: &str = include_str!("../../../docs/operations-metrics.md");

/// One row of a metrics table of the spec.
#[derive(Debug)]
struct Documented {
    name: String,
    kind: String,
    /// Label names, each with its documented values (none: free values,
    /// e.g. `machine` or `version`).
    labels: Vec<(String, Vec<String>)>,
}

impl Documented {
    /// Whether the spec promises the series from startup.
    fn promised_at_start(&self) -> bool {
        self.kind != "histogram" && !self.labels.iter().any(|(label, _)| label == "machine")
    }
}

/// The rows of the table under the heading `### {binary}`.
fn documented(binary: &str) -> Vec<Documented> {
    let heading = format!("\n### {binary}\n");
    let section = SPEC
        .split_once(&heading)
        .unwrap_or_else(|| panic!("no {heading:?} in docs/operations-metrics.md"))
        .1;
    let section = section.split("\n#").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let (Some(name), Some(kind), Some(labels)) = (cells.get(1), cells.get(2), cells.get(4))
            else {
                panic!("a metrics row of fewer than five cells: {line}");
            };
            Documented {
                name: name.trim_matches('`').to_owned(),
                kind: (*kind).to_owned(),
                labels: parse_labels(labels),
            }
        })
        .collect()
}

/// A labels cell: `—`, or labels in backticks, one of them followed by a
/// colon and its values (`` `machine`, `reason`: `a`, `b` ``).
fn parse_labels(cell: &str) -> Vec<(String, Vec<String>)> {
    let pieces: Vec<&str> = cell.split('`').collect();
    let mut labels: Vec<(String, Vec<String>)> = Vec::new();
    let mut values_open = false;
    // Odd pieces are inside backticks; the piece after says what it was.
    for (i, code) in pieces.iter().enumerate().skip(1).step_by(2) {
        let after = pieces.get(i + 1).map_or("", |s| s.trim_start());
        if after.starts_with(':') {
            labels.push(((*code).to_owned(), Vec::new()));
            values_open = true;
        } else if values_open {
            if let Some((_, values)) = labels.last_mut() {
                values.push((*code).to_owned());
            }
        } else {
            labels.push(((*code).to_owned(), Vec::new()));
        }
    }
    labels
}

/// What the spec promises from startup and `page` lacks: `name` or
/// `name{label="value"}`.
fn missing_at_start(rows: &[Documented], page: &str) -> Vec<String> {
    let series: Vec<String> = samples(page).into_iter().map(|(s, _)| s).collect();
    let mut missing = Vec::new();
    for row in rows.iter().filter(|r| r.promised_at_start()) {
        let of_name: Vec<&String> = series
            .iter()
            .filter(|s| series_name(s) == row.name)
            .collect();
        let fixed: Vec<&(String, Vec<String>)> =
            row.labels.iter().filter(|(_, v)| !v.is_empty()).collect();
        if fixed.is_empty() && of_name.is_empty() {
            missing.push(row.name.clone());
        }
        for (label, values) in fixed {
            for value in values {
                let pair = format!("{label}=\"{value}\"");
                if !of_name.iter().any(|s| s.contains(&pair)) {
                    missing.push(format!("{}{{{pair}}}", row.name));
                }
            }
        }
    }
    missing
}

#[test]
fn every_documented_fixed_series_is_in_the_first_scrape() {
    let daemon_rows = documented("tracesyncd");
    let relay_rows = documented("tracesync-relay");
    // The parse itself: a table that lost its rows or labels must not pass.
    assert!(daemon_rows.len() >= 40, "{daemon_rows:?}");
    assert!(relay_rows.len() >= 10, "{relay_rows:?}");
    let refused = daemon_rows
        .iter()
        .find(|r| r.name == "tracesync_connections_refused_total")
        .expect("the refused counter in the spec");
    assert!(
        refused.labels.len() == 1 && refused.labels[0].1.len() >= 4,
        "{refused:?}"
    );

    let mut daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
        ..DaemonOpts::default()
    });
    let metrics = logged_metrics_addr(|| daemon.log());
    // Once, before any relay: what exists now existed from the start.
    let page = http_get(metrics, "/metrics").unwrap_or_else(|e| panic!("{e}"));
    let daemon_missing = missing_at_start(&daemon_rows, &page);

    // A relay whose daemon never answers: nothing it counts has happened.
    let nowhere = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let mut opts = RelayOpts::synthetic("lonely", 10);
    opts.extra_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    let mut relay = Relay::start_to(nowhere, "", opts);
    let relay_metrics = logged_metrics_addr(|| relay.log());
    let relay_page = http_get(relay_metrics, "/metrics").unwrap_or_else(|e| panic!("{e}"));
    let relay_missing = missing_at_start(&relay_rows, &relay_page);

    assert!(
        daemon_missing.is_empty() && relay_missing.is_empty(),
        "documented series missing at start:\ntracesyncd: {daemon_missing:?}\n\
         tracesync-relay: {relay_missing:?}\n--- tracesyncd:\n{page}\n--- relay:\n{relay_page}"
    );
    relay.stop();
    assert!(daemon.stop().success(), "tracesyncd:\n{}", daemon.log());
}

#[test]
fn labels_cells_parse() {
    assert!(parse_labels("—").is_empty());
    assert_eq!(parse_labels("`version`"), [("version".into(), vec![])]);
    assert_eq!(
        parse_labels("`machine`, `reason`: `duplicate`, `other`"),
        [
            ("machine".into(), vec![]),
            ("reason".into(), vec!["duplicate".into(), "other".into()])
        ]
    );
}
