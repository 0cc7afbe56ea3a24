//! One Chrome JSON event read from its bytes, with Perfetto's coercions:
//! timestamps are microseconds turned into nanoseconds (integers times
//! 1000, fractions rounded to the nearest nanosecond, numeric strings
//! read as numbers with nothing after them), pids and tids outside
//! 0..=u32::MAX become 0, a missing tid is the pid, and the last of
//! duplicate keys wins.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A JSON value as the event's fields need it: scalars kept, objects and
/// arrays only noted.
#[derive(Debug)]
enum Loose<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    Float(f64),
    Bool(bool),
    Other,
}

impl<'de> Deserialize<'de> for Loose<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Loose<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Loose::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Loose::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Loose::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                // Beyond i64 Perfetto's parser reads a double.
                Ok(i64::try_from(v).map_or(Loose::Float(v as f64), Loose::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Loose::Float(v))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Loose::Bool(v))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Loose::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Loose::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Loose::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// An async or flow id: a string or an integer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Id {
    Str(String),
    Int(u64),
}

/// A pid or tid: a number, or a string Perfetto turns into an id of its
/// own named by the string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ident {
    Num(u32),
    Str(String),
}

/// Scope of an instant event (`s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Global,
    Process,
    Thread,
}

/// The fields of one event tracesync reads; the others are skipped.
#[derive(Debug, Default)]
pub struct JsonEvent {
    pub phase: u8,
    /// Nanoseconds on the file's own clock; None when absent.
    pub ts: Option<i64>,
    pub dur: Option<i64>,
    /// Thread time (`tts`) and thread duration (`tdur`), in ns.
    pub tts: Option<i64>,
    pub tdur: Option<i64>,
    pub pid: Option<Ident>,
    pub tid: Option<Ident>,
    pub name: String,
    pub cat: String,
    pub id: Option<Id>,
    pub id2_local: Option<Id>,
    pub id2_global: Option<Id>,
    pub bind_id: Option<Id>,
    pub scope: Option<Scope>,
    pub bind_enclosing: bool,
    pub flow_in: bool,
    pub flow_out: bool,
    pub args: Option<Map<String, Value>>,
    /// Some field was present (an empty `{}` is skipped silently).
    pub any_field: bool,
    /// Why a field could not be read (the event is counted as a
    /// tokenizer failure and dropped, as Perfetto drops it).
    pub bad_field: Option<String>,
}

/// Longest string buffer an event keeps for reuse by [`JsonEvent::reset`]
/// (a longer one is freed: the reused events stay small).
const KEPT_CAPACITY: usize = 256;

impl JsonEvent {
    /// Back to the default, keeping the buffers of `name` and `cat` (so
    /// the fast path, which reuses events, allocates nothing for them).
    pub fn reset(&mut self) {
        // Field by field, not a new event moved in: the event is large and
        // this runs once per event. The pattern names every field, so a new
        // one must be reset here too.
        let Self {
            phase,
            ts,
            dur,
            tts,
            tdur,
            pid,
            tid,
            name,
            cat,
            id,
            id2_local,
            id2_global,
            bind_id,
            scope,
            bind_enclosing,
            flow_in,
            flow_out,
            args,
            any_field,
            bad_field,
        } = self;
        *phase = 0;
        (*ts, *dur, *tts, *tdur) = (None, None, None, None);
        (*pid, *tid) = (None, None);
        (*id, *id2_local, *id2_global, *bind_id) = (None, None, None, None);
        *scope = None;
        (*bind_enclosing, *flow_in, *flow_out, *any_field) = (false, false, false, false);
        *args = None;
        *bad_field = None;
        for s in [name, cat] {
            s.clear();
            if s.capacity() > KEPT_CAPACITY {
                *s = String::new();
            }
        }
    }

    /// The pid as a number (0 without one): a string pid is mapped to a
    /// number of its own by `string_id`.
    pub fn pid_number(&self, string_id: &dyn Fn(&str) -> u32) -> u32 {
        match &self.pid {
            Some(Ident::Num(n)) => *n,
            Some(Ident::Str(s)) => string_id(s),
            None => 0,
        }
    }

    /// The tid as a number: a numeric tid of 0 (or none) is the pid.
    pub fn tid_number(&self, string_id: &dyn Fn(&str) -> u32) -> u32 {
        match &self.tid {
            Some(Ident::Str(s)) => string_id(s),
            Some(Ident::Num(n)) if *n != 0 => *n,
            _ => self.pid_number(string_id),
        }
    }
}

impl<'de> Deserialize<'de> for JsonEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JsonEvent;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<JsonEvent, A::Error> {
                let mut e = JsonEvent::default();
                while let Some(key) = m.next_key::<Cow<'de, str>>()? {
                    e.any_field = true;
                    read_field(&mut e, &key, &mut m)?;
                }
                Ok(e)
            }
        }
        d.deserialize_map(V)
    }
}

fn read_field<'de, A: MapAccess<'de>>(
    e: &mut JsonEvent,
    key: &str,
    m: &mut A,
) -> Result<(), A::Error> {
    match key {
        "ph" => {
            e.phase = string_of(m.next_value()?)
                .and_then(|s| s.bytes().next())
                .unwrap_or(0)
        }
        "ts" => match coerce_ts(&m.next_value()?) {
            Ok(ts) => e.ts = Some(ts),
            Err(why) => note_bad(e, "ts", why),
        },
        "dur" => match coerce_ts(&m.next_value()?) {
            Ok(dur) => e.dur = Some(dur),
            Err(why) => note_bad(e, "dur", why),
        },
        "tts" | "tdur" => match coerce_ts(&m.next_value()?) {
            Ok(t) if key == "tts" => e.tts = Some(t),
            Ok(t) => e.tdur = Some(t),
            Err(why) => note_bad(e, key, why),
        },
        "pid" => e.pid = ident_of(m.next_value()?),
        "tid" => e.tid = ident_of(m.next_value()?),
        "id" => e.id = id_of(m.next_value()?),
        "bind_id" => e.bind_id = id_of(m.next_value()?),
        "cat" => e.cat = string_of(m.next_value()?).unwrap_or_default(),
        "name" => e.name = string_of(m.next_value()?).unwrap_or_default(),
        "flow_in" => e.flow_in = matches!(m.next_value()?, Loose::Bool(true)),
        "flow_out" => e.flow_out = matches!(m.next_value()?, Loose::Bool(true)),
        "s" => {
            e.scope = match string_of(m.next_value()?).as_deref() {
                Some("p") => Some(Scope::Process),
                Some("t") => Some(Scope::Thread),
                Some("g") => Some(Scope::Global),
                _ => e.scope,
            }
        }
        "bp" => e.bind_enclosing = string_of(m.next_value()?).as_deref() == Some("e"),
        "args" => {
            e.args = match m.next_value::<Value>()? {
                Value::Object(o) if !o.is_empty() => Some(o),
                _ => None,
            }
        }
        "id2" => {
            if let Value::Object(o) = m.next_value::<Value>()? {
                e.id2_local = o.get("local").and_then(id_of_value);
                e.id2_global = o.get("global").and_then(id_of_value);
            }
        }
        _ => {
            m.next_value::<IgnoredAny>()?;
        }
    }
    Ok(())
}

fn note_bad(e: &mut JsonEvent, key: &str, why: String) {
    if e.bad_field.is_none() {
        e.bad_field = Some(format!("{key}: {why}"));
    }
}

fn string_of(v: Loose<'_>) -> Option<String> {
    match v {
        Loose::Str(s) => Some(s.into_owned()),
        _ => None,
    }
}

/// Perfetto's pid/tid coercion: outside 0..=u32::MAX is 0.
fn coerce_u32(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn ident_of(v: Loose<'_>) -> Option<Ident> {
    match v {
        Loose::Str(s) => Some(Ident::Str(s.into_owned())),
        Loose::Int(n) => Some(Ident::Num(coerce_u32(n))),
        Loose::Float(f) => Some(Ident::Num(coerce_u32(f as i64))),
        _ => None,
    }
}

fn id_of(v: Loose<'_>) -> Option<Id> {
    match v {
        Loose::Str(s) => Some(Id::Str(s.into_owned())),
        Loose::Int(n) => Some(Id::Int(n as u64)),
        _ => None,
    }
}

fn id_of_value(v: &Value) -> Option<Id> {
    match v {
        Value::String(s) => Some(Id::Str(s.clone())),
        Value::Number(n) => n.as_i64().map(|i| Id::Int(i as u64)),
        _ => None,
    }
}

/// Microseconds (a number or a numeric string) to nanoseconds, as
/// Perfetto coerces them.
fn coerce_ts(v: &Loose<'_>) -> Result<i64, String> {
    match v {
        Loose::Int(us) => us
            .checked_mul(1000)
            .ok_or_else(|| format!("{us} µs overflows 64-bit nanoseconds")),
        Loose::Float(us) => float_us_to_ns(*us),
        Loose::Str(s) => match serde_json::from_str::<Number>(s) {
            Ok(n) => match n.as_i64() {
                Some(us) => coerce_ts(&Loose::Int(us)),
                None => coerce_ts(&Loose::Float(n.as_f64().unwrap_or(f64::NAN))),
            },
            Err(_) => Err(format!("'{s}' is not a number (nothing may follow it)")),
        },
        Loose::Bool(_) | Loose::Other => Err("expected a number".into()),
    }
}

fn float_us_to_ns(us: f64) -> Result<i64, String> {
    if us == us.trunc() && us.abs() < 9.2e18 {
        // A whole number of µs is multiplied as an integer, as Perfetto does.
        return coerce_ts(&Loose::Int(us as i64));
    }
    // Half-way cases round away from zero (C's llround).
    let ns = (us * 1000.0).round();
    // i64::MAX as f64 rounds up to 2^63, itself out of range.
    if !ns.is_finite() || ns >= i64::MAX as f64 || ns < i64::MIN as f64 {
        return Err(format!("{us} µs is out of range"));
    }
    Ok(ns as i64)
}

/// Reads one event from its bytes; Err is a JSON syntax error (message,
/// byte index within `bytes`).
pub fn parse_event(bytes: &[u8]) -> Result<JsonEvent, (String, usize)> {
    serde_json::from_slice(bytes)
        .or_else(|strict| {
            // Perfetto's own reader is laxer: try again with its leniencies.
            match super::relaxed::relax(bytes) {
                Some(relaxed) => serde_json::from_slice(&relaxed).map_err(|_| strict),
                None => Err(strict),
            }
        })
        .map_err(|e| {
            let at = index_of(bytes, e.line(), e.column());
            let text = e.to_string();
            let message = match text.rfind(" at line ") {
                Some(cut) => text[..cut].to_string(),
                None => text,
            };
            (message, at)
        })
}

/// Byte index of a 1-based line and column.
fn index_of(bytes: &[u8], line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(i) => start += i + 1,
            None => break,
        }
    }
    (start + column.saturating_sub(1)).min(bytes.len())
}

/// Integer microseconds as nanoseconds (for the fast path).
pub(super) fn us_to_ns_int(us: i64) -> Result<i64, String> {
    coerce_ts(&Loose::Int(us))
}

/// Fractional microseconds as nanoseconds (for the fast path).
pub(super) fn us_to_ns_float(us: f64) -> Result<i64, String> {
    coerce_ts(&Loose::Float(us))
}

/// A numeric pid or tid (for the fast path).
pub(super) fn coerce_pid(n: i64) -> u32 {
    coerce_u32(n)
}
