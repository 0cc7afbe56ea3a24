//! `tracesync clocks` lists the private clocks of converted inputs (Chrome
//! JSON, systrace) like any other clock: each file's `TRACE_FILE` node
//! under its own name, the pin a manifest gives it (`manifest`), or the
//! default pin at zero (`same-domain`), with trace times that are the ones
//! `tracesync merge` gives the file's events.

use std::path::Path;

use serde_json::{Value, json};
use tracesync_tests::run::tracesync;

const JSON_A: &str = r#"[{"pid":1,"tid":1,"ts":2000,"dur":500,"ph":"X","name":"a"}]"#;
const JSON_B: &str = r#"[{"pid":2,"tid":2,"ts":2000,"dur":500,"ph":"X","name":"b"}]"#;
const SYSTRACE: &str = "# tracer: nop
#
  app-100 (  100) [001] ...1  1.000000: tracing_mark_write: B|100|s
  app-100 (  100) [001] ...1  1.500000: tracing_mark_write: E|100
";

fn run_lines(dir: &Path, args: &[&str]) -> Vec<Value> {
    let owned: Vec<String> = args
        .iter()
        .map(|a| {
            let p = dir.join(a);
            if p.exists() {
                p.display().to_string()
            } else {
                (*a).to_owned()
            }
        })
        .collect();
    let argv: Vec<&str> = owned.iter().map(String::as_str).collect();
    let o = tracesync(&argv);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// (origin, source file name, clock name, clock value, trace time) of
/// every row, in order.
fn rows(lines: &[Value]) -> Vec<(String, String, String, i64, Option<i64>)> {
    lines
        .iter()
        .map(|r| {
            let source = r["source"].as_str().unwrap_or_default();
            let name = Path::new(source)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (
                r["origin"].as_str().unwrap_or_default().to_owned(),
                name,
                r["clock_name"].as_str().unwrap_or("-").to_owned(),
                r["clock_value"].as_i64().unwrap_or(-1),
                r["ts"].as_i64(),
            )
        })
        .collect()
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, body) in [("a.json", JSON_A), ("b.json", JSON_B), ("s.txt", SYSTRACE)] {
        std::fs::write(dir.path().join(name), body).expect("write input");
    }
    dir
}

fn row(
    origin: &str,
    file: &str,
    clock: &str,
    value: i64,
    ts: i64,
) -> (String, String, String, i64, Option<i64>) {
    (origin.into(), file.into(), clock.into(), value, Some(ts))
}

#[test]
fn a_lone_json_file_shows_its_private_clock_pinned_at_zero() {
    let dir = setup();
    let got = rows(&run_lines(dir.path(), &["clocks", "--json", "a.json"]));
    assert_eq!(
        got,
        [
            row("same-domain", "a.json", "TRACE_FILE", 0, 0),
            row("same-domain", "a.json", "BOOTTIME", 0, 0),
        ]
    );
}

#[test]
fn manifest_pins_of_json_and_systrace_files_are_listed_where_merge_puts_them() {
    let dir = setup();
    let manifest = json!({"perfetto_manifest": {"version": 1,
        "trace_time": {"clock": "BOOTTIME"},
        "files": [
            {"path": "a.json", "clocks": {"offset_ns": 1_000_000_000,
                "sync_to": {"file": "a.json", "clock": "BOOTTIME"}}},
            {"path": "b.json", "clocks": {"offset_ns": 500, "sync_to": {"file": "a.json"}}},
            {"path": "s.txt", "clocks": {"offset_ns": -5, "sync_to": {"file": "b.json"}}}]}});
    std::fs::write(dir.path().join("m.json"), manifest.to_string()).expect("manifest");
    let inputs = ["m.json", "a.json", "b.json", "s.txt"];
    let mut args = vec!["clocks", "--json"];
    args.extend(inputs);
    let got = rows(&run_lines(dir.path(), &args));
    assert_eq!(
        got,
        [
            row("manifest", "a.json", "TRACE_FILE", 0, 1_000_000_000),
            row(
                "manifest",
                "a.json",
                "BOOTTIME",
                1_000_000_000,
                1_000_000_000
            ),
            row("manifest", "b.json", "TRACE_FILE", 0, 1_000_000_500),
            row("manifest", "a.json", "TRACE_FILE", 500, 1_000_000_500),
            row("manifest", "s.txt", "TRACE_FILE", 5, 1_000_000_500),
            row("manifest", "b.json", "TRACE_FILE", 0, 1_000_000_500),
        ]
    );
    // The merge puts each file's first event where those pins say: a.json
    // and b.json at 2000 µs of their clocks, s.txt at 1 s of its own.
    let mut args = vec!["merge", "--format", "jsonl", "-o", "-"];
    args.extend(inputs);
    let records = run_lines(dir.path(), &args);
    let first = |file: &str| {
        records
            .iter()
            .filter(|r| r["src"].as_str().is_some_and(|s| s.ends_with(file)))
            .filter(|r| r["clock_ts"].as_i64().is_some())
            .map(|r| r["ts"].as_i64().unwrap_or(-1))
            .min()
    };
    assert_eq!(first("a.json"), Some(1_000_000_000 + 2_000_000));
    assert_eq!(first("b.json"), Some(1_000_000_500 + 2_000_000));
    assert_eq!(first("s.txt"), Some(1_000_000_500 - 5 + 1_000_000_000));
}
