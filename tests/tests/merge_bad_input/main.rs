//! `tracesync merge` on bad inputs, through the real binary: every problem
//! is one stderr line naming the file and where (byte offset, manifest key,
//! or line:column), the exit code follows sysexits (docs/operations-cli.md: 65 bad
//! data, 66 no input, 73 cannot create output), nothing ever panics, and the
//! good inputs next to a bad one are still merged (unless `--strict`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use prost::Message;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, REALTIME};
use tracesync_protocol::perfetto::{Trace, TracePacket as Packet};
use tracesync_tests::archive::{tar, zip};
use tracesync_tests::build;
use tracesync_tests::run::{Record, merge_jsonl, tracesync};

mod arguments;
mod corruption;

const BT: u32 = BOOTTIME;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write input");
    path
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A small valid trace: a snapshot and `n` instants on BOOTTIME from `base`.
fn good_packets(base: u64, n: u64) -> Vec<Packet> {
    let mut p = vec![build::on_sequence(
        build::clock_snapshot(&[(BT, base), (MONOTONIC, base / 2)]),
        1,
    )];
    p.extend((0..n).map(|i| build::instant(base + 1000 * (i + 1), BT, 1, 1, "e")));
    p
}

fn good_trace(base: u64, n: u64) -> Vec<u8> {
    build::encode_trace(&good_packets(base, n))
}

/// One `Trace.packet` record (tag, length, body).
fn record(p: &Packet) -> Vec<u8> {
    build::encode_trace(std::slice::from_ref(p))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn exit_code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// No panic text, ever.
fn assert_no_panic(stderr: &str) {
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "panic on stderr:\n{stderr}"
    );
}

/// stderr is exactly one line, naming `file` and containing every `needle`.
fn assert_one_line(stderr: &str, file: &Path, needles: &[&str]) {
    assert_no_panic(stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one line on stderr, got:\n{stderr}"
    );
    let line = lines[0];
    assert!(
        line.contains(&file.display().to_string()),
        "the line does not name {}: {line}",
        file.display()
    );
    for n in needles {
        assert!(line.contains(n), "the line lacks {n:?}: {line}");
    }
    assert!(
        line.matches("byte offset").count() <= 1,
        "the offset is repeated: {line}"
    );
}

/// Track events of `src` in a jsonl run, as their raw BOOTTIME values.
fn events_of(records: &[Record], src: &Path) -> Vec<u64> {
    let src = src.display().to_string();
    records
        .iter()
        .filter(|r| r["kind"] == "track_event" && r["src"] == src.as_str())
        .map(|r| r["clock_ts"].as_u64().unwrap())
        .collect()
}

/// The bad inputs of the table test: (name, bytes, needles of its line).
struct Bad {
    name: &'static str,
    bytes: Vec<u8>,
    needles: Vec<String>,
    /// Packets of this input that precede the fault and must be merged.
    merged: Vec<u64>,
}

fn bad_inputs() -> Vec<Bad> {
    let prefix = good_trace(2_000_000_000, 3);
    let prefix_ts: Vec<u64> = (1..=3).map(|i| 2_000_000_000 + 1000 * i).collect();
    let at = |n: usize| format!("byte offset {n}:");
    let skipped = "the rest of this input is skipped".to_string();
    let not_trace = "not a Perfetto trace".to_string();
    let mut out = Vec::new();

    // Valid packets, then a record cut in the middle of its body.
    let cut = record(&build::instant(9, BT, 1, 1, "a long enough name"));
    let mut b = prefix.clone();
    b.extend_from_slice(&cut[..cut.len() / 2]);
    out.push(Bad {
        name: "truncated.pftrace",
        bytes: b,
        needles: vec![
            at(prefix.len()),
            "runs past the end".into(),
            skipped.clone(),
        ],
        merged: prefix_ts.clone(),
    });

    // Valid packets, then a record cut inside its header.
    let mut b = prefix.clone();
    b.extend_from_slice(&[0x0A, 0x80]);
    out.push(Bad {
        name: "truncated_header.pftrace",
        bytes: b,
        needles: vec![at(prefix.len()), "record header".into(), skipped.clone()],
        merged: prefix_ts.clone(),
    });

    // Garbage bytes (a fixed pattern whose first tag is not field 1).
    let garbage: Vec<u8> = (0..200u32).map(|i| (i * 37 + 11) as u8 | 0x10).collect();
    out.push(Bad {
        name: "garbage.bin",
        bytes: garbage,
        needles: vec![at(0), not_trace.clone()],
        merged: vec![],
    });

    // A record whose length runs past the end of the file.
    let mut b = prefix.clone();
    b.extend_from_slice(&[0x0A, 0xE8, 0x07, 1, 2, 3]); // 1000 bytes announced, 3 present
    out.push(Bad {
        name: "past_eof.pftrace",
        bytes: b,
        needles: vec![
            at(prefix.len()),
            "record of 1000 bytes runs past the end of input".into(),
        ],
        merged: prefix_ts.clone(),
    });

    // A bad varint: the tag, then 11 bytes of 0xFF as the length.
    let mut b = prefix.clone();
    b.push(0x0A);
    b.extend_from_slice(&[0xFF; 11]);
    out.push(Bad {
        name: "varint.pftrace",
        bytes: b,
        needles: vec![at(prefix.len()), "varint".into(), skipped.clone()],
        merged: prefix_ts.clone(),
    });

    // Gzip magic, then junk.
    let mut b = vec![0x1f, 0x8b];
    b.extend_from_slice(b"this is not deflate data at all, not even close");
    out.push(Bad {
        name: "junk.pftrace.gz",
        bytes: b,
        needles: vec![at(0), "gzip".into(), not_trace.clone()],
        merged: vec![],
    });

    // A wrong top-level field (field 2, length-delimited) after valid packets.
    let mut b = prefix.clone();
    b.extend_from_slice(&[0x12, 0x02, 0x40, 0x05]);
    out.push(Bad {
        name: "field2.pftrace",
        bytes: b,
        needles: vec![at(prefix.len()), "field 2".into(), skipped.clone()],
        merged: prefix_ts.clone(),
    });

    // Not a trace at all: a PNG header.
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00";
    out.push(Bad {
        name: "image.png",
        bytes: png.to_vec(),
        needles: vec![at(0), not_trace.clone()],
        merged: vec![],
    });

    // An empty file.
    out.push(Bad {
        name: "empty.pftrace",
        bytes: Vec::new(),
        needles: vec!["no trace packets".into(), "remove the input".into()],
        merged: vec![],
    });
    out
}

/// Each bad input next to a good one: exit 65, one line naming the bad file
/// and where, the good input (and the bad input's packets before its fault)
/// merged, in jsonl and in the output file; `--strict` fails with no output.
#[test]
fn bad_inputs_next_to_a_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "good.pftrace", &good_trace(1_000_000_000, 4));
    let good_ts: Vec<u64> = (1..=4).map(|i| 1_000_000_000 + 1000 * i).collect();
    for bad in bad_inputs() {
        let path = write(d, bad.name, &bad.bytes);
        let needles: Vec<&str> = bad.needles.iter().map(String::as_str).collect();

        let (records, code, err) = merge_jsonl(&[&good, &path], &[]);
        assert_eq!(code, 65, "{}: {err}", bad.name);
        assert_one_line(&err, &path, &needles);
        assert_eq!(events_of(&records, &good), good_ts, "{}", bad.name);
        assert_eq!(events_of(&records, &path), bad.merged, "{}", bad.name);

        // The same with the bad input first, into an output file.
        let out = d.join(format!("{}.jsonl", bad.name));
        let o = tracesync(&[
            "merge",
            "--format",
            "jsonl",
            "-o",
            out.to_str().unwrap(),
            path.to_str().unwrap(),
            good.to_str().unwrap(),
        ]);
        assert_eq!(exit_code(&o), 65, "{}: {}", bad.name, stderr(&o));
        assert_one_line(&stderr(&o), &path, &needles);
        let text = std::fs::read_to_string(&out).expect("output file written");
        let records: Vec<Record> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(events_of(&records, &good), good_ts, "{}", bad.name);

        // --strict: the same run fails and leaves no output file.
        let strict_out = d.join(format!("{}.strict.pftrace", bad.name));
        let o = tracesync(&[
            "merge",
            "--strict",
            "-o",
            strict_out.to_str().unwrap(),
            good.to_str().unwrap(),
            path.to_str().unwrap(),
        ]);
        assert_eq!(exit_code(&o), 65, "{}: {}", bad.name, stderr(&o));
        assert_no_panic(&stderr(&o));
        assert!(
            stderr(&o).contains(&path.display().to_string()),
            "{}",
            stderr(&o)
        );
        assert!(!strict_out.exists(), "--strict left {strict_out:?}");
        assert!(
            !d.join(format!("{}.strict.pftrace.tmp", bad.name)).exists(),
            "--strict left a temporary file"
        );
    }
}

/// A gzip'd trace cut mid-stream: the packets before the cut are merged, the
/// cut is one line with the (decompressed) byte offset.
#[test]
fn gzip_truncated_mid_stream() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Enough packets with varied names that the cut leaves some whole ones.
    let mut p = good_packets(1_000_000_000, 0);
    p.extend((0..3000u64).map(|i| {
        build::instant(
            1_000_000_000 + 1000 * (i + 1),
            BT,
            1,
            1,
            &format!("e{}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        )
    }));
    let gz = gzip(&build::encode_trace(&p));
    let path = write(d, "cut.pftrace.gz", &gz[..gz.len() / 2]);
    let good = write(d, "good.pftrace", &good_trace(5_000_000_000, 2));
    let (records, code, err) = merge_jsonl(&[&path, &good], &[]);
    assert_eq!(code, 65, "{err}");
    assert_one_line(
        &err,
        &path,
        &["byte offset", "gzip", "the rest of this input"],
    );
    let cut = events_of(&records, &path);
    assert!(
        !cut.is_empty() && cut.len() < 3000,
        "{} packets before the cut",
        cut.len()
    );
    assert_eq!(events_of(&records, &good).len(), 2);
    // The offset is where the decompressed stream broke: a record boundary
    // at or after the last packet read.
    let line = err.lines().next().unwrap();
    let offset: u64 = line
        .split("byte offset ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no offset in {line}"));
    let whole = build::encode_trace(&p[..=cut.len()]).len() as u64;
    assert!(offset >= whole, "offset {offset} < {whole}: {line}");
}

/// A bad member inside an archive: one line naming `archive:member` and the
/// offset; the other members are merged. A cut archive is one line naming
/// the archive.
#[test]
fn bad_member_inside_an_archive() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = good_trace(1_000_000_000, 2);
    let mut bad = good_trace(3_000_000_000, 1);
    let at = bad.len();
    bad.extend_from_slice(&[0x0A, 0xE8, 0x07, 1]);
    let members: [(&str, &[u8]); 2] = [("good.pb", &good), ("bad.pb", &bad)];
    for (name, bytes) in [("b.tar", tar(&members)), ("b.zip", zip(&members))] {
        let archive = d.join(name);
        std::fs::write(&archive, &bytes).unwrap();
        let (records, code, err) = merge_jsonl(&[&archive], &[]);
        assert_eq!(code, 65, "{name}: {err}");
        let member = PathBuf::from(format!("{}:bad.pb", archive.display()));
        assert_one_line(
            &err,
            &member,
            &[&format!("byte offset {at}:"), "runs past the end"],
        );
        let good_src = PathBuf::from(format!("{}:good.pb", archive.display()));
        assert_eq!(events_of(&records, &good_src).len(), 2, "{name}");
        assert_eq!(events_of(&records, &member), vec![3_000_001_000], "{name}");

        // The archive itself cut short.
        let cut = d.join(format!("cut-{name}"));
        // Mid-member (a tar cut exactly at a member boundary reads as complete).
        std::fs::write(&cut, &bytes[..bytes.len() / 3 + 100]).unwrap();
        let o = tracesync(&["merge", "--format", "jsonl", cut.to_str().unwrap()]);
        assert_eq!(exit_code(&o), 65, "{name}: {}", stderr(&o));
        assert_one_line(&stderr(&o), &cut, &["archive", "re-create the archive"]);
    }
}

/// A malformed packet body inside valid framing: one line with its offset,
/// only that packet skipped.
#[test]
fn malformed_packet_skips_only_that_packet() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut b = good_trace(1_000_000_000, 2);
    let at = b.len();
    // A packet body holding a field whose length runs past the packet.
    b.extend_from_slice(&[0x0A, 0x03, 0x42, 0x09, 0x00]);
    b.extend(record(&build::instant(1_000_009_000, BT, 1, 1, "after")));
    let path = write(d, "body.pftrace", &b);
    let (records, code, err) = merge_jsonl(&[&path], &[]);
    assert_eq!(code, 65, "{err}");
    assert_one_line(
        &err,
        &path,
        &[&format!("byte offset {at}:"), "packet skipped"],
    );
    assert_eq!(
        events_of(&records, &path),
        vec![1_000_001_000, 1_000_002_000, 1_000_009_000]
    );
}
