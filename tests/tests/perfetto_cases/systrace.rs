//! Perfetto's cases with systrace members (trace_manifest/tests.py and
//! zip/tests.py), each test named after Perfetto's. `SYSTRACE` is
//! Perfetto's: one slice `sys_slice` from 1.0 s to 1.5 s of MONOTONIC. The
//! merged ftrace events are checked in the jsonl (their packets' trace
//! time and machine) and, where installed, by the trace processor (the
//! slice's ts and dur as Perfetto's expected output gives them).

use tracesync_tests::cases::{Case, Layout, Merged, snap};
use tracesync_tests::tp;

use super::common::*;

/// `SYSTRACE` with its slice named `name`.
fn systrace(name: &str) -> Vec<u8> {
    format!(
        "# tracer: nop
#
  app-100 (  100) [001] ...1  1.000000: tracing_mark_write: B|100|{name}
  app-100 (  100) [001] ...1  1.500000: tracing_mark_write: E|100
"
    )
    .into_bytes()
}

/// (trace time, machine) of every packet of the member `member`.
fn packets_of(m: &Merged, member: &str) -> Vec<(i64, String)> {
    m.records
        .iter()
        .filter(|r| r["src"].as_str().is_some_and(|s| s.ends_with(member)))
        .map(|r| {
            let ts = r["ts"].as_i64().unwrap_or(-1);
            (ts, r["machine"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// (ts, dur) of the slice `name` as the trace processor reads the merged
/// trace; None when it is not installed.
fn tp_slice(m: &Merged, name: &str) -> Option<(i64, i64)> {
    if !tp::require_or_skip(m.origin) {
        return None;
    }
    let res = tp::query(
        &m.out,
        &[&format!("SELECT ts, dur FROM slice WHERE name = '{name}'")],
    )
    .unwrap_or_else(|e| panic!("{}: {e}", m.origin));
    let row = res[0].rows.first()?;
    Some((tp::as_i64(&row[0])?, tp::as_i64(&row[1])?))
}

#[test]
fn systrace_clock_baseline_no_config() {
    // Systrace timestamps are MONOTONIC: via the spine's MONOTONIC<->BOOTTIME
    // snapshot the 1.0 s slice lands at 1.5 s.
    let m = Case::new("test_systrace_clock_baseline_no_config")
        .layout(Layout::Zip)
        .bytes("sys.systrace", systrace("sys_slice"))
        .file("spine.pb", &spine())
        .merge()
        .ok();
    let host = |ts| (ts, "host".to_owned());
    assert_eq!(
        packets_of(&m, "sys.systrace"),
        vec![host(1_500_000_000), host(2_000_000_000)]
    );
    if let Some(slice) = tp_slice(&m, "sys_slice") {
        assert_eq!(slice, (1_500_000_000, 500_000_000));
    }
}

#[test]
fn zip_systrace_converted_timestamps() {
    // The spine is a snapshot alone: BOOTTIME 1 s = MONOTONIC 0.5 s.
    let m = Case::new("test_zip_systrace_converted_timestamps")
        .layout(Layout::Zip)
        .bytes("sys.systrace", systrace("sys_slice"))
        .file("spine.pb", &[snap(&[(BT, S), (MONO, S / 2)])])
        .merge()
        .ok();
    let ts: Vec<i64> = packets_of(&m, "sys.systrace").iter().map(|p| p.0).collect();
    assert_eq!(ts, vec![1_500_000_000, 2_000_000_000]);
    if let Some(slice) = tp_slice(&m, "sys_slice") {
        assert_eq!(slice, (1_500_000_000, 500_000_000));
    }
}

#[test]
fn zip_blueprint_inline_members() {
    // Adapted: Perfetto's query reads the processing order of the members
    // (b.pb, then a.systrace); here both are merged and the systrace,
    // owning trace time (b.pb has no clock snapshot), keeps its times.
    let mut process = tracesync_tests::build::packet();
    process.timestamp = Some(1);
    let m = Case::new("test_zip_blueprint_inline_members")
        .layout(Layout::Zip)
        .bytes("a.systrace", systrace("zip_slice"))
        .file("b.pb", &[process])
        .merge()
        .ok();
    let ts: Vec<i64> = packets_of(&m, "a.systrace").iter().map(|p| p.0).collect();
    assert_eq!(ts, vec![1_000_000_000, 1_500_000_000]);
    if let Some(slice) = tp_slice(&m, "zip_slice") {
        assert_eq!(slice, (1_000_000_000, 500_000_000));
    }
}

#[test]
fn systrace_alone_and_gzipped_in_tar() {
    // A systrace alone owns trace time (its MONOTONIC); gzip and a tar
    // member are found by content as a plain file is.
    let plain = Case::new("systrace alone")
        .bytes("sys.systrace", systrace("sys_slice"))
        .merge()
        .ok();
    assert_eq!(
        packets_of(&plain, "sys.systrace")
            .iter()
            .map(|p| p.0)
            .collect::<Vec<_>>(),
        vec![1_000_000_000, 1_500_000_000]
    );
    if let Some(slice) = tp_slice(&plain, "sys_slice") {
        assert_eq!(slice, (1_000_000_000, 500_000_000));
    }
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&systrace("gz_slice")).expect("gzip");
        e.finish().expect("gzip")
    };
    let tar = Case::new("systrace gzipped in a tar")
        .layout(Layout::Tar)
        .bytes("sys.txt.gz", gz)
        .merge()
        .ok();
    assert_eq!(packets_of(&tar, "sys.txt.gz").len(), 2);
}
