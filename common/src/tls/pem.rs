//! PEM files of the TLS setup. Errors are one line naming the file;
//! callers add the config key.

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A PEM file that does not hold what it should.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// Unreadable, or a PEM block that cannot be decoded.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable { path: PathBuf, source: pem::Error },
    /// Readable, but without a certificate.
    #[error("{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate { path: PathBuf },
    /// No private key (PKCS#8, PKCS#1 or SEC1), or an unreadable file.
    #[error("cannot read a private key from {}: {source}", path.display())]
    NoPrivateKey { path: PathBuf, source: pem::Error },
}

/// Every certificate in a PEM file (at least one).
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let unreadable = |source| PemError::Unreadable {
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(unreadable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| PemError::NoPrivateKey {
        path: path.to_owned(),
        source,
    })
}
