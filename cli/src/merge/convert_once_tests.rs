//! A converted input is converted once whichever way: held from the first
//! pass to the second, or spilled; the merge is the same, and a fault met
//! after the first pass is reported once, as the first pass would.

use std::path::{Path, PathBuf};

use super::output::Format;
use super::{MergeOptions, MergeOutcome, merge};

/// A JSON trace of `n` slices on two threads, with a few events the
/// conversion drops (counted) and a `displayTimeUnit`.
fn json_of(n: usize) -> String {
    let mut events: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"name":"s{i}","ph":"X","ts":{},"dur":2,"pid":1,"tid":{}}}"#,
                (i * 7) % 1000 + i,
                1 + i % 2
            )
        })
        .collect();
    events.push(r#"{"name":"no dur","ph":"X","ts":5,"pid":1,"tid":1}"#.into());
    events.push(r#"{"name":"sample","ph":"P","ts":6,"pid":1,"tid":1}"#.into());
    format!(
        r#"{{"displayTimeUnit":"ns","traceEvents":[{}]}}"#,
        events.join(",")
    )
}

fn run(inputs: &[PathBuf], out: &Path, strict: bool) -> (MergeOutcome, Vec<u8>, String, usize) {
    let stats = out.with_extension("stats.json");
    let opts = MergeOptions {
        inputs: inputs.to_vec(),
        manifest: None,
        output: Some(out.to_path_buf()),
        format: Format::Perfetto,
        stats: Some(stats.clone()),
        strict,
        machine_per_file: false,
    };
    let mut reported = 0;
    let outcome = merge(&opts, &mut |_| reported += 1).unwrap();
    let written = std::fs::read(out).unwrap();
    let stats = std::fs::read_to_string(stats).unwrap();
    (outcome, written, stats, reported)
}

#[test]
fn held_and_spilled_inputs_merge_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = [20_000, 500]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let path = dir.path().join(format!("t{i}.json"));
            std::fs::write(&path, json_of(n)).unwrap();
            path
        })
        .collect();
    // One converted input is held; two are spilled; --strict holds none.
    for inputs in [&paths[..1], &paths[..]] {
        let held = run(inputs, &dir.path().join("held.pftrace"), false);
        let spilled = run(inputs, &dir.path().join("spilled.pftrace"), true);
        assert!(held.0.faults.is_empty(), "{:?}", held.0.faults);
        assert!(held.1 == spilled.1, "the same merged trace");
        assert_eq!(held.2, spilled.2, "the same --stats");
        let dropped = format!("\"json_parser_failure\": {}", inputs.len());
        assert!(held.2.contains(&dropped), "{}", held.2);
    }
}

#[test]
fn a_fault_after_the_first_packet_is_reported_once_and_what_came_before_merges() {
    let dir = tempfile::tempdir().unwrap();
    // Broken inside what the first pass reads, and far beyond it.
    for n in [10, 60_000] {
        let good = json_of(n);
        // The same events as a bare array cut short: no fault.
        let body = &good[good.find('[').unwrap()..good.rfind(']').unwrap()];
        // One path for both: track uuids derive from the input's name.
        let input = dir.path().join("t.json");
        std::fs::write(&input, format!("{body},")).unwrap();
        let whole = run(
            std::slice::from_ref(&input),
            &dir.path().join("cut.pftrace"),
            false,
        );
        let text = format!("{body},{{\"ph\":\"X\" \"ts\":1}}]");
        let offset = text.rfind("\"ts\"").unwrap();
        std::fs::write(&input, text).unwrap();
        let part = run(&[input], &dir.path().join("broken.pftrace"), false);
        assert!(whole.0.faults.is_empty(), "{:?}", whole.0.faults);
        assert_eq!(part.0.faults.len(), 1, "{n}: {:?}", part.0.faults);
        assert_eq!(part.3, 1, "{n}: reported once");
        let fault = &part.0.faults[0];
        assert_eq!(fault.offset, Some(offset as u64), "{n}: {fault}");
        assert!(
            fault.message.contains("the events before it are merged"),
            "{fault}"
        );
        assert_eq!(part.0.exit_code(), 65);
        assert!(part.2.contains("\"inputs_with_errors\": 1"), "{}", part.2);
        assert!(whole.1 == part.1, "{n}: the events before the fault merge");
    }
}
