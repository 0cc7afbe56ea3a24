//! Tests of the manifest: parsing, its errors, and the input checks.

use super::*;
use std::collections::BTreeMap;
use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC, REALTIME};

fn wrap(body: &str) -> String {
    format!(r#"{{"perfetto_manifest": {{"version": 1, {body}}}}}"#)
}

fn parse_err(json: &str) -> String {
    match parse_manifest(json) {
        Ok(m) => panic!("expected an error, got {m:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn phone_watch_app_log() {
    let m = parse_manifest(
        r#"{
          "perfetto_manifest": {
            "version": 1,
            "trace_time": {"clock": "BOOTTIME"},
            "files": [
              {"path": "phone.pftrace", "machine": {"name": "phone"}},
              {"path": "watch.pftrace", "machine": {"name": "watch"}},
              {
                "path": "app_log.json",
                "clocks": {
                  "sync_to": {"file": "phone.pftrace", "clock": "BOOTTIME"},
                  "offset_ns": 250000000
                }
              }
            ],
            "some_future_field": {"ignored": true}
          }
        }"#,
    )
    .unwrap();
    assert_eq!(
        m.trace_time,
        Some(TraceTime {
            clock: BOOTTIME,
            file: None,
            machine: None
        })
    );
    assert_eq!(m.files.len(), 3);
    assert_eq!(m.files[0].machine.as_deref(), Some("phone"));
    assert_eq!(m.files[1].machine.as_deref(), Some("watch"));
    assert_eq!(
        m.files[2].clocks,
        Some(ClockOverride {
            clock: None,
            machine: None,
            sync_to: SyncTo {
                file: "phone.pftrace".into(),
                machine: None,
                clock: Some(BOOTTIME)
            },
            offset_ns: 250_000_000,
        })
    );
    assert!(m.attributes.is_empty());
}

#[test]
fn machines_rename() {
    let m = parse_manifest(&wrap(
        r#""files": [{"path": "relay.pftrace", "machines": [
            {"id": 0, "name": "host"}, {"id": 1234, "name": "vm"}, {"id": 4294967295, "name": "max"}]}]"#,
    ))
    .unwrap();
    assert_eq!(
        m.files[0].machines,
        vec![
            (0, "host".to_string()),
            (1234, "vm".to_string()),
            (u32::MAX, "max".to_string())
        ]
    );
    assert_eq!(m.files[0].machine, None);
}

#[test]
fn relate_with_offset_and_trace_time_file() {
    let m = parse_manifest(&wrap(
        r#""trace_time": {"clock": "REALTIME", "file": "device1.pftrace"},
           "files": [
             {"path": "device1.pftrace"},
             {"path": "device2.pftrace", "clocks": {
                "clock": "BOOTTIME", "machine": "d2",
                "sync_to": {"file": "device1.pftrace", "clock": "MONOTONIC", "machine": "d1"},
                "offset_ns": -5}}],
           "attributes": {"benchmark": "startup", "run_id": 42, "run_id": 43}"#,
    ))
    .unwrap();
    assert_eq!(
        m.trace_time,
        Some(TraceTime {
            clock: REALTIME,
            file: Some("device1.pftrace".into()),
            machine: None
        })
    );
    let c = m.files[1].clocks.as_ref().unwrap();
    assert_eq!(c.clock, Some(BOOTTIME));
    assert_eq!(c.machine.as_deref(), Some("d2"));
    assert_eq!(c.sync_to.clock, Some(MONOTONIC));
    assert_eq!(c.sync_to.machine.as_deref(), Some("d1"));
    assert_eq!(c.offset_ns, -5);
    assert_eq!(
        m.attributes,
        vec![
            (
                "benchmark".to_string(),
                AttributeValue::Str("startup".into())
            ),
            ("run_id".to_string(), AttributeValue::Int(43)),
        ]
    );
}

#[test]
fn minimal_and_offset_bounds() {
    let m = parse_manifest(r#"{"perfetto_manifest": {"version": 1}}"#).unwrap();
    assert_eq!(m, Manifest::default());
    for (text, want) in [
        ("9223372036854775807", i64::MAX),
        ("-9223372036854775807", -i64::MAX),
        ("0", 0),
    ] {
        let m = parse_manifest(&wrap(&format!(
            r#""files": [{{"path": "a"}}, {{"path": "b", "clocks": {{"sync_to": {{"file": "a"}}, "offset_ns": {text}}}}}]"#
        )))
        .unwrap();
        assert_eq!(m.files[1].clocks.as_ref().unwrap().offset_ns, want);
    }
}

/// Every parse-time error message, exactly.
#[test]
fn parse_errors() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"perfetto_manifest": {"version": 1,}}"#,
            "perfetto_manifest: invalid JSON: trailing comma at line 1 column 37; fix the syntax",
        ),
        (
            r#"{"files": []}"#,
            "perfetto_manifest: not a manifest: expected a JSON object with a top-level \"perfetto_manifest\" key",
        ),
        (
            r#"{"perfetto_manifest": 1}"#,
            "perfetto_manifest: perfetto_manifest: must be a JSON object",
        ),
        (
            r#"{"perfetto_manifest": {}}"#,
            "perfetto_manifest: missing required field: version",
        ),
        (
            r#"{"perfetto_manifest": {"version": 2}}"#,
            "perfetto_manifest: version: unsupported version: 2. Only version 1 is supported",
        ),
        (
            r#"{"perfetto_manifest": {"version": 99999999999999999999999}}"#,
            "perfetto_manifest: version: unsupported version: 1e+23. Only version 1 is supported",
        ),
        (
            r#"{"perfetto_manifest": {"version": "1"}}"#,
            "perfetto_manifest: version: version must be an integer; use 1",
        ),
        (
            r#"{"perfetto_manifest": {"version": 1.0}}"#,
            "perfetto_manifest: version: version must be an integer; use 1",
        ),
        (
            &wrap(r#""files": {}"#),
            "perfetto_manifest: files: must be an array of file entries",
        ),
        (
            &wrap(r#""files": ["a.pb"]"#),
            "perfetto_manifest: files[0]: must be a JSON object",
        ),
        (
            &wrap(r#""files": [{"machine": {"name": "x"}}]"#),
            "perfetto_manifest: files[0]: missing required field: path",
        ),
        (
            &wrap(r#""files": [{"path": ""}]"#),
            "perfetto_manifest: files[0].path: path must be a non-empty string",
        ),
        (
            &wrap(r#""files": [{"path": "a"}, {"path": "a"}]"#),
            "perfetto_manifest: files[1].path: 'a' is already listed at files[0]; merge the two entries",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "machine": {"name": "x"}, "machines": [{"id": 1, "name": "y"}]}]"#,
            ),
            "perfetto_manifest: files[0]: machine and machines are mutually exclusive; keep `machine` to put the whole file on one machine, or `machines` to name its embedded machine ids",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machine": "phone"}]"#),
            "perfetto_manifest: files[0].machine: must be an object like {\"name\": \"phone\"}",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machine": {}}]"#),
            "perfetto_manifest: files[0].machine: missing required field: name",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machine": {"name": ""}}]"#),
            "perfetto_manifest: files[0].machine.name: machine: name must be non-empty",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machines": {"1": "x"}}]"#),
            "perfetto_manifest: files[0].machines: must be an array like [{\"id\": 0, \"name\": \"host\"}]",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machines": [{"name": "x"}]}]"#),
            "perfetto_manifest: files[0].machines[0]: missing required field: id",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machines": [{"id": 4294967296, "name": "x"}]}]"#),
            "perfetto_manifest: files[0].machines[0].id: machines: id must be in [0, 4294967295]",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machines": [{"id": -1, "name": "x"}]}]"#),
            "perfetto_manifest: files[0].machines[0].id: machines: id must be in [0, 4294967295]",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machines": [{"id": 1.5, "name": "x"}]}]"#),
            "perfetto_manifest: files[0].machines[0].id: machines: id must be in [0, 4294967295]",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machines": [{"id": 1}]}]"#),
            "perfetto_manifest: files[0].machines[0]: missing required field: name",
        ),
        (
            &wrap(r#""files": [{"path": "a", "machines": [{"id": 1, "name": ""}]}]"#),
            "perfetto_manifest: files[0].machines[0].name: machines: name must be non-empty",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "machines": [{"id": 1, "name": "x"}, {"id": 1, "name": "y"}]}]"#,
            ),
            "perfetto_manifest: files[0].machines[1].id: machines: id 1 is declared twice; keep one entry",
        ),
        (
            &wrap(r#""files": [{"path": "a", "clocks": {"clock": "BOOTTIME"}}]"#),
            "perfetto_manifest: files[0].clocks: clocks: a sync_to block is required",
        ),
        (
            &wrap(r#""files": [{"path": "a", "clocks": {"sync_to": {"clock": "BOOTTIME"}}}]"#),
            "perfetto_manifest: files[0].clocks.sync_to: clocks: sync_to.file is required",
        ),
        (
            &wrap(r#""files": [{"path": "a", "clocks": {"sync_to": {"machine": "phone"}}}]"#),
            "perfetto_manifest: files[0].clocks.sync_to.machine: clocks: sync_to.file is required: a machine name alone is ambiguous; name its file with sync_to.file",
        ),
        (
            &wrap(r#""files": [{"path": "a", "clocks": {"sync_to": {"file": ""}}}]"#),
            "perfetto_manifest: files[0].clocks.sync_to.file: clocks: sync_to.file must be a non-empty string",
        ),
        (
            &wrap(
                r#""files": [{"path": "a"}, {"path": "b", "clocks": {"sync_to": {"file": "c"}}}]"#,
            ),
            "perfetto_manifest: files[1].clocks.sync_to.file: clocks: sync_to.file names unknown file 'c'. It must match the path of an entry in the files array",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "clocks": {"clock": "boottime", "sync_to": {"file": "a"}}}]"#,
            ),
            "perfetto_manifest: files[0].clocks.clock: unknown clock name: boottime. Use one of REALTIME, REALTIME_COARSE, MONOTONIC, MONOTONIC_COARSE, MONOTONIC_RAW, BOOTTIME",
        ),
        (
            &wrap(r#""files": [{"path": "a", "clocks": {"sync_to": {"file": "a", "clock": 7}}}]"#),
            "perfetto_manifest: files[0].clocks.sync_to.clock: a clock name must be a string, one of REALTIME, REALTIME_COARSE, MONOTONIC, MONOTONIC_COARSE, MONOTONIC_RAW, BOOTTIME",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "clocks": {"machine": "", "sync_to": {"file": "a"}}}]"#,
            ),
            "perfetto_manifest: files[0].clocks.machine: machine must be a non-empty string",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "clocks": {"sync_to": {"file": "a"}, "offset_ns": "5"}}]"#,
            ),
            "perfetto_manifest: files[0].clocks.offset_ns: offset_ns must be an integer (nanoseconds)",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "clocks": {"sync_to": {"file": "a"}, "offset_ns": 2.5}}]"#,
            ),
            "perfetto_manifest: files[0].clocks.offset_ns: offset_ns must be an integer (nanoseconds)",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "clocks": {"sync_to": {"file": "a"}, "offset_ns": -9223372036854775808}}]"#,
            ),
            "perfetto_manifest: files[0].clocks.offset_ns: offset_ns is out of range: it must be within ±9223372036854775807",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "clocks": {"sync_to": {"file": "a"}, "offset_ns": 9223372036854775808}}]"#,
            ),
            "perfetto_manifest: files[0].clocks.offset_ns: offset_ns is out of range: it must be within ±9223372036854775807",
        ),
        (
            &wrap(
                r#""files": [{"path": "a", "clocks": {"sync_to": {"file": "a"}, "offset_ns": 100000000000000000000}}]"#,
            ),
            "perfetto_manifest: files[0].clocks.offset_ns: offset_ns is out of range: it must be within ±9223372036854775807",
        ),
        (
            &wrap(r#""trace_time": "BOOTTIME""#),
            "perfetto_manifest: trace_time: must be a JSON object",
        ),
        (
            &wrap(r#""trace_time": {}"#),
            "perfetto_manifest: trace_time: missing required field: clock",
        ),
        (
            &wrap(r#""trace_time": {"clock": "UTC"}"#),
            "perfetto_manifest: trace_time.clock: unknown clock name: UTC. Use one of REALTIME, REALTIME_COARSE, MONOTONIC, MONOTONIC_COARSE, MONOTONIC_RAW, BOOTTIME",
        ),
        (
            &wrap(r#""trace_time": {"clock": "BOOTTIME", "machine": "vm"}"#),
            "perfetto_manifest: trace_time.machine: a machine name alone is ambiguous: also name its file with trace_time.file",
        ),
        (
            &wrap(r#""trace_time": {"clock": "BOOTTIME", "file": "x"}"#),
            "perfetto_manifest: trace_time.file: trace_time: file names unknown file 'x'. It must match the path of an entry in the files array",
        ),
        (
            &wrap(r#""attributes": ["a"]"#),
            "perfetto_manifest: attributes: attributes must be an object of string or integer values",
        ),
        (
            &wrap(r#""attributes": {"a": 1.5}"#),
            "perfetto_manifest: attributes: 'a' must be a string or an integer",
        ),
        (
            &wrap(r#""attributes": {"a": true}"#),
            "perfetto_manifest: attributes: 'a' must be a string or an integer",
        ),
        (
            &wrap(r#""attributes": {"a": 18446744073709551615}"#),
            "perfetto_manifest: attributes: 'a' is out of the 64-bit integer range",
        ),
        (
            &wrap(r#""attributes": {"": "x"}"#),
            "perfetto_manifest: attributes: keys must be non-empty",
        ),
    ];
    for (json, want) in cases {
        assert_eq!(parse_err(json), *want, "for {json}");
    }
}

#[test]
fn entry_for_matches_any_name_in_order() {
    let m = parse_manifest(&wrap(
        r#""files": [{"path": "phone.pb", "machine": {"name": "base"}},
                      {"path": "traces/phone.pb", "machine": {"name": "full"}}]"#,
    ))
    .unwrap();
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let e = m
        .entry_for(&names(&["traces/phone.pb", "phone.pb"]))
        .unwrap();
    assert_eq!(e.machine.as_deref(), Some("full"));
    let e = m
        .entry_for(&names(&["other/phone.pb", "phone.pb"]))
        .unwrap();
    assert_eq!(e.machine.as_deref(), Some("base"));
    assert!(m.entry_for(&names(&["watch.pb"])).is_none());
}

fn facts(ids: &[u32], snapshots: bool) -> FileFacts {
    FileFacts {
        embedded_machine_ids: ids.iter().copied().collect(),
        has_clock_snapshots: snapshots,
        has_remote_clock_sync: false,
        is_archive_or_manifest: false,
    }
}

/// Runs the input checks with a table of facts by path.
fn check(body: &str, table: &[(&str, FileFacts)]) -> Result<(), String> {
    let m = parse_manifest(&wrap(body)).unwrap();
    let map: BTreeMap<String, FileFacts> = table
        .iter()
        .map(|(p, f)| (p.to_string(), f.clone()))
        .collect();
    m.check_against_inputs(&|p| map.get(p).cloned())
        .map_err(|e| e.to_string())
}

#[test]
fn input_checks_pass() {
    let single = facts(&[0], true);
    let relay = facts(&[0, 7], true);
    let clockless = facts(&[0], false);
    check(
        r#""trace_time": {"clock": "BOOTTIME", "file": "relay.pb", "machine": "vm"},
           "files": [
             {"path": "phone.pb", "machine": {"name": "phone"}},
             {"path": "relay.pb", "machines": [{"id": 7, "name": "vm"}]},
             {"path": "log.json", "clocks": {"sync_to": {"file": "relay.pb", "machine": "vm", "clock": "BOOTTIME"}}},
             {"path": "b.pb", "clocks": {"clock": "BOOTTIME", "sync_to": {"file": "phone.pb"}}},
             {"path": "r2.pb", "machines": [{"id": 0, "name": "h"}, {"id": 9, "name": "g"}],
              "clocks": {"clock": "BOOTTIME", "machine": "g", "sync_to": {"file": "phone.pb", "machine": "phone"}}},
             {"path": "absent.pb", "machine": {"name": "nobody"}}
           ]"#,
        &[
            ("phone.pb", single.clone()),
            ("relay.pb", relay.clone()),
            ("log.json", clockless),
            ("b.pb", single),
            ("r2.pb", facts(&[0, 9], true)),
        ],
    )
    .unwrap();
}

/// Every error message of the input checks, exactly.
#[test]
fn input_check_errors() {
    let single = || facts(&[0], true);
    let relay = || facts(&[0, 7], true);
    let clockless = || facts(&[0], false);
    let archive = FileFacts {
        is_archive_or_manifest: true,
        ..FileFacts::default()
    };
    type Case<'a> = (&'a str, Vec<(&'a str, FileFacts)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            r#""trace_time": {"clock": "BOOTTIME", "file": "a"}, "files": [{"path": "a"}]"#,
            vec![],
            "perfetto_manifest: trace_time.file: trace_time: file names 'a', which is not among the inputs",
        ),
        (
            r#""trace_time": {"clock": "BOOTTIME", "file": "a"}, "files": [{"path": "a"}]"#,
            vec![("a", relay())],
            "perfetto_manifest: trace_time: trace_time: file 'a' is a multi-machine trace; also name the machine with trace_time.machine",
        ),
        (
            r#""trace_time": {"clock": "BOOTTIME", "file": "a", "machine": "vm"},
               "files": [{"path": "a", "machines": [{"id": 7, "name": "guest"}]}]"#,
            vec![("a", relay())],
            "perfetto_manifest: trace_time.machine: trace_time: machine 'vm' is not a machine declared by file 'a'",
        ),
        (
            r#""files": [{"path": "a", "machine": {"name": "x"}}]"#,
            vec![("a", facts(&[0, 3, 7], false))],
            "perfetto_manifest: files[0].machine: 'a' is a multi-machine trace (embedded machine ids 0, 3, 7). Replace `machine` with a `machines` block",
        ),
        (
            r#""files": [{"path": "a", "machines": [{"id": 3, "name": "x"}]}]"#,
            vec![("a", facts(&[0, 3, 7], false))],
            "perfetto_manifest: files[0].machines: machines: trace has a packet from undeclared machine id 7; add {\"id\": 7, \"name\": ...}",
        ),
        (
            r#""files": [{"path": "a", "machine": {"name": "x"}}]"#,
            vec![("a", archive.clone())],
            "perfetto_manifest: files[0]: overrides are not supported for trace files which are themselves archives or perfetto_manifest files",
        ),
        (
            r#""files": [{"path": "a"}, {"path": "b", "clocks": {"sync_to": {"file": "a"}}}]"#,
            vec![("a", archive), ("b", clockless())],
            "perfetto_manifest: files[1].clocks.sync_to.file: overrides are not supported for trace files which are themselves archives or perfetto_manifest files",
        ),
        (
            r#""files": [{"path": "a"}, {"path": "b", "clocks": {"sync_to": {"file": "a"}}}]"#,
            vec![("a", single()), ("b", single())],
            "perfetto_manifest: files[1].clocks: clock overrides require the trace to use a single clock when they name no source `clock`, but 'b' emits clock snapshots; name which of its clocks to relate with clocks.clock",
        ),
        (
            r#""files": [{"path": "a"}, {"path": "b", "machines": [{"id": 7, "name": "v"}], "clocks": {"machine": "v", "sync_to": {"file": "a"}}}]"#,
            vec![("a", single()), ("b", facts(&[0, 7], false))],
            "perfetto_manifest: files[1].clocks: a `clocks` override applies only to a single-machine file when it names no source `clock`, but 'b' has embedded machine ids 0, 7; name the clock with clocks.clock and the machine with clocks.machine",
        ),
        // Perfetto refuses these at the first packet of another machine even
        // when all of them carry one id (CheckManifestSingleMachine, its
        // trace_manifest tests test_error_proto_multi_machine_*).
        (
            r#""files": [{"path": "a"}, {"path": "b", "clocks": {"sync_to": {"file": "a"}}}]"#,
            vec![("a", single()), ("b", facts(&[7], false))],
            "perfetto_manifest: files[1].clocks: a `clocks` override applies only to a single-machine file when it names no source `clock`, but 'b' has embedded machine ids 7; name the clock with clocks.clock and the machine with clocks.machine",
        ),
        (
            r#""files": [{"path": "a", "machine": {"name": "x"}}]"#,
            vec![("a", facts(&[7], true))],
            "perfetto_manifest: files[0].machine: 'a' is a multi-machine trace (embedded machine ids 7). Replace `machine` with a `machines` block",
        ),
        (
            r#""files": [{"path": "a", "machine": {"name": "x"}}]"#,
            vec![(
                "a",
                FileFacts {
                    has_remote_clock_sync: true,
                    ..single()
                },
            )],
            "perfetto_manifest: files[0].machine: 'a' is a multi-machine trace (RemoteClockSync packets). Replace `machine` with a `machines` block",
        ),
        (
            r#""files": [{"path": "a"}, {"path": "b", "clocks": {"sync_to": {"file": "a"}}}]"#,
            vec![
                ("a", single()),
                (
                    "b",
                    FileFacts {
                        has_remote_clock_sync: true,
                        ..facts(&[0, 7], false)
                    },
                ),
            ],
            "perfetto_manifest: files[1].clocks: a `clocks` override applies only to a single-machine file when it names no source `clock`, but 'b' has embedded machine ids 0, 7, RemoteClockSync packets; name the clock with clocks.clock and the machine with clocks.machine",
        ),
        (
            r#""files": [{"path": "a"}, {"path": "b", "machines": [{"id": 7, "name": "v"}], "clocks": {"clock": "BOOTTIME", "sync_to": {"file": "a"}}}]"#,
            vec![("a", single()), ("b", relay())],
            "perfetto_manifest: files[1].clocks: clocks: file 'b' is a multi-machine trace; name which machine the clock is on with clocks: machine",
        ),
        (
            r#""files": [{"path": "a"}, {"path": "b", "machines": [{"id": 7, "name": "v"}], "clocks": {"clock": "BOOTTIME", "machine": "w", "sync_to": {"file": "a"}}}]"#,
            vec![("a", single()), ("b", relay())],
            "perfetto_manifest: files[1].clocks.machine: clocks: machine 'w' is not a machine declared by file 'b'",
        ),
        (
            r#""files": [{"path": "a"}, {"path": "b", "clocks": {"clock": "BOOTTIME", "sync_to": {"file": "a"}}}]"#,
            vec![("b", single())],
            "perfetto_manifest: files[1].clocks.sync_to.file: clocks: sync_to.file names 'a', which is not among the inputs",
        ),
        (
            r#""files": [{"path": "a"}, {"path": "b", "clocks": {"clock": "BOOTTIME", "sync_to": {"file": "a"}}}]"#,
            vec![("a", relay()), ("b", single())],
            "perfetto_manifest: files[1].clocks.sync_to: clocks: sync_to.file 'a' is a multi-machine trace; also name the machine with clocks: sync_to.machine",
        ),
        (
            r#""files": [{"path": "a", "machines": [{"id": 7, "name": "vm"}]}, {"path": "b", "clocks": {"clock": "BOOTTIME", "sync_to": {"file": "a", "machine": "phone"}}}]"#,
            vec![("a", relay()), ("b", single())],
            "perfetto_manifest: files[1].clocks.sync_to.machine: clocks: sync_to.machine 'phone' is not a machine declared by file 'a'",
        ),
    ];
    for (body, table, want) in cases {
        assert_eq!(check(body, &table), Err(want.to_string()), "for {body}");
    }
}

#[test]
fn error_exit_code_is_dataerr() {
    let e = parse_manifest("{}").unwrap_err();
    assert_eq!(e.exit_code(), DATAERR);
}
