//! A systrace file judged by the trace processor: what it reads from the
//! text alone (atrace slices and async slices with their threads, sched
//! slices with their end states, thread states, counters of atrace `C`,
//! cpu_frequency and cpu_idle) equals what it reads from `tracesync merge`
//! of that file alone, and from a merge beside a spine whose snapshot puts
//! MONOTONIC 0.5 s behind BOOTTIME (every time shifted by 0.5 s). The same
//! lines as a JSON file's `systemTraceEvents` read the same too.

use std::path::Path;

use serde_json::Value;
use tracesync_tests::cases::{snap, trace_of};
use tracesync_tests::run::tracesync;
use tracesync_tests::tp;

use super::{BT, MONO, S};

/// Every converted event kind, and one that is not (counted).
const INPUT: &str = include_str!("systrace_input.txt");

/// Rows of each query with the time column of each shifted back by `shift`.
fn read(trace: &Path, shift: i64) -> Vec<Vec<Vec<Value>>> {
    let queries = [
        "SELECT s.ts, s.dur, s.name, s.depth, t.tid FROM slice s \
         LEFT JOIN thread_track tt ON s.track_id = tt.id LEFT JOIN thread t USING(utid) \
         ORDER BY s.ts, s.name",
        "SELECT s.ts, s.dur, s.cpu, t.tid, s.end_state FROM sched s \
         JOIN thread t USING(utid) ORDER BY s.ts, s.cpu",
        "SELECT c.ts, t.name, c.value FROM counter c \
         JOIN counter_track t ON c.track_id = t.id ORDER BY t.name, c.ts",
        "SELECT ts.ts, t.tid, ts.state FROM thread_state ts \
         JOIN thread t USING(utid) ORDER BY ts.ts, t.tid",
        "SELECT tid, upid IS NOT NULL FROM thread ORDER BY tid",
    ];
    let res = tp::query(trace, &queries).unwrap_or_else(|e| panic!("{}: {e}", trace.display()));
    let mut out: Vec<Vec<Vec<Value>>> = res.into_iter().map(|r| r.rows).collect();
    for table in out.iter_mut().take(4) {
        for row in table {
            if let Some(ts) = tp::as_i64(&row[0]) {
                row[0] = Value::from(ts - shift);
            }
        }
    }
    out
}

fn merge(dir: &Path, inputs: &[&Path], name: &str) -> std::path::PathBuf {
    let out = dir.join(name);
    let stats = dir.join(format!("{name}.stats.json"));
    let mut args = vec![
        "merge".to_string(),
        "-o".into(),
        out.display().to_string(),
        "--stats".into(),
        stats.display().to_string(),
    ];
    args.extend(inputs.iter().map(|p| p.display().to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = tracesync(&argv);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{name}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stats: Value =
        serde_json::from_slice(&std::fs::read(&stats).expect("stats")).expect("stats JSON");
    assert_eq!(
        stats["systrace_events_not_converted"], 1,
        "{name}: irq_handler_entry"
    );
    assert_eq!(stats["systrace_parse_failure"], 0, "{name}");
    out
}

#[test]
fn systrace_events_read_the_same_from_the_merged_trace() {
    if !tp::require_or_skip("systrace_events_read_the_same_from_the_merged_trace") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("app.systrace");
    std::fs::write(&input, INPUT).expect("write input");
    let alone = read(&input, 0);
    assert!(
        alone[0].len() >= 4 && alone[1].len() >= 4 && alone[2].len() >= 4,
        "the trace processor reads slices, sched and counters: {alone:?}"
    );
    let merged = merge(dir.path(), &[&input], "out.pftrace");
    assert_eq!(read(&merged, 0), alone, "merged alone");

    // Listed after the systrace, the spine still owns trace time.
    let spine = dir.path().join("spine.pb");
    std::fs::write(&spine, trace_of(&[snap(&[(BT, S), (MONO, S / 2)])])).expect("write spine");
    let beside = merge(dir.path(), &[&input, &spine], "beside.pftrace");
    assert_eq!(
        read(&beside, 500_000_000),
        alone,
        "beside a spine, 0.5 s later"
    );
}

#[test]
fn json_system_trace_events_read_the_same_from_the_merged_trace() {
    // The same lines as a JSON file's `systemTraceEvents`, beside one JSON
    // event: they take the JSON file's private clock (its µs timeline).
    if !tp::require_or_skip("json_system_trace_events_read_the_same_from_the_merged_trace") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("app.json");
    let json = serde_json::json!({
        "traceEvents": [{"pid": 1, "tid": 1, "ts": 10_000_300, "dur": 100, "ph": "X", "name": "json_x"}],
        "systemTraceEvents": INPUT,
    });
    std::fs::write(&input, json.to_string()).expect("write input");
    let alone = read(&input, 0);
    assert!(
        alone[0].len() >= 5 && alone[1].len() >= 4,
        "the trace processor reads the JSON slice and the lines: {alone:?}"
    );
    let merged = merge(dir.path(), &[&input], "out.pftrace");
    // The idle threads (tid 0) differ: read from JSON the trace processor
    // keeps no thread state for the swapper, read from the merged
    // protobuf trace it does (as it does for a protobuf ftrace capture).
    let without_idle = |mut tables: Vec<Vec<Vec<Value>>>| {
        tables[3].retain(|r| r[1] != 0);
        tables[4].retain(|r| r[0] != 0);
        tables
    };
    assert_eq!(
        without_idle(read(&merged, 0)),
        without_idle(alone),
        "merged alone"
    );
}

/// The forms Perfetto detects without a `# tracer` header at the start:
/// atrace's output (a preamble, then `TRACE:`), trace-cmd's text (`cpus=N`
/// first), bare event lines, and HTML systrace. Each is read by the trace
/// processor as the headered text is, and the same from the merged trace.
#[test]
fn headerless_systrace_forms_read_the_same_from_the_merged_trace() {
    if !tp::require_or_skip("headerless_systrace_forms_read_the_same_from_the_merged_trace") {
        return;
    }
    let events: String = INPUT
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let forms = [
        format!("capturing trace... done\nTRACE:\n{events}"),
        format!("cpus=4\n{events}"),
        events.clone(),
        format!(
            "<!DOCTYPE html>\n<html>\n<script class=\"trace-data\" type=\"application/text\">\n\
             # tracer: nop\n#           TASK-PID    CPU#  TIMESTAMP  FUNCTION\n{events}</script>\n</html>\n"
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let headered = dir.path().join("headered.systrace");
    std::fs::write(&headered, INPUT).expect("write input");
    let want = read(&headered, 0);
    for (i, form) in forms.iter().enumerate() {
        let input = dir.path().join(format!("form{i}.txt"));
        std::fs::write(&input, form).expect("write input");
        assert_eq!(
            read(&input, 0),
            want,
            "form {i}: the trace processor reads it"
        );
        let merged = merge(dir.path(), &[&input], &format!("form{i}.pftrace"));
        assert_eq!(read(&merged, 0), want, "form {i}: merged alone");
    }
}
