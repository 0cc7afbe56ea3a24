//! The leniencies of Perfetto's JSON reader that strict JSON lacks: a comma
//! before a closing `}` or `]` (Perfetto's args_ordered test has one), and
//! raw control characters inside strings (a literal newline in an argument
//! value). An event strict parsing rejects is rewritten with these fixed
//! and parsed again; events strict parsing accepts never come here.
//!
//! Invariant: the rewrite only drops commas outside strings and escapes
//! bytes below 0x20 inside strings; everything else is copied, so a
//! truly broken event stays broken and keeps its error.

/// `bytes` with trailing commas dropped and control characters in strings
/// escaped; None when there was nothing to change.
pub fn relax(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut changed = false;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            } else if b < 0x20 {
                out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
                changed = true;
                continue;
            }
            out.push(b);
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' if closes_next(&bytes[i + 1..]) => {
                changed = true;
                continue;
            }
            _ => {}
        }
        out.push(b);
    }
    changed.then_some(out)
}

/// Whether the next byte that is not white space closes an object or array.
fn closes_next(rest: &[u8]) -> bool {
    rest.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'}' || b == b']')
}

#[cfg(test)]
mod tests {
    use super::relax;

    #[test]
    fn drops_trailing_commas_and_escapes_control_characters() {
        let got = relax(b"{\"a\": {\"b\": 2,}, \"c\": [1, 2 ,\n], \"d\": \"x\ny,}\"}");
        assert_eq!(
            got.as_deref(),
            Some(&b"{\"a\": {\"b\": 2}, \"c\": [1, 2 \n], \"d\": \"x\\u000ay,}\"}"[..])
        );
        assert_eq!(
            relax(b"{\"a\": \"q\\\",}\"}"),
            None,
            "escaped quotes stay in the string"
        );
        assert_eq!(relax(b"{\"a\": 1}"), None);
    }
}
