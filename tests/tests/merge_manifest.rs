//! `perfetto_manifest` end to end: Perfetto's manifest vectors
//! (Perfetto's trace_manifest diff tests; TV-19, TV-22, TV-23 below) through
//! `tracesync merge --format jsonl`, with the manifest given by `--manifest`,
//! as an input, or inside a .zip/.tar archive next to the traces; and
//! `tracesync clocks --json` showing where each edge came from.

use std::path::{Path, PathBuf};

use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, REALTIME};
use tracesync_protocol::perfetto::TracePacket as Packet;
use tracesync_tests::archive::{tar, zip};
use tracesync_tests::build;
use tracesync_tests::run::{Record, merge_jsonl, tracesync};

const BT: u32 = BOOTTIME;
const RT: u32 = REALTIME;
const MONO: u32 = MONOTONIC;
const NAMED: u64 = 1 << 32;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write");
    path
}

fn trace(dir: &Path, name: &str, packets: &[Packet]) -> PathBuf {
    write(dir, name, &build::encode_trace(packets))
}

fn manifest(dir: &Path, body: &str) -> PathBuf {
    let text = format!("{{\"perfetto_manifest\": {{\"version\": 1, {body}}}}}");
    write(dir, "perfetto_manifest.json", text.as_bytes())
}

fn snap(clocks: &[(u32, u64)]) -> Packet {
    build::on_sequence(build::clock_snapshot(clocks), 1)
}

fn slice(seq: u32, ts: u64) -> Packet {
    build::instant(ts, BT, seq, 1, "s")
}

/// A file: snap{BT 1e9} and a slice at BT `at`.
fn bt_file(dir: &Path, name: &str, at: u64) -> PathBuf {
    trace(dir, name, &[snap(&[(BT, 1_000_000_000)]), slice(2, at)])
}

/// The merged ts of the track event of `src` (a path or `archive:member`).
fn ts_in(records: &[Record], src: &str) -> Vec<i64> {
    records
        .iter()
        .filter(|r| r["kind"] == "track_event" && r["src"] == src)
        .map(|r| r["ts"].as_i64().unwrap())
        .collect()
}

fn src(p: &Path) -> String {
    p.display().to_string()
}

/// Runs a merge that must succeed cleanly.
fn merge_ok(inputs: &[&Path], extra: &[&str]) -> Vec<Record> {
    let (records, code, stderr) = merge_jsonl(inputs, extra);
    assert_eq!(code, 0, "merge failed: {stderr}");
    assert!(stderr.is_empty(), "unexpected stderr: {stderr}");
    records
}

/// TV-19: trace_time REALTIME by manifest.
#[test]
fn tv19_trace_time_realtime() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let spine = trace(
        d,
        "spine.pb",
        &[
            snap(&[
                (BT, 1_000_000_000),
                (RT, 1_700_000_001_000_000_000),
                (MONO, 500_000_000),
            ]),
            slice(2, 1_100_000_000),
        ],
    );
    let m = manifest(d, r#""trace_time": {"clock": "REALTIME"}"#);
    let r = merge_ok(&[&spine], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(ts_in(&r, &src(&spine)), vec![1_700_000_001_100_000_000]);
    // Without the manifest, BOOTTIME is trace time.
    let r = merge_ok(&[&spine], &[]);
    assert_eq!(ts_in(&r, &src(&spine)), vec![1_100_000_000]);
}

/// TV-22 sync_to_file_offset: server's BOOTTIME reads T when phone's reads
/// T + 500.
const SYNC_TO_PHONE: &str = r#""files": [
    {"path": "phone.pb"},
    {"path": "server.pb", "clocks": {"clock": "BOOTTIME", "offset_ns": OFFSET,
        "sync_to": {"file": "phone.pb", "clock": "BOOTTIME"}}}]"#;

fn phone_server(d: &Path) -> (PathBuf, PathBuf) {
    (
        bt_file(d, "phone.pb", 1_100_000_000),
        bt_file(d, "server.pb", 1_100_000_000),
    )
}

#[test]
fn tv22_sync_to_file_offset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (phone, server) = phone_server(d);
    let m = manifest(d, &SYNC_TO_PHONE.replace("OFFSET", "500"));
    let r = merge_ok(&[&phone, &server], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(ts_in(&r, &src(&phone)), vec![1_100_000_000]);
    assert_eq!(ts_in(&r, &src(&server)), vec![1_100_000_500]);
    // The manifest given as an input instead of --manifest: the same.
    let r2 = merge_ok(&[&m, &phone, &server], &[]);
    assert_eq!(r2, r);
    // Server first: its BOOTTIME claims trace time (first claimant wins),
    // and the edge still moves server 500 ns later relative to phone.
    let r = merge_ok(&[&server, &phone], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(ts_in(&r, &src(&phone)), vec![1_099_999_500]);
    assert_eq!(ts_in(&r, &src(&server)), vec![1_100_000_000]);
}

#[test]
fn tv22_negative_offset() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (phone, server) = phone_server(d);
    let m = manifest(d, &SYNC_TO_PHONE.replace("OFFSET", "-500"));
    let r = merge_ok(&[&phone, &server], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(ts_in(&r, &src(&phone)), vec![1_100_000_000]);
    assert_eq!(ts_in(&r, &src(&server)), vec![1_099_999_500]);
}

/// TV-22 trace_time_file: trace time is server's BOOTTIME, same edge.
#[test]
fn tv22_trace_time_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (phone, server) = phone_server(d);
    let body = format!(
        r#""trace_time": {{"file": "server.pb", "clock": "BOOTTIME"}}, {}"#,
        SYNC_TO_PHONE.replace("OFFSET", "500")
    );
    let m = manifest(d, &body);
    let r = merge_ok(&[&phone, &server], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(ts_in(&r, &src(&phone)), vec![1_099_999_500]);
    assert_eq!(ts_in(&r, &src(&server)), vec![1_100_000_000]);
}

/// Timestamps moved before 0 by a large negative offset are dropped and
/// counted; `--strict` refuses the merge.
#[test]
fn negative_timestamps_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (phone, server) = phone_server(d);
    let m = manifest(d, &SYNC_TO_PHONE.replace("OFFSET", "-5000000000"));
    let stats = d.join("stats.json");
    let (r, code, stderr) = merge_jsonl(
        &[&phone, &server],
        &[
            "--manifest",
            m.to_str().unwrap(),
            "--stats",
            stats.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(ts_in(&r, &src(&phone)), vec![1_100_000_000]);
    assert_eq!(ts_in(&r, &src(&server)), Vec::<i64>::new());
    assert!(
        r.iter().all(|x| x["ts"].as_i64().unwrap() >= 0),
        "a negative ts was written"
    );
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!(s["trace_sorter_negative_timestamp_dropped"], 1, "{s}");
    assert_eq!(s["packets_dropped"], 1, "{s}");

    let out = d.join("strict.pftrace");
    let o = tracesync(&[
        "merge",
        "--strict",
        "--manifest",
        m.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        phone.to_str().unwrap(),
        server.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(65), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--strict"), "{stderr}");
    assert!(!out.exists(), "--strict wrote {out:?}");
}

/// `machine` puts two files on one named machine.
#[test]
fn manifest_machine_names_two_files_onto_one_machine() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = bt_file(d, "a.pb", 1_100_000_000);
    let b = bt_file(d, "b.pb", 1_200_000_000);
    let m = manifest(
        d,
        r#""files": [{"path": "a.pb", "machine": {"name": "phone"}},
                     {"path": "b.pb", "machine": {"name": "phone"}}]"#,
    );
    let r = merge_ok(&[&a, &b], &["--manifest", m.to_str().unwrap()]);
    for f in [&a, &b] {
        let recs: Vec<&Record> = r.iter().filter(|x| x["src"] == src(f).as_str()).collect();
        assert!(!recs.is_empty());
        for x in recs {
            assert_eq!(x["machine"], "phone", "{x}");
            assert_eq!(x["raw_id"], NAMED, "{x}");
        }
    }
    assert_eq!(ts_in(&r, &src(&a)), vec![1_100_000_000]);
    assert_eq!(ts_in(&r, &src(&b)), vec![1_200_000_000]);
}

/// TV-23 with manifest names: ids 0 and 7 of a relay-recorded file renamed
/// "host" and "vm"; the remote sync still places the vm.
fn relay_file(d: &Path) -> PathBuf {
    trace(
        d,
        "relay.pb",
        &[
            snap(&[(BT, 1_000_000_000)]),
            build::on_machine(
                build::remote_clock_sync(1, &[(50_000_000_000, 2_000_000_000); 2]),
                7,
            ),
            slice(2, 1_100_000_000),
            build::on_machine(slice(3, 50_100_000_000), 7),
        ],
    )
}

#[test]
fn tv23_machines_renamed_by_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let relay = relay_file(d);
    let m = manifest(
        d,
        r#""files": [{"path": "relay.pb", "machines": [{"id": 0, "name": "host"}, {"id": 7, "name": "vm"}]}]"#,
    );
    let r = merge_ok(&[&relay], &["--manifest", m.to_str().unwrap()]);
    let ev = |raw: u64| {
        r.iter()
            .find(|x| x["kind"] == "track_event" && x["clock_ts"] == raw)
            .unwrap_or_else(|| panic!("no event {raw}"))
    };
    let host = ev(1_100_000_000);
    let vm = ev(50_100_000_000);
    assert_eq!(host["ts"], 1_100_000_000u64);
    assert_eq!(vm["ts"], 2_100_000_000u64);
    assert_eq!(host["machine"], "host");
    assert_eq!(vm["machine"], "vm");
    assert_ne!(host["raw_id"], vm["raw_id"]);
    assert!(vm["raw_id"].as_u64().unwrap() >= NAMED, "{vm}");
}

/// An embedded id the manifest's `machines` does not declare is an error
/// naming the id.
#[test]
fn undeclared_embedded_id_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let relay = relay_file(d);
    let m = manifest(
        d,
        r#""files": [{"path": "relay.pb", "machines": [{"id": 0, "name": "host"}, {"id": 8, "name": "vm"}]}]"#,
    );
    let (r, code, stderr) = merge_jsonl(&[&relay], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(code, 65, "{stderr}");
    assert!(r.is_empty(), "output despite the error");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for needle in [
        m.display().to_string().as_str(),
        "files[0].machines",
        "undeclared machine id 7",
    ] {
        assert!(stderr.contains(needle), "lacks {needle:?}: {stderr}");
    }
}

/// A manifest inside an archive with the traces, matched by member name.
#[test]
fn manifest_inside_zip_and_tar() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (phone, server) = phone_server(d);
    let m = manifest(d, &SYNC_TO_PHONE.replace("OFFSET", "500"));
    let (phone, server, m) = (
        std::fs::read(phone).unwrap(),
        std::fs::read(server).unwrap(),
        std::fs::read(m).unwrap(),
    );
    // The manifest's position in the archive does not matter (it is read
    // before any trace); members live in a folder, matched by base name.
    let members: [(&str, &[u8]); 3] = [
        ("traces/phone.pb", &phone),
        ("traces/server.pb", &server),
        ("traces/perfetto_manifest.json", &m),
    ];
    for (name, bytes) in [("bundle.tar", tar(&members)), ("bundle.zip", zip(&members))] {
        let archive = write(d, name, &bytes);
        let r = merge_ok(&[&archive], &[]);
        let a = src(&archive);
        assert_eq!(
            ts_in(&r, &format!("{a}:traces/phone.pb")),
            vec![1_100_000_000],
            "{name}"
        );
        assert_eq!(
            ts_in(&r, &format!("{a}:traces/server.pb")),
            vec![1_100_000_500],
            "{name}"
        );
    }
    // A manifest naming the full member path matches too.
    let exact = SYNC_TO_PHONE
        .replace("OFFSET", "500")
        .replace("\"phone.pb\"", "\"traces/phone.pb\"")
        .replace("\"server.pb\"", "\"traces/server.pb\"");
    let m2 = format!("{{\"perfetto_manifest\": {{\"version\": 1, {exact}}}}}");
    let members: [(&str, &[u8]); 3] = [
        ("traces/phone.pb", &phone),
        ("traces/server.pb", &server),
        ("perfetto_manifest.json", m2.as_bytes()),
    ];
    let archive = write(d, "exact.tar", &tar(&members));
    let r = merge_ok(&[&archive], &[]);
    let a = src(&archive);
    assert_eq!(
        ts_in(&r, &format!("{a}:traces/server.pb")),
        vec![1_100_000_500]
    );
}

fn clocks_json(inputs: &[&Path], extra: &[&str]) -> Vec<Record> {
    let mut args = vec!["clocks", "--json"];
    args.extend_from_slice(extra);
    let paths: Vec<String> = inputs.iter().map(|p| src(p)).collect();
    args.extend(paths.iter().map(String::as_str));
    let o = tracesync(&args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `tracesync clocks --json` lists the manifest's edge with origin
/// "manifest", both ends, with their values and trace times.
#[test]
fn clocks_json_lists_manifest_edge() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (phone, server) = phone_server(d);
    let m = manifest(d, &SYNC_TO_PHONE.replace("OFFSET", "500"));
    let rows = clocks_json(&[&phone, &server], &["--manifest", m.to_str().unwrap()]);
    let manifest_rows: Vec<&Record> = rows.iter().filter(|r| r["origin"] == "manifest").collect();
    assert_eq!(manifest_rows.len(), 2, "{rows:#?}");
    let end = |source: &Path| {
        manifest_rows
            .iter()
            .find(|r| r["source"] == src(source).as_str())
            .unwrap_or_else(|| panic!("no manifest row for {source:?}: {manifest_rows:#?}"))
    };
    let (s, p) = (end(&server), end(&phone));
    assert_eq!(s["snapshot_id"], p["snapshot_id"]);
    assert_eq!(
        (s["clock_id"].clone(), p["clock_id"].clone()),
        (BT.into(), BT.into())
    );
    assert_eq!(
        (s["clock_value"].clone(), p["clock_value"].clone()),
        (0.into(), 500.into())
    );
    assert_eq!(s["ts"], p["ts"]);
    assert_eq!(p["ts"], 500);
    // Without the manifest there is no such edge.
    let rows = clocks_json(&[&phone, &server], &[]);
    assert!(rows.iter().all(|r| r["origin"] != "manifest"), "{rows:#?}");
}

/// The REALTIME rendezvous of two machines is listed with origin "rendezvous".
#[test]
fn clocks_json_lists_rendezvous_edge() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = trace(
        d,
        "a.pb",
        &[
            snap(&[(BT, 1_000_000_000), (RT, 1_700_000_001_000_000_000)]),
            slice(2, 1_100_000_000),
        ],
    );
    let b = trace(
        d,
        "b.pb",
        &[
            snap(&[(BT, 1_000_000_000), (RT, 1_700_000_002_000_000_000)]),
            slice(2, 1_100_000_000),
        ],
    );
    let rows = clocks_json(&[&a, &b], &["--machine-per-file"]);
    let rdv: Vec<&Record> = rows
        .iter()
        .filter(|r| r["origin"] == "rendezvous")
        .collect();
    assert_eq!(rdv.len(), 2, "{rows:#?}");
    assert!(rdv.iter().all(|r| r["clock_id"] == RT), "{rdv:#?}");
    assert_ne!(rdv[0]["machine"], rdv[1]["machine"]);
    // The same placement in the merge: b one second later.
    let r = merge_ok(&[&a, &b], &["--machine-per-file"]);
    assert_eq!(ts_in(&r, &src(&a)), vec![1_100_000_000]);
    assert_eq!(ts_in(&r, &src(&b)), vec![2_100_000_000]);
    // A manifest naming the machines gives the same rendezvous.
    let m = manifest(
        d,
        r#""files": [{"path": "a.pb", "machine": {"name": "a"}}, {"path": "b.pb", "machine": {"name": "b"}}]"#,
    );
    let rows = clocks_json(&[&a, &b], &["--manifest", m.to_str().unwrap()]);
    let machines: Vec<&str> = rows
        .iter()
        .filter(|r| r["origin"] == "rendezvous")
        .map(|r| r["machine"].as_str().unwrap())
        .collect();
    assert_eq!(machines.len(), 2, "{rows:#?}");
    assert!(
        machines.contains(&"a") && machines.contains(&"b"),
        "{machines:?}"
    );
}

/// TV-22 with each file on its own named machine: the manifest edge is the
/// only relation between the machines.
#[test]
fn tv22_across_named_machines() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (phone, server) = phone_server(d);
    let body = SYNC_TO_PHONE
        .replace("OFFSET", "500")
        .replace(
            r#"{"path": "phone.pb"}"#,
            r#"{"path": "phone.pb", "machine": {"name": "phone"}}"#,
        )
        .replace(
            r#"{"path": "server.pb","#,
            r#"{"path": "server.pb", "machine": {"name": "server"},"#,
        );
    let m = manifest(d, &body);
    let r = merge_ok(&[&phone, &server], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(ts_in(&r, &src(&phone)), vec![1_100_000_000]);
    assert_eq!(ts_in(&r, &src(&server)), vec![1_100_000_500]);
    let machine_of = |f: &Path| {
        r.iter()
            .find(|x| x["src"] == src(f).as_str() && x["kind"] == "track_event")
            .map(|x| (x["machine"].clone(), x["raw_id"].clone()))
            .unwrap()
    };
    assert_eq!(machine_of(&phone), ("phone".into(), NAMED.into()));
    assert_eq!(machine_of(&server), ("server".into(), (NAMED + 1).into()));
}

/// Equal names share one machine across files: relay.pb's id 7 and vm.pb
/// (a file recorded on the vm) are one machine "vm", placed by the relay's
/// remote sync.
#[test]
fn equal_names_share_a_machine_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let relay = relay_file(d);
    let vm = trace(
        d,
        "vm.pb",
        &[snap(&[(BT, 50_000_000_000)]), slice(2, 50_200_000_000)],
    );
    let m = manifest(
        d,
        r#""files": [{"path": "relay.pb", "machines": [{"id": 0, "name": "host"}, {"id": 7, "name": "vm"}]},
                     {"path": "vm.pb", "machine": {"name": "vm"}}]"#,
    );
    let r = merge_ok(&[&relay, &vm], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(ts_in(&r, &src(&vm)), vec![2_200_000_000]);
    let vm_rec = r
        .iter()
        .find(|x| x["src"] == src(&vm).as_str() && x["kind"] == "track_event")
        .unwrap();
    let relay_vm = r
        .iter()
        .find(|x| x["clock_ts"] == 50_100_000_000u64)
        .unwrap();
    assert_eq!(vm_rec["machine"], "vm");
    assert_eq!(vm_rec["raw_id"], relay_vm["raw_id"]);
}

/// `clocks.machine` relates one machine of a multi-machine file.
#[test]
fn clocks_override_on_a_machine_of_a_multi_machine_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let phone = bt_file(d, "phone.pb", 1_100_000_000);
    // TV-24 shape: machine 7 without a remote sync.
    let relay = trace(
        d,
        "relay.pb",
        &[
            snap(&[(BT, 1_000_000_000)]),
            slice(2, 1_100_000_000),
            build::on_machine(
                build::on_sequence(build::clock_snapshot(&[(BT, 50_000_000_000)]), 3),
                7,
            ),
            build::on_machine(slice(3, 50_100_000_000), 7),
        ],
    );
    let m = manifest(
        d,
        r#""files": [{"path": "phone.pb"},
                     {"path": "relay.pb", "machines": [{"id": 0, "name": "host"}, {"id": 7, "name": "vm"}],
                      "clocks": {"clock": "BOOTTIME", "machine": "vm", "offset_ns": -49000000000,
                                 "sync_to": {"file": "phone.pb", "clock": "BOOTTIME"}}}]"#,
    );
    let r = merge_ok(&[&phone, &relay], &["--manifest", m.to_str().unwrap()]);
    let vm = r
        .iter()
        .find(|x| x["clock_ts"] == 50_100_000_000u64)
        .unwrap();
    assert_eq!(vm["machine"], "vm");
    assert_eq!(vm["ts"], 1_100_000_000u64);
}

/// A clockless proto file (no snapshots, no clock ids): its timestamps are
/// on its private timeline, which the manifest pins (TV-22
/// clockless_manual_cross_machine and sync_to_clock_omitted, with proto
/// files in place of JSON).
fn clockless(d: &Path, name: &str, ts: u64) -> PathBuf {
    let mut p = build::on_sequence(build::packet(), 2);
    p.timestamp = Some(ts);
    p.data =
        Some(tracesync_protocol::perfetto::trace_packet::Data::TrackDescriptor(Default::default()));
    trace(d, name, &[p])
}

#[test]
fn tv22_clockless_files_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let phone = bt_file(d, "phone.pb", 1_100_000_000);
    let app = clockless(d, "app.pb", 2_000_000);
    let m = manifest(
        d,
        r#""files": [{"path": "phone.pb"},
                     {"path": "app.pb", "clocks": {"offset_ns": 500, "sync_to": {"file": "phone.pb", "clock": "BOOTTIME"}}}]"#,
    );
    let r = merge_ok(&[&phone, &app], &["--manifest", m.to_str().unwrap()]);
    assert_eq!(ts_in(&r, &src(&phone)), vec![1_100_000_000]);
    let app_ts: Vec<i64> = r
        .iter()
        .filter(|x| x["src"] == src(&app).as_str() && x["kind"] == "track_descriptor")
        .map(|x| x["ts"].as_i64().unwrap())
        .collect();
    assert_eq!(app_ts, vec![2_000_500]);

    // sync_to without a clock: b's timeline relative to a's private one.
    let a = clockless(d, "a.pb", 2_000_000);
    let b = clockless(d, "b.pb", 2_000_000);
    let m = manifest(
        d,
        r#""files": [{"path": "a.pb"}, {"path": "b.pb", "clocks": {"offset_ns": 500, "sync_to": {"file": "a.pb"}}}]"#,
    );
    let r = merge_ok(&[&a, &b], &["--manifest", m.to_str().unwrap()]);
    let ts = |f: &Path| -> Vec<i64> {
        r.iter()
            .filter(|x| x["src"] == src(f).as_str() && x["kind"] == "track_descriptor")
            .map(|x| x["ts"].as_i64().unwrap())
            .collect()
    };
    assert_eq!((ts(&a), ts(&b)), (vec![2_000_000], vec![2_000_500]));
}
