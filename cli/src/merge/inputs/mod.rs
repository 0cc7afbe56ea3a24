//! Expansion of `tracesync merge` INPUT paths into trace sources.
//!
//! An input is a plain or gzip trace, a ZIP or TAR archive of traces
//! (`archive`), or a `perfetto_manifest` (recognised by content, as Perfetto
//! does: `classify`). Archives are indexed once, without reading member data
//! beyond a short prefix used to classify it; each source can then be
//! reopened for every merge pass (`source`).

mod archive;
mod classify;
mod error;
mod source;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use archive::{expand_tar, expand_zip};
use classify::{Kind, inspect};
pub use error::InputError;
pub use source::InputSource;
use source::Origin;

/// The expanded inputs of one merge.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub traces: Vec<InputSource>,
    /// (display, JSON text) of the one manifest, if any.
    pub manifest: Option<(String, String)>,
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

fn push_unique(names: &mut Vec<String>, name: String) {
    if !name.is_empty() && !names.contains(&name) {
        names.push(name);
    }
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

#[cfg(test)]
mod tests;
