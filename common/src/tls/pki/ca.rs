//! The lab CA of DIR, and the certificates and CRL `renew` and `revoke`
//! read there (PEM or DER), with errors naming the file.

use std::path::{Path, PathBuf};

use rcgen::KeyPair;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer};

use super::{PkiError, ca_params, now_unix};
use crate::tls::x509;

/// The lab CA of DIR: its key (PEM) and, when `ca.crt` is there, what its
/// certificate says.
pub(super) struct Ca {
    pub(super) key_path: PathBuf,
    pub(super) key_pem: String,
    pub(super) cert: Option<x509::CertFields>,
}

impl Ca {
    pub(super) fn open(dir: &Path) -> Result<Ca, PkiError> {
        let key_path = dir.join("ca.key");
        let key_pem = std::fs::read_to_string(&key_path).map_err(|source| PkiError::NoCa {
            path: key_path.clone(),
            source,
        })?;
        let crt = dir.join("ca.crt");
        let cert = match std::fs::read(&crt) {
            Ok(pem) => Some(read_cert(&crt, &pem)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(PkiError::Read { path: crt, source }),
        };
        let ca = Ca {
            key_path,
            key_pem,
            cert,
        };
        if let Some(cert) = &ca.cert
            && cert.subject != ca.subject()?
        {
            return Err(PkiError::ForeignCa {
                ca_cert: crt,
                ca_key: ca.key_path,
            });
        }
        Ok(ca)
    }

    /// The CA's subject Name as its certificates name their issuer.
    pub(super) fn subject(&self) -> Result<Vec<u8>, PkiError> {
        let key = KeyPair::from_pem(&self.key_pem).map_err(PkiError::CaKey)?;
        let params = ca_params(&key);
        let probe = params.self_signed(&key).map_err(PkiError::Rcgen)?;
        let fields = x509::certificate(probe.der()).map_err(|source| PkiError::Malformed {
            path: self.key_path.clone(),
            source,
        })?;
        Ok(fields.subject)
    }

    /// Refuses a certificate that would outlive the CA.
    pub(super) fn check_days(&self, dir: &Path, days: u32) -> Result<(), PkiError> {
        let Some(cert) = &self.cert else {
            return Ok(());
        };
        let end = now_unix().saturating_add(i64::from(days) * 86_400);
        if end > cert.not_after {
            return Err(PkiError::OutlivesCa {
                ca_cert: dir.join("ca.crt"),
                days_left: (cert.not_after - now_unix()).max(0) / 86_400,
                days,
            });
        }
        Ok(())
    }

    /// Refuses a certificate this CA did not issue.
    pub(super) fn check_issued(
        &self,
        path: &Path,
        cert: &x509::CertFields,
    ) -> Result<(), PkiError> {
        if cert.issuer != self.subject()? {
            return Err(PkiError::NotIssuedHere {
                path: path.to_owned(),
            });
        }
        Ok(())
    }
}

/// The first certificate of a PEM (or DER) file, read.
pub(super) fn read_cert(path: &Path, bytes: &[u8]) -> Result<x509::CertFields, PkiError> {
    let der = if bytes.starts_with(b"-----BEGIN") {
        CertificateDer::from_pem_slice(bytes).map_err(|source| PkiError::NotPem {
            path: path.to_owned(),
            kind: "certificate",
            source,
        })?
    } else {
        CertificateDer::from(bytes.to_vec())
    };
    x509::certificate(der.as_ref()).map_err(|source| PkiError::Malformed {
        path: path.to_owned(),
        source,
    })
}

/// The first CRL of a PEM (or DER) file, read.
pub(super) fn read_crl(path: &Path, bytes: &[u8]) -> Result<x509::CrlFields, PkiError> {
    let der = if bytes.starts_with(b"-----BEGIN") {
        CertificateRevocationListDer::from_pem_slice(bytes).map_err(|source| PkiError::NotPem {
            path: path.to_owned(),
            kind: "CRL",
            source,
        })?
    } else {
        CertificateRevocationListDer::from(bytes.to_vec())
    };
    x509::crl(der.as_ref()).map_err(|source| PkiError::Malformed {
        path: path.to_owned(),
        source,
    })
}

/// A certificate file of DIR, whole.
pub(super) fn read_file(path: &Path) -> Result<Vec<u8>, PkiError> {
    std::fs::read(path).map_err(|source| PkiError::Read {
        path: path.to_owned(),
        source,
    })
}
