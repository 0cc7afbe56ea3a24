//! A cursor over one event's JSON bytes for the fast path
//! ([`super::fast_event`]): tokens read in place, strings borrowed.
//!
//! Invariant: every method answers None for anything it does not read
//! exactly as serde_json does (an escape in a string, a control character,
//! invalid UTF-8, a number outside the range where serde_json's value is
//! certain, a syntax error); the caller then reads the event with
//! serde_json, which gives the value or the error.

use super::event::{coerce_pid, us_to_ns_float, us_to_ns_int};

/// A JSON number as serde_json reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// A negative integer.
    Int(i64),
    /// A non-negative integer.
    Uint(u64),
    Float(f64),
}

impl Num {
    /// As microseconds turned into nanoseconds (`event::coerce_ts`).
    pub fn us_to_ns(self) -> Result<i64, String> {
        match self {
            Num::Int(i) => us_to_ns_int(i),
            Num::Uint(u) => match i64::try_from(u) {
                Ok(i) => us_to_ns_int(i),
                Err(_) => us_to_ns_float(u as f64),
            },
            Num::Float(f) => us_to_ns_float(f),
        }
    }

    /// As a pid or tid (`event::ident_of`).
    pub fn as_pid(self) -> u32 {
        match self {
            Num::Int(i) => coerce_pid(i),
            Num::Uint(u) => match i64::try_from(u) {
                Ok(i) => coerce_pid(i),
                Err(_) => coerce_pid(u as f64 as i64),
            },
            Num::Float(f) => coerce_pid(f as i64),
        }
    }

    /// As an async or flow id (`event::id_of`): integers up to i64::MAX.
    pub fn as_id(self) -> Option<u64> {
        match self {
            Num::Int(i) => Some(i as u64),
            Num::Uint(u) if u <= i64::MAX as u64 => Some(u),
            _ => None,
        }
    }
}

/// Powers of ten a double holds exactly.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Powers of ten as integers, up to the largest below 2^64.
const POW10_INT: [u64; 20] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
    10_000_000_000_000_000,
    100_000_000_000_000_000,
    1_000_000_000_000_000_000,
    10_000_000_000_000_000_000,
];

/// The bytes that end a string's plain run: its closing quote, a
/// backslash, a control character, and (to be noted) any above 0x7f.
const STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = b == b'"' as usize || b == b'\\' as usize || b < 0x20 || b > 0x7f;
        b += 1;
    }
    t
};

/// The run of at most `max` (at most 19) ASCII digits `rest` starts
/// with: its value and length.
fn digit_run(rest: &[u8], max: usize) -> (u64, usize) {
    let (mut v, mut n) = (0u64, 0);
    for &b in rest.iter().take(max) {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = v * 10 + u64::from(d);
        n += 1;
    }
    (v, n)
}

/// The high bit of each byte of `w` (eight string bytes, the first
/// lowest) that is a [`STRING_STOP`], and maybe of bytes above the first
/// such one (a borrow runs upward from it): so the lowest is exact.
#[inline(always)]
fn string_stops(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Below 0x80, a byte's high bit is set by a subtraction only when it
    // is the quote (^ then - 1), the backslash, or below 0x20 (- 0x20).
    let quote = (w ^ (ONES * u64::from(b'"'))).wrapping_sub(ONES);
    let backslash = (w ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES);
    let control = w.wrapping_sub(ONES * 0x20);
    (quote | backslash | control | w) & (ONES * 0x80)
}

/// A number written with a fraction and no exponent, as its digits.
#[derive(Clone, Copy)]
struct Decimal {
    significand: u64,
    frac_digits: u32,
    negative: bool,
}

#[derive(Clone)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// A string read held a byte above 0x7f: the text must be checked
    /// as UTF-8 ([`Cursor::ascii`]).
    non_ascii: bool,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            pos: 0,
            non_ascii: false,
        }
    }

    /// Every string read so far is ASCII. Outside strings the cursor
    /// reads nothing but ASCII, so then the bytes read are valid UTF-8.
    pub fn ascii(&self) -> bool {
        !self.non_ascii
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    /// A cursor at `pos` of the same bytes.
    pub fn at(&self, pos: usize) -> Self {
        Self {
            bytes: self.bytes,
            pos,
            non_ascii: self.non_ascii,
        }
    }

    /// The bytes from the cursor on.
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    /// Moves past `n` bytes the caller has read from [`Cursor::rest`]
    /// (plain ASCII outside a string's text).
    pub fn skip(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.bytes.len());
    }

    /// The bytes at `range` (a [`Cursor::string_at`] answer).
    pub fn slice(&self, range: std::ops::Range<usize>) -> &'a [u8] {
        self.bytes.get(range).unwrap_or_default()
    }

    /// [`Cursor::string`] as where its bytes are. Not inlined: inlined
    /// into the fast path's callers (as other changes to the crate can
    /// make the compiler do) it costs more instructions, not fewer.
    #[inline(never)]
    pub fn string_at(&mut self) -> Option<std::ops::Range<usize>> {
        let s = self.string()?;
        let end = self.pos - 1;
        Some(end - s.len()..end)
    }

    #[inline(always)]
    pub fn skip_ws(&mut self) {
        // Most events are written without whitespace: one test then.
        if let Some(&b) = self.bytes.get(self.pos)
            && b > b' '
        {
            return;
        }
        self.skip_ws_run();
    }

    #[inline(never)]
    fn skip_ws_run(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    pub fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes.get(self.pos).copied()
    }

    /// Consumes `b` if it is next.
    pub fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub fn expect(&mut self, b: u8) -> Option<()> {
        self.eat(b).then_some(())
    }

    /// The bytes of a string without escapes or control characters (not
    /// checked as UTF-8 here: a byte above 0x7f is noted, and the caller
    /// checks the text then, [`Cursor::ascii`]).
    pub fn string(&mut self) -> Option<&'a [u8]> {
        self.skip_ws();
        self.string_here()
    }

    /// [`Cursor::string`] with no whitespace before it (as after a
    /// [`Cursor::peek`]).
    pub fn string_here(&mut self) -> Option<&'a [u8]> {
        if self.bytes.get(self.pos) != Some(&b'"') {
            return None;
        }
        let start = self.pos + 1;
        let rest = self.bytes.get(start..)?;
        // Eight bytes a test while eight remain, then one table look-up a
        // byte; after a byte above 0x7f (noted) the rest is scanned
        // without looking for more.
        let mut len = 0;
        loop {
            let tail = rest.get(len..)?;
            match tail.first_chunk::<8>() {
                Some(w) => {
                    let m = string_stops(u64::from_le_bytes(*w));
                    if m != 0 {
                        len += (m.trailing_zeros() / 8) as usize;
                        break;
                    }
                    len += 8;
                }
                None => {
                    len += tail.iter().position(|&b| STRING_STOP[usize::from(b)])?;
                    break;
                }
            }
        }
        if rest.get(len).is_some_and(|&b| b > 0x7f) {
            self.non_ascii = true;
            len += rest
                .get(len..)?
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        }
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.pos = start + len + 1;
        rest.get(..len)
    }

    pub fn boolean(&mut self) -> Option<bool> {
        self.skip_ws();
        for (word, value) in [(&b"true"[..], true), (&b"false"[..], false)] {
            if self.bytes[self.pos..].starts_with(word) {
                self.pos += word.len();
                return Some(value);
            }
        }
        None
    }

    pub fn null(&mut self) -> Option<()> {
        self.skip_ws();
        self.bytes[self.pos..]
            .starts_with(b"null")
            .then(|| self.pos += 4)
    }

    /// The run of digits at the cursor: its value, its length, and
    /// whether the value overflowed u64 (then the value is not it).
    fn digits(&mut self) -> (u64, usize, bool) {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        // Locals, not the cursor's fields, in the loop: most numbers are
        // a few digits, and the loop is the whole cost of reading them.
        let (mut v, mut n) = (0u64, 0);
        for &b in rest {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            v = v.wrapping_mul(10).wrapping_add(u64::from(d));
            n += 1;
        }
        self.pos += n;
        // Nineteen digits always fit; a longer run is read again, checked.
        if n <= 19 {
            return (v, n, false);
        }
        let mut checked = Some(0u64);
        for &b in &rest[..n] {
            checked = checked
                .and_then(|x| x.checked_mul(10))
                .and_then(|x| x.checked_add(u64::from(b - b'0')));
        }
        (checked.unwrap_or(0), n, checked.is_none())
    }

    /// A number: integers as they are, a fraction or exponent only when
    /// it is a digit string below 2^53 scaled by at most 10^22 (a single
    /// correctly rounded operation, whichever way serde_json computes).
    pub fn number(&mut self) -> Option<Num> {
        self.skip_ws();
        self.number_here()
    }

    /// [`Cursor::number`] with no whitespace before it (as after a
    /// [`Cursor::peek`]).
    pub fn number_here(&mut self) -> Option<Num> {
        // Most numbers are small non-negative integers: read here, with
        // nothing to carry out; the rest by `number_parts`.
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let (v, n) = digit_run(rest, 19);
        // Ends here (no twentieth digit, no fraction or exponent), and no
        // leading zero: exactly `number_parts`'s integer.
        if n > 0
            && (n == 1 || rest.first() != Some(&b'0'))
            && !matches!(rest.get(n), Some(b'0'..=b'9' | b'.' | b'e' | b'E'))
        {
            self.pos += n;
            return Some(Num::Uint(v));
        }
        self.number_parts().map(|(n, _)| n)
    }

    /// A number of microseconds as nanoseconds, as [`Num::us_to_ns`]
    /// reads it; None where [`Cursor::number`] answers None.
    pub fn us_to_ns(&mut self) -> Option<Result<i64, String>> {
        if let Some(ns) = self.plain_us_to_ns() {
            return Some(ns);
        }
        self.us_to_ns_parts()
    }

    /// [`Cursor::us_to_ns`] through `number_parts`.
    fn us_to_ns_parts(&mut self) -> Option<Result<i64, String>> {
        let (n, decimal) = self.number_parts()?;
        if let Some(d) = decimal
            && d.frac_digits <= 3
        {
            // A decimal of at most three places below 2^50 ns is exactly
            // its digits: the double read (one rounding) times 1000 (a
            // second) is within a quarter of a nanosecond of it, so
            // rounding gives the digits back; and a fraction of at least
            // 0.001 never rounds to a whole number of microseconds there.
            let ns = d
                .significand
                .checked_mul(POW10_INT[3 - d.frac_digits as usize])
                .filter(|&ns| ns < 1 << 50);
            if let Some(ns) = ns {
                let ns = ns as i64;
                return Some(Ok(if d.negative { -ns } else { ns }));
            }
        }
        Some(n.us_to_ns())
    }

    /// [`Cursor::us_to_ns`] for the common timestamps: non-negative, at
    /// most fifteen integer digits and three decimals, no exponent; the
    /// same answer `number_parts` leads to (an integer as its `Num`, a
    /// decimal as its digits when below 2^50 ns). None for anything else,
    /// the cursor then past whitespace only.
    fn plain_us_to_ns(&mut self) -> Option<Result<i64, String>> {
        self.skip_ws();
        let rest = self.bytes.get(self.pos..)?;
        let (int, n) = digit_run(rest, 16);
        if n == 0 || n > 15 || (n > 1 && rest.first() == Some(&b'0')) {
            return None;
        }
        match rest.get(n) {
            Some(b'.') => {
                let frac_at = rest.get(n + 1..)?;
                // Four at most: a fourth digit sends it the long way.
                let (frac, k) = digit_run(frac_at, 4);
                if k == 0 || k > 3 || matches!(frac_at.get(k), Some(b'e' | b'E')) {
                    return None;
                }
                let ns = (int * POW10_INT[k] + frac) * POW10_INT[3 - k];
                if ns >= 1 << 50 {
                    return None;
                }
                self.pos += n + 1 + k;
                Some(Ok(ns as i64))
            }
            Some(b'e' | b'E') => None,
            _ => {
                self.pos += n;
                Some(Num::Uint(int).us_to_ns())
            }
        }
    }

    /// [`Cursor::number`], and for a number with a fraction and no
    /// exponent its digits (`significand` / 10^`frac_digits`).
    fn number_parts(&mut self) -> Option<(Num, Option<Decimal>)> {
        self.skip_ws();
        let negative = self.bytes.get(self.pos) == Some(&b'-');
        if negative {
            self.pos += 1;
        }
        let int_at = self.pos;
        let (int, int_digits, overflow) = self.digits();
        // No leading zeros, at least one digit (JSON's grammar).
        if int_digits == 0 || overflow || (int_digits > 1 && self.bytes[int_at] == b'0') {
            return None;
        }
        let mut significand = int;
        let mut exponent: i32 = 0;
        let mut float = false;
        let mut frac_digits = 0;
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            let frac_at = self.pos;
            let (frac, n, _) = self.digits();
            if n == 0 {
                return None;
            }
            if int_digits + n <= 19 {
                // Fits: int * 10^n + frac < 10^19.
                significand = int * POW10_INT[n] + frac;
            } else {
                for &b in &self.bytes[frac_at..self.pos] {
                    significand = significand
                        .checked_mul(10)?
                        .checked_add(u64::from(b - b'0'))?;
                }
            }
            frac_digits = n;
            exponent -= n as i32;
            float = true;
        }
        let mut decimal = float;
        if let Some(b'e' | b'E') = self.bytes.get(self.pos) {
            self.pos += 1;
            let minus = match self.bytes.get(self.pos) {
                Some(b'-') => true,
                Some(b'+') => false,
                _ => false,
            };
            if let Some(b'-' | b'+') = self.bytes.get(self.pos) {
                self.pos += 1;
            }
            let (e, e_digits, e_overflow) = self.digits();
            if e_digits == 0 || e_overflow || e > 400 {
                return None;
            }
            exponent += if minus { -(e as i32) } else { e as i32 };
            float = true;
            decimal = false;
        }
        if !float {
            return Some((
                if !negative {
                    Num::Uint(int)
                } else if int == 0 || int > 1 << 63 {
                    // serde_json reads -0 and beyond i64 as doubles.
                    return None;
                } else {
                    Num::Int((int as i64).wrapping_neg())
                },
                None,
            ));
        }
        if significand >= 1 << 53 {
            return None;
        }
        let pow = *POW10.get(exponent.unsigned_abs() as usize)?;
        let f = significand as f64;
        let f = if exponent >= 0 { f * pow } else { f / pow };
        let decimal = decimal.then_some(Decimal {
            significand,
            frac_digits: frac_digits as u32,
            negative,
        });
        Some((Num::Float(if negative { -f } else { f }), decimal))
    }

    /// Skips one value, checking its syntax; at most `depth` levels of
    /// objects and arrays.
    pub fn skip_value(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b't' | b'f' => self.boolean().map(drop),
            b'n' => self.null(),
            b'{' => {
                let depth = depth.checked_sub(1)?;
                self.pos += 1;
                if self.eat(b'}') {
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.expect(b':')?;
                    self.skip_value(depth)?;
                    if self.eat(b',') {
                        continue;
                    }
                    return self.expect(b'}');
                }
            }
            b'[' => {
                let depth = depth.checked_sub(1)?;
                self.pos += 1;
                if self.eat(b']') {
                    return Some(());
                }
                loop {
                    self.skip_value(depth)?;
                    if self.eat(b',') {
                        continue;
                    }
                    return self.expect(b']');
                }
            }
            _ => self.number().map(drop),
        }
    }
}

#[cfg(test)]
mod tests;
