//! Perfetto's single-file JSON cases (`test/trace_processor/diff_tests/
//! parser/json/tests.py`), each test named after Perfetto's: the case's
//! JSON (tests/fixtures/parser_json/) is merged alone by `tracesync merge`
//! and the trace processor (v52) must read from the merged trace what it
//! reads from the JSON, with Perfetto's expected rows where v52 has the
//! table. Perfetto's expected rows come from a newer trace processor; where
//! v52 reads the JSON otherwise, the merged trace is held to Perfetto's
//! expected rows and v52's reading of the JSON is noted.
//!
//! What TrackEvent cannot carry differs by design (docs/format.md, "Chrome
//! JSON"): args are `debug.*` (a `.` in a key becomes `_`) where the JSON
//! importer writes `args.*`, async tracks are TrackEvent tracks, not
//! `legacy_async_*` ones. The comparison here makes those the same; the
//! cases TrackEvent cannot carry at all are skipped with their reason in
//! parser_json_tracks.rs.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tracesync_tests::run::tracesync;
use tracesync_tests::tp;

/// One case merged: the trace processor's rows from the JSON and from the
/// merged trace, and the merge's `--stats`.
pub struct Judged {
    pub json: Vec<Vec<Vec<Value>>>,
    pub merged: Vec<Vec<Vec<Value>>>,
    pub stats: Value,
    pub out: PathBuf,
    _dir: tempfile::TempDir,
}

pub fn fixture(case: &str) -> PathBuf {
    tp::repo_root()
        .join("tests/fixtures/parser_json")
        .join(format!("{case}.json"))
}

/// Merges `case`'s JSON alone; the merged trace, its stats and the run's
/// stderr (None when the merge failed).
pub fn merge(case: &str, dir: &Path) -> (Option<PathBuf>, Value, String) {
    merge_path(&fixture(case), dir)
}

/// [`merge`] of the JSON file `input`.
pub fn merge_path(input: &Path, dir: &Path) -> (Option<PathBuf>, Value, String) {
    let out = dir.join("out.pftrace");
    let stats = dir.join("stats.json");
    let run = tracesync(&[
        "merge",
        "-o",
        &out.display().to_string(),
        "--stats",
        &stats.display().to_string(),
        &input.display().to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    if run.status.code() != Some(0) {
        return (None, Value::Null, stderr);
    }
    let stats = std::fs::read(&stats)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    (Some(out), stats, stderr)
}

fn rows(trace: &Path, sqls: &[&str]) -> Vec<Vec<Vec<Value>>> {
    tp::query(trace, sqls)
        .unwrap_or_else(|e| panic!("{}: {e}", trace.display()))
        .into_iter()
        .map(|r| r.rows)
        .collect()
}

/// Merges `case` and runs `sqls` on the JSON and on the merged trace; None
/// when the trace processor is not installed.
pub fn judge(case: &str, sqls: &[&str]) -> Option<Judged> {
    judge_path(case, &fixture(case), sqls)
}

/// [`judge`] of the JSON file `input`, named `case` in messages.
pub fn judge_path(case: &str, input: &Path, sqls: &[&str]) -> Option<Judged> {
    if !tp::require_or_skip(case) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, stats, stderr) = merge_path(input, dir.path());
    let out = out.unwrap_or_else(|| panic!("{case}: merge failed: {stderr}"));
    let machines = "SELECT count(*) FROM thread WHERE machine_id IS NOT NULL";
    let mut all: Vec<&str> = sqls.to_vec();
    all.push(machines);
    let mut json = rows(input, &all);
    let mut merged = rows(&out, &all);
    // Perfetto gives a lone JSON file the host machine: so must the merge.
    assert_eq!(merged.pop(), Some(vec![vec![json!(0)]]), "{case}: machine");
    json.pop();
    Some(Judged {
        json,
        merged,
        stats,
        out,
        _dir: dir,
    })
}

/// Every slice's args as (slice, key, value) with the importer's prefix
/// dropped and `.` in keys read as `_` (TrackEvent's debug annotations),
/// sorted.
pub const ARGS: &str = "SELECT s.name, substr(a.key, instr(a.key, '.') + 1), a.display_value \
     FROM slice s JOIN args a USING(arg_set_id) \
     WHERE a.key GLOB 'args.*' OR a.key GLOB 'debug.*'";

pub fn args_of(rows: &[Vec<Value>]) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            let s = |i: usize| r[i].as_str().unwrap_or_default().to_owned();
            (s(0), s(1).replace('.', "_"), s(2))
        })
        .collect();
    v.sort();
    v
}

/// `rows` as the JSON values of Perfetto's expected CSV rows.
pub fn expect(rows: &[Vec<Value>], expected: Value, case: &str) {
    assert_eq!(
        Value::from(rows.to_vec()),
        expected,
        "{case}: Perfetto's rows"
    );
}

/// The case's own query must read the same from the JSON and the merged
/// trace, and give Perfetto's rows.
fn same_and_expected(case: &str, sql: &str, expected: Value) {
    let Some(j) = judge(case, &[sql]) else {
        return;
    };
    assert_eq!(j.merged[0], j.json[0], "{case}: merged reads as the JSON");
    expect(&j.merged[0], expected, case);
}

const SLICES_WITH_CONTEXT: &str = "INCLUDE PERFETTO MODULE slices.with_context; \
     SELECT slice.ts, slice.dur, slice.name, slice.thread_name, slice.tid, \
     slice.process_name, slice.pid FROM thread_or_process_slice AS slice";

#[test]
fn string_pid_tid() {
    same_and_expected(
        "string_pid_tid",
        "SELECT slice.ts, slice.dur, slice.name, process.name, thread.name FROM slice \
         LEFT JOIN thread_track ON slice.track_id = thread_track.id \
         LEFT JOIN thread USING (utid) LEFT JOIN process USING (upid)",
        json!([[5100, 500100, "name.exec", "foo", "bar"]]),
    );
}

#[test]
fn args_ordered() {
    // A trailing comma in `args`: Perfetto's reader accepts it.
    let Some(j) = judge("args_ordered", &[ARGS]) else {
        return;
    };
    assert_eq!(args_of(&j.merged[0]), args_of(&j.json[0]));
    let want = [
        ("Event1", "02_step2"),
        ("Event2", "01_step1"),
        ("Event2", "02_step2"),
    ];
    let got = args_of(&j.merged[0]);
    let got: Vec<(&str, &str)> = got.iter().map(|(s, k, _)| (&s[..], &k[..])).collect();
    assert_eq!(got, want);
}

#[test]
fn x_event_order() {
    same_and_expected(
        "x_event_order",
        "SELECT ts, dur, name, depth FROM slice",
        json!([[1000, 10000, "Parent", 0], [1000, 5000, "Child", 1]]),
    );
}

#[test]
fn json_incomplete() {
    same_and_expected(
        "json_incomplete",
        "SELECT ts FROM slice",
        json!([[4_619_295_550_000_i64]]),
    );
}

#[test]
fn json_all_slice_types() {
    let sql = "INCLUDE PERFETTO MODULE slices.with_context; \
               SELECT ts, dur, name FROM thread_or_process_slice ORDER BY ts";
    let Some(j) = judge("json_all_slice_types", &[sql, ARGS]) else {
        return;
    };
    assert_eq!(j.merged[0], j.json[0]);
    // The end named otherwise leaves BeginEvent open (dur -1); global
    // instants are on no thread or process.
    expect(
        &j.merged[0],
        json!([
            [100000, -1, "BeginEvent"],
            [250000, 50000, "CompleteEvent"],
            [310000, 0, "InstantProcess"],
            [320000, 0, "InstantThread"],
            [330000, 0, "InstantDefaultScope"],
            [350000, 0, "Instanti"]
        ]),
        "json_all_slice_types",
    );
    assert_eq!(args_of(&j.merged[1]), args_of(&j.json[1]));
}

#[test]
fn json_flow() {
    same_and_expected(
        "json_flow",
        "INCLUDE PERFETTO MODULE slices.with_context; \
         SELECT slice.ts, slice.dur, slice.name, COUNT(DISTINCT fin.id), COUNT(DISTINCT fout.id) \
         FROM thread_or_process_slice AS slice \
         LEFT JOIN flow AS fin ON slice.id = fin.slice_in \
         LEFT JOIN flow AS fout ON slice.id = fout.slice_out",
        json!([[100000, -1, "BeginEvent", 0, 0]]),
    );
}

#[test]
fn json_metadata() {
    let Some(j) = judge("json_metadata", &[SLICES_WITH_CONTEXT, ARGS]) else {
        return;
    };
    let expected = json!([
        [
            790000,
            25000,
            "ActivityOnThread31",
            "MyRevisedThread31Name",
            31,
            "MyProcess30",
            30
        ],
        [
            900000,
            50000,
            "EventMissingCatAndArgs",
            null,
            32,
            "MyProcess30",
            30
        ],
        [960000, 10000, "PidOnlyEvent", null, 33, null, 33],
        [970000, 10000, "NoPidNoTidEvent", null, 0, null, 0]
    ]);
    expect(&j.json[0], expected.clone(), "json_metadata (the JSON)");
    // Read from TrackEvent, the trace processor names thread 0 of process 0
    // "swapper" (docs/format.md); every other value is the JSON's.
    let mut merged = j.merged[0].clone();
    assert_eq!(merged[3][3], json!("swapper"));
    merged[3][3] = Value::Null;
    expect(&merged, expected, "json_metadata");
    assert_eq!(args_of(&j.merged[1]), args_of(&j.json[1]));
}

#[test]
fn json_extreme_vals() {
    same_and_expected(
        "json_extreme_vals",
        SLICES_WITH_CONTEXT,
        json!([
            [1100000, -1, "BeginNoTTS", null, 102, null, 100],
            [1300000, 50000, "CompleteNoTDUR", null, 103, null, 100]
        ]),
    );
}

#[test]
fn json_async() {
    // Async slices are on no thread or process track.
    same_and_expected("json_async", SLICES_WITH_CONTEXT, json!([]));
}

#[test]
fn json_id2() {
    same_and_expected("json_id2", SLICES_WITH_CONTEXT, json!([]));
}

#[test]
fn json_counter_args() {
    same_and_expected(
        "json_counter_args",
        "SELECT process.pid, process.name, pct.name, value FROM counter \
         JOIN process_counter_track pct ON counter.track_id = pct.id \
         JOIN process USING (upid) ORDER BY pct.name",
        json!([
            [300, null, "CounterStringEdgeCases leading_dot", 0.75],
            [300, null, "CounterStringEdgeCases leading_zero_float", 1.23],
            [300, null, "CounterStringEdgeCases leading_zero_int_str", 50],
            [300, null, "CounterStringEdgeCases plus_val", 10.5],
            [300, null, "CounterStringEdgeCases trailing_dot", 246]
        ]),
    );
}

#[test]
fn json_trailing_comma() {
    same_and_expected(
        "json_trailing_comma",
        "SELECT name, ts, dur FROM slice ORDER BY ts",
        json!([
            ["Bar", 4_890_000, 3_764_289_708_i64],
            ["Foo", 3_473_608_458_i64, 295_555_500]
        ]),
    );
}

#[test]
fn string_ts_and_dur() {
    same_and_expected(
        "string_ts_and_dur",
        "SELECT ts, dur, name FROM slice ORDER BY ts",
        json!([
            [100000, 100500, "BeginEvent"],
            [250000, 50500, "CompleteEvent"]
        ]),
    );
}

#[test]
fn json_pid_tid_zero() {
    // Raw newlines inside argument strings: Perfetto's reader accepts them.
    same_and_expected(
        "json_pid_tid_zero",
        "SELECT name, ts, dur FROM slice",
        json!([
            ["RoutineControl Reeq", 0, 4000],
            ["31 ", 0, 1000],
            ["RoutineControl", 0, 1000],
            ["01 ", 1000, 1000],
            ["startRoutine", 1000, 1000],
            ["02 03 ", 2000, 2000],
            ["Routine Identifier", 2000, 2000]
        ]),
    );
}
