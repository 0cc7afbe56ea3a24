//! trace_manifest/tests.py, the `ExpectedError` tests: each must fail the
//! merge with exit code 65 and one line carrying Perfetto's message. Where
//! Perfetto's input is a JSON trace (not a format tracesync merges), the
//! error does not depend on it and a proto trace stands in.

use serde_json::{Value, json};
use tracesync_tests::cases::{Case, Layout};

use super::common::*;

fn with_app(origin: &'static str, manifest: Value) -> Case {
    Case::new(origin)
        .manifest(manifest)
        .file("app.pb", &solo("json_slice"))
}

#[test]
fn error_missing_version() {
    with_app("test_error_missing_version", json!({}))
        .merge()
        .fails_with("perfetto_manifest: missing required field: version");
}

#[test]
fn error_unsupported_version() {
    with_app("test_error_unsupported_version", json!({"version": 99}))
        .merge()
        .fails_with("perfetto_manifest: version: unsupported version: 99");
}

#[test]
fn error_version_not_integer() {
    with_app("test_error_version_not_integer", json!({"version": 1.5}))
        .merge()
        .fails_with("version must be an integer");
}

#[test]
fn error_unknown_clock_name() {
    with_app(
        "test_error_unknown_clock_name",
        json!({"version": 1, "trace_time": {"clock": "BOOTIME"}}),
    )
    .merge()
    .fails_with("unknown clock name: BOOTIME");
}

/// Issue 15, behaviour 7: a gzipped manifest sorts after the traces.
#[test]
fn error_gzipped_config_after_proto() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(
        json!({"perfetto_manifest": {"version": 1}})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    Case::new("test_error_gzipped_config_after_proto")
        .bytes("meta.json.gz", gz.finish().unwrap())
        .file("spine.pb", &spine())
        .layout(Layout::Zip)
        .merge()
        .fails_with("perfetto_manifest file must be the first trace file");
}

fn manifest_bytes(v: Value) -> Vec<u8> {
    json!({ "perfetto_manifest": v }).to_string().into_bytes()
}

#[test]
fn error_multiple_configs() {
    Case::new("test_error_multiple_configs")
        .bytes("meta1.json", manifest_bytes(json!({"version": 1})))
        .bytes("meta2.json", manifest_bytes(json!({"version": 1})))
        .file("app.pb", &solo("json_slice"))
        .layout(Layout::Zip)
        .merge()
        .fails_with("multiple perfetto_manifest files");
}

/// Issue 15, behaviour 7: an override naming a manifest is diagnosed as
/// such, before the second manifest itself.
#[test]
fn error_clock_override_on_metadata_file() {
    Case::new("test_error_clock_override_on_metadata_file")
        .bytes(
            "meta1.json",
            manifest_bytes(json!({"version": 1, "files": [
                {"path": "meta2.json", "clocks": {"sync_to": {"file": "app.pb", "clock": "BOOTTIME"}}},
                {"path": "app.pb"}]})),
        )
        .bytes("meta2.json", manifest_bytes(json!({"version": 1})))
        .file("app.pb", &solo("json_slice"))
        .layout(Layout::Zip)
        .merge()
        .fails_with(
            "overrides are not supported for trace files which are themselves archives or perfetto_manifest files",
        );
}

#[test]
fn error_clock_sync_to_a_manifest() {
    // The same rule for the reference of a `clocks` block.
    with_app(
        "test_error_clock_override_on_metadata_file (sync_to)",
        json!({"version": 1, "files": [{"path": "app.pb", "clocks": {"clock": "BOOTTIME",
            "sync_to": {"file": "perfetto_manifest.json", "clock": "BOOTTIME"}}},
            {"path": "perfetto_manifest.json"}]}),
    )
    .merge()
    .fails_with(
        "overrides are not supported for trace files which are themselves archives or perfetto_manifest files",
    );
}

#[test]
fn error_proto_multi_clock() {
    Case::new("test_error_proto_multi_clock")
        .manifest(json!({"version": 1, "files": [
            {"path": "spine.pb", "clocks": {"sync_to": {"file": "app.pb", "clock": "BOOTTIME"}}},
            {"path": "app.pb"}]}))
        .file("spine.pb", &spine())
        .file("app.pb", &solo("json_slice"))
        .merge()
        .fails_with("clock overrides require the trace to use a single clock");
}

#[test]
fn error_proto_multi_machine_clock_override() {
    let mut multi = proto_slice("proto_slice");
    multi.push(m7_packet());
    Case::new("test_error_proto_multi_machine_clock_override")
        .manifest(json!({"version": 1, "files": [
            {"path": "spine.pb", "clocks": {"sync_to": {"file": "app.pb", "clock": "BOOTTIME"}}},
            {"path": "app.pb"}]}))
        .file("spine.pb", &multi)
        .file("app.pb", &solo("json_slice"))
        .merge()
        .fails_with("a `clocks` override applies only to a single-machine file");
}

#[test]
fn error_machines_id_out_of_range() {
    with_app(
        "test_error_machines_id_out_of_range",
        json!({"version": 1, "files": [{"path": "app.pb",
            "machines": [{"id": 4_294_967_296_u64, "name": "vm"}]}]}),
    )
    .merge()
    .fails_with("machines: id must be in [0, 4294967295]");
}

#[test]
fn error_proto_multi_machine_machine_override() {
    let mut multi = proto_slice("proto_slice");
    multi.push(m7_packet());
    Case::new("test_error_proto_multi_machine_machine_override")
        .manifest(json!({"version": 1, "files": [{"path": "spine.pb", "machine": {"name": "vm"}}]}))
        .file("spine.pb", &multi)
        .merge()
        .fails_with("Replace `machine` with a `machines` block");
}

/// Perfetto's check runs at the first packet of another machine
/// (proto_trace_reader.cc `CheckManifestSingleMachine`, called when a
/// packet carries a nonzero machine_id and when a RemoteClockSync is
/// parsed): a file whose packets all carry one embedded id is refused too.
#[test]
fn error_machine_override_on_one_embedded_machine() {
    Case::new("CheckManifestSingleMachine: every packet on machine 7")
        .manifest(json!({"version": 1, "files": [{"path": "vm.pb", "machine": {"name": "vm"}}]}))
        .file("vm.pb", &m7_slice("vm_slice"))
        .merge()
        .fails_with("'vm.pb' is a multi-machine trace (embedded machine ids 7). Replace `machine` with a `machines` block");
}

#[test]
fn error_machine_override_on_a_remote_clock_sync() {
    let mut relay_host = spine();
    relay_host.push(tracesync_tests::build::remote_clock_sync(
        9,
        &[(50, 2), (60, 12)],
    ));
    Case::new("CheckManifestSingleMachine: a RemoteClockSync without machine_id")
        .manifest(
            json!({"version": 1, "files": [{"path": "host.pb", "machine": {"name": "host"}}]}),
        )
        .file("host.pb", &relay_host)
        .merge()
        .fails_with("(RemoteClockSync packets). Replace `machine` with a `machines` block");
}

#[test]
fn error_pinned_clocks_on_one_embedded_machine() {
    let mut vm: Vec<_> = solo("vm_slice");
    for p in &mut vm {
        p.machine_id = Some(7);
    }
    Case::new("CheckManifestSingleMachine: a pinned clock on machine 7's packets")
        .manifest(json!({"version": 1, "files": [
            {"path": "vm.pb", "clocks": {"sync_to": {"file": "app.pb", "clock": "BOOTTIME"}}},
            {"path": "app.pb"}]}))
        .file("vm.pb", &vm)
        .file("app.pb", &solo("json_slice"))
        .merge()
        .fails_with(
            "applies only to a single-machine file when it names no source `clock`, but 'vm.pb' has embedded machine ids 7",
        );
}

#[test]
fn error_machine_empty() {
    with_app(
        "test_error_machine_empty",
        json!({"version": 1, "files": [{"path": "app.pb", "machine": {"name": ""}}]}),
    )
    .merge()
    .fails_with("machine: name must be non-empty");
}

#[test]
fn error_machine_and_machines_exclusive() {
    with_app(
        "test_error_machine_and_machines_exclusive",
        json!({"version": 1, "files": [{"path": "app.pb", "machine": {"name": "a"},
            "machines": [{"id": 0, "name": "b"}]}]}),
    )
    .merge()
    .fails_with("machine and machines are mutually exclusive");
}

#[test]
fn error_sync_to_file_unknown() {
    Case::new("test_error_sync_to_file_unknown")
        .manifest(
            json!({"version": 1, "files": [{"path": "a.pb", "machine": {"name": "phone"},
            "clocks": {"clock": "BOOTTIME", "offset_ns": 1,
                "sync_to": {"file": "ghost.pb", "clock": "BOOTTIME"}}}]}),
        )
        .file(
            "a.pb",
            &proto_boot_snap("a_slice", 1, 111, S, 1_100_000_000),
        )
        .merge()
        .fails_with("clocks: sync_to.file names unknown file 'ghost.pb'");
}

#[test]
fn error_trace_time_file_unknown() {
    with_app(
        "test_error_trace_time_file_unknown",
        json!({"version": 1, "trace_time": {"file": "ghost.pb", "clock": "BOOTTIME"},
            "files": [{"path": "app.pb"}]}),
    )
    .merge()
    .fails_with("trace_time: file names unknown file 'ghost.pb'");
}

#[test]
fn error_machines_undeclared_id() {
    let mut multi = spine();
    multi.extend(m7_slice("vm_slice"));
    Case::new("test_error_machines_undeclared_id")
        .manifest(json!({"version": 1, "files": [{"path": "multi.pb",
            "machines": [{"id": 0, "name": "phone"}]}]}))
        .file("multi.pb", &multi)
        .merge()
        .fails_with("machines: trace has a packet from undeclared machine id 7");
}

fn multi_and_server(server_clocks: Value, origin: &'static str) -> Case {
    let mut multi = spine();
    multi.extend(m7_slice("vm_slice"));
    Case::new(origin)
        .manifest(json!({"version": 1, "files": [
            {"path": "multi.pb", "machines": [{"id": 0, "name": "phone"}, {"id": 7, "name": "vm"}]},
            {"path": "server.pb", "machine": {"name": "server"}, "clocks": server_clocks}]}))
        .file("multi.pb", &multi)
        .file(
            "server.pb",
            &proto_boot_snap("server_slice", 3, 333, S, 1_100_000_000),
        )
}

#[test]
fn error_sync_to_file_multi_machine_needs_machine() {
    multi_and_server(
        json!({"clock": "BOOTTIME", "offset_ns": 500,
            "sync_to": {"file": "multi.pb", "clock": "BOOTTIME"}}),
        "test_error_sync_to_file_multi_machine_needs_machine",
    )
    .merge()
    .fails_with(
        "clocks: sync_to.file 'multi.pb' is a multi-machine trace; also name the machine with clocks: sync_to.machine",
    );
}

#[test]
fn error_sync_to_without_file() {
    Case::new("test_error_sync_to_without_file")
        .manifest(
            json!({"version": 1, "files": [{"path": "a.pb", "machine": {"name": "phone"},
            "clocks": {"clock": "BOOTTIME", "offset_ns": 1,
                "sync_to": {"machine": "phone", "clock": "BOOTTIME"}}}]}),
        )
        .file(
            "a.pb",
            &proto_boot_snap("a_slice", 1, 111, S, 1_100_000_000),
        )
        .merge()
        .fails_with("sync_to.file is required");
}

#[test]
fn error_sync_to_machine_not_in_file() {
    multi_and_server(
        json!({"clock": "BOOTTIME", "offset_ns": 500,
            "sync_to": {"file": "multi.pb", "machine": "ghost", "clock": "BOOTTIME"}}),
        "test_error_sync_to_machine_not_in_file",
    )
    .merge()
    .fails_with("clocks: sync_to.machine 'ghost' is not a machine declared by file 'multi.pb'");
}

#[test]
fn error_multi_machine_source_needs_machine() {
    let mut multi = spine();
    multi.extend(m7_slice("vm_slice"));
    Case::new("test_error_multi_machine_source_needs_machine")
        .manifest(json!({"version": 1, "files": [
            {"path": "multi.pb", "machines": [{"id": 0, "name": "phone"}, {"id": 7, "name": "vm"}],
             "clocks": {"clock": "BOOTTIME", "sync_to": {"file": "server.pb", "clock": "BOOTTIME"}}},
            {"path": "server.pb", "machine": {"name": "server"}}]}))
        .file("multi.pb", &multi)
        .file("server.pb", &proto_boot_snap("server_slice", 3, 333, 50 * S, 50_100_000_000))
        .merge()
        .fails_with(
            "clocks: file 'multi.pb' is a multi-machine trace; name which machine the clock is on with clocks: machine",
        );
}

#[test]
fn error_source_machine_unknown() {
    Case::new("test_error_source_machine_unknown")
        .manifest(json!({"version": 1, "files": [
            {"path": "a.pb", "machine": {"name": "phone"}, "clocks": {"machine": "ghost",
                "clock": "BOOTTIME", "sync_to": {"file": "b.pb", "clock": "BOOTTIME"}}},
            {"path": "b.pb", "machine": {"name": "srv"}}]}))
        .file(
            "a.pb",
            &proto_boot_snap("a_slice", 1, 111, S, 1_100_000_000),
        )
        .file(
            "b.pb",
            &proto_boot_snap("b_slice", 2, 222, S, 1_100_000_000),
        )
        .merge()
        .fails_with("clocks: machine 'ghost' is not a machine declared by file 'a.pb'");
}

#[test]
fn error_attributes_bad_value() {
    with_app(
        "test_error_attributes_bad_value",
        json!({"version": 1, "attributes": {"flags": ["a", "b"]}}),
    )
    .merge()
    .fails_with("perfetto_manifest: attributes: 'flags' must be a string or an integer");
}

/// `test_attributes`: Perfetto lists them as `manifest_attribute.*`
/// metadata when it reads the manifest; a merged protobuf trace cannot
/// carry them, so the merge says so on one line and goes on.
#[test]
fn attributes_are_accepted_and_said_to_stay_behind() {
    let m = with_app(
        "test_attributes",
        json!({"version": 1, "attributes": {"benchmark": "startup", "run_id": 42}}),
    )
    .merge()
    .ok();
    let notices: Vec<&str> = m
        .stderr
        .lines()
        .filter(|l| l.contains("attributes (benchmark, run_id) are not carried"))
        .collect();
    assert_eq!(notices.len(), 1, "{}", m.stderr);
    assert_eq!(m.slices.len(), 1, "the trace is merged: {:?}", m.slices);
}

/// `tracesync clocks` writes no trace: it says nothing of the attributes.
#[test]
fn attributes_notice_is_the_merges_alone() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("app.pb");
    std::fs::write(
        &trace,
        tracesync_tests::build::encode_trace(&solo("json_slice")),
    )
    .unwrap();
    let manifest = dir.path().join("perfetto_manifest.json");
    let text = json!({"perfetto_manifest": {"version": 1, "attributes": {"run_id": 42}}});
    std::fs::write(&manifest, text.to_string()).unwrap();
    let o = tracesync_tests::run::tracesync(&[
        "clocks",
        "--manifest",
        manifest.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
