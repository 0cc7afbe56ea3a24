//! Fuzz targets of the text inputs (see `tracesync_tests::fuzz`): the
//! `perfetto_manifest` JSON of `tracesync merge`, the daemon's TOML config
//! and the relay's TOML config.
//!
//! Inputs are built from the real vocabulary (keys, clock names, the
//! shipped `configs/*.toml`) with edge values (huge, negative, wrong type,
//! deep nesting) and then broken byte-wise. Every case must give Ok or one
//! error line (with a position inside the text for the configs); no panic,
//! no stack overflow.

use std::path::Path;

use proptest::prelude::*;
use tracesync_cli::merge::manifest::parse_manifest;
use tracesync_daemon::config::DaemonConfig;
use tracesync_relay::config::{Flags, RelayConfig};
use tracesync_tests::fuzz::{self, mutate, mutations};

const BIN: &str = "fuzz_inputs";

/// `depth` nested arrays around a value, as text (no recursion).
fn nested(depth: usize, open: &str, close: &str, inner: &str) -> String {
    let mut s = String::with_capacity(depth * (open.len() + close.len()) + inner.len());
    for _ in 0..depth {
        s.push_str(open);
    }
    s.push_str(inner);
    for _ in 0..depth {
        s.push_str(close);
    }
    s
}

fn break_text(text: String, muts: &[fuzz::Mutation]) -> String {
    String::from_utf8_lossy(&mutate(text.into_bytes(), muts)).into_owned()
}

// ---- manifest ----

fn json_scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1".to_owned()),
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("-9223372036854775809".to_owned()),
        Just("1e400".to_owned()),
        Just("1.5".to_owned()),
        Just("true".to_owned()),
        Just("null".to_owned()),
        prop::sample::select(vec![
            "BOOTTIME",
            "MONOTONIC",
            "REALTIME",
            "MONOTONIC_RAW",
            "REALTIME_COARSE",
            "MONOTONIC_COARSE",
            "TSC",
            "a.pftrace",
            "b.pftrace",
            "dir/a.pftrace",
            "host",
            "",
        ])
        .prop_map(|s| format!("\"{s}\"")),
        "[ -~]{0,12}".prop_map(|s| serde_json::Value::String(s).to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
    ]
}

fn json_value() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "perfetto_manifest",
        "version",
        "files",
        "path",
        "machine",
        "machines",
        "id",
        "name",
        "clocks",
        "clock",
        "sync_to",
        "file",
        "offset_ns",
        "trace_time",
        "attributes",
        "x",
    ]);
    json_scalar().prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((keys.clone(), inner), 0..6).prop_map(|kv| {
                let body: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    })
}

/// A manifest-shaped document with some fields replaced by anything.
fn manifest_text() -> impl Strategy<Value = String> {
    let file = (
        prop::sample::select(vec!["a.pftrace", "b.pftrace", "c.pftrace"]),
        prop::option::of(json_value()),
        prop::option::of(json_value()),
        prop::option::of(prop::sample::select(vec!["BOOTTIME", "MONOTONIC", "X"])),
        prop::option::of(prop::sample::select(vec!["a.pftrace", "b.pftrace", "zz"])),
        prop::option::of(json_scalar()),
    )
        .prop_map(|(path, machine, machines, clock, sync_file, offset)| {
            let mut fields = vec![format!("\"path\":\"{path}\"")];
            if let Some(m) = machine {
                fields.push(format!("\"machine\":{m}"));
            }
            if let Some(m) = machines {
                fields.push(format!("\"machines\":{m}"));
            }
            if let Some(c) = clock {
                let sync = sync_file.map_or(String::new(), |f| {
                    format!(",\"sync_to\":{{\"file\":\"{f}\",\"clock\":\"BOOTTIME\"}}")
                });
                let offset = offset.map_or(String::new(), |o| format!(",\"offset_ns\":{o}"));
                fields.push(format!("\"clocks\":{{\"clock\":\"{c}\"{sync}{offset}}}"));
            }
            format!("{{{}}}", fields.join(","))
        });
    let doc = (
        prop::option::of(json_scalar()),
        prop::collection::vec(file, 0..4),
        prop::option::of(json_value()),
        prop::option::of(json_value()),
    )
        .prop_map(|(version, files, trace_time, attributes)| {
            let mut fields = Vec::new();
            if let Some(v) = version {
                fields.push(format!("\"version\":{v}"));
            }
            fields.push(format!("\"files\":[{}]", files.join(",")));
            if let Some(t) = trace_time {
                fields.push(format!("\"trace_time\":{t}"));
            }
            if let Some(a) = attributes {
                fields.push(format!("\"attributes\":{a}"));
            }
            format!("{{\"perfetto_manifest\":{{{}}}}}", fields.join(","))
        });
    prop_oneof![
        6 => (doc, mutations()).prop_map(|(d, m)| break_text(d, &m)),
        1 => json_value(),
        1 => (1usize..50_000).prop_map(|d| format!(
            "{{\"perfetto_manifest\":{{\"version\":1,\"files\":{}}}}}",
            nested(d, "[", "]", "")
        )),
        1 => (1usize..50_000).prop_map(|d| nested(d, "{\"a\":", "}", "1")),
    ]
}

#[test]
fn manifest() {
    fuzz::with_big_stack(|| {
        fuzz::run(BIN, "manifest", 3_000, manifest_text(), |text| {
            if let Err(e) = parse_manifest(&text) {
                let line = e.to_string();
                prop_assert!(!line.is_empty());
                prop_assert!(!line.contains('\n'), "error is not one line: {line:?}");
                prop_assert!(e.exit_code() != 0);
            }
            Ok(())
        });
    });
}

// ---- configs ----

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "0", "1", "-1", "100", "1000", "4194304", "65536", "65537",
            "18446744073709551615", "9223372036854775807", "-9223372036854775808",
            "99999999999999999999999", "1e400", "nan", "inf", "-0.0", "0.5", "0x7fffffff",
            "true", "false", "\"\"", "\"127.0.0.1:0\"", "\"[::1]:7410\"", "\"host:99999\"",
            "\"synthetic:100\"", "\"synthetic:99999999999999999999\"", "\"file:\"",
            "\"unix:/nonexistent/x\"", "\"block\"", "\"drop-oldest\"", "\"info\"", "\"LOUD\"",
            "\"a\\u0000b\"", "'''\nmulti\n'''", "1979-05-27T07:32:00Z", "[]", "{}",
            "[1, \"a\", 2.5]", "{ a = 1 }",
        ])
        .prop_map(str::to_owned),
        1 => "[ -~&&[^\"\\\\]]{0,16}".prop_map(|s| format!("\"{s}\"")),
        1 => any::<i64>().prop_map(|v| v.to_string()),
        1 => (1usize..2_000).prop_map(|d| nested(d, "[", "]", "1")),
        1 => (1usize..2_000).prop_map(|d| nested(d, "{ a = ", " }", "1")),
    ]
}

fn toml_text(
    shipped: &'static str,
    sections: &'static [&'static str],
    keys: &'static [&'static str],
) -> impl Strategy<Value = String> {
    let line = (
        prop::option::of(prop::sample::select(sections)),
        prop::sample::select(keys),
        toml_value(),
    )
        .prop_map(|(section, key, value)| match section {
            Some(s) => format!("[{s}]\n{key} = {value}\n"),
            None => format!("{key} = {value}\n"),
        });
    prop_oneof![
        3 => (prop::collection::vec(line, 0..8), mutations())
            .prop_map(|(lines, m)| break_text(lines.concat(), &m)),
        2 => mutations().prop_map(move |m| break_text(shipped.to_owned(), &m)),
        1 => (prop::sample::select(keys), toml_value())
            .prop_map(move |(k, v)| format!("{shipped}\n{k} = {v}\n")),
    ]
}

/// The error's line:column must point into the text.
fn check_position(text: &str, line: usize, column: usize) -> Result<(), TestCaseError> {
    let lines = text.split('\n').count().max(1);
    prop_assert!(
        (1..=lines).contains(&line),
        "line {line} outside 1..={lines}"
    );
    prop_assert!(column >= 1, "column {column}");
    Ok(())
}

#[test]
fn daemon_config() {
    fuzz::with_big_stack(|| {
        const SECTIONS: &[&str] = &["listen", "auth", "output", "merge", "limits", "log", "x"];
        const KEYS: &[&str] = &[
            "data",
            "sync",
            "control",
            "metrics",
            "token",
            "dir",
            "rotate-bytes",
            "rotate-seconds",
            "retain-bytes",
            "retain-seconds",
            "commit-interval-ms",
            "fsync",
            "window-ms",
            "pending-packets",
            "queue-bytes",
            "max-relays",
            "hello-timeout-ms",
            "max-frame-bytes",
            "level",
            "unknown-key",
        ];
        let shipped = include_str!("../../configs/daemon.toml");
        let file = Path::new("daemon.toml");
        fuzz::run(
            BIN,
            "daemon_config",
            5_000,
            toml_text(shipped, SECTIONS, KEYS),
            |text| {
                if let Err(e) = DaemonConfig::from_toml(&text, file) {
                    let line = e.to_string();
                    prop_assert!(line.starts_with("daemon.toml"), "{line}");
                    prop_assert!(!line.contains('\n'), "error is not one line: {line:?}");
                    if let Some((l, c)) = e.position {
                        check_position(&text, l, c)?;
                    }
                }
                Ok(())
            },
        );
    });
}

#[test]
fn relay_config() {
    fuzz::with_big_stack(|| {
        const KEYS: &[&str] = &[
            "host",
            "name",
            "sources",
            "token",
            "spool",
            "when-full",
            "spool-memory-bytes",
            "spool-disk-bytes",
            "linger-ms",
            "window-bytes",
            "clock-offset-ns",
            "clock-drift-ppm",
            "unknown-key",
        ];
        let shipped = include_str!("../../configs/relay.toml");
        let path = Path::new("relay.toml");
        let flags = Flags::default();
        fuzz::run(
            BIN,
            "relay_config",
            5_000,
            toml_text(shipped, &["x"], KEYS),
            |text| {
                if let Err(e) = RelayConfig::from_parts(Some(path), Some(&text), &flags) {
                    let line = e.to_string();
                    prop_assert!(line.starts_with("relay.toml"), "{line}");
                    prop_assert!(!line.contains('\n'), "error is not one line: {line:?}");
                }
                Ok(())
            },
        );
    });
}
