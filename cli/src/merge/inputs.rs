//! Expansion of `tracesync merge` INPUT paths into trace sources.
//!
//! An input is a plain or gzip trace, a ZIP or TAR archive of traces, or a
//! `perfetto_manifest` (recognised by content, as Perfetto does). Archives are
//! indexed once, without reading member data beyond a short prefix used to
//! classify it; each source can then be reopened for every merge pass.

use std::fs::File;
use std::io::{self, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use flate2::read::{DeflateDecoder, MultiGzDecoder};
use zip::CompressionMethod;

use tracesync_common::exit::{DATAERR, NOINPUT};

/// Upper bound on a manifest's size: it is the one thing read whole.
const MANIFEST_CAP: u64 = 16 << 20;
/// How much of a file is read to classify it. Bounded, so classification
/// costs the same for a 1 KiB and a 100 GiB member; generous enough for a
/// manifest preceded by a lot of whitespace.
const SNIFF_LEN: u64 = 64 << 10;

/// One trace to merge: a file, or a member of an archive.
#[derive(Debug, Clone)]
pub struct InputSource {
    /// `a.pftrace` or `bundle.zip:phone.pb`, for errors and the jsonl `src` field.
    pub display: String,
    /// Names a manifest `path` can match: for a file the path as given and
    /// its base name; for a member the member name and its base name.
    pub names: Vec<String>,
    origin: Origin,
}

#[derive(Debug, Clone)]
enum Origin {
    File(PathBuf),
    /// A tar member is contiguous in the archive: reopen and seek.
    Tar {
        archive: PathBuf,
        data_offset: u64,
        len: u64,
    },
    /// A zip member is located once at indexing time. `zip`'s entry reader
    /// borrows the archive, so it cannot be returned as an owned reader;
    /// instead the member's data is read directly from its offset and the
    /// CRC and size from the central directory are checked at the end.
    Zip {
        archive: PathBuf,
        data_offset: u64,
        compressed_len: u64,
        deflated: bool,
        len: u64,
        crc32: u32,
    },
}

impl InputSource {
    /// A fresh reader of the raw bytes (gzip is left for the trace reader to
    /// detect). Reopens the underlying file each time, so every merge pass
    /// reads the same bytes with constant memory.
    pub fn open(&self) -> io::Result<Box<dyn Read + Send>> {
        match &self.origin {
            Origin::File(path) => Ok(Box::new(File::open(path)?)),
            Origin::Tar {
                archive,
                data_offset,
                len,
            } => {
                let mut f = File::open(archive)?;
                f.seek(SeekFrom::Start(*data_offset))?;
                Ok(Box::new(Checked::new(
                    f.take(*len),
                    *len,
                    None,
                    self.display.clone(),
                )))
            }
            Origin::Zip {
                archive,
                data_offset,
                compressed_len,
                deflated,
                len,
                crc32,
            } => {
                let mut f = File::open(archive)?;
                f.seek(SeekFrom::Start(*data_offset))?;
                let raw = f.take(*compressed_len);
                let inner: Box<dyn Read + Send> = if *deflated {
                    Box::new(DeflateDecoder::new(raw))
                } else {
                    Box::new(raw)
                };
                Ok(Box::new(Checked::new(
                    inner,
                    *len,
                    Some(*crc32),
                    self.display.clone(),
                )))
            }
        }
    }
}

/// The expanded inputs of one merge.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub traces: Vec<InputSource>,
    /// (display, JSON text) of the one manifest, if any.
    pub manifest: Option<(String, String)>,
}

/// Why the inputs could not be expanded. Each message is one line naming the
/// file (and member) and what to do.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("no input files: give one or more traces, or a .zip/.tar archive of them")]
    NoInputs,
    #[error("no trace files among the inputs (only a perfetto_manifest): add the traces to merge")]
    NoTraces,
    #[error("{path}: cannot open: {source}; check the path and its permissions")]
    Open { path: String, source: io::Error },
    #[error("{path}: is a directory; pass the trace files in it, or an archive of them")]
    IsDirectory { path: String },
    #[error("{display}: read failed: {source}; check that the file is readable")]
    Read { display: String, source: io::Error },
    #[error("{display}: malformed {kind} archive: {detail}; re-create the archive")]
    BadArchive {
        display: String,
        kind: &'static str,
        detail: String,
    },
    #[error("{display}: nested archives are not supported: merge the leaf files directly")]
    NestedArchive { display: String },
    #[error(
        "{display}: gzip-compressed archives are not supported: decompress it (gunzip) and pass the .tar or .zip"
    )]
    CompressedArchive { display: String },
    #[error(
        "{display}: {what} is not supported; re-create the archive with stored or deflated members"
    )]
    UnsupportedMember { display: String, what: String },
    #[error("multiple perfetto_manifest files: {first} and {second}; keep only one")]
    MultipleManifests { first: String, second: String },
    #[error(
        "{display}: perfetto_manifest is larger than 16 MiB; it should only describe the files"
    )]
    ManifestTooLarge { display: String },
    #[error("{display}: perfetto_manifest is not valid UTF-8; save it as UTF-8 JSON")]
    ManifestNotUtf8 { display: String },
    #[error(
        "{path}: not a perfetto_manifest (expected a JSON object whose first key is \"perfetto_manifest\"); check the --manifest argument"
    )]
    NotAManifest { path: String },
}

impl InputError {
    /// sysexits code: 66 when an input is missing or unreadable, 65 when its
    /// content is unusable.
    pub fn exit_code(&self) -> u8 {
        match self {
            InputError::NoInputs
            | InputError::NoTraces
            | InputError::Open { .. }
            | InputError::IsDirectory { .. }
            | InputError::Read { .. } => NOINPUT,
            InputError::BadArchive { .. }
            | InputError::NestedArchive { .. }
            | InputError::CompressedArchive { .. }
            | InputError::UnsupportedMember { .. }
            | InputError::MultipleManifests { .. }
            | InputError::ManifestTooLarge { .. }
            | InputError::ManifestNotUtf8 { .. }
            | InputError::NotAManifest { .. } => DATAERR,
        }
    }
}

/// Expands INPUT paths (and an optional `--manifest`) into trace sources, in
/// the order given, archive members in order of appearance.
pub fn expand_inputs(
    paths: &[PathBuf],
    manifest_path: Option<&Path>,
) -> Result<Inputs, InputError> {
    if paths.is_empty() {
        return Err(InputError::NoInputs);
    }
    let mut out = Inputs {
        traces: Vec::new(),
        manifest: None,
    };
    let mut manifest_canon = None;
    if let Some(m) = manifest_path {
        let shown = m.display().to_string();
        let mut f = open_file(m)?;
        match inspect(&mut f).map_err(|source| read_err(&shown, source))? {
            Kind::Manifest(text) => set_manifest(&mut out, shown, text)?,
            Kind::ManifestTooLarge => return Err(InputError::ManifestTooLarge { display: shown }),
            Kind::ManifestNotUtf8 => return Err(InputError::ManifestNotUtf8 { display: shown }),
            _ => return Err(InputError::NotAManifest { path: shown }),
        }
        // Passing the same file as `--manifest` and as an input is one manifest, not two.
        manifest_canon = std::fs::canonicalize(m).ok();
    }
    for path in paths {
        if manifest_canon.is_some() && std::fs::canonicalize(path).ok() == manifest_canon {
            continue;
        }
        expand_one(path, &mut out)?;
    }
    if out.traces.is_empty() {
        return Err(InputError::NoTraces);
    }
    Ok(out)
}

fn expand_one(path: &Path, out: &mut Inputs) -> Result<(), InputError> {
    let shown = path.display().to_string();
    let mut f = open_file(path)?;
    match inspect(&mut f).map_err(|source| read_err(&shown, source))? {
        Kind::Zip => {
            drop(f);
            expand_zip(path, &shown, out)
        }
        Kind::Tar => {
            drop(f);
            expand_tar(path, &shown, out)
        }
        Kind::CompressedArchive => Err(InputError::CompressedArchive { display: shown }),
        Kind::Manifest(text) => set_manifest(out, shown, text),
        Kind::ManifestTooLarge => Err(InputError::ManifestTooLarge { display: shown }),
        Kind::ManifestNotUtf8 => Err(InputError::ManifestNotUtf8 { display: shown }),
        Kind::Trace => {
            let mut names = vec![shown.clone()];
            if let Some(base) = path.file_name() {
                push_unique(&mut names, base.to_string_lossy().into_owned());
            }
            out.traces.push(InputSource {
                display: shown,
                names,
                origin: Origin::File(path.to_path_buf()),
            });
            Ok(())
        }
    }
}

fn expand_zip(path: &Path, shown: &str, out: &mut Inputs) -> Result<(), InputError> {
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

fn expand_tar(path: &Path, shown: &str, out: &mut Inputs) -> Result<(), InputError> {
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
        Kind::Manifest(text) => set_manifest(out, display, text),
        Kind::ManifestTooLarge => Err(InputError::ManifestTooLarge { display }),
        Kind::ManifestNotUtf8 => Err(InputError::ManifestNotUtf8 { display }),
        Kind::Trace => {
            out.traces.push(InputSource {
                display,
                names: member_names(member),
                origin,
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

fn push_unique(names: &mut Vec<String>, name: String) {
    if !name.is_empty() && !names.contains(&name) {
        names.push(name);
    }
}

/// Perfetto ignores archive members with any path component starting with a
/// dot (`.DS_Store`, `__MACOSX/._x`, `.git/...`); `.` and `..` are not names.
fn is_hidden(member: &str) -> bool {
    member
        .split(['/', '\\'])
        .any(|c| c.starts_with('.') && c != "." && c != "..")
}

fn set_manifest(out: &mut Inputs, display: String, text: String) -> Result<(), InputError> {
    if let Some((first, _)) = &out.manifest {
        return Err(InputError::MultipleManifests {
            first: first.clone(),
            second: display,
        });
    }
    out.manifest = Some((display, text));
    Ok(())
}

fn open_file(path: &Path) -> Result<File, InputError> {
    let shown = || path.display().to_string();
    let f = File::open(path).map_err(|source| InputError::Open {
        path: shown(),
        source,
    })?;
    let meta = f.metadata().map_err(|source| InputError::Open {
        path: shown(),
        source,
    })?;
    if meta.is_dir() {
        return Err(InputError::IsDirectory { path: shown() });
    }
    Ok(f)
}

fn read_err(display: &str, source: io::Error) -> InputError {
    InputError::Read {
        display: display.to_string(),
        source,
    }
}

/// What a file or member turned out to be.
enum Kind {
    Zip,
    Tar,
    /// A gzip stream whose content is an archive.
    CompressedArchive,
    Manifest(String),
    ManifestTooLarge,
    ManifestNotUtf8,
    Trace,
}

/// Classifies a stream by its first bytes; reads the rest only for a
/// manifest. Errors are I/O errors of the underlying reader.
fn inspect(r: &mut dyn Read) -> io::Result<Kind> {
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
            return Ok(Kind::Trace);
        }
        if is_zip(&inner) || is_tar(&inner) {
            return Ok(Kind::CompressedArchive);
        }
        if is_manifest(&inner) {
            return read_manifest_rest(inner, &mut gz);
        }
        return Ok(Kind::Trace);
    }
    if is_manifest(&head) {
        return read_manifest_rest(head, r);
    }
    Ok(Kind::Trace)
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
fn is_manifest(head: &[u8]) -> bool {
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

/// Checks an archive member's length (and CRC for zip) as it is read, so a
/// truncated or altered archive fails loudly instead of yielding a short trace.
struct Checked<R> {
    inner: R,
    expected_len: u64,
    seen: u64,
    crc: Option<(flate2::Crc, u32)>,
    display: String,
}

impl<R: Read> Checked<R> {
    fn new(inner: R, expected_len: u64, crc32: Option<u32>, display: String) -> Self {
        Checked {
            inner,
            expected_len,
            seen: 0,
            crc: crc32.map(|c| (flate2::Crc::new(), c)),
            display,
        }
    }
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seen += n as u64;
        if let Some((crc, _)) = &mut self.crc {
            crc.update(&buf[..n]);
        }
        let broken = |what: String| {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {what}; re-create the archive", self.display),
            ))
        };
        if self.seen > self.expected_len {
            return broken(format!(
                "member is longer than the {} bytes its header declares",
                self.expected_len
            ));
        }
        if n == 0 && !buf.is_empty() {
            if self.seen < self.expected_len {
                return broken(format!(
                    "member truncated at byte {} of {}",
                    self.seen, self.expected_len
                ));
            }
            if let Some((crc, want)) = &self.crc
                && crc.sum() != *want
            {
                return broken(format!(
                    "CRC mismatch (got {:08x}, header says {want:08x})",
                    crc.sum()
                ));
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;
    use zip::write::SimpleFileOptions;

    const MANIFEST: &str = r#"  {  "perfetto_manifest": {"version": 1}}"#;

    /// Bytes that look like nothing in particular: a trace as far as
    /// classification is concerned. Long enough to span several reads.
    fn trace_bytes(seed: u8) -> Vec<u8> {
        (0..200_000u32)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 0x01)
            .collect()
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    fn zip_bytes(members: &[(&str, &[u8], bool)]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, data, deflate) in members {
            let method = if *deflate {
                CompressionMethod::Deflated
            } else {
                CompressionMethod::Stored
            };
            if name.ends_with('/') {
                w.add_directory(*name, SimpleFileOptions::default())
                    .unwrap();
                continue;
            }
            w.start_file(
                *name,
                SimpleFileOptions::default().compression_method(method),
            )
            .unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    fn tar_bytes(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in members {
            let mut h = tar::Header::new_ustar();
            if name.ends_with('/') {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
            } else {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(data.len() as u64);
            }
            h.set_mode(0o644);
            // Name written raw: `Builder` would normalise away a leading `./`,
            // which real archives (`tar -C dir .`) have.
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn read_all(s: &InputSource) -> Vec<u8> {
        let mut v = Vec::new();
        s.open().unwrap().read_to_end(&mut v).unwrap();
        v
    }

    fn err_of(r: Result<Inputs, InputError>) -> InputError {
        match r {
            Ok(i) => panic!("expected an error, got {i:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn plain_and_gzip_files() {
        let d = tempfile::tempdir().unwrap();
        let plain = trace_bytes(1);
        let gz = gzip(&trace_bytes(2));
        let a = write(d.path(), "a.pftrace", &plain);
        let b = write(d.path(), "b.pftrace.gz", &gz);
        let inputs = expand_inputs(&[a.clone(), b.clone()], None).unwrap();
        assert!(inputs.manifest.is_none());
        assert_eq!(inputs.traces.len(), 2);
        let t = &inputs.traces[0];
        assert_eq!(t.display, a.display().to_string());
        assert_eq!(
            t.names,
            vec![a.display().to_string(), "a.pftrace".to_string()]
        );
        assert_eq!(read_all(t), plain);
        // gzip is passed through raw: the trace reader detects it.
        assert_eq!(read_all(&inputs.traces[1]), gz);
    }

    #[test]
    fn zip_members_in_order_dirs_and_hidden_skipped() {
        let d = tempfile::tempdir().unwrap();
        let phone = trace_bytes(3);
        let watch = trace_bytes(4);
        let z = zip_bytes(&[
            ("traces/", b"", false),
            ("traces/phone.pb", &phone, true),
            (".DS_Store", b"junk", false),
            ("__MACOSX/._phone.pb", b"junk", false),
            ("traces/.hidden/x.pb", b"junk", false),
            ("watch.pb", &watch, false),
        ]);
        let p = write(d.path(), "bundle.zip", &z);
        let inputs = expand_inputs(std::slice::from_ref(&p), None).unwrap();
        let shown = p.display().to_string();
        let displays: Vec<_> = inputs.traces.iter().map(|t| t.display.clone()).collect();
        assert_eq!(
            displays,
            vec![
                format!("{shown}:traces/phone.pb"),
                format!("{shown}:watch.pb")
            ]
        );
        assert_eq!(inputs.traces[0].names, vec!["traces/phone.pb", "phone.pb"]);
        assert_eq!(inputs.traces[1].names, vec!["watch.pb"]);
        assert_eq!(read_all(&inputs.traces[0]), phone);
        assert_eq!(read_all(&inputs.traces[1]), watch);
    }

    #[test]
    fn tar_members_in_order_dirs_and_hidden_skipped() {
        let d = tempfile::tempdir().unwrap();
        let phone = trace_bytes(5);
        let watch = gzip(&trace_bytes(6));
        let t = tar_bytes(&[
            ("./", b""),
            ("./phone.pb", &phone),
            ("./.hidden.pb", b"junk"),
            ("dir/", b""),
            ("dir/watch.pb.gz", &watch),
        ]);
        let p = write(d.path(), "bundle.tar", &t);
        let inputs = expand_inputs(std::slice::from_ref(&p), None).unwrap();
        assert_eq!(inputs.traces.len(), 2);
        assert_eq!(inputs.traces[0].names, vec!["./phone.pb", "phone.pb"]);
        assert_eq!(
            inputs.traces[1].names,
            vec!["dir/watch.pb.gz", "watch.pb.gz"]
        );
        assert_eq!(
            inputs.traces[1].display,
            format!("{}:dir/watch.pb.gz", p.display())
        );
        assert_eq!(read_all(&inputs.traces[0]), phone);
        assert_eq!(read_all(&inputs.traces[1]), watch);
    }

    #[test]
    fn sources_reopen_identically() {
        let d = tempfile::tempdir().unwrap();
        let a = trace_bytes(7);
        let b = trace_bytes(8);
        let z = write(
            d.path(),
            "x.zip",
            &zip_bytes(&[("a", &a, true), ("b", &b, false)]),
        );
        let t = write(d.path(), "x.tar", &tar_bytes(&[("a", &a), ("b", &b)]));
        let f = write(d.path(), "f.pb", &a);
        let inputs = expand_inputs(&[z, t, f], None).unwrap();
        assert_eq!(inputs.traces.len(), 5);
        for s in &inputs.traces {
            let first = read_all(s);
            let second = read_all(s);
            assert!(first == a || first == b, "{}", s.display);
            assert_eq!(first, second, "{}", s.display);
        }
    }

    #[test]
    fn manifest_detected_as_input_and_in_archives() {
        let d = tempfile::tempdir().unwrap();
        let tr = trace_bytes(9);
        // As a plain input, whatever its name.
        let m = write(d.path(), "notes.txt", MANIFEST.as_bytes());
        let a = write(d.path(), "a.pb", &tr);
        let inputs = expand_inputs(&[a.clone(), m.clone()], None).unwrap();
        assert_eq!(
            inputs.manifest,
            Some((m.display().to_string(), MANIFEST.to_string()))
        );
        assert_eq!(inputs.traces.len(), 1);

        // In a zip, position irrelevant.
        let z = write(
            d.path(),
            "b.zip",
            &zip_bytes(&[
                ("t.pb", &tr, true),
                ("perfetto_manifest.json", MANIFEST.as_bytes(), true),
            ]),
        );
        let inputs = expand_inputs(std::slice::from_ref(&z), None).unwrap();
        let (shown, text) = inputs.manifest.unwrap();
        assert_eq!(shown, format!("{}:perfetto_manifest.json", z.display()));
        assert_eq!(text, MANIFEST);
        assert_eq!(inputs.traces.len(), 1);

        // In a tar, gzip-compressed.
        let t = write(
            d.path(),
            "c.tar",
            &tar_bytes(&[("m.json.gz", &gzip(MANIFEST.as_bytes())), ("t.pb", &tr)]),
        );
        let inputs = expand_inputs(std::slice::from_ref(&t), None).unwrap();
        assert_eq!(inputs.manifest.unwrap().1, MANIFEST);
        assert_eq!(inputs.traces.len(), 1);

        // Via --manifest, also listed as an input: still one manifest.
        let inputs = expand_inputs(&[a.clone(), m.clone()], Some(&m)).unwrap();
        assert_eq!(inputs.manifest.unwrap().0, m.display().to_string());

        // Not a manifest: a JSON object with another first key is a trace.
        let j = write(
            d.path(),
            "app.json",
            br#"{"traceEvents": [], "perfetto_manifest": 1}"#,
        );
        let inputs = expand_inputs(std::slice::from_ref(&j), None).unwrap();
        assert!(inputs.manifest.is_none());
        assert_eq!(inputs.traces.len(), 1);
    }

    #[test]
    fn manifest_detection_rules() {
        assert!(is_manifest(br#"{"perfetto_manifest":{}}"#));
        assert!(is_manifest(b"\n\t {\r\n  \"perfetto_manifest\" : {}}"));
        assert!(!is_manifest(br#"{"version": 1, "perfetto_manifest": {}}"#));
        assert!(!is_manifest(br#"["perfetto_manifest"]"#));
        assert!(!is_manifest(b"   "));
        assert!(!is_manifest(b"{"));
    }

    #[test]
    fn two_manifests_rejected() {
        let d = tempfile::tempdir().unwrap();
        let m1 = write(d.path(), "m1.json", MANIFEST.as_bytes());
        let m2 = write(d.path(), "m2.json", MANIFEST.as_bytes());
        let z = write(
            d.path(),
            "b.zip",
            &zip_bytes(&[
                ("t.pb", &trace_bytes(1), false),
                ("m.json", MANIFEST.as_bytes(), false),
            ]),
        );
        let e = err_of(expand_inputs(&[m1.clone(), z.clone()], None));
        assert_eq!(e.exit_code(), DATAERR);
        assert_eq!(
            e.to_string(),
            format!(
                "multiple perfetto_manifest files: {} and {}:m.json; keep only one",
                m1.display(),
                z.display()
            )
        );
        let e = err_of(expand_inputs(std::slice::from_ref(&z), Some(&m2)));
        assert!(
            e.to_string()
                .starts_with("multiple perfetto_manifest files: "),
            "{e}"
        );
    }

    #[test]
    fn nested_archives_rejected() {
        let d = tempfile::tempdir().unwrap();
        let inner_zip = zip_bytes(&[("t.pb", &trace_bytes(1), false)]);
        let inner_tar = tar_bytes(&[("t.pb", &trace_bytes(1))]);
        let z = write(
            d.path(),
            "outer.zip",
            &zip_bytes(&[("inner.zip", &inner_zip, true)]),
        );
        let e = err_of(expand_inputs(std::slice::from_ref(&z), None));
        assert_eq!(e.exit_code(), DATAERR);
        assert_eq!(
            e.to_string(),
            format!(
                "{}:inner.zip: nested archives are not supported: merge the leaf files directly",
                z.display()
            )
        );
        let t = write(
            d.path(),
            "outer.tar",
            &tar_bytes(&[("a/inner.tar", &inner_tar)]),
        );
        let e = err_of(expand_inputs(std::slice::from_ref(&t), None));
        assert!(matches!(e, InputError::NestedArchive { .. }), "{e}");
        // A gzipped tar inside an archive is nested too.
        let t = write(
            d.path(),
            "outer2.tar",
            &tar_bytes(&[("inner.tgz", &gzip(&inner_tar))]),
        );
        let e = err_of(expand_inputs(std::slice::from_ref(&t), None));
        assert!(matches!(e, InputError::NestedArchive { .. }), "{e}");
    }

    #[test]
    fn top_level_tar_gz_rejected() {
        let d = tempfile::tempdir().unwrap();
        let tgz = gzip(&tar_bytes(&[("t.pb", &trace_bytes(1))]));
        let p = write(d.path(), "x.tar.gz", &tgz);
        let e = err_of(expand_inputs(std::slice::from_ref(&p), None));
        assert_eq!(e.exit_code(), DATAERR);
        assert_eq!(
            e.to_string(),
            format!(
                "{}: gzip-compressed archives are not supported: decompress it (gunzip) and pass the .tar or .zip",
                p.display()
            )
        );
    }

    #[test]
    fn missing_inputs_are_noinput() {
        let d = tempfile::tempdir().unwrap();
        let e = err_of(expand_inputs(&[], None));
        assert_eq!(e.exit_code(), NOINPUT);
        assert_eq!(
            e.to_string(),
            "no input files: give one or more traces, or a .zip/.tar archive of them"
        );

        let missing = d.path().join("nope.pftrace");
        let e = err_of(expand_inputs(std::slice::from_ref(&missing), None));
        assert_eq!(e.exit_code(), NOINPUT);
        let s = e.to_string();
        assert!(
            s.starts_with(&format!("{}: cannot open: ", missing.display())),
            "{s}"
        );
        assert!(s.ends_with("; check the path and its permissions"), "{s}");
        assert!(!s.contains('\n'));

        let e = err_of(expand_inputs(&[d.path().to_path_buf()], None));
        assert_eq!(e.exit_code(), NOINPUT);
        assert_eq!(
            e.to_string(),
            format!(
                "{}: is a directory; pass the trace files in it, or an archive of them",
                d.path().display()
            )
        );

        let a = write(d.path(), "a.pb", &trace_bytes(1));
        let e = err_of(expand_inputs(std::slice::from_ref(&a), Some(&missing)));
        assert_eq!(e.exit_code(), NOINPUT);

        let m = write(d.path(), "m.json", MANIFEST.as_bytes());
        let e = err_of(expand_inputs(std::slice::from_ref(&m), None));
        assert_eq!(e.exit_code(), NOINPUT);
        assert_eq!(
            e.to_string(),
            "no trace files among the inputs (only a perfetto_manifest): add the traces to merge"
        );
    }

    #[test]
    fn bad_manifest_files() {
        let d = tempfile::tempdir().unwrap();
        let a = write(d.path(), "a.pb", &trace_bytes(1));
        let notm = write(d.path(), "x.json", b"{\"files\": []}");
        let e = err_of(expand_inputs(std::slice::from_ref(&a), Some(&notm)));
        assert_eq!(e.exit_code(), DATAERR);
        assert_eq!(
            e.to_string(),
            format!(
                "{}: not a perfetto_manifest (expected a JSON object whose first key is \"perfetto_manifest\"); check the --manifest argument",
                notm.display()
            )
        );

        let mut bad = MANIFEST.as_bytes().to_vec();
        bad.extend_from_slice(b"\xff\xfe");
        let m = write(d.path(), "bad.json", &bad);
        let e = err_of(expand_inputs(&[a.clone(), m.clone()], None));
        assert_eq!(
            e.to_string(),
            format!(
                "{}: perfetto_manifest is not valid UTF-8; save it as UTF-8 JSON",
                m.display()
            )
        );

        // Over the cap: never read whole, rejected.
        let mut big = MANIFEST.as_bytes().to_vec();
        big.resize(MANIFEST_CAP as usize + 10, b' ');
        let m = write(d.path(), "big.json", &big);
        let e = err_of(expand_inputs(&[a, m.clone()], None));
        assert_eq!(e.exit_code(), DATAERR);
        assert_eq!(
            e.to_string(),
            format!(
                "{}: perfetto_manifest is larger than 16 MiB; it should only describe the files",
                m.display()
            )
        );
    }

    #[test]
    fn malformed_archives_are_dataerr() {
        let d = tempfile::tempdir().unwrap();
        // A zip local header followed by garbage: no central directory.
        let mut z = b"PK\x03\x04".to_vec();
        z.extend_from_slice(&[0u8; 100]);
        let p = write(d.path(), "broken.zip", &z);
        let e = err_of(expand_inputs(std::slice::from_ref(&p), None));
        assert_eq!(e.exit_code(), DATAERR);
        let s = e.to_string();
        assert!(
            s.starts_with(&format!("{}: malformed zip archive: ", p.display())),
            "{s}"
        );
        assert!(s.ends_with("; re-create the archive"), "{s}");

        // A tar whose header checksum is wrong.
        let mut t = tar_bytes(&[("a.pb", &trace_bytes(1))]);
        t[148..156].copy_from_slice(b"0000000\0");
        let p = write(d.path(), "broken.tar", &t);
        let e = err_of(expand_inputs(std::slice::from_ref(&p), None));
        assert_eq!(e.exit_code(), DATAERR);
        assert!(
            e.to_string()
                .starts_with(&format!("{}: malformed tar archive: ", p.display())),
            "{e}"
        );
    }

    #[test]
    fn altered_zip_member_fails_on_read() {
        let d = tempfile::tempdir().unwrap();
        let data = trace_bytes(1);
        let mut z = zip_bytes(&[("a.pb", &data, false)]);
        let p = write(d.path(), "x.zip", &z);
        let inputs = expand_inputs(std::slice::from_ref(&p), None).unwrap();
        // Flip a byte of the stored data after indexing: the CRC catches it.
        let at = z.windows(4).position(|w| w == &data[..4]).unwrap();
        z[at + 1000] ^= 0x40;
        std::fs::write(&p, &z).unwrap();
        let mut v = Vec::new();
        let e = inputs.traces[0]
            .open()
            .unwrap()
            .read_to_end(&mut v)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("CRC mismatch"), "{e}");
    }

    #[test]
    fn unsupported_zip_method_rejected() {
        let d = tempfile::tempdir().unwrap();
        let mut z = zip_bytes(&[("a.pb", &trace_bytes(1), false)]);
        // Claim bzip2 (method 12) in the local and central headers.
        z[8] = 12;
        let central = z.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
        z[central + 10] = 12;
        let p = write(d.path(), "x.zip", &z);
        let e = err_of(expand_inputs(std::slice::from_ref(&p), None));
        assert_eq!(e.exit_code(), DATAERR);
        let s = e.to_string();
        assert!(
            s.starts_with(&format!("{}:a.pb: compression method ", p.display())),
            "{s}"
        );
        assert!(
            s.ends_with(" is not supported; re-create the archive with stored or deflated members"),
            "{s}"
        );
    }

    #[test]
    fn hidden_rules() {
        assert!(is_hidden(".DS_Store"));
        assert!(is_hidden("a/.git/config"));
        assert!(is_hidden("__MACOSX/._a.pb"));
        assert!(!is_hidden("./a.pb"));
        assert!(!is_hidden("a/b.pb"));
        assert!(!is_hidden("a.b/c.pb"));
    }
}
