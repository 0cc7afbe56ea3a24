//! Bad manifests and arguments: a missing input, an output that cannot be
//! made.

use super::*;

fn manifest_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    write(dir, name, text.as_bytes())
}

/// Invalid manifests: exit 65, one line naming the manifest and the key or
/// line:column, given as an input or with `--manifest`.
#[test]
fn invalid_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "good.pftrace", &good_trace(1_000_000_000, 2));
    let wrap = |body: &str| format!("{{\"perfetto_manifest\": {{\"version\": 1, {body}}}}}");
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "syntax.json",
            "{\"perfetto_manifest\": {\n  \"version\": 1,,\n}}".into(),
            vec!["invalid JSON", "line 2 column 16"],
        ),
        (
            "unterminated.json",
            "{\"perfetto_manifest\": {\"version\": 1".into(),
            vec!["invalid JSON", "line 1 column"],
        ),
        (
            "v2.json",
            "{\"perfetto_manifest\": {\"version\": 2}}".into(),
            vec!["version:", "unsupported version: 2", "Only version 1"],
        ),
        (
            "clock.json",
            wrap(r#""trace_time": {"clock": "TAI"}"#),
            vec!["trace_time.clock:", "unknown clock name: TAI", "BOOTTIME"],
        ),
        (
            "both.json",
            wrap(
                r#""files": [{"path": "good.pftrace", "machine": {"name": "a"}, "machines": [{"id": 0, "name": "b"}]}]"#,
            ),
            vec!["files[0]:", "mutually exclusive", "keep `machine`"],
        ),
        // Manifests naming unknown files.
        (
            "sync_unknown.json",
            wrap(
                r#""files": [{"path": "good.pftrace", "clocks": {"clock": "BOOTTIME", "sync_to": {"file": "phone.pb"}}}]"#,
            ),
            vec!["files[0].clocks.sync_to.file:", "unknown file 'phone.pb'"],
        ),
        (
            "time_unknown.json",
            wrap(r#""trace_time": {"clock": "BOOTTIME", "file": "phone.pb"}"#),
            vec!["trace_time.file:", "unknown file 'phone.pb'"],
        ),
        (
            "time_absent.json",
            wrap(
                r#""trace_time": {"clock": "BOOTTIME", "file": "phone.pb"}, "files": [{"path": "phone.pb"}]"#,
            ),
            vec!["trace_time.file:", "'phone.pb'", "not among the inputs"],
        ),
    ];
    for (name, text, needles) in cases {
        let m = manifest_file(d, name, &text);
        let as_input = tracesync(&[
            "merge",
            "--format",
            "jsonl",
            good.to_str().unwrap(),
            m.to_str().unwrap(),
        ]);
        let separate = tracesync(&[
            "merge",
            "--format",
            "jsonl",
            "--manifest",
            m.to_str().unwrap(),
            good.to_str().unwrap(),
        ]);
        for o in [as_input, separate] {
            assert_eq!(exit_code(&o), 65, "{name}: {}", stderr(&o));
            assert_one_line(&stderr(&o), &m, &needles);
            assert!(o.stdout.is_empty(), "{name}: output despite a bad manifest");
        }
    }
}

/// A `--manifest` that is not a manifest, and one that is missing.
#[test]
fn manifest_argument_problems() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "good.pftrace", &good_trace(1_000_000_000, 2));
    let o = tracesync(&[
        "merge",
        "--manifest",
        good.to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    assert_eq!(exit_code(&o), 65, "{}", stderr(&o));
    assert_one_line(&stderr(&o), &good, &["not a perfetto_manifest"]);
    let missing = d.join("missing.json");
    let o = tracesync(&[
        "merge",
        "--manifest",
        missing.to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    assert_eq!(exit_code(&o), 66, "{}", stderr(&o));
    assert_one_line(&stderr(&o), &missing, &["cannot open"]);
}

/// A missing input: exit 66, one line naming it, whatever else is given.
#[test]
fn missing_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "good.pftrace", &good_trace(1_000_000_000, 2));
    let missing = d.join("not-there.pftrace");
    let o = tracesync(&["merge", good.to_str().unwrap(), missing.to_str().unwrap()]);
    assert_eq!(exit_code(&o), 66, "{}", stderr(&o));
    assert_one_line(&stderr(&o), &missing, &["cannot open", "check the path"]);
    // A directory is not an input either.
    let o = tracesync(&["merge", d.to_str().unwrap()]);
    assert_eq!(exit_code(&o), 66, "{}", stderr(&o));
    assert_one_line(&stderr(&o), d, &["directory"]);
}

/// An output that cannot be created: exit 73, one line naming the path the
/// user gave (not a temporary file).
#[test]
fn unwritable_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "good.pftrace", &good_trace(1_000_000_000, 2));
    let out = d.join("no-such-dir").join("merged.pftrace");
    let o = tracesync(&["merge", "-o", out.to_str().unwrap(), good.to_str().unwrap()]);
    assert_eq!(exit_code(&o), 73, "{}", stderr(&o));
    assert_one_line(&stderr(&o), &out, &["cannot create", "directory"]);
    assert!(
        !stderr(&o).contains("merged.pftrace.tmp"),
        "names the temporary file: {}",
        stderr(&o)
    );
    let stats = d.join("no-such-dir").join("stats.json");
    let o = tracesync(&[
        "merge",
        "--stats",
        stats.to_str().unwrap(),
        "-o",
        d.join("m.pftrace").to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    assert_eq!(exit_code(&o), 73, "{}", stderr(&o));
    assert_one_line(&stderr(&o), &stats, &["cannot create"]);
}

/// Ctrl-C (SIGINT) or SIGTERM while the merged trace is written: the
/// process ends by the signal, and neither the output nor its temporary
/// is left behind.
#[test]
fn an_interrupted_merge_leaves_no_temporary() {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Long enough to still be writing when the signal comes.
    let mut json = String::from(r#"{"traceEvents":["#);
    for i in 0..600_000_u64 {
        json.push_str(&format!(
            r#"{{"ph":"X","pid":1,"tid":{},"ts":{i},"dur":1,"name":"e{}"}},"#,
            i % 4,
            i % 9
        ));
    }
    json.push_str("{}]}");
    let input = write(d, "big.json", json.as_bytes());
    let out = d.join("merged.pftrace");
    let temp = d.join("merged.pftrace.tmp");
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        let mut child = std::process::Command::new(tracesync_tests::run::bin("tracesync"))
            .args([
                "merge",
                "-o",
                out.to_str().unwrap(),
                input.to_str().unwrap(),
            ])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !temp.exists() {
            assert!(child.try_wait().unwrap().is_none(), "ended before writing");
            assert!(started.elapsed() < Duration::from_secs(120), "no temporary");
            std::thread::sleep(Duration::from_millis(5));
        }
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(signal as i32), "{signal}: {status}");
        assert!(!temp.exists(), "{signal}: the temporary is left");
        assert!(!out.exists(), "{signal}: an output is left");
    }
}
