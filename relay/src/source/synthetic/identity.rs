//! Reading back the identity annotations of a synthetic TrackEvent, by
//! scanning the packet's bytes.

use tracesync_protocol::scan::{self, FieldValue, RawField};

/// The identity annotations of a synthetic TrackEvent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntheticIdentity {
    pub src: String,
    pub n: u64,
    pub truth_ns: u64,
}

/// Reads the identity annotations of a synthetic TrackEvent packet by
/// scanning its bytes (no decoding); None for any other packet.
pub fn read_identity(packet: &[u8]) -> Option<SyntheticIdentity> {
    let event = scan::Fields::new(packet).find_map(|f| match f {
        Ok(RawField {
            number: 11,
            value: FieldValue::Len(b),
            ..
        }) => Some(b),
        _ => None,
    })?;
    let (mut src, mut n, mut truth_ns) = (None, None, None);
    for f in scan::Fields::new(event) {
        let RawField {
            number: 4,
            value: FieldValue::Len(annotation),
            ..
        } = f.ok()?
        else {
            continue;
        };
        let (mut name, mut uint, mut string) = (None, None, None);
        for g in scan::Fields::new(annotation) {
            match g.ok()?.value {
                FieldValue::Len(b) if g.ok()?.number == 10 => name = Some(b),
                FieldValue::Varint(v) if g.ok()?.number == 3 => uint = Some(v),
                FieldValue::Len(b) if g.ok()?.number == 6 => string = Some(b),
                _ => {}
            }
        }
        match name? {
            b"tracesync_src" => src = Some(String::from_utf8_lossy(string?).into_owned()),
            b"tracesync_n" => n = uint,
            b"tracesync_truth_ns" => truth_ns = uint,
            _ => {}
        }
    }
    Some(SyntheticIdentity {
        src: src?,
        n: n?,
        truth_ns: truth_ns?,
    })
}
