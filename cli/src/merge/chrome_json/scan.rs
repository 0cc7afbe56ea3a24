//! The outer structure of a Chrome JSON trace, read from a stream: the
//! top-level object (or bare array), its `traceEvents` array, and each
//! event's bytes handed out one at a time.
//!
//! Invariants: memory is one read buffer plus the one event being handed
//! out (at most [`MAX_EVENT_BYTES`]); values of other keys are skipped
//! byte by byte, never held. What is accepted follows Perfetto's JSON
//! reader: trailing commas in the array, an empty `{}` event, a bare array
//! whose closing `]` is missing (a trace cut short by its writer), and
//! nothing but whitespace after the trace.

use std::io::{self, Read};

use super::{JsonError, JsonStats};

/// Bytes read from the source at a time.
const READ_CHUNK: usize = 256 << 10;
/// The largest single event accepted: an event is the unit held in memory.
pub const MAX_EVENT_BYTES: usize = 64 << 20;

/// Where the reader stands in the trace's outer structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Position {
    Start,
    /// Between keys of the top-level object.
    DictKey,
    /// Inside `traceEvents` (or the bare array: `top_array`).
    InArray,
    /// Inside the `systemTraceEvents` string, between lines.
    SystemTrace,
    End,
}

/// What the scanner hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// An event's bytes, and the offset of its first byte.
    Event(u64),
    /// One line of the `systemTraceEvents` text, unescaped (its newline
    /// dropped); an overlong one is handed out empty, `too_long`.
    SystemLine { too_long: bool },
}

/// The longest `systemTraceEvents` line kept; longer ones are skipped.
const MAX_SYSTEM_LINE: usize = 1 << 20;

/// A stream of one trace's event objects.
pub struct EventScanner<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Offset in the source of `buf[start]`.
    offset: u64,
    eof: bool,
    position: Position,
    top_array: bool,
    events: u64,
    /// The line being unescaped is over [`MAX_SYSTEM_LINE`].
    line_too_long: bool,
}

/// How a value is walked: inside a string, and how deep in `{`/`[`.
#[derive(Default)]
struct Walk {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl Walk {
    /// Takes one byte; true when the value ends with it.
    #[inline(always)]
    fn step(&mut self, b: u8) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                return self.depth == 0;
            }
            return false;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }

    /// Takes the bytes of `chunk` up to the value's end: the index of its
    /// last byte, or None if it goes on after the chunk. The inside of a
    /// string is skipped to its next quote or backslash at once.
    #[inline]
    fn run(&mut self, chunk: &[u8]) -> Option<usize> {
        let mut i = 0;
        while i < chunk.len() {
            if self.in_string && !self.escaped {
                match memchr::memchr2(b'"', b'\\', &chunk[i..]) {
                    Some(j) => i += j,
                    None => return None,
                }
            }
            if self.step(chunk[i]) {
                return Some(i);
            }
            i += 1;
        }
        None
    }
}

/// One unescaped unit of a string.
enum Escaped {
    Byte(u8),
    Char(char),
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl<R: Read> EventScanner<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            offset: 0,
            eof: false,
            position: Position::Start,
            top_array: false,
            events: 0,
            line_too_long: false,
        }
    }

    /// Offset in the source of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn peek(&mut self) -> Result<Option<u8>, JsonError> {
        if self.start == self.end && !self.refill()? {
            return Ok(None);
        }
        Ok(Some(self.buf[self.start]))
    }

    fn bump(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    /// Reads more bytes; false at the end of the source.
    fn refill(&mut self) -> Result<bool, JsonError> {
        if self.eof {
            return Ok(false);
        }
        self.start = 0;
        self.end = 0;
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(JsonError::Io(e)),
            }
        }
    }

    fn skip_space(&mut self) -> Result<Option<u8>, JsonError> {
        loop {
            match self.peek()? {
                Some(b) if is_space(b) => self.bump(1),
                other => return Ok(other),
            }
        }
    }

    fn syntax(&self, expected: &str) -> JsonError {
        JsonError::Syntax {
            offset: self.offset,
            expected: expected.to_string(),
        }
    }

    /// Walks one `{...}`, `[...]` or string value from its first byte,
    /// appending its bytes to `keep` if given.
    fn walk_value(&mut self, mut keep: Option<&mut Vec<u8>>) -> Result<(), JsonError> {
        let begin = self.offset;
        let mut walk = Walk::default();
        loop {
            if self.start == self.end && !self.refill()? {
                return Err(JsonError::Syntax {
                    offset: self.offset,
                    expected: format!(
                        "the end of the value that starts at byte offset {begin} (the file ends inside it)"
                    ),
                });
            }
            let chunk = &self.buf[self.start..self.end];
            let done_at = walk.run(chunk);
            let n = done_at.map_or(chunk.len(), |i| i + 1);
            if let Some(out) = keep.as_deref_mut() {
                if out.len() + n > MAX_EVENT_BYTES {
                    return Err(JsonError::Syntax {
                        offset: begin,
                        expected: format!(
                            "an event of at most {MAX_EVENT_BYTES} bytes (this one is longer)"
                        ),
                    });
                }
                out.extend_from_slice(&chunk[..n]);
            }
            self.bump(n);
            if done_at.is_some() {
                return Ok(());
            }
        }
    }

    /// Skips a number, `true`, `false` or `null`.
    fn skip_scalar(&mut self) -> Result<(), JsonError> {
        let begin = self.offset;
        while let Some(b) = self.peek()? {
            if is_space(b) || matches!(b, b',' | b'}' | b']') {
                break;
            }
            if !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.')) {
                return Err(self.syntax("a JSON value"));
            }
            self.bump(1);
        }
        if self.offset == begin {
            return Err(self.syntax("a JSON value"));
        }
        Ok(())
    }

    fn skip_value(&mut self) -> Result<(), JsonError> {
        match self.skip_space()? {
            Some(b'{' | b'[' | b'"') => self.walk_value(None),
            Some(_) => self.skip_scalar(),
            None => Err(self.syntax("a value (the file ends after a key)")),
        }
    }

    /// When the next item of the events array is an event object: its
    /// offset and the bytes read so far from its `{` on (the event may go
    /// on after them), for a caller that reads it in place and then
    /// [`EventScanner::consume_event`]s it. None otherwise (or when the
    /// caller reads it with [`EventScanner::next_event`] after all).
    pub fn event_in_buffer(&mut self) -> Result<Option<(u64, &[u8])>, JsonError> {
        if self.position != Position::InArray {
            return Ok(None);
        }
        loop {
            match self.skip_space()? {
                // As `array_item` takes them, one at a time.
                Some(b',') => self.bump(1),
                Some(b'{') => {
                    return Ok(Some((self.offset, &self.buf[self.start..self.end])));
                }
                _ => return Ok(None),
            }
        }
    }

    /// Moves past the `n` bytes of the event [`EventScanner::event_in_buffer`]
    /// handed out, read in place.
    pub fn consume_event(&mut self, n: usize) {
        self.bump(n.min(self.end - self.start));
        self.events += 1;
    }

    /// The next event's bytes, or `systemTraceEvents` line, into `out`
    /// (cleared first); None at the end of the trace.
    pub fn next_event(
        &mut self,
        out: &mut Vec<u8>,
        stats: &mut JsonStats,
    ) -> Result<Option<Item>, JsonError> {
        out.clear();
        loop {
            match self.position {
                Position::Start => self.start_trace()?,
                Position::DictKey => self.dict_key(stats)?,
                Position::InArray => {
                    if let Some(at) = self.array_item(out)? {
                        return Ok(Some(Item::Event(at)));
                    }
                }
                Position::SystemTrace => {
                    if let Some(item) = self.system_line(out)? {
                        return Ok(Some(item));
                    }
                }
                Position::End => {
                    return match self.skip_space()? {
                        None => Ok(None),
                        Some(_) => Err(self.syntax("nothing after the end of the trace")),
                    };
                }
            }
        }
    }

    fn start_trace(&mut self) -> Result<(), JsonError> {
        // A UTF-8 byte order mark some editors write.
        if self.peek()? == Some(0xEF) {
            self.bump(1);
            for want in [0xBB, 0xBF] {
                if self.peek()? != Some(want) {
                    return Err(self.syntax("'{' or '[' opening a Chrome JSON trace"));
                }
                self.bump(1);
            }
        }
        match self.skip_space()? {
            Some(b'{') => self.position = Position::DictKey,
            Some(b'[') => {
                self.top_array = true;
                self.position = Position::InArray;
            }
            _ => return Err(self.syntax("'{' or '[' opening a Chrome JSON trace")),
        }
        self.bump(1);
        Ok(())
    }

    fn dict_key(&mut self, stats: &mut JsonStats) -> Result<(), JsonError> {
        match self.skip_space()? {
            Some(b'}') => {
                self.bump(1);
                self.position = Position::End;
                return Ok(());
            }
            Some(b',') => {
                self.bump(1);
                return Ok(());
            }
            Some(b'"') => {}
            Some(_) => return Err(self.syntax("a key, ',' or '}' in the top-level object")),
            None => {
                return Err(self.syntax(
                    "'}' closing the top-level object (the file ends inside it: truncated?)",
                ));
            }
        }
        let mut key = Vec::new();
        self.walk_value(Some(&mut key))?;
        if self.skip_space()? != Some(b':') {
            return Err(self.syntax("':' after a key"));
        }
        self.bump(1);
        match &key[..] {
            b"\"traceEvents\"" => {
                if self.skip_space()? != Some(b'[') {
                    return Err(self.syntax("'[': traceEvents must be an array"));
                }
                self.bump(1);
                self.position = Position::InArray;
                return Ok(());
            }
            b"\"displayTimeUnit\"" => stats.json_display_time_unit += 1,
            b"\"systemTraceEvents\"" => {
                if self.skip_space()? == Some(b'"') {
                    self.bump(1);
                    self.position = Position::SystemTrace;
                    return Ok(());
                }
                stats.json_system_trace_events_not_converted += 1;
            }
            _ => {}
        }
        self.skip_value()
    }

    /// Unescapes the `systemTraceEvents` string up to its next line end
    /// into `out`: a line (possibly empty), or None at the string's end
    /// with nothing left.
    fn system_line(&mut self, out: &mut Vec<u8>) -> Result<Option<Item>, JsonError> {
        loop {
            let Some(b) = self.peek()? else {
                return Err(self.syntax(
                    "'\"' closing the systemTraceEvents string (the file ends inside it)",
                ));
            };
            self.bump(1);
            let decoded = match b {
                b'"' => {
                    self.position = Position::DictKey;
                    let too_long = std::mem::take(&mut self.line_too_long);
                    return Ok(
                        (!out.is_empty() || too_long).then_some(Item::SystemLine { too_long })
                    );
                }
                b'\\' => self.escape()?,
                _ => Escaped::Byte(b),
            };
            match decoded {
                Escaped::Byte(b'\n') => {
                    let too_long = std::mem::take(&mut self.line_too_long);
                    return Ok(Some(Item::SystemLine { too_long }));
                }
                Escaped::Byte(b) => out.push(b),
                Escaped::Char(c) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
            if out.len() > MAX_SYSTEM_LINE || self.line_too_long {
                self.line_too_long = true;
                out.clear();
            }
        }
    }

    /// The character after a backslash inside a string.
    fn escape(&mut self) -> Result<Escaped, JsonError> {
        let Some(b) = self.peek()? else {
            return Err(self.syntax("an escape after '\\' (the file ends inside a string)"));
        };
        self.bump(1);
        Ok(match b {
            b'n' => Escaped::Byte(b'\n'),
            b't' => Escaped::Byte(b'\t'),
            b'r' => Escaped::Byte(b'\r'),
            b'b' => Escaped::Byte(0x08),
            b'f' => Escaped::Byte(0x0c),
            b'"' | b'\\' | b'/' => Escaped::Byte(b),
            b'u' => {
                let unit = self.hex4()?;
                let c = if (0xD800..0xDC00).contains(&unit) && self.peek()? == Some(b'\\') {
                    self.bump(1);
                    if self.peek()? != Some(b'u') {
                        return Err(self.syntax("'\\u' after a high surrogate"));
                    }
                    self.bump(1);
                    let low = self.hex4()?;
                    (0xDC00..0xE000)
                        .contains(&low)
                        .then(|| 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                        .and_then(char::from_u32)
                } else {
                    char::from_u32(unit)
                };
                Escaped::Char(c.unwrap_or(char::REPLACEMENT_CHARACTER))
            }
            _ => return Err(self.syntax("a JSON escape (one of \"\\/bfnrtu) after '\\'")),
        })
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut v = 0;
        for _ in 0..4 {
            let digit = self
                .peek()?
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or_else(|| self.syntax("four hex digits after '\\u'"))?;
            self.bump(1);
            v = v * 16 + digit;
        }
        Ok(v)
    }

    /// One step inside the events array: an event's offset, or None after
    /// a separator or the array's end.
    fn array_item(&mut self, out: &mut Vec<u8>) -> Result<Option<u64>, JsonError> {
        match self.skip_space()? {
            Some(b',') => self.bump(1),
            Some(b']') => {
                self.bump(1);
                self.position = if self.top_array {
                    Position::End
                } else {
                    Position::DictKey
                };
            }
            Some(b'{') => {
                let at = self.offset;
                self.walk_value(Some(out))?;
                self.events += 1;
                return Ok(Some(at));
            }
            Some(_) => return Err(self.syntax("an event object '{', ',' or ']'")),
            // A bare array cut short is accepted, as Perfetto does.
            None if self.top_array => self.position = Position::End,
            None => {
                let plural = if self.events == 1 { "" } else { "s" };
                return Err(self.syntax(&format!(
                    "']' closing traceEvents (the file ends after {} event{plural}: truncated?)",
                    self.events
                )));
            }
        }
        Ok(None)
    }
}

/// Perfetto's sniff of a Chrome JSON trace: with whitespace removed, the
/// head starts `{"` or `[{"` (a manifest is recognised before this). A
/// UTF-8 byte order mark before it is allowed.
pub fn looks_like_chrome_json(head: &[u8]) -> bool {
    let head = head.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(head);
    let start: Vec<u8> = head
        .iter()
        .copied()
        .filter(|&b| !is_space(b))
        .take(3)
        .collect();
    start.starts_with(b"{\"") || start.starts_with(b"[{\"")
}
