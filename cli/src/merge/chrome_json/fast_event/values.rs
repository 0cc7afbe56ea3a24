//! The args of counter (`C`) and metadata (`M`) events, which the
//! conversion reads as values: built as the `serde_json::Map` the full
//! reading builds (the same values, the last of duplicate keys kept), read
//! from the event's text once it is known to be UTF-8.
//!
//! Invariant: a value this reads differently from serde_json (a nested
//! object or array, anything [`Cursor`] leaves) answers None, and the
//! event is read the full way.

use serde_json::{Map, Number, Value};

use super::super::json_scan::{Cursor, Num};

/// The args object at `at` of `text` (its `{`): None when it must be read
/// the full way; Some(None) for an empty object (as the full reading).
pub fn args_values(text: &str, at: usize) -> Option<Option<Map<String, Value>>> {
    let mut c = Cursor::new(text.as_bytes()).at(at);
    let mut map = Map::new();
    c.expect(b'{')?;
    if !c.eat(b'}') {
        loop {
            let key = c.string_at()?;
            c.expect(b':')?;
            let value = match c.peek()? {
                b'"' => Value::String(text.get(c.string_at()?)?.to_owned()),
                b't' | b'f' => Value::Bool(c.boolean()?),
                b'n' => {
                    c.null()?;
                    Value::Null
                }
                b'{' | b'[' => return None,
                _ => Value::Number(match c.number()? {
                    Num::Int(i) => Number::from(i),
                    Num::Uint(u) => Number::from(u),
                    Num::Float(f) => Number::from_f64(f)?,
                }),
            };
            map.insert(text.get(key)?.to_owned(), value);
            if c.eat(b',') {
                continue;
            }
            c.expect(b'}')?;
            break;
        }
    }
    Some((!map.is_empty()).then_some(map))
}
