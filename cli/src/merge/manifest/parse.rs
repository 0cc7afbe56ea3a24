//! Parsing and validating a `perfetto_manifest` version 1 document on its
//! own, before any input is read.
//!
//! The JSON is walked by hand (not derived) so every error can name the key
//! path at fault, e.g. `files[2].clocks.sync_to.file`.

use serde_json::{Map, Value};

use super::clocks::parse_clocks;
use super::json::{Int, as_object, clock_name, integer, non_empty_str, opt_name, present};
use super::{AttributeValue, FileEntry, Manifest, ManifestError, TraceTime, err, join};

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

    check_version(m)?;
    let files = parse_files(m)?;
    let trace_time = parse_trace_time(m, &files)?;
    check_sync_targets(&files)?;
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

/// `version`: present, and 1.
fn check_version(m: &Map<String, Value>) -> Result<(), ManifestError> {
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
    Ok(())
}

/// `files`: the entries, each path listed once.
fn parse_files(m: &Map<String, Value>) -> Result<Vec<FileEntry>, ManifestError> {
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
    Ok(files)
}

/// `trace_time`: its clock, and the file (and machine) it names, which
/// `files` must list.
fn parse_trace_time(
    m: &Map<String, Value>,
    files: &[FileEntry],
) -> Result<Option<TraceTime>, ManifestError> {
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
    Ok(trace_time)
}

/// Every `clocks.sync_to.file` names a listed file.
fn check_sync_targets(files: &[FileEntry]) -> Result<(), ManifestError> {
    let known = |p: &str| files.iter().any(|e| e.path == p);
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
    Ok(())
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
            return Err(err("attributes", "keys must be non-empty"));
        }
        let value = match val {
            Value::String(s) => AttributeValue::Str(s.clone()),
            other => match integer(other) {
                Int::Yes(n) if i64::try_from(n).is_ok() => AttributeValue::Int(n as i64),
                Int::Yes(_) | Int::Big(_) => {
                    return Err(err(
                        "attributes",
                        format!("'{k}' is out of the 64-bit integer range"),
                    ));
                }
                Int::No => {
                    return Err(err(
                        "attributes",
                        format!("'{k}' must be a string or an integer"),
                    ));
                }
            },
        };
        out.push((k.clone(), value));
    }
    Ok(out)
}
