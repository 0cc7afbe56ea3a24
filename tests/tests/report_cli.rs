//! `tracesync report` on the demo's output draws a picture and exits 0;
//! bad input gets one clear line and the sysexits code (65 not a capture,
//! 66 an empty directory).

use std::process::{Command, Output};

use tracesync_tests::live;

fn tracesync(args: &[&str]) -> Output {
    Command::new(live::bin("tracesync"))
        .args(args)
        .output()
        .expect("run tracesync")
}

/// Width and height of a PNG (its IHDR chunk), if `bytes` is one.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.get(..8)? != b"\x89PNG\r\n\x1a\n" || bytes.get(12..16)? != b"IHDR" {
        return None;
    }
    let be = |r: std::ops::Range<usize>| Some(u32::from_be_bytes(bytes.get(r)?.try_into().ok()?));
    Some((be(16..20)?, be(20..24)?))
}

#[test]
fn report_on_the_demo_output_draws_a_picture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("demo");
    let out_s = out.to_str().expect("utf-8");
    let demo = tracesync(&[
        "demo",
        "--relays",
        "2",
        "--seconds",
        "4",
        "--out",
        out_s,
        "--metrics-listen",
        "off",
    ]);
    let text = String::from_utf8_lossy(&demo.stdout);
    assert!(
        demo.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    // The demo's table gives the bound each packet had, and its report.
    assert!(text.contains("p99 bound (us)"), "{text}");
    let beside = out.join("sync-report.png");
    let drawn = std::fs::read(&beside).expect("the demo wrote its report");
    assert!(png_size(&drawn).is_some(), "{}", beside.display());

    let png = dir.path().join("r.png");
    let run = tracesync(&[
        "report",
        &format!("{out_s}/output"),
        "-o",
        png.to_str().expect("utf-8"),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let bytes = std::fs::read(&png).expect("report written");
    let (w, h) = png_size(&bytes).expect("a PNG");
    println!("{stdout}report PNG {w}x{h}, {} bytes", bytes.len());
    assert!(w >= 800 && h >= 400 && bytes.len() > 20_000);
    // One table row per relay machine.
    assert_eq!(
        stdout.lines().filter(|l| l.contains(" µs ")).count(),
        2,
        "{stdout}"
    );
    let svg = dir.path().join("r.svg");
    let run = tracesync(&[
        "report",
        &format!("{out_s}/output"),
        "-o",
        svg.to_str().expect("utf-8"),
    ]);
    assert!(run.status.success());
    let svg_text = std::fs::read_to_string(&svg).expect("svg");
    assert!(svg_text.starts_with("<svg") && svg_text.contains("error bound"));
}

fn one_line_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn report_on_bad_input_says_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let run = tracesync(&["report", empty.to_str().expect("utf-8")]);
    let line = one_line_error(&run);
    assert_eq!(run.status.code(), Some(66), "{line}");
    assert!(line.contains("no rolled files"), "{line}");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a trace\n").expect("write");
    let run = tracesync(&["report", text.to_str().expect("utf-8")]);
    let line = one_line_error(&run);
    assert_eq!(run.status.code(), Some(65), "{line}");
    assert!(line.contains("not a rolling capture"), "{line}");

    // A rolled file's name on bytes that are no trace: file and offset.
    let fake = dir.path().join("tracesync-20260101T000000Z-000001.pftrace");
    std::fs::write(&fake, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff").expect("write");
    let run = tracesync(&["report", fake.to_str().expect("utf-8")]);
    let line = one_line_error(&run);
    assert_eq!(run.status.code(), Some(65), "{line}");
    assert!(
        line.contains("byte offset") && line.contains(&*fake.to_string_lossy()),
        "{line}"
    );
}
