//! ZIP and TAR archives: their members indexed in order (directories,
//! links and hidden members skipped, nested archives refused), each member
//! classified and added as a source or as the manifest.

use std::io::BufReader;
use std::path::Path;

use zip::CompressionMethod;

use super::classify::{Kind, inspect};
use super::source::Origin;
use super::{
    InputError, InputSource, Inputs, open_file, push_unique, set_gz_manifest, set_manifest,
};

pub(super) fn expand_zip(path: &Path, shown: &str, out: &mut Inputs) -> Result<(), InputError> {
    let bad = |detail: String| InputError::BadArchive {
        display: shown.to_string(),
        kind: "zip",
        detail,
    };
    let f = open_file(path)?;
    let mut ar = zip::ZipArchive::new(BufReader::new(f)).map_err(|e| bad(e.to_string()))?;
    for index in 0..ar.len() {
        // Metadata first, from the raw entry: this locates the data without
        // decompressing and works for methods we cannot decode.
        let (name, data_offset, method, encrypted, compressed_len, len, crc32) = {
            let e = ar
                .by_index_raw(index)
                .map_err(|e| bad(format!("entry {index}: {e}")))?;
            if e.is_dir() || e.is_symlink() {
                continue;
            }
            let name = e
                .name()
                .map_err(|e| bad(format!("entry {index}: {e}")))?
                .into_owned();
            let data_offset = e
                .data_start()
                .ok_or_else(|| bad(format!("entry {index}: data offset unknown")))?;
            (
                name,
                data_offset,
                e.compression(),
                e.encrypted(),
                e.compressed_size(),
                e.size(),
                e.crc32(),
            )
        };
        if is_hidden(&name) {
            continue;
        }
        let display = format!("{shown}:{name}");
        if encrypted {
            return Err(InputError::UnsupportedMember {
                display,
                what: "an encrypted member".into(),
            });
        }
        let deflated = match method {
            CompressionMethod::Stored => false,
            CompressionMethod::Deflated => true,
            other => {
                return Err(InputError::UnsupportedMember {
                    display,
                    what: format!("compression method {other}"),
                });
            }
        };
        let kind = {
            let mut e = ar
                .by_index(index)
                .map_err(|e| bad(format!("{name}: {e}")))?;
            inspect(&mut e).map_err(|e| bad(format!("{name}: {e}")))?
        };
        let origin = Origin::Zip {
            archive: path.to_path_buf(),
            data_offset,
            compressed_len,
            deflated,
            len,
            crc32,
        };
        add_member(out, kind, display, &name, origin)?;
    }
    Ok(())
}

pub(super) fn expand_tar(path: &Path, shown: &str, out: &mut Inputs) -> Result<(), InputError> {
    let bad = |detail: String| InputError::BadArchive {
        display: shown.to_string(),
        kind: "tar",
        detail,
    };
    let f = open_file(path)?;
    let mut ar = tar::Archive::new(BufReader::new(f));
    // With seek, unread member data is skipped rather than read through.
    let entries = ar.entries_with_seek().map_err(|e| bad(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let etype = entry.header().entry_type();
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if etype.is_gnu_sparse() {
            if is_hidden(&name) {
                continue;
            }
            return Err(InputError::UnsupportedMember {
                display: format!("{shown}:{name}"),
                what: "a sparse tar member".into(),
            });
        }
        // Directories, links, devices and metadata headers carry no trace data.
        if !(etype.is_file() || etype.is_contiguous()) || is_hidden(&name) {
            continue;
        }
        let display = format!("{shown}:{name}");
        let data_offset = entry.raw_file_position();
        let len = entry.size();
        let kind = inspect(&mut entry).map_err(|e| bad(format!("{name}: {e}")))?;
        let origin = Origin::Tar {
            archive: path.to_path_buf(),
            data_offset,
            len,
        };
        add_member(out, kind, display, &name, origin)?;
    }
    Ok(())
}

fn add_member(
    out: &mut Inputs,
    kind: Kind,
    display: String,
    member: &str,
    origin: Origin,
) -> Result<(), InputError> {
    match kind {
        Kind::Zip | Kind::Tar | Kind::CompressedArchive => {
            Err(InputError::NestedArchive { display })
        }
        Kind::Manifest(text) => {
            for name in member_names(member) {
                push_unique(&mut out.containers, name);
            }
            set_manifest(out, display, text)
        }
        Kind::GzManifest(text) => {
            for name in member_names(member) {
                push_unique(&mut out.containers, name);
            }
            set_gz_manifest(out, display, text)
        }
        Kind::ManifestTooLarge => Err(InputError::ManifestTooLarge { display }),
        Kind::ManifestNotUtf8 => Err(InputError::ManifestNotUtf8 { display }),
        Kind::Trace(content) => {
            out.traces.push(InputSource {
                display,
                names: member_names(member),
                origin,
                content,
                spill: None,
                held: None,
            });
            Ok(())
        }
    }
}

/// The member name, the same without a leading `./` (as `tar -C dir .`
/// writes), and the base name.
fn member_names(member: &str) -> Vec<String> {
    let mut names = vec![member.to_string()];
    let mut trimmed = member;
    while let Some(rest) = trimmed.strip_prefix("./") {
        trimmed = rest;
    }
    push_unique(&mut names, trimmed.to_string());
    if let Some(base) = trimmed.rsplit('/').next().filter(|b| !b.is_empty()) {
        push_unique(&mut names, base.to_string());
    }
    names
}

/// Perfetto ignores archive members with any path component starting with a
/// dot (`.DS_Store`, `__MACOSX/._x`, `.git/...`); `.` and `..` are not names.
pub(super) fn is_hidden(member: &str) -> bool {
    member
        .split(['/', '\\'])
        .any(|c| c.starts_with('.') && c != "." && c != "..")
}
