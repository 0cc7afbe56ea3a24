//! The flight recorder's shared vocabulary: a relay's mode, trigger names
//! and the durations a trigger is given in. Both binaries and the CLI
//! check with these, so a name or a duration one accepts the others do.
//!
//! Invariants: a valid trigger name is 1 to [`MAX_TRIGGER_NAME_BYTES`]
//! bytes of `[A-Za-z0-9._-]` not starting with `.` (it becomes part of a
//! file name, `snapshot-<UTC>-<NAME>.pftrace`); a parsed duration never
//! overflows nanoseconds in a u64.

use std::fmt;
use std::time::Duration;

/// Longest trigger name, in bytes.
pub const MAX_TRIGGER_NAME_BYTES: usize = 64;

/// Longest `--before` or `--after` a trigger takes: a window is meant to
/// be minutes, and a longer one would pin more than any ring holds.
pub const MAX_TRIGGER_SPAN: Duration = Duration::from_secs(3600);

/// How a relay ships its packets (`--mode`, `Hello.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RelayMode {
    /// Every packet as it comes (the default, and every relay from before
    /// ring mode).
    #[default]
    Stream,
    /// Packets kept in the relay's ring; only a trigger's window is shipped.
    Ring,
}

impl RelayMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Ring => "ring",
        }
    }

    /// The mode a flag or config names.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "stream" => Ok(Self::Stream),
            "ring" => Ok(Self::Ring),
            _ => Err(format!("unknown mode {text:?}; give stream or ring")),
        }
    }

    /// The mode a Hello announces; an empty one is a relay from before
    /// ring mode (it streams). None: a word this daemon does not know.
    pub fn from_hello(text: &str) -> Option<Self> {
        if text.is_empty() {
            return Some(Self::Stream);
        }
        Self::parse(text).ok()
    }
}

impl fmt::Display for RelayMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks a trigger name; the error says what is wrong without quoting
/// more than the limit allows.
pub fn check_trigger_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a trigger name is empty; give 1 to 64 characters of A-Z a-z 0-9 . _ -".into());
    }
    if name.len() > MAX_TRIGGER_NAME_BYTES {
        return Err(format!(
            "a trigger name of {} bytes is over the {MAX_TRIGGER_NAME_BYTES}-byte limit",
            name.len()
        ));
    }
    if name.starts_with('.') {
        return Err("a trigger name must not start with '.'".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "a trigger name holds {:?}; use only A-Z a-z 0-9 . _ -",
            bad.escape_debug().to_string()
        ));
    }
    Ok(())
}

/// Parses a duration as `30s`, `500ms`, `2m` (a whole number and a unit:
/// `ms`, `s`, `m`), at most [`MAX_TRIGGER_SPAN`].
pub fn parse_span(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let hint = "give a whole number and a unit, as 30s, 500ms or 2m";
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("duration {text:?}: {hint}"))?;
    let span = match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number.saturating_mul(60)),
        _ => return Err(format!("duration {text:?}: unknown unit; {hint}")),
    };
    if span > MAX_TRIGGER_SPAN {
        return Err(format!(
            "duration {text:?} is over the {}-second limit",
            MAX_TRIGGER_SPAN.as_secs()
        ));
    }
    Ok(span)
}

/// Prints a duration the way [`parse_span`] reads it back.
pub fn format_span(span: Duration) -> String {
    let ms = span.as_millis();
    if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_and_an_empty_hello_mode_is_a_stream_relay() {
        for mode in [RelayMode::Stream, RelayMode::Ring] {
            assert_eq!(RelayMode::parse(mode.as_str()), Ok(mode));
        }
        assert_eq!(RelayMode::from_hello(""), Some(RelayMode::Stream));
        assert_eq!(RelayMode::from_hello("ring"), Some(RelayMode::Ring));
        assert_eq!(RelayMode::from_hello("burst"), None);
        assert!(RelayMode::parse("Ring").is_err());
    }

    #[test]
    fn trigger_names_are_file_name_safe() {
        for good in ["crash", "oom-kill_2", "a.b", &"x".repeat(64)] {
            assert_eq!(check_trigger_name(good), Ok(()), "{good}");
        }
        for bad in ["", ".hidden", "a/b", "a b", "é", "..", &"x".repeat(65)] {
            assert!(check_trigger_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn spans_parse_in_three_units_and_print_back() {
        assert_eq!(parse_span("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_span("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_span("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_span("0s"), Ok(Duration::ZERO));
        for bad in [
            "",
            "s",
            "30",
            "1h",
            "-1s",
            "1.5s",
            "61m",
            "99999999999999999999s",
        ] {
            assert!(parse_span(bad).is_err(), "{bad}");
        }
        for text in ["30s", "500ms", "2m", "0s", "1500ms"] {
            let span = parse_span(text).unwrap_or_default();
            assert_eq!(format_span(span), text);
        }
    }
}
