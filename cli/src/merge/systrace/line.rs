//! One line of systrace (ftrace text) output, split into its parts the way
//! the trace processor's systrace reader reads it:
//! `TASK-PID ( TGID) [CPU] FLAGS SECONDS.FRACTION: EVENT: ARGS`, where the
//! tgid and the flags are optional and the task name may hold spaces and
//! dashes (the pid is the digits after the last dash before the cpu).

/// The parts of a line; borrowed from it.
#[derive(Debug, PartialEq, Eq)]
pub struct Line<'a> {
    pub task: &'a str,
    pub pid: u32,
    /// None when absent or shown as dashes (`-----`).
    pub tgid: Option<u32>,
    pub cpu: u32,
    /// Nanoseconds: the seconds as a double times 1e9, truncated, as the
    /// trace processor computes them (so both read the same value).
    pub ts: i64,
    pub event: &'a str,
    pub args: &'a str,
}

/// Splits `line`; None if it is not an event line.
pub fn parse_line(line: &str) -> Option<Line<'_>> {
    let (open, close) = cpu_brackets(line)?;
    let cpu: u32 = line[open + 1..close].parse().ok()?;
    let (task, pid, tgid) = task_pid_tgid(line[..open].trim_end())?;
    let rest = line[close + 1..].trim_start();
    // Optional flags (e.g. `...1`, `d..2`), then the timestamp with its colon.
    let (ts_text, rest) = match rest.split_once(':') {
        Some((first, after)) if is_timestamp(first.trim()) => (first.trim(), after),
        _ => {
            let (flags, after_flags) = rest.split_once(char::is_whitespace)?;
            if !is_flags(flags) {
                return None;
            }
            let (first, after) = after_flags.trim_start().split_once(':')?;
            if !is_timestamp(first) {
                return None;
            }
            (first, after)
        }
    };
    let seconds: f64 = ts_text.parse().ok()?;
    let rest = rest.strip_prefix(char::is_whitespace)?.trim_start();
    let (event, args) = rest.split_once(':')?;
    if event.is_empty() || event.contains(char::is_whitespace) {
        return None;
    }
    Some(Line {
        task,
        pid,
        tgid,
        cpu,
        ts: (seconds * 1e9) as i64,
        event,
        args: args.trim(),
    })
}

/// The `[CPU]` brackets: the first `[` followed by digits and `]`.
fn cpu_brackets(line: &str) -> Option<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(rel) = line[from..].find('[') {
        let open = from + rel;
        let digits = bytes[open + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let close = open + 1 + digits;
        if digits > 0 && bytes.get(close) == Some(&b']') {
            return Some((open, close));
        }
        from = open + 1;
    }
    None
}

/// `TASK-PID` with an optional `( TGID)` after it.
fn task_pid_tgid(prefix: &str) -> Option<(&str, u32, Option<u32>)> {
    let (task_pid, tgid) = match prefix.strip_suffix(')') {
        Some(inner) => {
            let (before, tgid) = inner.rsplit_once('(')?;
            (before.trim_end(), tgid.trim().parse().ok())
        }
        None => (prefix, None),
    };
    let (task, pid) = task_pid.rsplit_once('-')?;
    Some((task.trim(), pid.parse().ok()?, tgid))
}

fn is_timestamp(s: &str) -> bool {
    let Some((whole, fraction)) = s.split_once('.') else {
        return false;
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    digits(whole) && digits(fraction)
}

/// Irq/preempt flags: three letters or dots, then one or two hex digits or
/// dots.
fn is_flags(s: &str) -> bool {
    let b = s.as_bytes();
    (4..=5).contains(&b.len())
        && b[..3].iter().all(|c| c.is_ascii_alphabetic() || *c == b'.')
        && b[3..]
            .iter()
            .all(|c| (c.is_ascii_hexdigit() && !c.is_ascii_uppercase()) || *c == b'.')
}

/// `key=value` pairs of an event's arguments; a word with no `=` is the
/// value of `name`.
pub fn arg<'a>(args: &'a str, key: &str) -> Option<&'a str> {
    args.split(' ')
        .find_map(|token| match token.split_once('=') {
            Some((k, v)) if k == key => Some(v),
            None if key == "name" && !token.is_empty() => Some(token),
            _ => None,
        })
}

/// A `prev_state` letter code as the raw kernel state the trace processor
/// decodes back to the same letters (its 4.4 layout for converted text).
pub fn raw_prev_state(state: &str) -> i64 {
    const INVALID: i64 = 0xffff;
    if state.is_empty() {
        return INVALID;
    }
    if state.starts_with('R') {
        return if state == "R+" { 0x800 } else { 0 };
    }
    let mut raw = 0;
    for c in state.chars() {
        raw |= match c {
            '|' => 0,
            'S' => 0x1,
            'D' => 0x2,
            'T' => 0x4,
            't' => 0x8,
            'X' => 0x10,
            'Z' => 0x20,
            'x' => 0x40,
            'K' => 0x80,
            'W' => 0x100,
            'P' => 0x200,
            'N' => 0x400,
            'I' => 0x2 | 0x400,
            _ => return INVALID,
        };
    }
    raw
}
