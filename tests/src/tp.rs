//! Asks a real Perfetto trace processor (v52, WebAssembly under Node) about a
//! trace file, through `tests/tp/query.mjs`.
//!
//! The wasm is fetched by `scripts/setup-test-deps.sh` into `.cache/` at the
//! repo root. Tests that need it start with
//! `if !tp::require_or_skip("test name") { return; }`: without the wasm that
//! panics when `CI` is set and prints a skip notice otherwise.
//!
//! Values in [`QueryResult::rows`] are JSON: NULL is `null`, strings are
//! strings, doubles are numbers, int64 are numbers when |v| <= 2^53 - 1 and
//! decimal strings beyond that, blobs are `{"blob": "<base64>"}`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One SQL statement's result.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
}

impl QueryResult {
    /// Index of a column by name.
    pub fn col(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

/// The repository root (parent of the `tests` crate).
pub fn repo_root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest
        .parent()
        .expect("tests crate has a parent directory")
        .to_path_buf()
}

fn script() -> PathBuf {
    repo_root().join("tests").join("tp").join("query.mjs")
}

fn tp_dir() -> PathBuf {
    repo_root().join(".cache").join("trace_processor")
}

/// Whether the trace processor (wasm + engine bundle) has been fetched.
pub fn available() -> bool {
    let dir = tp_dir();
    dir.join("trace_processor.wasm").is_file() && dir.join("engine_bundle.js").is_file()
}

/// For tests that need the trace processor: true if it is available. If not,
/// panics when the environment variable `CI` is set (so CI cannot pass by
/// skipping), otherwise prints a skip notice and returns false.
pub fn require_or_skip(test: &str) -> bool {
    if available() {
        return true;
    }
    let msg = format!(
        "{test}: Perfetto trace processor not found in .cache/trace_processor; \
         run scripts/setup-test-deps.sh"
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED {msg}");
    false
}

fn node() -> std::ffi::OsString {
    std::env::var_os("NODE").unwrap_or_else(|| "node".into())
}

/// Runs `query.mjs` and returns one parsed JSON object per output line.
fn run(trace: &Path, stats: bool, sqls: &[&str]) -> Result<Vec<serde_json::Value>, String> {
    if !available() {
        return Err(
            "Perfetto trace processor not found in .cache/trace_processor; \
             run scripts/setup-test-deps.sh"
                .into(),
        );
    }
    let mut cmd = Command::new(node());
    cmd.arg(script());
    if stats {
        cmd.arg("--stats");
    }
    cmd.arg(trace).args(sqls);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run node (needs Node >= 20 on PATH, or NODE=...): {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "trace processor failed on {} ({}): {}",
            trace.display(),
            out.status,
            stderr.trim()
        ));
    }
    let stdout = String::from_utf8(out.stdout).map_err(|e| format!("non-UTF-8 output: {e}"))?;
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("bad JSON line from query.mjs: {e}")))
        .collect::<Result<_, _>>()?;
    let expected = sqls.len() + usize::from(stats);
    if lines.len() != expected {
        return Err(format!(
            "query.mjs printed {} results, expected {expected}",
            lines.len()
        ));
    }
    Ok(lines)
}

fn to_result(v: &serde_json::Value, sql: &str) -> Result<QueryResult, String> {
    if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
        return Err(format!("query `{sql}` failed: {err}"));
    }
    let columns = v["columns"]
        .as_array()
        .ok_or("result without columns")?
        .iter()
        .map(|c| c.as_str().unwrap_or_default().to_owned())
        .collect();
    let rows = v["rows"]
        .as_array()
        .ok_or("result without rows")?
        .iter()
        .map(|r| r.as_array().cloned().unwrap_or_default())
        .collect();
    Ok(QueryResult { columns, rows })
}

/// Loads `trace` and runs each SQL statement in order. Any SQL error, or a
/// trace the trace processor cannot load, is an `Err` with its message.
pub fn query(trace: &Path, sqls: &[&str]) -> Result<Vec<QueryResult>, String> {
    let lines = run(trace, false, sqls)?;
    lines
        .iter()
        .zip(sqls)
        .map(|(v, sql)| to_result(v, sql))
        .collect()
}

/// A `stats` row: (name, idx, severity, value).
pub type StatRow = (String, i64, String, i64);

/// [`query`] and [`error_stats`] from one load of the trace (loading is
/// most of the cost).
pub fn query_with_error_stats(
    trace: &Path,
    sqls: &[&str],
) -> Result<(Vec<StatRow>, Vec<QueryResult>), String> {
    let lines = run(trace, true, sqls)?;
    let errors = error_rows(&to_result(&lines[0], "stats")?)
        .into_iter()
        .filter(|(_, _, sev, _)| sev == "error" || sev == "data_loss")
        .collect();
    let results = lines[1..]
        .iter()
        .zip(sqls)
        .map(|(v, sql)| to_result(v, sql))
        .collect::<Result<_, _>>()?;
    Ok((errors, results))
}

/// An int64 cell as i64 (numbers, or decimal strings beyond 2^53).
pub fn as_i64(v: &serde_json::Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// The `stats` rows with value > 0: (name, idx, severity, value); idx is 0
/// for stats that are not indexed (NULL in SQL).
pub fn stats_nonzero(trace: &Path) -> Result<Vec<(String, i64, String, i64)>, String> {
    let lines = run(trace, true, &[])?;
    Ok(error_rows(&to_result(&lines[0], "stats")?))
}

/// Rows of the `--stats` result as (name, idx, severity, value).
fn error_rows(res: &QueryResult) -> Vec<(String, i64, String, i64)> {
    res.rows
        .iter()
        .map(|r| {
            let s = |i: usize| r.get(i).and_then(|v| v.as_str()).unwrap_or("").to_owned();
            let n = |i: usize| r.get(i).and_then(as_i64).unwrap_or(0);
            // Columns: name, idx, severity, source, value.
            (s(0), n(1), s(2), n(4))
        })
        .collect()
}

/// The nonzero stats whose severity is `error` or `data_loss` (clock sync
/// failures, dropped packets, ...): what a valid trace must not have.
pub fn error_stats(trace: &Path) -> Result<Vec<(String, i64, String, i64)>, String> {
    Ok(stats_nonzero(trace)?
        .into_iter()
        .filter(|(_, _, sev, _)| sev == "error" || sev == "data_loss")
        .collect())
}
