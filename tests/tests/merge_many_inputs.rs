//! `tracesync merge` of hundreds of inputs, through the real binary: the
//! packets come out in time order, given as files or as archive members,
//! and the process starts a bounded number of threads, whatever the
//! number of inputs (a scan thread for a few inputs, the rest read on the
//! merging thread).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tracesync_cli::merge::feed::MAX_SCAN_THREADS;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::reader::TraceFile;
use tracesync_tests::archive::tar;
use tracesync_tests::build;
use tracesync_tests::run::{bin, merge_jsonl};

const INPUTS: u64 = 200;

/// Input `i` of a set whose packets interleave in time: 5 to 24 instants
/// on BOOTTIME at `1_000_000 + 1000 j + i`.
fn interleaved(i: u64) -> Vec<u64> {
    (0..5 + i % 20).map(|j| 1_000_000 + 1000 * j + i).collect()
}

fn trace_of(ts: &[u64]) -> Vec<u8> {
    let packets: Vec<_> = ts
        .iter()
        .map(|&t| build::instant(t, BOOTTIME, 1, 1, "e"))
        .collect();
    build::encode_trace(&packets)
}

/// The track events of a jsonl merge: (raw timestamp, src), in output order.
fn events(inputs: &[&Path]) -> Vec<(u64, String)> {
    let (records, code, stderr) = merge_jsonl(inputs, &[]);
    assert_eq!(code, 0, "{stderr}");
    records
        .iter()
        .filter(|r| r["kind"] == "track_event")
        .map(|r| {
            let src = r["src"].as_str().unwrap();
            let name = src.rsplit(['/', ':']).next().unwrap();
            (r["clock_ts"].as_u64().unwrap(), name.to_string())
        })
        .collect()
}

#[test]
fn hundreds_of_inputs_as_files_or_tar_members_merge_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut want = Vec::new();
    for i in 0..INPUTS {
        let name = format!("in-{i:03}.pftrace");
        let ts = interleaved(i);
        want.extend(ts.iter().map(|&t| (t, name.clone())));
        files.push((name.clone(), trace_of(&ts)));
        std::fs::write(dir.path().join(&name), &files.last().unwrap().1).unwrap();
    }
    want.sort();
    let paths: Vec<PathBuf> = files.iter().map(|(n, _)| dir.path().join(n)).collect();
    let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let got = events(&refs);
    assert_eq!(got.len(), want.len());
    assert!(got == want, "files: not in time order");

    let members: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_slice()))
        .collect();
    let archive = dir.path().join("all.tar");
    std::fs::write(&archive, tar(&members)).unwrap();
    assert!(
        events(&[&archive]) == want,
        "tar members: not in time order"
    );
}

fn threads_of(pid: u32) -> Option<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Threads:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The same input 200 times, each long enough (more than its batches
/// hold) that a scan thread per input would still be running when the
/// output starts: counted while the merge runs.
#[test]
fn hundreds_of_inputs_start_a_bounded_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let name = "x".repeat(60_000);
    let packets: Vec<_> = (0..12)
        .map(|j| build::instant(1_000_000 + 1000 * j, BOOTTIME, 1, 1, &name))
        .collect();
    let input = dir.path().join("big.pftrace");
    std::fs::write(&input, build::encode_trace(&packets)).unwrap();

    let mut child = Command::new(bin("tracesync"))
        .arg("merge")
        .args(std::iter::repeat_n(&input, INPUTS as usize))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    // The first output byte: the second pass has opened every input.
    let mut first = [0u8; 1];
    out.read_exact(&mut first).unwrap();
    let mut most = 0;
    for _ in 0..10 {
        most = most.max(threads_of(child.id()).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its output: every packet once per input.
    let mut trace = TraceFile::new(std::io::Cursor::new(first).chain(out)).unwrap();
    let mut large = 0;
    while let Some(p) = trace.next_packet().unwrap() {
        large += usize::from(p.bytes.len() > name.len());
    }
    let status = child.wait_with_output().unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(large, packets.len() * INPUTS as usize);
    // The main thread, the write thread and the scan threads.
    assert!(most >= 2, "threads not counted: {most}");
    assert!(
        most <= 2 + MAX_SCAN_THREADS,
        "{most} threads for {INPUTS} inputs"
    );
}

/// `tracesync merge` of 200 small files under a shell's `ulimit LIMIT`
/// (`-S -n 64`: soft only; `-n 64`: both): (exit code, stderr).
fn merge_with_open_file_limit(limit: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for i in 0..INPUTS {
        let path = dir.path().join(format!("in-{i:03}.pftrace"));
        std::fs::write(&path, trace_of(&interleaved(i))).unwrap();
        paths.push(path.display().to_string());
    }
    let out = dir.path().join("out.pftrace");
    let script = format!("out=$1; shift; ulimit {limit} && exec \"$0\" merge -o \"$out\" \"$@\"");
    let run = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin("tracesync"))
        .arg(&out)
        .args(&paths)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    if run.status.success() {
        assert!(out.exists(), "{stderr}");
    } else {
        assert!(!out.exists(), "a failed merge leaves no output");
    }
    (run.status.code().unwrap_or(-1), stderr)
}

/// Every input stays open for the second pass: a soft open-file limit
/// below the number of inputs is raised; a hard one is an error naming
/// the input and the limit, never an input dropped in silence.
#[test]
fn hundreds_of_inputs_and_the_open_file_limit() {
    let (code, stderr) = merge_with_open_file_limit("-S -n 64");
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = merge_with_open_file_limit("-n 64");
    assert_eq!(code, 66, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot open it again") && stderr.contains("ulimit -n"),
        "{stderr}"
    );
}
