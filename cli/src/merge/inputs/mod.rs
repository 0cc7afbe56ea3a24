//! Expansion of `tracesync merge` INPUT paths into trace sources.
//!
//! An input is a plain or gzip trace (Perfetto protobuf or Chrome JSON), a ZIP or TAR archive of traces
//! (`archive`), or a `perfetto_manifest` (recognised by content, as Perfetto
//! does: `classify`). Archives are indexed once, without reading member data
//! beyond a short prefix used to classify it; each source can then be
//! reopened for every merge pass (`source`).

mod archive;
mod classify;
mod error;
mod held;
mod source;
mod spill;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use archive::{expand_tar, expand_zip};
use classify::{Kind, inspect};
pub use error::InputError;
pub use held::{Held, MAX_HELD};
use source::Origin;
pub use source::{Content, InputSource};
pub use spill::Spill;

/// The expanded inputs of one merge.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub traces: Vec<InputSource>,
    /// (display, JSON text) of the one manifest, if any.
    pub manifest: Option<(String, String)>,
    /// Manifests after the first (display): refused once the first one is
    /// read (its entries may name them, which is diagnosed first).
    pub extra_manifests: Vec<String>,
    /// Names of the inputs that are not traces (archives, manifests), which
    /// a manifest entry may name but never override.
    pub containers: Vec<String>,
    /// A gzip-compressed manifest among the inputs (display).
    gz_manifest: Option<String>,
}

impl Inputs {
    /// The error of a second manifest, if there is one.
    pub fn multiple_manifests(&self) -> Option<InputError> {
        let (first, _) = self.manifest.as_ref()?;
        self.extra_manifests
            .first()
            .map(|second| InputError::MultipleManifests {
                first: first.clone(),
                second: second.clone(),
            })
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
        extra_manifests: Vec::new(),
        containers: Vec::new(),
        gz_manifest: None,
    };
    let mut manifest_canon = None;
    if let Some(m) = manifest_path {
        let shown = m.display().to_string();
        let mut f = open_file(m)?;
        match inspect(&mut f).map_err(|source| read_err(&shown, source))? {
            // Named explicitly, a compressed manifest is read first too.
            Kind::Manifest(text) | Kind::GzManifest(text) => {
                note_container(&mut out, &shown, m.file_name());
                set_manifest(&mut out, shown, text)?
            }
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
    // Perfetto sorts a compressed manifest after the traces, and a manifest
    // that is not the first file is refused.
    if let Some(display) = out.gz_manifest.take() {
        return Err(InputError::ManifestNotFirst { display });
    }
    Ok(out)
}

fn expand_one(path: &Path, out: &mut Inputs) -> Result<(), InputError> {
    let shown = path.display().to_string();
    let mut f = open_file(path)?;
    match inspect(&mut f).map_err(|source| read_err(&shown, source))? {
        Kind::Zip => {
            drop(f);
            note_container(out, &shown, path.file_name());
            expand_zip(path, &shown, out)
        }
        Kind::Tar => {
            drop(f);
            note_container(out, &shown, path.file_name());
            expand_tar(path, &shown, out)
        }
        Kind::CompressedArchive => Err(InputError::CompressedArchive { display: shown }),
        Kind::Manifest(text) => {
            note_container(out, &shown, path.file_name());
            set_manifest(out, shown, text)
        }
        Kind::GzManifest(text) => {
            note_container(out, &shown, path.file_name());
            set_gz_manifest(out, shown, text)
        }
        Kind::ManifestTooLarge => Err(InputError::ManifestTooLarge { display: shown }),
        Kind::ManifestNotUtf8 => Err(InputError::ManifestNotUtf8 { display: shown }),
        Kind::Trace(content) => {
            let mut names = vec![shown.clone()];
            if let Some(base) = path.file_name() {
                push_unique(&mut names, base.to_string_lossy().into_owned());
            }
            out.traces.push(InputSource {
                display: shown,
                names,
                origin: Origin::File(path.to_path_buf()),
                content,
                spill: None,
                held: None,
            });
            Ok(())
        }
    }
}

fn push_unique(names: &mut Vec<String>, name: String) {
    if !name.is_empty() && !names.contains(&name) {
        names.push(name);
    }
}

fn set_manifest(out: &mut Inputs, display: String, text: String) -> Result<(), InputError> {
    if out.manifest.is_some() {
        out.extra_manifests.push(display);
        return Ok(());
    }
    out.manifest = Some((display, text));
    Ok(())
}

fn set_gz_manifest(out: &mut Inputs, display: String, text: String) -> Result<(), InputError> {
    if out.gz_manifest.is_none() {
        out.gz_manifest = Some(display.clone());
    }
    set_manifest(out, display, text)
}

/// Records the names a manifest entry may use for a non-trace input.
fn note_container(out: &mut Inputs, shown: &str, base: Option<&std::ffi::OsStr>) {
    push_unique(&mut out.containers, shown.to_string());
    if let Some(base) = base {
        push_unique(&mut out.containers, base.to_string_lossy().into_owned());
    }
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

#[cfg(test)]
mod tests;
