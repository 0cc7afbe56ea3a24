//! The real trace processor (v52) on one rolled file: it must load alone
//! with no error stats, skip nothing for missing incremental state, name
//! every slice, and place every synthetic slice exactly where the
//! [`output`](super::output) checker resolved it.

use std::path::Path;

use super::output::{FileScan, SLICE_BEGIN};
use crate::tp;

/// Stats that are `info` in Perfetto but mean a packet or its interned
/// data was skipped: a self-contained file has none.
pub const SKIP_STATS: [&str; 2] = [
    "packet_skipped_seq_needs_incremental_state_invalid",
    "interned_data_skipped_incremental_state_invalid",
];

const MACHINES: &str = "SELECT raw_id FROM machine ORDER BY raw_id";
const UNNAMED_SLICES: &str = "SELECT COUNT(*) FROM slice WHERE name IS NULL OR name = ''";
const SKIPS: &str = "SELECT name, value FROM stats WHERE value > 0 AND name IN \
     ('packet_skipped_seq_needs_incremental_state_invalid', \
      'interned_data_skipped_incremental_state_invalid')";
/// Synthetic slices: (ts, src). The end event's annotations replace the
/// begin's in the slice's args (v52), so a slice's `debug.tracesync_n` is
/// its end's counter: slices are matched to begins by source and time.
const SLICES: &str = "SELECT s.ts, src.display_value FROM slice s \
     JOIN args src ON src.arg_set_id = s.arg_set_id AND src.key = 'debug.tracesync_src'";

/// What the trace processor said about one file.
#[derive(Clone, Debug, Default)]
pub struct Judgement {
    /// `machine.raw_id` rows.
    pub machine_raw_ids: Vec<i64>,
    /// Synthetic slices found.
    pub slices: usize,
}

/// Loads `scan.path` alone and checks it against `scan`. `Err` lists every
/// problem found.
pub fn judge_file(scan: &FileScan) -> Result<Judgement, String> {
    let path: &Path = &scan.path;
    let label = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("?")
        .to_owned();
    let (errors, res) =
        tp::query_with_error_stats(path, &[MACHINES, UNNAMED_SLICES, SKIPS, SLICES])?;
    let mut problems = Vec::new();
    if !errors.is_empty() {
        problems.push(format!("error/data_loss stats: {errors:?}"));
    }
    let int = |v: &serde_json::Value| tp::as_i64(v).unwrap_or(i64::MIN);
    let machine_raw_ids: Vec<i64> = res[0].rows.iter().map(|r| int(&r[0])).collect();
    let unnamed = res[1].rows.first().map_or(0, |r| int(&r[0]));
    if unnamed != 0 {
        problems.push(format!("{unnamed} slices without a name"));
    }
    if !res[2].rows.is_empty() {
        problems.push(format!(
            "skipped for missing incremental state: {:?}",
            res[2].rows
        ));
    }
    let mut got: Vec<(String, i64)> = res[3]
        .rows
        .iter()
        .map(|r| (r[1].as_str().unwrap_or("<null>").to_owned(), int(&r[0])))
        .collect();
    got.sort();
    let mut want: Vec<(String, i64)> = scan
        .events
        .iter()
        .filter(|e| e.kind == SLICE_BEGIN && !e.in_preamble)
        .map(|e| (e.id.src.to_string(), e.ts_host))
        .collect();
    want.sort();
    if got != want {
        let first = got.iter().zip(&want).position(|(g, w)| g != w);
        problems.push(format!(
            "{} synthetic slices in the trace processor, {} begins in the file; \
             first difference (src, ts): {:?}",
            got.len(),
            want.len(),
            first.map(|i| (&got[i], &want[i]))
        ));
    }
    if problems.is_empty() {
        Ok(Judgement {
            machine_raw_ids,
            slices: got.len(),
        })
    } else {
        Err(format!("{label}: {}", problems.join("; ")))
    }
}

/// [`judge_file`] on every file of a checked output dir; `Err` lists the
/// problems of every failing file.
pub fn judge_all(check: &super::OutputCheck) -> Result<Vec<Judgement>, String> {
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for scan in &check.files {
        match judge_file(scan) {
            Ok(j) => ok.push(j),
            Err(e) => failed.push(e),
        }
    }
    if failed.is_empty() {
        Ok(ok)
    } else {
        Err(failed.join("\n"))
    }
}
