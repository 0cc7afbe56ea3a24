//! JSON value helpers of the manifest parser: present-and-not-null fields,
//! objects, non-empty strings, clock names and strict integers, each error
//! naming the key path at fault.

use serde_json::{Map, Value};
use tracesync_protocol::clock_ids::manifest_clock_id;

use super::{ManifestError, err, join};

const CLOCK_NAMES: &str =
    "REALTIME, REALTIME_COARSE, MONOTONIC, MONOTONIC_COARSE, MONOTONIC_RAW, BOOTTIME";

/// A field that is present and not null: an explicit `null` reads as absent.
pub(super) fn present<'a>(o: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    o.get(k).filter(|v| !v.is_null())
}

pub(super) fn as_object<'a>(
    v: &'a Value,
    key: &str,
) -> Result<&'a Map<String, Value>, ManifestError> {
    v.as_object()
        .ok_or_else(|| err(key, "must be a JSON object"))
}

pub(super) fn non_empty_str(v: &Value, key: &str, message: &str) -> Result<String, ManifestError> {
    match v.as_str() {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(err(key, message)),
    }
}

/// An optional machine (or file) name: absent, or a non-empty string.
pub(super) fn opt_name(
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

pub(super) fn clock_name(v: &Value, key: &str) -> Result<u32, ManifestError> {
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

pub(super) enum Int {
    /// An integer within ±2^64.
    Yes(i128),
    /// An integral number too large for 64 bits (serde_json holds it as f64).
    Big(String),
    No,
}

/// JSON integers only: `1.0`, `"1"` and `true` are not integers.
pub(super) fn integer(v: &Value) -> Int {
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
