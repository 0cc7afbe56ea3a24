//! (e) The real-producer fixtures (Perfetto SDK, incremental clock 64),
//! and (f) gzip'd inputs and a .tar of inputs merge like the plain files.

use super::one_file::relay_recorded;
use super::placement::rendezvous_files;
use super::*;

// (e) the real-producer fixtures (Perfetto SDK, incremental clock 64)

#[test]
fn sdk_fixtures_alone_and_together() {
    if !tp::require_or_skip("sdk_fixtures_alone_and_together") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let host = fixture("sdk_host.pftrace");
    let m7 = fixture("sdk_machine7.pftrace");

    let j = judge(d, "e_host", &[&host], &[]);
    assert_same_as_input(&host, &j, &[]);
    assert_eq!(j.by_raw_id(), BTreeMap::from([(0, 0)]));
    assert_eq!(j.slices.len(), 40, "10 rounds x 2 threads x 2 slices");

    let j = judge(d, "e_m7", &[&m7], &[]);
    assert_same_as_input(&m7, &j, &[]);
    let on_machine = |j: &Judged, m: u32| j.slices.iter().filter(|s| s.machine == m).count();
    let m7_out = j.by_raw_id()[&7];
    assert_eq!(
        on_machine(&j, m7_out),
        40,
        "machine 7's slices stay together"
    );

    let j = judge(d, "e_both", &[&host, &m7], &["--machine-per-file"]);
    let (first, m7_out) = (j.by_raw_id()[&(1 << 32)], j.by_raw_id()[&7]);
    assert_eq!(first, 0, "the first file's machine holds trace time");
    assert_eq!(on_machine(&j, first), 40);
    assert_eq!(on_machine(&j, m7_out), 40);
    assert_eq!(j.slices.len(), 80);
}

// (f) gzip'd inputs and a .tar of inputs merge like the plain files

fn gzip(src: &Path, dst: &Path) {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(dst).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(&std::fs::read(src).unwrap()).unwrap();
    enc.finish().unwrap();
}

fn tar_of(dst: &Path, members: &[(&str, &Path)]) {
    let mut b = tar::Builder::new(std::fs::File::create(dst).unwrap());
    for (name, path) in members {
        b.append_path_with_name(path, name).unwrap();
    }
    b.finish().unwrap();
}

/// jsonl records without `src`, which names the input as given.
fn without_src(records: &[Record]) -> Vec<Record> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("src");
            r
        })
        .collect()
}

/// Merges `inputs` both ways and asserts the same trace bytes and the same
/// jsonl (but for `src`) as `reference`, which [`judge`] checked.
fn assert_same_merge(
    dir: &Path,
    label: &str,
    inputs: &[&Path],
    extra: &[&str],
    reference: &Judged,
) {
    let (out, records) = merge_both(dir, label, inputs, extra);
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(&reference.out).unwrap(),
        "{label}: the merged trace differs from the plain files'"
    );
    assert_eq!(
        without_src(&records),
        without_src(&reference.records),
        "{label}"
    );
}

#[test]
fn gzip_and_tar_inputs_merge_like_plain_files() {
    if !tp::require_or_skip("gzip_and_tar_inputs_merge_like_plain_files") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let flags = ["--machine-per-file"];
    // Two machines by rendezvous, one of them gzip'd.
    let (a, b) = rendezvous_files(d);
    let plain = judge(d, "f_plain", &[&a, &b], &flags);
    assert_eq!(plain.slice("b_slice").ts, 2_100_000_000);
    let a_gz = d.join("a.pftrace.gz");
    gzip(&a, &a_gz);
    assert_same_merge(d, "f_gz", &[&a_gz, &b], &flags, &plain);

    // The SDK fixtures, plain and as the members of one .tar.
    let host = fixture("sdk_host.pftrace");
    let m7 = fixture("sdk_machine7.pftrace");
    let plain = judge(d, "f_sdk_plain", &[&host, &m7], &flags);
    let archive = d.join("both.tar");
    tar_of(
        &archive,
        &[("sdk_host.pftrace", &host), ("sdk_machine7.pftrace", &m7)],
    );
    assert_same_merge(d, "f_sdk_tar", &[&archive], &flags, &plain);
    let (_, records) = merge_both(d, "f_sdk_tar_src", &[&archive], &flags);
    let srcs: std::collections::BTreeSet<&str> =
        records.iter().map(|r| r["src"].as_str().unwrap()).collect();
    assert_eq!(srcs.len(), 2, "records name the archive members: {srcs:?}");

    // A relay-recorded file, gzip'd.
    let relay = relay_recorded(d, "relay.pftrace", 0);
    let relay_gz = d.join("relay.pftrace.gz");
    gzip(&relay, &relay_gz);
    let plain = judge(d, "f_relay_plain", &[&relay], &[]);
    assert_same_merge(d, "f_relay_gz", &[&relay_gz], &[], &plain);
}
