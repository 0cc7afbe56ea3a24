//! Classifying a file or member by content: ZIP, TAR, a gzip'd archive, a
//! `perfetto_manifest` (read whole, within a cap), a Chrome JSON trace or
//! a systrace text (plain or gzip), or else a Perfetto protobuf trace.

use std::io::{self, Cursor, Read};

use flate2::read::MultiGzDecoder;

use super::source::Content;
use crate::merge::chrome_json::scan::looks_like_chrome_json;
use crate::merge::systrace::looks_like_systrace;

/// Upper bound on a manifest's size: it is the one thing read whole.
pub(super) const MANIFEST_CAP: u64 = 16 << 20;
/// How much of a file is read to classify it. Bounded, so classification
/// costs the same for a 1 KiB and a 100 GiB member; generous enough for a
/// manifest preceded by a lot of whitespace.
const SNIFF_LEN: u64 = 64 << 10;

/// What a file or member turned out to be.
pub(super) enum Kind {
    Zip,
    Tar,
    /// A gzip stream whose content is an archive.
    CompressedArchive,
    Manifest(String),
    /// A gzip-compressed manifest: Perfetto sorts it as a container, after
    /// the traces, where a manifest is refused.
    GzManifest(String),
    ManifestTooLarge,
    ManifestNotUtf8,
    Trace(Content),
}

/// Classifies a stream by its first bytes; reads the rest only for a
/// manifest. Errors are I/O errors of the underlying reader.
pub(super) fn inspect(r: &mut dyn Read) -> io::Result<Kind> {
    let mut head = Vec::new();
    r.take(SNIFF_LEN).read_to_end(&mut head)?;
    if is_zip(&head) {
        return Ok(Kind::Zip);
    }
    if is_tar(&head) {
        return Ok(Kind::Tar);
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        let mut gz = MultiGzDecoder::new(Cursor::new(head).chain(r));
        let mut inner = Vec::new();
        // A gzip stream that does not decode is left to the trace reader,
        // which reports it with a byte offset.
        if (&mut gz).take(SNIFF_LEN).read_to_end(&mut inner).is_err() {
            return Ok(Kind::Trace(Content::Proto));
        }
        if is_zip(&inner) || is_tar(&inner) {
            return Ok(Kind::CompressedArchive);
        }
        if is_manifest(&inner) {
            return read_manifest_rest(inner, &mut gz).map(|k| match k {
                Kind::Manifest(text) => Kind::GzManifest(text),
                other => other,
            });
        }
        if looks_like_chrome_json(&inner) {
            return Ok(Kind::Trace(Content::ChromeJson { gzip: true }));
        }
        if looks_like_systrace(&inner) {
            return Ok(Kind::Trace(Content::Systrace { gzip: true }));
        }
        return Ok(Kind::Trace(Content::Proto));
    }
    if is_manifest(&head) {
        return read_manifest_rest(head, r);
    }
    if looks_like_chrome_json(&head) {
        return Ok(Kind::Trace(Content::ChromeJson { gzip: false }));
    }
    if looks_like_systrace(&head) {
        return Ok(Kind::Trace(Content::Systrace { gzip: false }));
    }
    Ok(Kind::Trace(Content::Proto))
}

fn read_manifest_rest(mut text: Vec<u8>, rest: &mut dyn Read) -> io::Result<Kind> {
    let room = (MANIFEST_CAP + 1).saturating_sub(text.len() as u64);
    rest.take(room).read_to_end(&mut text)?;
    if text.len() as u64 > MANIFEST_CAP {
        return Ok(Kind::ManifestTooLarge);
    }
    Ok(match String::from_utf8(text) {
        Ok(s) => Kind::Manifest(s),
        Err(_) => Kind::ManifestNotUtf8,
    })
}

fn is_zip(head: &[u8]) -> bool {
    // A local file header, or the end record of an empty archive.
    head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06")
}

fn is_tar(head: &[u8]) -> bool {
    head.get(257..262) == Some(b"ustar")
}

/// `{`, optional whitespace, `"perfetto_manifest"`, after optional whitespace.
pub(super) fn is_manifest(head: &[u8]) -> bool {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let Some(start) = head.iter().position(|b| !ws(b)) else {
        return false;
    };
    if head[start] != b'{' {
        return false;
    }
    let rest = &head[start + 1..];
    let Some(key) = rest.iter().position(|b| !ws(b)) else {
        return false;
    };
    rest[key..].starts_with(b"\"perfetto_manifest\"")
}
