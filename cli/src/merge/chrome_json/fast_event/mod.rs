//! The fast path of reading one event: the common shapes of events read
//! straight from their bytes, strings borrowed, and their `args` encoded
//! at once as the TrackEvent's debug annotations, with no `Value` built
//! (but for counter and metadata events, whose args are read as values:
//! [`values`]).
//!
//! Invariant: an event is read here only when the result is exactly what
//! [`super::event::parse_event`] and [`super::convert`] make of it (the
//! same fields, the same annotation bytes: keys in sorted order, nulls
//! dropped); anything else (an escape in a string, a duplicate key, a
//! number whose value might round differently, `id2`, args of counter and
//! metadata events that are not flat, a syntax error) answers None, and
//! the caller reads the event the full way. So this path decides nothing
//! on its own: it only skips allocations.

use super::event::{Id, Ident, JsonEvent, Scope};
use super::json_scan::{Cursor, Num};

/// TrackEvent field 4 (debug_annotations), length-delimited.
const TRACK_EVENT_ANNOTATION: u8 = 0x22;
/// DebugAnnotation fields (length-delimited unless said).
const DICT_ENTRY: u8 = 0x5a;
const ARRAY_VALUE: u8 = 0x62;
const NAME: u8 = 0x52;
const BOOL_VALUE: u8 = 0x10; // varint
const UINT_VALUE: u8 = 0x18; // varint
const INT_VALUE: u8 = 0x20; // varint
const DOUBLE_VALUE: u8 = 0x29; // fixed64
const STRING_VALUE: u8 = 0x32;

/// Deepest args nesting read here (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 32;

/// The keys an event may hold once (a duplicate goes the full way), as
/// a bit each; a key is matched once, by [`plain_key`].
mod key {
    pub const PH: u32 = 0;
    pub const TS: u32 = 1;
    pub const DUR: u32 = 2;
    pub const TTS: u32 = 3;
    pub const TDUR: u32 = 4;
    pub const PID: u32 = 5;
    pub const TID: u32 = 6;
    pub const ID: u32 = 7;
    pub const BIND_ID: u32 = 8;
    pub const CAT: u32 = 9;
    pub const NAME: u32 = 10;
    pub const FLOW_IN: u32 = 11;
    pub const FLOW_OUT: u32 = 12;
    pub const S: u32 = 13;
    pub const BP: u32 = 14;
    pub const ARGS: u32 = 15;
}

/// The key at the cursor when it is one of the event's, written plainly
/// (as nearly every writer writes them): its bit, the cursor past its
/// closing quote. Matched on its quoted bytes, the quotes included, so
/// only the exact key matches (`"id2"` is not `"id"`); None leaves the
/// cursor where it was, for the key to be read as a string.
#[inline(always)]
fn plain_key(c: &mut Cursor<'_>) -> Option<u32> {
    c.skip_ws();
    let rest = c.rest();
    let is = |quoted: &[u8]| rest.starts_with(quoted);
    let (bit, len) = match *rest.get(1)? {
        b'p' if is(b"\"ph\"") => (key::PH, 4),
        b'p' if is(b"\"pid\"") => (key::PID, 5),
        b't' if is(b"\"ts\"") => (key::TS, 4),
        b't' if is(b"\"tid\"") => (key::TID, 5),
        b't' if is(b"\"tts\"") => (key::TTS, 5),
        b't' if is(b"\"tdur\"") => (key::TDUR, 6),
        b'd' if is(b"\"dur\"") => (key::DUR, 5),
        b'n' if is(b"\"name\"") => (key::NAME, 6),
        b'c' if is(b"\"cat\"") => (key::CAT, 5),
        b'a' if is(b"\"args\"") => (key::ARGS, 6),
        b'i' if is(b"\"id\"") => (key::ID, 4),
        b'b' if is(b"\"bp\"") => (key::BP, 4),
        b'b' if is(b"\"bind_id\"") => (key::BIND_ID, 9),
        b'f' if is(b"\"flow_in\"") => (key::FLOW_IN, 9),
        b'f' if is(b"\"flow_out\"") => (key::FLOW_OUT, 10),
        b's' if is(b"\"s\"") => (key::S, 3),
        _ => return None,
    };
    c.skip(len);
    Some(bit)
}

/// The key a bit stands for (to name a bad field).
fn key_name(bit: u32) -> &'static str {
    match bit {
        key::TS => "ts",
        key::DUR => "dur",
        key::TTS => "tts",
        _ => "tdur",
    }
}

/// Where the event's `name` and `cat` strings are: copied once the
/// whole event is known to be UTF-8 (so it is checked once).
#[derive(Default)]
struct Strs {
    name: Option<std::ops::Range<usize>>,
    cat: Option<std::ops::Range<usize>>,
    /// Where the args object starts (its `{`).
    args: Option<usize>,
}

/// Buffers the fast path reuses from event to event (so reading an event
/// allocates nothing once they have grown).
#[derive(Default)]
pub struct Scratch {
    /// Entries of the args objects being read, innermost last (a stack:
    /// each object's entries sit above its parent's).
    entries: Vec<Entry>,
    /// An object's encoded entries while they are put in key order.
    moved: Vec<u8>,
}

/// Reads the event object `bytes` start with into `e` (reset first, its
/// strings' buffers kept), its args' annotations appended to `args` (so
/// they go straight where the caller keeps them): the length of its
/// object; None when it must be read the full way (or `bytes` end inside
/// it), `e` then holding anything and `args` anything past its length at
/// the call (the caller truncates it).
pub fn parse_fast(
    bytes: &[u8],
    e: &mut JsonEvent,
    args: &mut Vec<u8>,
    scratch: &mut Scratch,
) -> Option<usize> {
    let args_from = args.len();
    scratch.entries.clear();
    let mut c = Cursor::new(bytes);
    e.reset();
    let mut seen = 0u32;
    let mut strs = Strs::default();
    c.expect(b'{')?;
    if !c.eat(b'}') {
        loop {
            // Any other key without an escape (one sends the event the
            // full way) is not one of the event's: its value is skipped.
            let bit = match plain_key(&mut c) {
                Some(bit) => Some(bit),
                None if c.string()? == b"id2" => return None,
                None => None,
            };
            c.expect(b':')?;
            e.any_field = true;
            if let Some(i) = bit {
                if seen & (1 << i) != 0 {
                    return None;
                }
                seen |= 1 << i;
                read_field(e, i, &mut c, args, scratch, &mut strs)?;
            } else {
                c.skip_value(MAX_DEPTH)?;
            }
            if c.eat(b',') {
                continue;
            }
            c.expect(b'}')?;
            break;
        }
    }
    // Every string of the event is valid UTF-8: checked here, once, when
    // one holds a byte above 0x7f (else the event is ASCII).
    let event = bytes.get(..c.pos())?;
    if !c.ascii() {
        std::str::from_utf8(event).ok()?;
    }
    if matches!(e.phase, b'C' | b'M') {
        // Their args are values; no annotations (as the full reading).
        args.truncate(args_from);
        if let Some(at) = strs.args {
            e.args = values::args_values(std::str::from_utf8(event).ok()?, at)?;
        }
    }
    if let Some(at) = strs.name {
        e.name.push_str(std::str::from_utf8(c.slice(at)).ok()?);
    }
    if let Some(at) = strs.cat {
        e.cat.push_str(std::str::from_utf8(c.slice(at)).ok()?);
    }
    Some(c.pos())
}

/// A scalar as the event's fields read it (`event::Loose`).
enum Scalar<'a> {
    Str(&'a [u8]),
    Num(Num),
    Bool(bool),
    /// null, an object or an array (skipped).
    Other,
}

fn scalar<'a>(c: &mut Cursor<'a>) -> Option<Scalar<'a>> {
    Some(match c.peek()? {
        b'"' => Scalar::Str(c.string_here()?),
        b't' | b'f' => Scalar::Bool(c.boolean()?),
        b'n' => {
            c.null()?;
            Scalar::Other
        }
        b'{' | b'[' => {
            c.skip_value(MAX_DEPTH)?;
            Scalar::Other
        }
        _ => Scalar::Num(c.number_here()?),
    })
}

/// The phase: the first byte of a string, else 0.
fn phase(c: &mut Cursor<'_>) -> Option<u8> {
    // Nearly always one plain letter: read as it is.
    if let [b'"', p, b'"', ..] = *c.rest()
        && (0x20..0x80).contains(&p)
        && p != b'"'
        && p != b'\\'
    {
        c.skip(3);
        return Some(p);
    }
    Some(match scalar(c)? {
        Scalar::Str(s) => s.first().copied().unwrap_or(0),
        _ => 0,
    })
}

/// A string's bytes as an owned string.
fn text(s: &[u8]) -> Option<String> {
    std::str::from_utf8(s).ok().map(str::to_owned)
}

/// Reads the value of field `bit` into `e`.
fn read_field(
    e: &mut JsonEvent,
    bit: u32,
    c: &mut Cursor<'_>,
    args: &mut Vec<u8>,
    scratch: &mut Scratch,
    strs: &mut Strs,
) -> Option<()> {
    match bit {
        key::ARGS => {
            if c.peek()? == b'{' {
                strs.args = Some(c.pos());
                if matches!(e.phase, b'C' | b'M') {
                    // Read as values at the end (`values`).
                    c.skip_value(MAX_DEPTH)?;
                    return Some(());
                }
                encode_args(c, args, scratch)?;
            } else {
                c.skip_value(MAX_DEPTH)?;
            }
            return Some(());
        }
        key::PH => e.phase = phase(c)?,
        key::TS | key::DUR | key::TTS | key::TDUR => {
            let ns = match c.peek()? {
                b'-' | b'0'..=b'9' => c.us_to_ns()?,
                _ => match scalar(c)? {
                    Scalar::Num(n) => n.us_to_ns(),
                    // A numeric string is read the full way.
                    Scalar::Str(_) => return None,
                    _ => Err("expected a number".to_string()),
                },
            };
            match (bit, ns) {
                (key::TS, Ok(ns)) => e.ts = Some(ns),
                (key::DUR, Ok(ns)) => e.dur = Some(ns),
                (key::TTS, Ok(ns)) => e.tts = Some(ns),
                (_, Ok(ns)) => e.tdur = Some(ns),
                // The first bad field is the one named (`event::note_bad`).
                (_, Err(why)) => {
                    if e.bad_field.is_none() {
                        e.bad_field = Some(format!("{}: {why}", key_name(bit)));
                    }
                }
            }
        }
        key::PID | key::TID => {
            let ident = match scalar(c)? {
                Scalar::Str(s) => Some(Ident::Str(text(s)?)),
                Scalar::Num(n) => Some(Ident::Num(n.as_pid())),
                _ => None,
            };
            if bit == key::PID {
                e.pid = ident;
            } else {
                e.tid = ident;
            }
        }
        key::ID | key::BIND_ID => {
            let id = match scalar(c)? {
                Scalar::Str(s) => Some(Id::Str(text(s)?)),
                Scalar::Num(n) => n.as_id().map(Id::Int),
                _ => None,
            };
            if bit == key::ID {
                e.id = id;
            } else {
                e.bind_id = id;
            }
        }
        key::CAT | key::NAME => {
            // Copied at the end (`Strs`); a non-string leaves it empty.
            let at = if c.peek()? == b'"' {
                Some(c.string_at()?)
            } else {
                scalar(c)?;
                None
            };
            if bit == key::CAT {
                strs.cat = at;
            } else {
                strs.name = at;
            }
        }
        key::FLOW_IN => e.flow_in = matches!(scalar(c)?, Scalar::Bool(true)),
        key::FLOW_OUT => e.flow_out = matches!(scalar(c)?, Scalar::Bool(true)),
        key::S => {
            e.scope = match scalar(c)? {
                Scalar::Str(b"p") => Some(Scope::Process),
                Scalar::Str(b"t") => Some(Scope::Thread),
                Scalar::Str(b"g") => Some(Scope::Global),
                _ => None,
            }
        }
        key::BP => e.bind_enclosing = matches!(scalar(c)?, Scalar::Str(b"e")),
        _ => c.skip_value(MAX_DEPTH)?,
    }
    Some(())
}

/// One entry of an object being encoded: its key, and where its field
/// (tag, length, annotation) was written.
#[derive(Clone)]
struct Entry {
    key: std::ops::Range<usize>,
    /// The key's first eight bytes, big-endian, zero-padded: orders most
    /// keys without reading them (a key holds no zero byte: control
    /// characters send a string the full way).
    prefix: u64,
    field: std::ops::Range<usize>,
}

fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// The order of two entries' keys (byte order, as a `serde_json::Map`
/// holds them).
fn key_order(c: &Cursor<'_>, a: &Entry, b: &Entry) -> std::cmp::Ordering {
    a.prefix
        .cmp(&b.prefix)
        .then_with(|| c.slice(a.key.clone()).cmp(c.slice(b.key.clone())))
}

/// Buffers of one args object's encoding.
struct Bufs<'s> {
    /// Entries of the objects being read, innermost last.
    stack: &'s mut Vec<Entry>,
    /// A copy of an object's fields while they are put in key order.
    moved: &'s mut Vec<u8>,
}

/// Encodes the object at the cursor as one `tag` field per entry (each
/// an annotation named by its key), in the order of their keys; None on
/// a duplicate key. The fields are written in the text's order, then
/// moved into key order unless they already are (the common case).
fn object(
    c: &mut Cursor<'_>,
    out: &mut Vec<u8>,
    tag: u8,
    depth: u32,
    bufs: &mut Bufs<'_>,
) -> Option<()> {
    let start = bufs.stack.len();
    let body = out.len();
    c.expect(b'{')?;
    if !c.eat(b'}') {
        loop {
            let key = c.string_at()?;
            c.expect(b':')?;
            let at = out.len();
            let name = c.slice(key.clone());
            nested(out, tag, |buf| annotation(Some(name), c, buf, depth, bufs))?;
            bufs.stack.push(Entry {
                prefix: key_prefix(name),
                key,
                field: at..out.len(),
            });
            if c.eat(b',') {
                continue;
            }
            c.expect(b'}')?;
            break;
        }
    }
    let mine = bufs.stack.get_mut(start..)?;
    // Strictly ascending: sorted, and no duplicate key.
    if !mine
        .windows(2)
        .all(|w| key_order(c, &w[0], &w[1]) == std::cmp::Ordering::Less)
    {
        // Unstable is enough: equal keys are refused below.
        mine.sort_unstable_by(|x, y| key_order(c, x, y));
        if mine
            .windows(2)
            .any(|w| key_order(c, &w[0], &w[1]) == std::cmp::Ordering::Equal)
        {
            return None;
        }
        bufs.moved.clear();
        bufs.moved.extend_from_slice(out.get(body..)?);
        out.truncate(body);
        for e in mine.iter() {
            out.extend_from_slice(bufs.moved.get(e.field.start - body..e.field.end - body)?);
        }
    }
    bufs.stack.truncate(start);
    Some(())
}

/// The event's args object as TrackEvent debug annotations.
fn encode_args(c: &mut Cursor<'_>, out: &mut Vec<u8>, scratch: &mut Scratch) -> Option<()> {
    let mut bufs = Bufs {
        stack: &mut scratch.entries,
        moved: &mut scratch.moved,
    };
    object(c, out, TRACK_EVENT_ANNOTATION, MAX_DEPTH, &mut bufs)
}

/// Appends field `tag` holding what `body` writes; a null (body answers
/// Some(false)) leaves nothing.
fn nested(
    out: &mut Vec<u8>,
    tag: u8,
    body: impl FnOnce(&mut Vec<u8>) -> Option<bool>,
) -> Option<()> {
    let start = out.len();
    out.push(tag);
    // One byte of length, widened below if the body is longer.
    out.push(0);
    let body_at = out.len();
    if !body(out)? {
        out.truncate(start);
        return Some(());
    }
    let len = out.len() - body_at;
    if len < 0x80 {
        out[body_at - 1] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        put_varint(&mut prefix, len as u64);
        out.splice(body_at - 1..body_at, prefix);
    }
    Some(())
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The value at the cursor as a DebugAnnotation's fields (in the order
/// prost writes them: name, then dict entries, array values or the
/// value); Some(false) for null, which is dropped.
fn annotation(
    name: Option<&[u8]>,
    c: &mut Cursor<'_>,
    out: &mut Vec<u8>,
    depth: u32,
    bufs: &mut Bufs<'_>,
) -> Option<bool> {
    let depth = depth.checked_sub(1)?;
    let first = c.peek()?;
    if first == b'n' {
        c.null()?;
        return Some(false);
    }
    if let Some(n) = name {
        put_bytes(out, NAME, n);
    }
    match first {
        b'{' => object(c, out, DICT_ENTRY, depth, bufs)?,
        b'[' => {
            c.expect(b'[')?;
            if !c.eat(b']') {
                loop {
                    nested(out, ARRAY_VALUE, |buf| {
                        annotation(None, c, buf, depth, bufs)
                    })?;
                    if c.eat(b',') {
                        continue;
                    }
                    c.expect(b']')?;
                    break;
                }
            }
        }
        b'"' => {
            let s = c.string_here()?;
            put_bytes(out, STRING_VALUE, s);
        }
        b't' | b'f' => {
            let b = c.boolean()?;
            out.push(BOOL_VALUE);
            out.push(u8::from(b));
        }
        _ => {
            let n = c.number_here()?;
            match n {
                Num::Int(i) => {
                    out.push(INT_VALUE);
                    put_varint(out, i as u64);
                }
                Num::Uint(u) if u <= i64::MAX as u64 => {
                    out.push(INT_VALUE);
                    put_varint(out, u);
                }
                Num::Uint(u) => {
                    out.push(UINT_VALUE);
                    put_varint(out, u);
                }
                Num::Float(f) => {
                    out.push(DOUBLE_VALUE);
                    out.extend_from_slice(&f.to_le_bytes());
                }
            }
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests;
mod values;
