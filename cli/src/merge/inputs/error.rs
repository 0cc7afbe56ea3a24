//! Why INPUT paths could not be expanded, and the exit code each reason
//! maps to.

use std::io;

use tracesync_common::exit::{DATAERR, NOINPUT};

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
        "{display}: perfetto_manifest file must be the first trace file: a gzip-compressed manifest is read after the traces; store it uncompressed, or pass it with --manifest"
    )]
    ManifestNotFirst { display: String },
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
            | InputError::ManifestNotFirst { .. }
            | InputError::ManifestTooLarge { .. }
            | InputError::ManifestNotUtf8 { .. }
            | InputError::NotAManifest { .. } => DATAERR,
        }
    }
}
