//! Why a `tracesync pki` step failed: one line naming the file (or flag)
//! and what to do, and the sysexits code the command exits with.

use std::io;
use std::path::PathBuf;

use crate::exit;
use crate::tls::x509::X509Error;

/// An error of the lab PKI ([`super::init`], `issue`, `renew`, `revoke`,
/// `--group`).
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// `--days` outside 1..=[`super::MAX_DAYS`].
    #[error("--days must be in 1..={max}, got {days}", max = super::MAX_DAYS)]
    DaysOutOfRange { days: u32 },
    /// A certificate asked for longer than the CA (`ca.crt`) is valid.
    #[error(
        "{}: the CA is valid for {days_left} more days, less than the {days} asked; ask for \
         fewer --days, or make a new PKI with `tracesync pki init` in another directory",
        ca_cert.display()
    )]
    OutlivesCa {
        ca_cert: PathBuf,
        days_left: i64,
        days: u32,
    },
    /// A name rcgen cannot put in a subject alternative name (not ASCII).
    #[error("{name:?} cannot be a certificate name ({source}); give an ASCII name")]
    BadName { name: String, source: rcgen::Error },
    /// `ca.key` cannot be read: no PKI in the directory.
    #[error("cannot read {}: {source}; run `tracesync pki init` first", path.display())]
    NoCa { path: PathBuf, source: io::Error },
    /// `ca.key` is not a private key rcgen can use.
    #[error("the CA key: {0}")]
    CaKey(rcgen::Error),
    /// `ca.crt` is not the certificate of `ca.key`.
    #[error(
        "{} is not the `tracesync pki` CA of {}; issue, renew and revoke with the tools of the \
         CA that made it (e.g. openssl ca)",
        ca_cert.display(),
        ca_key.display()
    )]
    ForeignCa { ca_cert: PathBuf, ca_key: PathBuf },
    /// A certificate or CRL file that cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    /// A file starting like PEM without a block of the kind wanted.
    #[error("{}: not a PEM {kind}: {source}", path.display())]
    NotPem {
        path: PathBuf,
        /// "certificate" or "CRL".
        kind: &'static str,
        source: rustls_pki_types::pem::Error,
    },
    /// A certificate or CRL x509-parser cannot read.
    #[error("{}: {source}", path.display())]
    Malformed { path: PathBuf, source: X509Error },
    /// A certificate another CA issued.
    #[error("{} was not issued by this directory's CA", path.display())]
    NotIssuedHere { path: PathBuf },
    /// `renew --name NAME` of a certificate that names another machine.
    #[error(
        "{} does not name machine {name:?}; `tracesync pki issue --name {name}` makes a \
         certificate for it",
        path.display()
    )]
    NotNamed { path: PathBuf, name: String },
    /// `ca.crl` signed by another CA.
    #[error(
        "{} was not issued by this directory's CA; move it away to start a new one",
        path.display()
    )]
    ForeignCrl { path: PathBuf },
    /// A CRL number past 15 bytes (rcgen writes at most 20).
    #[error("{}: CRL number too large", path.display())]
    CrlNumberTooLarge { path: PathBuf },
    /// rcgen could not make a key, sign, or write PEM.
    #[error("{0}")]
    Rcgen(rcgen::Error),
    /// A validity instant outside what `time` represents.
    #[error("{0}")]
    Time(time::error::ComponentRange),
    /// A directory or new file that cannot be created (a file already
    /// there included: nothing is overwritten).
    #[error("cannot create {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    /// A new file that cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    /// A file that cannot be replaced (temporary, fsync, rename).
    #[error("cannot replace {}: {source}", path.display())]
    Replace { path: PathBuf, source: io::Error },
    /// `--group G`: no such group.
    #[error(
        "--group {group}: no such group; create it (systemd-sysusers \
         systemd/tracesync.sysusers makes `tracesync`) or give an existing one"
    )]
    NoSuchGroup { group: String },
    /// `--group G`: the group database cannot be read.
    #[error("--group {group}: cannot look it up: {source}")]
    GroupLookup { group: String, source: nix::Error },
    /// A key that cannot be given to the group.
    #[error(
        "cannot give {} to group {gid}: {source} (run as root, or as a member of the group)",
        path.display()
    )]
    Chown {
        path: PathBuf,
        gid: nix::unistd::Gid,
        source: nix::Error,
    },
    /// A key whose mode cannot be set to 0640.
    #[error("cannot chmod 0640 {}: {source}", path.display())]
    Chmod { path: PathBuf, source: io::Error },
}

impl PkiError {
    /// The sysexits code of `tracesync pki` for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            PkiError::DaysOutOfRange { .. }
            | PkiError::OutlivesCa { .. }
            | PkiError::BadName { .. } => exit::USAGE,
            PkiError::CaKey(_)
            | PkiError::ForeignCa { .. }
            | PkiError::NotPem { .. }
            | PkiError::Malformed { .. }
            | PkiError::NotIssuedHere { .. }
            | PkiError::NotNamed { .. }
            | PkiError::ForeignCrl { .. }
            | PkiError::CrlNumberTooLarge { .. } => exit::DATAERR,
            PkiError::NoCa { .. } | PkiError::Read { .. } => exit::NOINPUT,
            PkiError::NoSuchGroup { .. } | PkiError::GroupLookup { .. } => exit::NOUSER,
            PkiError::Rcgen(_) | PkiError::Time(_) => exit::SOFTWARE,
            PkiError::Create { .. } | PkiError::Replace { .. } => exit::CANTCREAT,
            PkiError::Write { .. } => exit::IOERR,
            PkiError::Chown { .. } | PkiError::Chmod { .. } => exit::NOPERM,
        }
    }
}
