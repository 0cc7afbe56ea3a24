//! Perfetto's single-file JSON cases (parser/json/tests.py), continued:
//! async tracks by `id2`, timestamps that do not parse, sort indexes,
//! metadata without a time, overlapping complete events, and the cases
//! TrackEvent cannot carry (skipped, with the reason; docs/format.md).

use prost::Message;
use serde_json::{Value, json};
use tracesync_protocol::perfetto::Trace;
use tracesync_protocol::perfetto::trace_packet::Data;
use tracesync_tests::tp;

use super::parser_json::{expect, fixture, judge, judge_path, merge};

/// Name, ts, dur and track name of the slice `name`, and whether its track
/// belongs to a process: the JSON importer's `legacy_async_process_slice`
/// tracks are TrackEvent tracks under the process (docs/format.md).
fn async_sql(name: &str) -> String {
    format!(
        "SELECT slice.name, slice.ts, slice.dur, track.name, \
         EXISTS(SELECT 1 FROM process_track pt WHERE pt.id = track.id) \
         FROM slice JOIN track ON slice.track_id = track.id WHERE slice.name = '{name}'"
    )
}

fn async_case(case: &str, name: &str, expected: Value) {
    let sql = async_sql(name);
    let Some(j) = judge(case, &[&sql]) else {
        return;
    };
    assert_eq!(j.merged[0], j.json[0], "{case}: merged reads as the JSON");
    expect(&j.merged[0], expected, case);
}

#[test]
fn json_id2_global_string_id() {
    async_case(
        "json_id2_global_string_id",
        "AsyncId2GlobalString",
        json!([[
            "AsyncId2GlobalString",
            4000000,
            100000,
            "AsyncId2GlobalString",
            0
        ]]),
    );
}

#[test]
fn json_id2_local_string_id() {
    async_case(
        "json_id2_local_string_id",
        "AsyncId2LocalString",
        json!([[
            "AsyncId2LocalString",
            4000000,
            100000,
            "AsyncId2LocalString",
            1
        ]]),
    );
}

#[test]
fn json_id2_global_int_id() {
    // 1850244461563845.0 µs: read exactly, not through a rounded double.
    async_case(
        "json_id2_global_int_id",
        "write",
        json!([["write", "1850244461563845000", 167000, "write", 0]]),
    );
}

#[test]
fn json_id2_local_int_id() {
    async_case(
        "json_id2_local_int_id",
        "write",
        json!([["write", "1750244461563845000", 167000, "write", 1]]),
    );
}

/// Cases whose every event is dropped (a `ts` or `dur` that is no number,
/// or a number followed by other characters): the trace processor reads
/// no slice; the merge refuses the file as holding no packets, names it
/// and says why.
fn nothing_converted(case: &str) {
    if !tp::require_or_skip(case) {
        return;
    }
    let slices = tp::query(&fixture(case), &["SELECT count(*) FROM slice"]).expect("tp");
    assert_eq!(
        slices[0].rows,
        vec![vec![json!(0)]],
        "{case}: Perfetto reads none"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, _, stderr) = merge(case, dir.path());
    assert!(out.is_none(), "{case}: merged an input with no event");
    assert!(
        stderr.contains(&format!("{case}.json"))
            && stderr.contains("holds no trace packets: no event of it converts"),
        "{case}: {stderr}"
    );
}

#[test]
fn invalid_string_ts_and_dur() {
    nothing_converted("invalid_string_ts_and_dur");
}

#[test]
fn string_ts_trailing_chars() {
    nothing_converted("string_ts_trailing_chars");
}

/// The sort index of each process and thread descriptor of the merged
/// trace, last one winning: (pid, tid or None, index).
fn sort_indexes(out: &std::path::Path) -> Vec<(i32, Option<i64>, i32)> {
    let bytes = std::fs::read(out).expect("merged trace");
    let trace = Trace::decode(&bytes[..]).expect("decodes");
    let mut got = std::collections::BTreeMap::new();
    for p in trace.packet {
        let Some(Data::TrackDescriptor(d)) = p.data else {
            continue;
        };
        if let Some(t) = d.thread
            && let (Some(pid), Some(i)) = (t.pid, t.legacy_sort_index)
        {
            got.insert((pid, t.tid), i);
        }
        if let Some(pr) = d.process
            && let (Some(pid), Some(i)) = (pr.pid, pr.legacy_sort_index)
        {
            got.insert((pid, None), i);
        }
    }
    got.into_iter().map(|((p, t), i)| (p, t, i)).collect()
}

/// Trace processor v52 has no `thread.arg_set_id` (Perfetto's query of
/// the sort index hints): the hints are checked in the merged trace's
/// descriptors (`legacy_sort_index`), where the trace processor reads them.
#[test]
fn json_sort_index_hints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, _, stderr) = merge("json_sort_index_hints", dir.path());
    let out = out.unwrap_or_else(|| panic!("{stderr}"));
    // Perfetto: process 30 hint -2, thread 31 hint 5, process 40 hint 10.
    assert_eq!(
        sort_indexes(&out),
        [(30, None, -2), (30, Some(31), 5), (40, None, 10)]
    );
}

#[test]
fn json_sort_index_ordering() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, _, stderr) = merge("json_sort_index_ordering", dir.path());
    let out = out.unwrap_or_else(|| panic!("{stderr}"));
    assert_eq!(
        sort_indexes(&out),
        [
            (10, None, 100),
            (10, Some(11), 10),
            (10, Some(12), 20),
            (10, Some(13), 5),
            (10, Some(14), -3),
            (20, None, 50),
            (30, None, 200),
            (40, None, -5)
        ]
    );
}

#[test]
fn json_metadata_missing_or_invalid_ts() {
    let sql = "SELECT pid, name FROM process WHERE name IS NOT NULL ORDER BY pid";
    let Some(j) = judge("json_metadata_missing_or_invalid_ts", &[sql]) else {
        return;
    };
    // Perfetto's rows; v52 reads only the first from the JSON.
    expect(
        &j.merged[0],
        json!([[100, "MissingTs"], [101, "NullTs"], [102, "InvalidTs"]]),
        "json_metadata_missing_or_invalid_ts",
    );
    assert_eq!(j.json[0], vec![vec![json!(100), json!("MissingTs")]]);
}

#[test]
fn trailing_empty_event() {
    let Some(j) = judge("trailing_empty_event", &["SELECT count(*) FROM slice"]) else {
        return;
    };
    assert_eq!(j.merged[0], j.json[0]);
    assert_eq!(j.merged[0], vec![vec![json!(1)]]);
    // Perfetto: the trailing `{}` is no json_tokenizer_failure (v52 still
    // counts one).
    assert_eq!(j.stats["json_tokenizer_failure"], json!(0));
}

#[test]
fn overlapping_complete_event_recovered() {
    let sql = "SELECT s.ts, s.dur, s.name, t.tid FROM slice s \
               JOIN thread_track tt ON s.track_id = tt.id JOIN thread t USING(utid) ORDER BY s.ts";
    let Some(j) = judge("overlapping_complete_event_recovered", &[sql]) else {
        return;
    };
    // Perfetto: both slices kept, "inner" on an overflow track of thread
    // 1, one spill counted (v52 still drops "inner").
    expect(
        &j.merged[0],
        json!([[100000, 100000, "outer", 1], [150000, 100000, "inner", 1]]),
        "overlapping_complete_event_recovered",
    );
    assert_eq!(j.stats["slice_spill_overlapping_complete_event"], json!(1));
    let tracks = tp::query(&j.out, &["SELECT count(DISTINCT track_id) FROM slice"]).expect("tp");
    assert_eq!(
        tracks[0].rows,
        vec![vec![json!(2)]],
        "inner on a track of its own"
    );
}

#[test]
fn overlapping_complete_event_import_log() {
    // The import log's args (overlap range, conflicting slice) are the
    // trace processor's own record of its import; a merged trace has no
    // place for them. The spill is counted in the merge's stats.
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, stats, stderr) = merge("overlapping_complete_event_import_log", dir.path());
    assert!(out.is_some(), "{stderr}");
    assert_eq!(stats["slice_spill_overlapping_complete_event"], json!(1));
}

#[test]
fn string_tts_and_tdur() {
    let sql = "SELECT ts, dur, name, thread_ts, thread_dur FROM slice ORDER BY ts";
    let Some(j) = judge("string_tts_and_tdur", &[sql]) else {
        return;
    };
    assert_eq!(j.merged[0], j.json[0]);
    expect(
        &j.merged[0],
        json!([[400000, 100000, "StringTtsTdur", 390500, 80500]]),
        "string_tts_and_tdur",
    );
}

/// Thread time beyond Perfetto's case: a `B`/`E` pair with `tts` on both,
/// one whose `E` has none, an `X` without `tdur` (no thread_dur, as the
/// JSON importer leaves it).
#[test]
fn thread_time_of_begin_end_pairs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("tts.json");
    let text = r#"[{"ph":"B","pid":1,"tid":2,"ts":10,"tts":5,"name":"b"},
        {"ph":"E","pid":1,"tid":2,"ts":20,"tts":9.5},
        {"ph":"X","pid":1,"tid":2,"ts":30,"dur":5,"tts":12,"name":"x"},
        {"ph":"B","pid":1,"tid":3,"ts":10,"tts":5,"name":"b2"},
        {"ph":"E","pid":1,"tid":3,"ts":20}]"#;
    std::fs::write(&input, text).expect("write input");
    let sql = "SELECT ts, dur, name, thread_ts, thread_dur FROM slice ORDER BY ts, name";
    let Some(j) = judge_path("thread_time_of_begin_end_pairs", &input, &[sql]) else {
        return;
    };
    assert_eq!(j.merged[0], j.json[0]);
    expect(
        &j.merged[0],
        json!([
            [10000, 10000, "b", 5000, 4500],
            [10000, 10000, "b2", 5000, null],
            [30000, 5000, "x", 12000, null]
        ]),
        "thread_time_of_begin_end_pairs",
    );
}

/// Cases TrackEvent cannot carry: the merge keeps going and counts them.
#[test]
fn not_carried_by_track_event() {
    for (case, why) in [
        (
            "json_thread_state",
            "`T` thread-state events fill thread_state, which TrackEvent has no packet for",
        ),
        ("json_thread_state_sched", "`T` events fill sched: as above"),
        (
            "json_trace_metadata",
            "the top-level `metadata` dictionary has no TrackEvent packet (v52 ignores it too)",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (out, _, stderr) = merge(case, dir.path());
        assert!(out.is_some(), "{case} ({why}): {stderr}");
        eprintln!("SKIPPED parser_json {case}: {why}");
    }
}
