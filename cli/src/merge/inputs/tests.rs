//! Tests of input expansion: files, archives, manifests, errors.

use super::archive::is_hidden;
use super::classify::{MANIFEST_CAP, is_manifest};
use super::*;
use flate2::Compression;
use flate2::write::GzEncoder;
use std::io::{Cursor, Read, Write};
use tracesync_common::exit::{DATAERR, NOINPUT};
use zip::CompressionMethod;
use zip::write::SimpleFileOptions;

const MANIFEST: &str = r#"  {  "perfetto_manifest": {"version": 1}}"#;

/// Bytes that look like nothing in particular: a trace as far as
/// classification is concerned. Long enough to span several reads.
fn trace_bytes(seed: u8) -> Vec<u8> {
    (0..200_000u32)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 0x01)
        .collect()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

fn zip_bytes(members: &[(&str, &[u8], bool)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data, deflate) in members {
        let method = if *deflate {
            CompressionMethod::Deflated
        } else {
            CompressionMethod::Stored
        };
        if name.ends_with('/') {
            w.add_directory(*name, SimpleFileOptions::default())
                .unwrap();
            continue;
        }
        w.start_file(
            *name,
            SimpleFileOptions::default().compression_method(method),
        )
        .unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn tar_bytes(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_ustar();
        if name.ends_with('/') {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
        } else {
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(data.len() as u64);
        }
        h.set_mode(0o644);
        // Name written raw: `Builder` would normalise away a leading `./`,
        // which real archives (`tar -C dir .`) have.
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn read_all(s: &InputSource) -> Vec<u8> {
    let mut v = Vec::new();
    s.open().unwrap().read_to_end(&mut v).unwrap();
    v
}

fn err_of(r: Result<Inputs, InputError>) -> InputError {
    match r {
        Ok(i) => panic!("expected an error, got {i:?}"),
        Err(e) => e,
    }
}

#[test]
fn plain_and_gzip_files() {
    let d = tempfile::tempdir().unwrap();
    let plain = trace_bytes(1);
    let gz = gzip(&trace_bytes(2));
    let a = write(d.path(), "a.pftrace", &plain);
    let b = write(d.path(), "b.pftrace.gz", &gz);
    let inputs = expand_inputs(&[a.clone(), b.clone()], None).unwrap();
    assert!(inputs.manifest.is_none());
    assert_eq!(inputs.traces.len(), 2);
    let t = &inputs.traces[0];
    assert_eq!(t.display, a.display().to_string());
    assert_eq!(
        t.names,
        vec![a.display().to_string(), "a.pftrace".to_string()]
    );
    assert_eq!(read_all(t), plain);
    // gzip is passed through raw: the trace reader detects it.
    assert_eq!(read_all(&inputs.traces[1]), gz);
}

#[test]
fn zip_members_in_order_dirs_and_hidden_skipped() {
    let d = tempfile::tempdir().unwrap();
    let phone = trace_bytes(3);
    let watch = trace_bytes(4);
    let z = zip_bytes(&[
        ("traces/", b"", false),
        ("traces/phone.pb", &phone, true),
        (".DS_Store", b"junk", false),
        ("__MACOSX/._phone.pb", b"junk", false),
        ("traces/.hidden/x.pb", b"junk", false),
        ("watch.pb", &watch, false),
    ]);
    let p = write(d.path(), "bundle.zip", &z);
    let inputs = expand_inputs(std::slice::from_ref(&p), None).unwrap();
    let shown = p.display().to_string();
    let displays: Vec<_> = inputs.traces.iter().map(|t| t.display.clone()).collect();
    assert_eq!(
        displays,
        vec![
            format!("{shown}:traces/phone.pb"),
            format!("{shown}:watch.pb")
        ]
    );
    assert_eq!(inputs.traces[0].names, vec!["traces/phone.pb", "phone.pb"]);
    assert_eq!(inputs.traces[1].names, vec!["watch.pb"]);
    assert_eq!(read_all(&inputs.traces[0]), phone);
    assert_eq!(read_all(&inputs.traces[1]), watch);
}

#[test]
fn tar_members_in_order_dirs_and_hidden_skipped() {
    let d = tempfile::tempdir().unwrap();
    let phone = trace_bytes(5);
    let watch = gzip(&trace_bytes(6));
    let t = tar_bytes(&[
        ("./", b""),
        ("./phone.pb", &phone),
        ("./.hidden.pb", b"junk"),
        ("dir/", b""),
        ("dir/watch.pb.gz", &watch),
    ]);
    let p = write(d.path(), "bundle.tar", &t);
    let inputs = expand_inputs(std::slice::from_ref(&p), None).unwrap();
    assert_eq!(inputs.traces.len(), 2);
    assert_eq!(inputs.traces[0].names, vec!["./phone.pb", "phone.pb"]);
    assert_eq!(
        inputs.traces[1].names,
        vec!["dir/watch.pb.gz", "watch.pb.gz"]
    );
    assert_eq!(
        inputs.traces[1].display,
        format!("{}:dir/watch.pb.gz", p.display())
    );
    assert_eq!(read_all(&inputs.traces[0]), phone);
    assert_eq!(read_all(&inputs.traces[1]), watch);
}

#[test]
fn sources_reopen_identically() {
    let d = tempfile::tempdir().unwrap();
    let a = trace_bytes(7);
    let b = trace_bytes(8);
    let z = write(
        d.path(),
        "x.zip",
        &zip_bytes(&[("a", &a, true), ("b", &b, false)]),
    );
    let t = write(d.path(), "x.tar", &tar_bytes(&[("a", &a), ("b", &b)]));
    let f = write(d.path(), "f.pb", &a);
    let inputs = expand_inputs(&[z, t, f], None).unwrap();
    assert_eq!(inputs.traces.len(), 5);
    for s in &inputs.traces {
        let first = read_all(s);
        let second = read_all(s);
        assert!(first == a || first == b, "{}", s.display);
        assert_eq!(first, second, "{}", s.display);
    }
}

#[test]
fn manifest_detected_as_input_and_in_archives() {
    let d = tempfile::tempdir().unwrap();
    let tr = trace_bytes(9);
    // As a plain input, whatever its name.
    let m = write(d.path(), "notes.txt", MANIFEST.as_bytes());
    let a = write(d.path(), "a.pb", &tr);
    let inputs = expand_inputs(&[a.clone(), m.clone()], None).unwrap();
    assert_eq!(
        inputs.manifest,
        Some((m.display().to_string(), MANIFEST.to_string()))
    );
    assert_eq!(inputs.traces.len(), 1);

    // In a zip, position irrelevant.
    let z = write(
        d.path(),
        "b.zip",
        &zip_bytes(&[
            ("t.pb", &tr, true),
            ("perfetto_manifest.json", MANIFEST.as_bytes(), true),
        ]),
    );
    let inputs = expand_inputs(std::slice::from_ref(&z), None).unwrap();
    let (shown, text) = inputs.manifest.unwrap();
    assert_eq!(shown, format!("{}:perfetto_manifest.json", z.display()));
    assert_eq!(text, MANIFEST);
    assert_eq!(inputs.traces.len(), 1);

    // In a tar, gzip-compressed: read after the traces, so refused
    // (Perfetto: "perfetto_manifest file must be the first trace file").
    let t = write(
        d.path(),
        "c.tar",
        &tar_bytes(&[("m.json.gz", &gzip(MANIFEST.as_bytes())), ("t.pb", &tr)]),
    );
    let e = err_of(expand_inputs(std::slice::from_ref(&t), None));
    assert!(
        e.to_string().contains("must be the first trace file"),
        "{e}"
    );

    // Via --manifest, also listed as an input: still one manifest.
    let inputs = expand_inputs(&[a.clone(), m.clone()], Some(&m)).unwrap();
    assert_eq!(inputs.manifest.unwrap().0, m.display().to_string());

    // Not a manifest: a JSON object with another first key is a trace.
    let j = write(
        d.path(),
        "app.json",
        br#"{"traceEvents": [], "perfetto_manifest": 1}"#,
    );
    let inputs = expand_inputs(std::slice::from_ref(&j), None).unwrap();
    assert!(inputs.manifest.is_none());
    assert_eq!(inputs.traces.len(), 1);
}

#[test]
fn manifest_detection_rules() {
    assert!(is_manifest(br#"{"perfetto_manifest":{}}"#));
    assert!(is_manifest(b"\n\t {\r\n  \"perfetto_manifest\" : {}}"));
    assert!(!is_manifest(br#"{"version": 1, "perfetto_manifest": {}}"#));
    assert!(!is_manifest(br#"["perfetto_manifest"]"#));
    assert!(!is_manifest(b"   "));
    assert!(!is_manifest(b"{"));
}

#[test]
fn two_manifests_rejected() {
    let d = tempfile::tempdir().unwrap();
    let m1 = write(d.path(), "m1.json", MANIFEST.as_bytes());
    let m2 = write(d.path(), "m2.json", MANIFEST.as_bytes());
    let z = write(
        d.path(),
        "b.zip",
        &zip_bytes(&[
            ("t.pb", &trace_bytes(1), false),
            ("m.json", MANIFEST.as_bytes(), false),
        ]),
    );
    // The second manifest is refused once the first is read (the first
    // may name it, which is diagnosed first).
    let second = |r: Result<Inputs, InputError>| r.unwrap().multiple_manifests().unwrap();
    let e = second(expand_inputs(&[m1.clone(), z.clone()], None));
    assert_eq!(e.exit_code(), DATAERR);
    assert_eq!(
        e.to_string(),
        format!(
            "multiple perfetto_manifest files: {} and {}:m.json; keep only one",
            m1.display(),
            z.display()
        )
    );
    let e = second(expand_inputs(std::slice::from_ref(&z), Some(&m2)));
    assert!(
        e.to_string()
            .starts_with("multiple perfetto_manifest files: "),
        "{e}"
    );
}

#[test]
fn gzipped_manifest_among_traces_is_not_first() {
    // Perfetto's test_error_gzipped_config_after_proto: a gzip-compressed
    // manifest sorts as a container, after the traces.
    let d = tempfile::tempdir().unwrap();
    let z = write(
        d.path(),
        "g.zip",
        &zip_bytes(&[
            ("meta.json.gz", &gzip(MANIFEST.as_bytes()), false),
            ("spine.pb", &trace_bytes(1), false),
        ]),
    );
    let e = err_of(expand_inputs(std::slice::from_ref(&z), None));
    assert_eq!(e.exit_code(), DATAERR);
    assert!(
        e.to_string()
            .contains("meta.json.gz: perfetto_manifest file must be the first trace file"),
        "{e}"
    );
    // Named with --manifest it is read first.
    let m = write(d.path(), "m.json.gz", &gzip(MANIFEST.as_bytes()));
    let t = write(d.path(), "t.pb", &trace_bytes(2));
    let ok = expand_inputs(std::slice::from_ref(&t), Some(&m)).unwrap();
    assert!(ok.manifest.is_some());
}

#[test]
fn nested_archives_rejected() {
    let d = tempfile::tempdir().unwrap();
    let inner_zip = zip_bytes(&[("t.pb", &trace_bytes(1), false)]);
    let inner_tar = tar_bytes(&[("t.pb", &trace_bytes(1))]);
    let z = write(
        d.path(),
        "outer.zip",
        &zip_bytes(&[("inner.zip", &inner_zip, true)]),
    );
    let e = err_of(expand_inputs(std::slice::from_ref(&z), None));
    assert_eq!(e.exit_code(), DATAERR);
    assert_eq!(
        e.to_string(),
        format!(
            "{}:inner.zip: nested archives are not supported: merge the leaf files directly",
            z.display()
        )
    );
    let t = write(
        d.path(),
        "outer.tar",
        &tar_bytes(&[("a/inner.tar", &inner_tar)]),
    );
    let e = err_of(expand_inputs(std::slice::from_ref(&t), None));
    assert!(matches!(e, InputError::NestedArchive { .. }), "{e}");
    // A gzipped tar inside an archive is nested too.
    let t = write(
        d.path(),
        "outer2.tar",
        &tar_bytes(&[("inner.tgz", &gzip(&inner_tar))]),
    );
    let e = err_of(expand_inputs(std::slice::from_ref(&t), None));
    assert!(matches!(e, InputError::NestedArchive { .. }), "{e}");
}

#[test]
fn top_level_tar_gz_rejected() {
    let d = tempfile::tempdir().unwrap();
    let tgz = gzip(&tar_bytes(&[("t.pb", &trace_bytes(1))]));
    let p = write(d.path(), "x.tar.gz", &tgz);
    let e = err_of(expand_inputs(std::slice::from_ref(&p), None));
    assert_eq!(e.exit_code(), DATAERR);
    assert_eq!(
        e.to_string(),
        format!(
            "{}: gzip-compressed archives are not supported: decompress it (gunzip) and pass the .tar or .zip",
            p.display()
        )
    );
}

#[test]
fn missing_inputs_are_noinput() {
    let d = tempfile::tempdir().unwrap();
    let e = err_of(expand_inputs(&[], None));
    assert_eq!(e.exit_code(), NOINPUT);
    assert_eq!(
        e.to_string(),
        "no input files: give one or more traces, or a .zip/.tar archive of them"
    );

    let missing = d.path().join("nope.pftrace");
    let e = err_of(expand_inputs(std::slice::from_ref(&missing), None));
    assert_eq!(e.exit_code(), NOINPUT);
    let s = e.to_string();
    assert!(
        s.starts_with(&format!("{}: cannot open: ", missing.display())),
        "{s}"
    );
    assert!(s.ends_with("; check the path and its permissions"), "{s}");
    assert!(!s.contains('\n'));

    let e = err_of(expand_inputs(&[d.path().to_path_buf()], None));
    assert_eq!(e.exit_code(), NOINPUT);
    assert_eq!(
        e.to_string(),
        format!(
            "{}: is a directory; pass the trace files in it, or an archive of them",
            d.path().display()
        )
    );

    let a = write(d.path(), "a.pb", &trace_bytes(1));
    let e = err_of(expand_inputs(std::slice::from_ref(&a), Some(&missing)));
    assert_eq!(e.exit_code(), NOINPUT);

    let m = write(d.path(), "m.json", MANIFEST.as_bytes());
    let e = err_of(expand_inputs(std::slice::from_ref(&m), None));
    assert_eq!(e.exit_code(), NOINPUT);
    assert_eq!(
        e.to_string(),
        "no trace files among the inputs (only a perfetto_manifest): add the traces to merge"
    );
}

#[test]
fn bad_manifest_files() {
    let d = tempfile::tempdir().unwrap();
    let a = write(d.path(), "a.pb", &trace_bytes(1));
    let notm = write(d.path(), "x.json", b"{\"files\": []}");
    let e = err_of(expand_inputs(std::slice::from_ref(&a), Some(&notm)));
    assert_eq!(e.exit_code(), DATAERR);
    assert_eq!(
        e.to_string(),
        format!(
            "{}: not a perfetto_manifest (expected a JSON object whose first key is \"perfetto_manifest\"); check the --manifest argument",
            notm.display()
        )
    );

    let mut bad = MANIFEST.as_bytes().to_vec();
    bad.extend_from_slice(b"\xff\xfe");
    let m = write(d.path(), "bad.json", &bad);
    let e = err_of(expand_inputs(&[a.clone(), m.clone()], None));
    assert_eq!(
        e.to_string(),
        format!(
            "{}: perfetto_manifest is not valid UTF-8; save it as UTF-8 JSON",
            m.display()
        )
    );

    // Over the cap: never read whole, rejected.
    let mut big = MANIFEST.as_bytes().to_vec();
    big.resize(MANIFEST_CAP as usize + 10, b' ');
    let m = write(d.path(), "big.json", &big);
    let e = err_of(expand_inputs(&[a, m.clone()], None));
    assert_eq!(e.exit_code(), DATAERR);
    assert_eq!(
        e.to_string(),
        format!(
            "{}: perfetto_manifest is larger than 16 MiB; it should only describe the files",
            m.display()
        )
    );
}

#[test]
fn malformed_archives_are_dataerr() {
    let d = tempfile::tempdir().unwrap();
    // A zip local header followed by garbage: no central directory.
    let mut z = b"PK\x03\x04".to_vec();
    z.extend_from_slice(&[0u8; 100]);
    let p = write(d.path(), "broken.zip", &z);
    let e = err_of(expand_inputs(std::slice::from_ref(&p), None));
    assert_eq!(e.exit_code(), DATAERR);
    let s = e.to_string();
    assert!(
        s.starts_with(&format!("{}: malformed zip archive: ", p.display())),
        "{s}"
    );
    assert!(s.ends_with("; re-create the archive"), "{s}");

    // A tar whose header checksum is wrong.
    let mut t = tar_bytes(&[("a.pb", &trace_bytes(1))]);
    t[148..156].copy_from_slice(b"0000000\0");
    let p = write(d.path(), "broken.tar", &t);
    let e = err_of(expand_inputs(std::slice::from_ref(&p), None));
    assert_eq!(e.exit_code(), DATAERR);
    assert!(
        e.to_string()
            .starts_with(&format!("{}: malformed tar archive: ", p.display())),
        "{e}"
    );
}

#[test]
fn altered_zip_member_fails_on_read() {
    let d = tempfile::tempdir().unwrap();
    let data = trace_bytes(1);
    let mut z = zip_bytes(&[("a.pb", &data, false)]);
    let p = write(d.path(), "x.zip", &z);
    let inputs = expand_inputs(std::slice::from_ref(&p), None).unwrap();
    // Flip a byte of the stored data after indexing: the CRC catches it.
    let at = z.windows(4).position(|w| w == &data[..4]).unwrap();
    z[at + 1000] ^= 0x40;
    std::fs::write(&p, &z).unwrap();
    let mut v = Vec::new();
    let e = inputs.traces[0]
        .open()
        .unwrap()
        .read_to_end(&mut v)
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("CRC mismatch"), "{e}");
}

#[test]
fn unsupported_zip_method_rejected() {
    let d = tempfile::tempdir().unwrap();
    let mut z = zip_bytes(&[("a.pb", &trace_bytes(1), false)]);
    // Claim bzip2 (method 12) in the local and central headers.
    z[8] = 12;
    let central = z.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    z[central + 10] = 12;
    let p = write(d.path(), "x.zip", &z);
    let e = err_of(expand_inputs(std::slice::from_ref(&p), None));
    assert_eq!(e.exit_code(), DATAERR);
    let s = e.to_string();
    assert!(
        s.starts_with(&format!("{}:a.pb: compression method ", p.display())),
        "{s}"
    );
    assert!(
        s.ends_with(" is not supported; re-create the archive with stored or deflated members"),
        "{s}"
    );
}

#[test]
fn hidden_rules() {
    assert!(is_hidden(".DS_Store"));
    assert!(is_hidden("a/.git/config"));
    assert!(is_hidden("__MACOSX/._a.pb"));
    assert!(!is_hidden("./a.pb"));
    assert!(!is_hidden("a/b.pb"));
    assert!(!is_hidden("a.b/c.pb"));
}
