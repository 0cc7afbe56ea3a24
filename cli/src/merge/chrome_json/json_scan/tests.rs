//! The cursor's shortcuts against its general reading, and strings' ends
//! against a byte-by-byte scan.

use super::*;

/// The integer shortcut of [`Cursor::number`] reads what
/// `number_parts` reads, and stops where it stops.
#[test]
fn number_is_number_parts() {
    for text in [
        "0",
        "7",
        "01",
        "00",
        "0,",
        "12}",
        "-3",
        "5.",
        "5.25",
        "1e3",
        "2E2",
        "9]",
        "1234567890123456789",
        "9999999999999999999",
        "12345678901234567890",
        "18446744073709551615",
        "18446744073709551616",
        "123456789012345678901",
        "",
        "x",
        "4 ",
    ] {
        let mut fast = Cursor::new(text.as_bytes());
        let mut full = Cursor::new(text.as_bytes());
        let got = fast.number();
        let want = full.number_parts().map(|(n, _)| n);
        assert_eq!(got, want, "{text}");
        if got.is_some() {
            assert_eq!(fast.pos(), full.pos(), "{text}");
        }
    }
}

/// The timestamp shortcut reads what `number_parts` leads to, and
/// stops where it stops.
#[test]
fn plain_us_to_ns_is_us_to_ns_parts() {
    for text in [
        "0",
        "7",
        "01",
        "0.5",
        "00.5",
        "1.",
        "1.5",
        "1.25",
        "1.125",
        "1.1250",
        "1.5e3",
        "2.5E-3",
        "3e2",
        "-1.5",
        "123456789012345",
        "123456789012345.999",
        "1234567890123456",
        "1234567890123456.5",
        "1125899906842.623",
        "1125899906842.624",
        "9223372036854775807",
        "1.5,",
        "2}",
        "0.000",
        "3.0e",
    ] {
        let mut fast = Cursor::new(text.as_bytes());
        let mut full = Cursor::new(text.as_bytes());
        let want = full.us_to_ns_parts();
        match fast.plain_us_to_ns() {
            Some(got) => {
                assert_eq!(Some(got), want, "{text}");
                assert_eq!(fast.pos(), full.pos(), "{text}");
            }
            None => assert_eq!(fast.pos(), 0, "{text}"),
        }
    }
}

/// The eight-byte scan ends a string where the byte loop does.
#[test]
fn strings_end_where_each_byte_says() {
    let specials = [
        b'"', b'\\', 0, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xc3, 0xff, b'a', b']',
    ];
    for len in 1..20 {
        for at in 0..len {
            for &s1 in &specials {
                for &s2 in &specials {
                    let mut v = vec![b'"'];
                    v.extend(std::iter::repeat_n(b'x', len));
                    v[at + 1] = s1;
                    v[len] = s2;
                    let body = &v[1..];
                    let end = body
                        .iter()
                        .position(|&b| b == b'"' || b == b'\\' || b < 0x20);
                    let want = end.filter(|&e| body[e] == b'"').map(|e| &body[..e]);
                    let mut c = Cursor::new(&v);
                    assert_eq!(c.string(), want, "{v:?}");
                    let seen = &body[..end.unwrap_or(body.len())];
                    if want.is_some() {
                        assert_eq!(c.ascii(), seen.is_ascii(), "{v:?}");
                    }
                }
            }
        }
    }
}

/// A byte above 0x7f anywhere in a string is noted; the string's end
/// is found as without it.
#[test]
fn strings_note_non_ascii() {
    for (text, want, ascii) in [
        (&b"\"ab\"x"[..], Some(&b"ab"[..]), true),
        (b"\"\xc3\xa9\"", Some(b"\xc3\xa9"), false),
        (b"\"a\xff\"", Some(b"a\xff"), false),
        (b"\"\xff\\n\"", None, false),
        (b"\"\xff\x01\"", None, false),
        (b"\"\xff", None, false),
        (b"\"a\\n\"", None, true),
    ] {
        let mut c = Cursor::new(text);
        assert_eq!(c.string(), want, "{text:?}");
        assert_eq!(c.ascii(), ascii, "{text:?}");
    }
}
