//! `perfetto_manifest` version 1: parsing, and the checks that need facts
//! about the input files.
//!
//! The JSON is walked by hand (not derived) so every error can name the key
//! path at fault, e.g. `files[2].clocks.sync_to.file`.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};
use tracesync_protocol::clock_ids::manifest_clock_id;

use tracesync_common::exit::DATAERR;

const CLOCK_NAMES: &str =
    "REALTIME, REALTIME_COARSE, MONOTONIC, MONOTONIC_COARSE, MONOTONIC_RAW, BOOTTIME";

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    pub trace_time: Option<TraceTime>,
    pub files: Vec<FileEntry>,
    /// In key order; a key set twice keeps its last value.
    pub attributes: Vec<(String, AttributeValue)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceTime {
    /// Builtin clock id.
    pub clock: u32,
    pub file: Option<String>,
    pub machine: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub path: String,
    /// The whole file on one named machine.
    pub machine: Option<String>,
    /// Embedded machine id → name, in the order written.
    pub machines: Vec<(u32, String)>,
    pub clocks: Option<ClockOverride>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockOverride {
    /// The file's own clock (RELATE); `None` pins the file's private timeline (PIN).
    pub clock: Option<u32>,
    pub machine: Option<String>,
    pub sync_to: SyncTo,
    /// The source clock reads T when the reference reads T + offset_ns.
    pub offset_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncTo {
    pub file: String,
    pub machine: Option<String>,
    /// `None`: the reference file's private per-file timeline.
    pub clock: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeValue {
    Str(String),
    Int(i64),
}

/// A manifest error: `key` is the JSON key path (empty for the document
/// itself), `message` says what is wrong and, where useful, what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub key: String,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "perfetto_manifest: {}", self.message)
        } else {
            write!(f, "perfetto_manifest: {}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ManifestError {}

impl ManifestError {
    /// A bad manifest is bad input data.
    pub fn exit_code(&self) -> u8 {
        DATAERR
    }
}

fn err(key: impl Into<String>, message: impl Into<String>) -> ManifestError {
    ManifestError {
        key: key.into(),
        message: message.into(),
    }
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}

/// Facts about each input file known after a first read pass, for the checks
/// that need them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileFacts {
    /// Distinct `TracePacket.machine_id` values seen, 0 for packets without one.
    pub embedded_machine_ids: BTreeSet<u32>,
    pub has_clock_snapshots: bool,
    pub is_archive_or_manifest: bool,
}

impl FileFacts {
    fn is_multi_machine(&self) -> bool {
        self.embedded_machine_ids.len() > 1
    }
}

/// Parses and validates a `perfetto_manifest` version 1 document.
pub fn parse_manifest(json: &str) -> Result<Manifest, ManifestError> {
    let doc: Value = serde_json::from_str(json)
        .map_err(|e| err("", format!("invalid JSON: {e}; fix the syntax")))?;
    let Some(top) = doc.as_object().and_then(|o| o.get("perfetto_manifest")) else {
        return Err(err(
            "",
            "not a manifest: expected a JSON object with a top-level \"perfetto_manifest\" key",
        ));
    };
    let m = as_object(top, "perfetto_manifest")?;

    match present(m, "version") {
        None => return Err(err("", "missing required field: version")),
        Some(v) => match integer(v) {
            Int::Yes(1) => {}
            Int::Yes(n) => {
                return Err(err(
                    "version",
                    format!("unsupported version: {n}. Only version 1 is supported"),
                ));
            }
            Int::Big(s) => {
                return Err(err(
                    "version",
                    format!("unsupported version: {s}. Only version 1 is supported"),
                ));
            }
            Int::No => return Err(err("version", "version must be an integer; use 1")),
        },
    }

    let mut files = Vec::new();
    if let Some(v) = present(m, "files") {
        let arr = v
            .as_array()
            .ok_or_else(|| err("files", "must be an array of file entries"))?;
        for (i, f) in arr.iter().enumerate() {
            let key = format!("files[{i}]");
            let entry = parse_file(f, &key)?;
            if let Some(j) = files.iter().position(|e: &FileEntry| e.path == entry.path) {
                return Err(err(
                    join(&key, "path"),
                    format!(
                        "'{}' is already listed at files[{j}]; merge the two entries",
                        entry.path
                    ),
                ));
            }
            files.push(entry);
        }
    }
    let known = |p: &str| files.iter().any(|e| e.path == p);

    let trace_time = match present(m, "trace_time") {
        None => None,
        Some(v) => {
            let o = as_object(v, "trace_time")?;
            let clock = match present(o, "clock") {
                None => return Err(err("trace_time", "missing required field: clock")),
                Some(c) => clock_name(c, "trace_time.clock")?,
            };
            let file = opt_name(o, "file", "trace_time")?;
            let machine = opt_name(o, "machine", "trace_time")?;
            match &file {
                Some(f) if !known(f) => {
                    return Err(err(
                        "trace_time.file",
                        format!(
                            "trace_time: file names unknown file '{f}'. It must match the path of an entry in the files array"
                        ),
                    ));
                }
                None if machine.is_some() => {
                    return Err(err(
                        "trace_time.machine",
                        "a machine name alone is ambiguous: also name its file with trace_time.file",
                    ));
                }
                _ => {}
            }
            Some(TraceTime {
                clock,
                file,
                machine,
            })
        }
    };

    for (i, e) in files.iter().enumerate() {
        if let Some(c) = &e.clocks
            && !known(&c.sync_to.file)
        {
            return Err(err(
                format!("files[{i}].clocks.sync_to.file"),
                format!(
                    "clocks: sync_to.file names unknown file '{}'. It must match the path of an entry in the files array",
                    c.sync_to.file
                ),
            ));
        }
    }

    let attributes = match present(m, "attributes") {
        None => Vec::new(),
        Some(v) => parse_attributes(v)?,
    };

    Ok(Manifest {
        trace_time,
        files,
        attributes,
    })
}

fn parse_file(v: &Value, key: &str) -> Result<FileEntry, ManifestError> {
    let o = as_object(v, key)?;
    let path = match present(o, "path") {
        None => return Err(err(key, "missing required field: path")),
        Some(p) => non_empty_str(p, &join(key, "path"), "path must be a non-empty string")?,
    };
    let machine_v = present(o, "machine");
    let machines_v = present(o, "machines");
    if machine_v.is_some() && machines_v.is_some() {
        return Err(err(
            key,
            "machine and machines are mutually exclusive; keep `machine` to put the whole file on one machine, or `machines` to name its embedded machine ids",
        ));
    }

    let machine = match machine_v {
        None => None,
        Some(mv) => {
            let mkey = join(key, "machine");
            let mo = mv
                .as_object()
                .ok_or_else(|| err(&mkey, "must be an object like {\"name\": \"phone\"}"))?;
            match present(mo, "name") {
                None => return Err(err(&mkey, "missing required field: name")),
                Some(n) => Some(non_empty_str(
                    n,
                    &join(&mkey, "name"),
                    "machine: name must be non-empty",
                )?),
            }
        }
    };

    let mut machines: Vec<(u32, String)> = Vec::new();
    if let Some(mv) = machines_v {
        let mkey = join(key, "machines");
        let arr = mv.as_array().ok_or_else(|| {
            err(
                &mkey,
                "must be an array like [{\"id\": 0, \"name\": \"host\"}]",
            )
        })?;
        for (j, item) in arr.iter().enumerate() {
            let ikey = format!("{mkey}[{j}]");
            let io = as_object(item, &ikey)?;
            let id = match present(io, "id") {
                None => return Err(err(&ikey, "missing required field: id")),
                Some(idv) => match integer(idv) {
                    Int::Yes(n) if (0..=i128::from(u32::MAX)).contains(&n) => n as u32,
                    _ => {
                        return Err(err(
                            join(&ikey, "id"),
                            "machines: id must be in [0, 4294967295]",
                        ));
                    }
                },
            };
            let name = match present(io, "name") {
                None => return Err(err(&ikey, "missing required field: name")),
                Some(n) => {
                    non_empty_str(n, &join(&ikey, "name"), "machines: name must be non-empty")?
                }
            };
            if machines.iter().any(|(k, _)| *k == id) {
                return Err(err(
                    join(&ikey, "id"),
                    format!("machines: id {id} is declared twice; keep one entry"),
                ));
            }
            machines.push((id, name));
        }
    }

    let clocks = match present(o, "clocks") {
        None => None,
        Some(cv) => Some(parse_clocks(cv, &join(key, "clocks"))?),
    };

    Ok(FileEntry {
        path,
        machine,
        machines,
        clocks,
    })
}

fn parse_clocks(v: &Value, key: &str) -> Result<ClockOverride, ManifestError> {
    let o = as_object(v, key)?;
    let clock = match present(o, "clock") {
        None => None,
        Some(c) => Some(clock_name(c, &join(key, "clock"))?),
    };
    let machine = opt_name(o, "machine", key)?;
    let skey = join(key, "sync_to");
    let Some(sv) = present(o, "sync_to") else {
        return Err(err(key, "clocks: a sync_to block is required"));
    };
    let so = as_object(sv, &skey)?;
    let file = match present(so, "file") {
        Some(f) => non_empty_str(
            f,
            &join(&skey, "file"),
            "clocks: sync_to.file must be a non-empty string",
        )?,
        None if present(so, "machine").is_some() => {
            return Err(err(
                join(&skey, "machine"),
                "clocks: a machine name alone is ambiguous: also name its file with sync_to.file",
            ));
        }
        None => return Err(err(&skey, "clocks: sync_to.file is required")),
    };
    let sync_machine = opt_name(so, "machine", &skey)?;
    let sync_clock = match present(so, "clock") {
        None => None,
        Some(c) => Some(clock_name(c, &join(&skey, "clock"))?),
    };
    let okey = join(key, "offset_ns");
    let offset_ns = match present(o, "offset_ns") {
        None => 0,
        Some(ov) => match integer(ov) {
            Int::Yes(n) if n > i128::from(i64::MIN) && n <= i128::from(i64::MAX) => n as i64,
            Int::Yes(_) | Int::Big(_) => {
                return Err(err(
                    okey,
                    "offset_ns is out of range: it must be within ±9223372036854775807",
                ));
            }
            Int::No => {
                return Err(err(okey, "offset_ns must be an integer (nanoseconds)"));
            }
        },
    };
    Ok(ClockOverride {
        clock,
        machine,
        sync_to: SyncTo {
            file,
            machine: sync_machine,
            clock: sync_clock,
        },
        offset_ns,
    })
}

fn parse_attributes(v: &Value) -> Result<Vec<(String, AttributeValue)>, ManifestError> {
    let o = v.as_object().ok_or_else(|| {
        err(
            "attributes",
            "attributes must be an object of string or integer values",
        )
    })?;
    // serde_json keeps the last of duplicate keys, which is the spec's "last write wins".
    let mut out = Vec::with_capacity(o.len());
    for (k, val) in o {
        if k.is_empty() {
            return Err(err("attributes", "attributes: keys must be non-empty"));
        }
        let value = match val {
            Value::String(s) => AttributeValue::Str(s.clone()),
            other => match integer(other) {
                Int::Yes(n) if i64::try_from(n).is_ok() => AttributeValue::Int(n as i64),
                Int::Yes(_) | Int::Big(_) => {
                    return Err(err(
                        "attributes",
                        format!("attributes: '{k}' is out of the 64-bit integer range"),
                    ));
                }
                Int::No => {
                    return Err(err(
                        "attributes",
                        format!("attributes: '{k}' must be a string or an integer"),
                    ));
                }
            },
        };
        out.push((k.clone(), value));
    }
    Ok(out)
}

/// A field that is present and not null: an explicit `null` reads as absent.
fn present<'a>(o: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    o.get(k).filter(|v| !v.is_null())
}

fn as_object<'a>(v: &'a Value, key: &str) -> Result<&'a Map<String, Value>, ManifestError> {
    v.as_object()
        .ok_or_else(|| err(key, "must be a JSON object"))
}

fn non_empty_str(v: &Value, key: &str, message: &str) -> Result<String, ManifestError> {
    match v.as_str() {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(err(key, message)),
    }
}

/// An optional machine (or file) name: absent, or a non-empty string.
fn opt_name(
    o: &Map<String, Value>,
    field: &str,
    parent: &str,
) -> Result<Option<String>, ManifestError> {
    match present(o, field) {
        None => Ok(None),
        Some(v) => {
            let key = join(parent, field);
            non_empty_str(v, &key, &format!("{field} must be a non-empty string")).map(Some)
        }
    }
}

fn clock_name(v: &Value, key: &str) -> Result<u32, ManifestError> {
    match v.as_str() {
        Some(name) => manifest_clock_id(name).ok_or_else(|| {
            err(
                key,
                format!("unknown clock name: {name}. Use one of {CLOCK_NAMES}"),
            )
        }),
        None => Err(err(
            key,
            format!("a clock name must be a string, one of {CLOCK_NAMES}"),
        )),
    }
}

enum Int {
    /// An integer within ±2^64.
    Yes(i128),
    /// An integral number too large for 64 bits (serde_json holds it as f64).
    Big(String),
    No,
}

/// JSON integers only: `1.0`, `"1"` and `true` are not integers.
fn integer(v: &Value) -> Int {
    let Some(n) = v.as_number() else {
        return Int::No;
    };
    if let Some(i) = n.as_i64() {
        return Int::Yes(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Int::Yes(i128::from(u));
    }
    // serde_json reads integer literals beyond 64 bits as floats: report
    // those as too large rather than as not integers.
    if n.as_f64()
        .is_some_and(|f| f.fract() == 0.0 && f.abs() >= 2f64.powi(63))
    {
        return Int::Big(n.to_string());
    }
    Int::No
}

impl Manifest {
    /// The entry for an input, matched by any of its names in the order
    /// given (exact path first, then base name or member name).
    pub fn entry_for(&self, names: &[String]) -> Option<&FileEntry> {
        names
            .iter()
            .find_map(|n| self.files.iter().find(|e| e.path == *n))
    }

    fn entry_by_path(&self, path: &str) -> Option<&FileEntry> {
        self.files.iter().find(|e| e.path == path)
    }

    /// Machine names an entry declares for its file.
    fn declares(&self, path: &str, machine: &str) -> bool {
        self.entry_by_path(path).is_some_and(|e| {
            e.machine.as_deref() == Some(machine) || e.machines.iter().any(|(_, n)| n == machine)
        })
    }

    /// Checks that need the inputs. `facts` maps a manifest file path to that
    /// input's facts (`None`: no such input).
    pub fn check_against_inputs(
        &self,
        facts: &dyn Fn(&str) -> Option<FileFacts>,
    ) -> Result<(), ManifestError> {
        if let Some(tt) = &self.trace_time
            && let Some(file) = &tt.file
        {
            let Some(ff) = facts(file) else {
                return Err(err(
                    "trace_time.file",
                    format!("trace_time: file names '{file}', which is not among the inputs"),
                ));
            };
            match &tt.machine {
                None if ff.is_multi_machine() => {
                    return Err(err(
                        "trace_time",
                        format!(
                            "trace_time: file '{file}' is a multi-machine trace; also name the machine with trace_time.machine"
                        ),
                    ));
                }
                Some(g) if !self.declares(file, g) => {
                    return Err(err(
                        "trace_time.machine",
                        format!(
                            "trace_time: machine '{g}' is not a machine declared by file '{file}'"
                        ),
                    ));
                }
                _ => {}
            }
        }

        for (i, e) in self.files.iter().enumerate() {
            let key = format!("files[{i}]");
            // An entry for a file that is not among the inputs configures nothing.
            let Some(ff) = facts(&e.path) else {
                continue;
            };
            let overrides = e.machine.is_some() || !e.machines.is_empty() || e.clocks.is_some();
            if ff.is_archive_or_manifest && overrides {
                return Err(err(
                    key,
                    "overrides are not supported for trace files which are themselves archives or perfetto_manifest files",
                ));
            }
            if e.machine.is_some() && ff.is_multi_machine() {
                return Err(err(
                    join(&key, "machine"),
                    format!(
                        "'{}' is a multi-machine trace (embedded machine ids {}). Replace `machine` with a `machines` block",
                        e.path,
                        list_ids(&ff.embedded_machine_ids)
                    ),
                ));
            }
            if !e.machines.is_empty() {
                // Id 0 is packets without a machine id: the file's base
                // machine, which needs no declaration.
                if let Some(id) = ff
                    .embedded_machine_ids
                    .iter()
                    .find(|id| **id != 0 && !e.machines.iter().any(|(k, _)| k == *id))
                {
                    return Err(err(
                        join(&key, "machines"),
                        format!(
                            "machines: trace has a packet from undeclared machine id {id}; add {{\"id\": {id}, \"name\": ...}}"
                        ),
                    ));
                }
            }
            let Some(c) = &e.clocks else {
                continue;
            };
            let ckey = join(&key, "clocks");
            if c.clock.is_none() {
                if ff.is_multi_machine() {
                    return Err(err(
                        ckey,
                        "a `clocks` override without a source `clock` applies only to a single-machine file; name the clock with clocks.clock and the machine with clocks.machine",
                    ));
                }
                if ff.has_clock_snapshots {
                    return Err(err(
                        ckey,
                        format!(
                            "a `clocks` override without a source `clock` pins a clockless file, but '{}' emits clock snapshots; name which of its clocks to relate with clocks.clock",
                            e.path
                        ),
                    ));
                }
            }
            match &c.machine {
                None if ff.is_multi_machine() => {
                    return Err(err(
                        ckey,
                        format!(
                            "clocks: file '{}' is a multi-machine trace; name which machine the clock is on with clocks: machine",
                            e.path
                        ),
                    ));
                }
                Some(g) if !self.declares(&e.path, g) => {
                    return Err(err(
                        join(&ckey, "machine"),
                        format!(
                            "clocks: machine '{g}' is not a machine declared by file '{}'",
                            e.path
                        ),
                    ));
                }
                _ => {}
            }
            let r = &c.sync_to.file;
            let skey = join(&ckey, "sync_to");
            let Some(rf) = facts(r) else {
                return Err(err(
                    join(&skey, "file"),
                    format!("clocks: sync_to.file names '{r}', which is not among the inputs"),
                ));
            };
            if rf.is_archive_or_manifest {
                return Err(err(
                    join(&skey, "file"),
                    "overrides are not supported for trace files which are themselves archives or perfetto_manifest files",
                ));
            }
            match &c.sync_to.machine {
                None if rf.is_multi_machine() => {
                    return Err(err(
                        skey,
                        format!(
                            "clocks: sync_to.file '{r}' is a multi-machine trace; also name the machine with clocks: sync_to.machine"
                        ),
                    ));
                }
                Some(g) if !self.declares(r, g) => {
                    return Err(err(
                        join(&skey, "machine"),
                        format!(
                            "clocks: sync_to.machine '{g}' is not a machine declared by file '{r}'"
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

fn list_ids(ids: &BTreeSet<u32>) -> String {
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
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
                "perfetto_manifest: files[0].clocks.sync_to.machine: clocks: a machine name alone is ambiguous: also name its file with sync_to.file",
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
                &wrap(
                    r#""files": [{"path": "a", "clocks": {"sync_to": {"file": "a", "clock": 7}}}]"#,
                ),
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
                "perfetto_manifest: attributes: attributes: 'a' must be a string or an integer",
            ),
            (
                &wrap(r#""attributes": {"a": true}"#),
                "perfetto_manifest: attributes: attributes: 'a' must be a string or an integer",
            ),
            (
                &wrap(r#""attributes": {"a": 18446744073709551615}"#),
                "perfetto_manifest: attributes: attributes: 'a' is out of the 64-bit integer range",
            ),
            (
                &wrap(r#""attributes": {"": "x"}"#),
                "perfetto_manifest: attributes: attributes: keys must be non-empty",
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
                "perfetto_manifest: files[1].clocks: a `clocks` override without a source `clock` pins a clockless file, but 'b' emits clock snapshots; name which of its clocks to relate with clocks.clock",
            ),
            (
                r#""files": [{"path": "a"}, {"path": "b", "machines": [{"id": 7, "name": "v"}], "clocks": {"machine": "v", "sync_to": {"file": "a"}}}]"#,
                vec![("a", single()), ("b", facts(&[0, 7], false))],
                "perfetto_manifest: files[1].clocks: a `clocks` override without a source `clock` applies only to a single-machine file; name the clock with clocks.clock and the machine with clocks.machine",
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
}
