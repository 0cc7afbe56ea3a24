//! An event's `args` as TrackEvent debug annotations, read the full way
//! (from serde_json values): keys in the map's sorted order, nulls
//! dropped, as the trace processor drops them. The fast path
//! (`fast_event`) encodes the same bytes without building values.

use serde_json::{Map, Value};
use tracesync_protocol::perfetto::{DebugAnnotation, debug_annotation};

/// A JSON value as a debug annotation (objects and arrays entry by entry);
/// None for null, which the trace processor drops too.
fn annotation(name: Option<&str>, v: &Value) -> Option<DebugAnnotation> {
    use debug_annotation::Value as V;
    let mut a = DebugAnnotation {
        name_field: name.map(|n| debug_annotation::NameField::Name(n.to_owned())),
        ..Default::default()
    };
    match v {
        Value::Null => return None,
        Value::Bool(b) => a.value = Some(V::BoolValue(*b)),
        Value::Number(n) => {
            a.value = Some(match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => V::IntValue(i),
                (None, Some(u)) => V::UintValue(u),
                _ => V::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
            })
        }
        Value::String(s) => a.value = Some(V::StringValue(s.clone())),
        Value::Array(items) => {
            a.array_values = items.iter().filter_map(|i| annotation(None, i)).collect();
        }
        Value::Object(map) => {
            a.dict_entries = map
                .iter()
                .filter_map(|(k, v)| annotation(Some(k), v))
                .collect();
        }
    }
    Some(a)
}

pub fn annotations(args: Option<&Map<String, Value>>) -> Vec<DebugAnnotation> {
    args.map(|m| {
        m.iter()
            .filter_map(|(k, v)| annotation(Some(k), v))
            .collect()
    })
    .unwrap_or_default()
}
