//! Printing text a peer chose (machine names, refusal reasons): control
//! characters are escaped, so a name cannot end a log line early, move the
//! cursor of a terminal, or forge a line of a table or a metrics page.
//!
//! Escaped are every `char::is_control` character (C0, DEL, C1), the
//! Unicode bidirectional formatting characters (U+061C, U+200E, U+200F,
//! U+202A..U+202E, U+2066..U+2069), which reorder what a terminal shows,
//! and the line and paragraph separators (U+2028, U+2029), which some
//! terminals and editors take for a new line. This is
//! the one function every output of a peer's text goes through (terminal
//! text, tables, report labels); JSON output carries the text as it is,
//! JSON escapes it. They are written
//! as Rust writes them in a string literal (`\n`, `\t`, `\r`, `\u{1b}`);
//! everything else, backslashes included, is printed as it is.

use std::borrow::Cow;
use std::fmt;

/// Whether `c` is escaped by [`escape_control`].
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with its control characters escaped (borrowed when there are none).
pub fn escape_control(text: &str) -> Cow<'_, str> {
    if text.chars().any(needs_escape) {
        Cow::Owned(Escaped(text).to_string())
    } else {
        Cow::Borrowed(text)
    }
}

/// Displays its text with control characters escaped (for format strings
/// and log fields: `%Escaped(name)`, no allocation).
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some((i, c)) = rest.char_indices().find(|(_, c)| needs_escape(*c)) {
            f.write_str(&rest[..i])?;
            write!(f, "{}", c.escape_default())?;
            rest = &rest[i + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_and_unchanged() {
        for text in ["", "phone", "vm 1 (büro)", "a\\nb", "名前", "tab-free"] {
            assert!(matches!(escape_control(text), Cow::Borrowed(t) if t == text));
            assert_eq!(Escaped(text).to_string(), text);
        }
    }

    #[test]
    fn control_characters_are_escaped() {
        let cases = [
            ("a\nb", "a\\nb"),
            ("\r\t", "\\r\\t"),
            ("\u{1b}[2J", "\\u{1b}[2J"),
            ("nul\0", "nul\\u{0}"),
            ("del\u{7f}", "del\\u{7f}"),
            ("c1\u{85}", "c1\\u{85}"),
            ("bidi\u{202e}txt.exe", "bidi\\u{202e}txt.exe"),
            ("iso\u{2066}late", "iso\\u{2066}late"),
            ("rlm\u{200f}", "rlm\\u{200f}"),
            ("lrm\u{200e}alm\u{61c}", "lrm\\u{200e}alm\\u{61c}"),
            ("line\u{2028}para\u{2029}", "line\\u{2028}para\\u{2029}"),
            ("é\n名", "é\\n名"),
        ];
        for (text, want) in cases {
            assert_eq!(escape_control(text), want, "{text:?}");
            assert_eq!(Escaped(text).to_string(), want, "{text:?}");
        }
    }

    #[test]
    fn escaped_text_has_no_control_characters_left() {
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let escaped = escape_control(&all);
        assert!(!escaped.chars().any(needs_escape));
        assert!(!escaped.contains('\n'));
    }
}
