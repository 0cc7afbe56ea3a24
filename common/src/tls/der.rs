//! A small DER reader for the X.509 fields tracesync looks at: a
//! certificate's serial, issuer, subject, validity and subject alternative
//! names, and a CRL's issuer, number and revoked serials. It reads what
//! rcgen and openssl write; anything else is an error, never a panic.
//! Signatures are not checked here (rustls/webpki does that).

use std::net::IpAddr;

const TAG_INTEGER: u8 = 0x02;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_OID: u8 = 0x06;
const TAG_UTC_TIME: u8 = 0x17;
const TAG_GENERALIZED_TIME: u8 = 0x18;
const TAG_SEQUENCE: u8 = 0x30;
const TAG_VERSION: u8 = 0xa0; // [0] EXPLICIT, constructed
const TAG_EXTENSIONS: u8 = 0xa3; // [3] EXPLICIT, constructed
const TAG_CRL_EXTENSIONS: u8 = 0xa0; // [0] EXPLICIT in tbsCertList
const TAG_SAN_DNS: u8 = 0x82; // [2] IMPLICIT IA5String
const TAG_SAN_URI: u8 = 0x86; // [6] IMPLICIT IA5String
const TAG_SAN_IP: u8 = 0x87; // [7] IMPLICIT OCTET STRING
/// 2.5.29.17 subjectAltName.
const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];
/// 2.5.29.20 cRLNumber.
const OID_CRL_NUMBER: &[u8] = &[0x55, 0x1d, 0x14];

/// A subject alternative name tracesync reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum San {
    Dns(String),
    Uri(String),
    Ip(IpAddr),
}

/// One DER TLV: tag, contents, and the bytes after it.
pub fn tlv(input: &[u8]) -> Result<(u8, &[u8], &[u8]), String> {
    let bad = || "malformed certificate (DER)".to_owned();
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    if tag & 0x1f == 0x1f {
        return Err(bad()); // high tag numbers do not occur where we look
    }
    let (&first, rest) = rest.split_first().ok_or_else(bad)?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad());
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad());
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The children of a constructed TLV's contents.
pub fn children(mut contents: &[u8]) -> impl Iterator<Item = Result<(u8, &[u8]), String>> {
    std::iter::from_fn(move || {
        if contents.is_empty() {
            return None;
        }
        match tlv(contents) {
            Ok((tag, value, rest)) => {
                contents = rest;
                Some(Ok((tag, value)))
            }
            Err(e) => {
                contents = &[];
                Some(Err(e))
            }
        }
    })
}

fn bad(what: &str) -> String {
    format!("malformed certificate: {what}")
}

/// The contents of the outer SEQUENCE's first child, itself a SEQUENCE
/// (a certificate's tbsCertificate, a CRL's tbsCertList).
fn to_be_signed(der: &[u8]) -> Result<&[u8], String> {
    let (tag, outer, _) = tlv(der)?;
    if tag != TAG_SEQUENCE {
        return Err(bad("not a SEQUENCE"));
    }
    let (tag, tbs, _) = tlv(outer)?;
    if tag != TAG_SEQUENCE {
        return Err(bad("no to-be-signed SEQUENCE"));
    }
    Ok(tbs)
}

/// The DNS, URI and IP names of a certificate's subjectAltName extension,
/// in order (other kinds of names are skipped).
pub fn subject_alt_names(der: &[u8]) -> Result<Vec<San>, String> {
    let tbs = to_be_signed(der)?;
    let mut names = Vec::new();
    for child in children(tbs) {
        let (tag, value) = child?;
        if tag != TAG_EXTENSIONS {
            continue;
        }
        let (tag, list, _) = tlv(value)?;
        if tag != TAG_SEQUENCE {
            return Err(bad("extensions are not a SEQUENCE"));
        }
        for ext in children(list) {
            let (tag, ext) = ext?;
            if tag != TAG_SEQUENCE {
                return Err(bad("extension is not a SEQUENCE"));
            }
            let mut parts = children(ext);
            let Some(Ok((TAG_OID, oid))) = parts.next() else {
                return Err(bad("extension without an OID"));
            };
            if oid != OID_SAN {
                continue;
            }
            // The value is the last part (an optional BOOLEAN may precede it).
            let mut value = None;
            for part in parts {
                value = Some(part?);
            }
            let Some((TAG_OCTET_STRING, value)) = value else {
                return Err(bad("subjectAltName without a value"));
            };
            let (tag, general_names, _) = tlv(value)?;
            if tag != TAG_SEQUENCE {
                return Err(bad("subjectAltName is not a SEQUENCE"));
            }
            for name in children(general_names) {
                let (tag, value) = name?;
                let text = || {
                    std::str::from_utf8(value)
                        .ok()
                        .filter(|s| s.is_ascii())
                        .map(str::to_owned)
                        .ok_or_else(|| bad("a SAN is not ASCII"))
                };
                match tag {
                    TAG_SAN_DNS => names.push(San::Dns(text()?)),
                    TAG_SAN_URI => names.push(San::Uri(text()?)),
                    TAG_SAN_IP => {
                        let ip = match value.len() {
                            4 => IpAddr::from(<[u8; 4]>::try_from(value).map_err(|_| bad("IP"))?),
                            16 => IpAddr::from(<[u8; 16]>::try_from(value).map_err(|_| bad("IP"))?),
                            _ => return Err(bad("an IP address SAN is not 4 or 16 bytes")),
                        };
                        names.push(San::Ip(ip));
                    }
                    _ => {} // e-mail, directory names, ...: not ours
                }
            }
        }
    }
    Ok(names)
}

/// What tracesync reads of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFields {
    /// The serial number's content bytes (as encoded, sign byte included).
    pub serial: Vec<u8>,
    /// The issuer Name, its whole TLV.
    pub issuer: Vec<u8>,
    /// The subject Name, its whole TLV.
    pub subject: Vec<u8>,
    /// notBefore and notAfter, seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
    pub sans: Vec<San>,
}

/// Reads a DER certificate's serial, names and validity.
pub fn certificate(der: &[u8]) -> Result<CertFields, String> {
    let tbs = to_be_signed(der)?;
    let mut parts = children(tbs).peekable();
    if let Some(Ok((TAG_VERSION, _))) = parts.peek() {
        parts.next();
    }
    let mut next = |what: &str, want: u8| -> Result<(&[u8], Vec<u8>), String> {
        let (tag, value) = parts.next().ok_or_else(|| bad(what))??;
        if tag != want {
            return Err(bad(what));
        }
        Ok((value, whole(tag, value)))
    };
    let (serial, _) = next("no serial number", TAG_INTEGER)?;
    let serial = serial.to_vec();
    next("no signature algorithm", TAG_SEQUENCE)?;
    let (_, issuer) = next("no issuer", TAG_SEQUENCE)?;
    let (validity, _) = next("no validity", TAG_SEQUENCE)?;
    let (_, subject) = next("no subject", TAG_SEQUENCE)?;
    let mut times = children(validity);
    let mut time_at = |what: &str| -> Result<i64, String> {
        let (tag, value) = times.next().ok_or_else(|| bad(what))??;
        time(tag, value).ok_or_else(|| bad(what))
    };
    let not_before = time_at("bad notBefore")?;
    let not_after = time_at("bad notAfter")?;
    Ok(CertFields {
        serial,
        issuer,
        subject,
        not_before,
        not_after,
        sans: subject_alt_names(der)?,
    })
}

/// What tracesync reads of a certificate revocation list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrlFields {
    /// The issuer Name, its whole TLV.
    pub issuer: Vec<u8>,
    /// thisUpdate, seconds since the Unix epoch.
    pub this_update: i64,
    /// The cRLNumber extension's content bytes, if any.
    pub number: Option<Vec<u8>>,
    /// Revoked serial numbers (content bytes) and their revocation times.
    pub revoked: Vec<(Vec<u8>, i64)>,
}

/// Reads a DER CRL's issuer, number and revoked certificates.
pub fn crl(der: &[u8]) -> Result<CrlFields, String> {
    let bad = |what: &str| format!("malformed CRL: {what}");
    let tbs = to_be_signed(der).map_err(|_| bad("not a CertificateList"))?;
    let mut fields = CrlFields::default();
    let mut parts = children(tbs).peekable();
    if let Some(Ok((TAG_INTEGER, _))) = parts.peek() {
        parts.next(); // version
    }
    let mut seen = 0;
    for part in parts {
        let (tag, value) = part.map_err(|_| bad("bad DER"))?;
        match (seen, tag) {
            (0, TAG_SEQUENCE) => seen = 1, // signature algorithm
            (1, TAG_SEQUENCE) => {
                fields.issuer = whole(tag, value);
                seen = 2;
            }
            (2, TAG_UTC_TIME | TAG_GENERALIZED_TIME) => {
                fields.this_update = time(tag, value).ok_or_else(|| bad("bad thisUpdate"))?;
                seen = 3;
            }
            (3, TAG_UTC_TIME | TAG_GENERALIZED_TIME) => seen = 4, // nextUpdate
            (3 | 4, TAG_SEQUENCE) => {
                for entry in children(value) {
                    let (tag, entry) = entry.map_err(|_| bad("bad entry"))?;
                    if tag != TAG_SEQUENCE {
                        return Err(bad("revoked entry is not a SEQUENCE"));
                    }
                    let mut items = children(entry);
                    let Some(Ok((TAG_INTEGER, serial))) = items.next() else {
                        return Err(bad("revoked entry without a serial"));
                    };
                    let Some(Ok((tag, date))) = items.next() else {
                        return Err(bad("revoked entry without a date"));
                    };
                    let date = time(tag, date).ok_or_else(|| bad("bad revocation date"))?;
                    fields.revoked.push((serial.to_vec(), date));
                }
                seen = 5;
            }
            (3..=5, TAG_CRL_EXTENSIONS) => {
                let (_, list, _) = tlv(value).map_err(|_| bad("bad extensions"))?;
                for ext in children(list) {
                    let (_, ext) = ext.map_err(|_| bad("bad extension"))?;
                    let mut items = children(ext);
                    let Some(Ok((TAG_OID, oid))) = items.next() else {
                        return Err(bad("extension without an OID"));
                    };
                    if oid != OID_CRL_NUMBER {
                        continue;
                    }
                    let value = items.last().and_then(Result::ok);
                    let Some((TAG_OCTET_STRING, value)) = value else {
                        return Err(bad("cRLNumber without a value"));
                    };
                    match tlv(value) {
                        Ok((TAG_INTEGER, number, _)) => fields.number = Some(number.to_vec()),
                        _ => return Err(bad("cRLNumber is not an INTEGER")),
                    }
                }
                seen = 6;
            }
            _ => return Err(bad("unexpected field")),
        }
    }
    if seen < 3 {
        return Err(bad("no issuer or thisUpdate"));
    }
    Ok(fields)
}

/// A TLV re-encoded whole from its tag and contents.
fn whole(tag: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(value);
    out
}

/// A UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as
/// seconds since the Unix epoch (the forms RFC 5280 allows).
pub fn time(tag: u8, value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?;
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let num = |r: std::ops::Range<usize>| digits.get(r)?.parse::<i64>().ok();
    let (year, rest) = match (tag, digits.len()) {
        (TAG_UTC_TIME, 12) => {
            let yy = num(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (TAG_GENERALIZED_TIME, 14) => (num(0..4)?, 4),
        _ => return None,
    };
    let month = u8::try_from(num(rest..rest + 2)?).ok()?;
    let day = u8::try_from(num(rest + 2..rest + 4)?).ok()?;
    let hour = u8::try_from(num(rest + 4..rest + 6)?).ok()?;
    let minute = u8::try_from(num(rest + 6..rest + 8)?).ok()?;
    let second = num(rest + 8..rest + 10)?;
    // A leap second (60) reads as the second after 59.
    let (second, leap) = match second {
        60 => (59, 1),
        s => (u8::try_from(s).ok()?, 0),
    };
    let date = time::Date::from_calendar_date(
        i32::try_from(year).ok()?,
        time::Month::try_from(month).ok()?,
        day,
    )
    .ok()?;
    let at = date.with_hms(hour, minute, second).ok()?.assume_utc();
    Some(at.unix_timestamp() + leap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_both_forms() {
        assert_eq!(time(TAG_UTC_TIME, b"700101000000Z"), Some(0));
        assert_eq!(time(TAG_UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(
            time(TAG_GENERALIZED_TIME, b"20240229120000Z"),
            Some(1_709_208_000)
        );
        assert_eq!(
            time(TAG_GENERALIZED_TIME, b"40960101000000Z"),
            Some(67_090_118_400)
        );
        for bad in [&b"7001010000Z"[..], b"700101000000", b"70010100000aZ", b""] {
            assert_eq!(time(TAG_UTC_TIME, bad), None, "{bad:?}");
        }
        assert_eq!(time(TAG_GENERALIZED_TIME, b"700101000000Z"), None);
    }

    #[test]
    fn whole_re_encodes_long_lengths() {
        let value = vec![7u8; 300];
        let der = whole(TAG_SEQUENCE, &value);
        let (tag, contents, rest) = tlv(&der).unwrap();
        assert_eq!((tag, contents, rest.len()), (TAG_SEQUENCE, &value[..], 0));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            &b""[..],
            b"\x30",
            b"\x30\x84\xff\xff\xff\xff",
            b"\x1f\x00",
            b"\x30\x00",
            b"\x30\x05\x30\x03\x02",
        ] {
            assert!(certificate(bytes).is_err());
            assert!(crl(bytes).is_err());
            let _ = subject_alt_names(bytes);
        }
    }
}
