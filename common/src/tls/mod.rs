//! Mutual TLS of the relay data connection (rustls, ring provider, TLS 1.3
//! only): the files both ends load and the rustls configurations built from
//! them. The daemon verifies relays against its client CA and the relay the
//! daemon against its CA; each presents its own certificate. Plaintext only
//! with `mode = "off"` (both ends warn).

mod group;
pub mod pem;
pub mod pki;
pub mod x509;

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use serde::Deserialize;

/// URI SAN prefix binding a machine name (written by [`pki`], read by the
/// daemon's identity check).
pub const URI_MACHINE: &str = "tracesync:machine/";
/// URI SAN prefix binding a raw machine id (decimal).
pub const URI_MACHINE_ID: &str = "tracesync:machine-id/";

/// Where `tracesync pki init` puts the lab PKI's files, and the defaults.
pub const DEFAULT_TLS_DIR: &str = "/etc/tracesync/tls";

/// `[tls] mode` / `--tls`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// Mutual TLS: each end presents a certificate the other's CA issued (the default).
    #[default]
    Required,
    /// Plaintext TCP: anyone who can reach the port may connect (both ends must agree; they warn).
    Off,
}

/// The `[tls]` key a loading error is about (for `file:line:column`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsKey {
    /// The relay's CA of the daemon's certificate.
    Ca,
    /// The daemon's CA of relay certificates.
    ClientCa,
    Cert,
    Key,
    ServerName,
    /// The daemon's certificate revocation list(s) of relay certificates.
    Crl,
}

impl TlsKey {
    pub fn name(self) -> &'static str {
        match self {
            TlsKey::Ca => "ca",
            TlsKey::ClientCa => "client-ca",
            TlsKey::Cert => "cert",
            TlsKey::Key => "key",
            TlsKey::ServerName => "server-name",
            TlsKey::Crl => "crl",
        }
    }
}

/// A `[tls]` file or name that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tls.{}: {message}", key.name())]
pub struct TlsError {
    pub key: TlsKey,
    pub message: String,
}

/// Every certificate in a PEM file (at least one).
pub fn read_certs(path: &Path, key: TlsKey) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    pem::certificates(path).map_err(|e| TlsError {
        key,
        message: e.to_string(),
    })
}

/// The private key in a PEM file.
pub fn read_key(path: &Path, key: TlsKey) -> Result<PrivateKeyDer<'static>, TlsError> {
    pem::private_key(path).map_err(|e| TlsError {
        key,
        message: e.to_string(),
    })
}

/// The CA certificate(s) of a PEM file as trust roots.
fn roots(path: &Path, key: TlsKey) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in read_certs(path, key)? {
        roots.add(ca).map_err(|e| TlsError {
            key,
            message: format!("{}: not a usable CA certificate: {e}", path.display()),
        })?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn not_fitting(key: &Path, cert: &Path, e: rustls::Error) -> TlsError {
    TlsError {
        key: TlsKey::Key,
        message: format!("{} does not fit {}: {e}", key.display(), cert.display()),
    }
}

/// The certificate revocation lists of a file: every `X509 CRL` block of a
/// PEM file, or one DER CRL. Each must be issued by one of the CAs in
/// `client_ca` (the issuer names must match: a CRL of another CA would
/// leave every relay's status unknown, and the handshake fails then).
/// Signatures are checked by rustls when a relay connects.
pub fn read_crls(
    path: &Path,
    client_ca: &Path,
) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    let error = |message: String| TlsError {
        key: TlsKey::Crl,
        message,
    };
    let bytes =
        std::fs::read(path).map_err(|e| error(format!("cannot read {}: {e}", path.display())))?;
    let crls = if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        let crls = CertificateRevocationListDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| error(format!("cannot read {}: {e}", path.display())))?;
        if crls.is_empty() {
            return Err(error(format!(
                "{} holds no PEM CRL (-----BEGIN X509 CRL-----)",
                path.display()
            )));
        }
        crls
    } else {
        vec![CertificateRevocationListDer::from(bytes)]
    };
    let subjects = read_certs(client_ca, TlsKey::ClientCa)?
        .iter()
        .filter_map(|ca| x509::certificate(ca.as_ref()).ok().map(|c| c.subject))
        .collect::<Vec<_>>();
    for (i, crl) in crls.iter().enumerate() {
        let which = if crls.len() > 1 {
            format!("{} (CRL {})", path.display(), i + 1)
        } else {
            path.display().to_string()
        };
        let fields = x509::crl(crl.as_ref())
            .map_err(|e| error(format!("{which}: not a certificate revocation list: {e}")))?;
        if !subjects.contains(&fields.issuer) {
            return Err(error(format!(
                "{which} was not issued by a CA of [tls] client-ca ({}); give the CRL of the                  CA that issues relay certificates (`tracesync pki revoke` writes ca.crl)",
                client_ca.display()
            )));
        }
    }
    Ok(crls)
}

/// The daemon's side: presents `cert`/`key`, requires a relay certificate
/// issued by `client_ca` and not revoked by a CRL of `crl` (when given).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: &Path,
    crl: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = provider();
    let roots = roots(client_ca, TlsKey::ClientCa)?;
    let crls = match crl {
        Some(path) => read_crls(path, client_ca)?,
        None => Vec::new(),
    };
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .with_crls(crls)
        .build()
        .map_err(|e| match (&e, crl) {
            (rustls::server::VerifierBuilderError::InvalidCrl(_), Some(path)) => TlsError {
                key: TlsKey::Crl,
                message: format!("{}: not a usable CRL: {e}", path.display()),
            },
            _ => TlsError {
                key: TlsKey::ClientCa,
                message: format!("{}: {e}", client_ca.display()),
            },
        })?;
    let chain = read_certs(cert, TlsKey::Cert)?;
    let private = read_key(key, TlsKey::Key)?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError {
            key: TlsKey::Cert,
            message: e.to_string(),
        })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, private)
        .map_err(|e| not_fitting(key, cert, e))?;
    Ok(Arc::new(config))
}

/// The relay's side: verifies the daemon against `ca`, presents
/// `cert`/`key`.
pub fn client_config(
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = roots(ca, TlsKey::Ca)?;
    let chain = read_certs(cert, TlsKey::Cert)?;
    let private = read_key(key, TlsKey::Key)?;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError {
            key: TlsKey::Cert,
            message: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, private)
        .map_err(|e| not_fitting(key, cert, e))?;
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_name_their_key_and_path() {
        let err = server_config(
            Path::new("/nonexistent/d.crt"),
            Path::new("/nonexistent/d.key"),
            Path::new("/nonexistent/ca.crt"),
            None,
        )
        .unwrap_err();
        assert_eq!(err.key, TlsKey::ClientCa);
        assert!(
            err.to_string()
                .starts_with("tls.client-ca: cannot read /nonexistent/ca.crt"),
            "{err}"
        );
        let err = client_config(
            Path::new("/nonexistent/ca.crt"),
            Path::new("/nonexistent/r.crt"),
            Path::new("/nonexistent/r.key"),
        )
        .unwrap_err();
        assert_eq!(err.key, TlsKey::Ca);
    }

    #[test]
    fn crl_files_that_cannot_be_used_name_the_crl_key() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        pki::init(dir.path(), &["localhost".into()]).unwrap();
        pki::init(other.path(), &["localhost".into()]).unwrap();
        for (d, name) in [(dir.path(), "a"), (other.path(), "x")] {
            pki::issue(d, name, None).unwrap();
        }
        pki::revoke(dir.path(), "a").unwrap();
        pki::revoke(other.path(), "x").unwrap();
        let at = |f: &str| dir.path().join(f);
        let config = |crl: &Path| {
            server_config(
                &at("daemon.crt"),
                &at("daemon.key"),
                &at("ca.crt"),
                Some(crl),
            )
        };
        // The lab CRL loads, as PEM and as DER.
        config(&at(pki::CRL_FILE)).unwrap();
        let der = CertificateRevocationListDer::from_pem_file(at(pki::CRL_FILE)).unwrap();
        std::fs::write(at("ca.crl.der"), der.as_ref()).unwrap();
        config(&at("ca.crl.der")).unwrap();

        std::fs::write(
            at("empty.pem"),
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        std::fs::write(at("garbage.der"), b"\x30\x03\x02\x01\x01").unwrap();
        let cases = [
            (at("missing.crl"), "cannot read"),
            (at("empty.pem"), "holds no PEM CRL"),
            (at("garbage.der"), "not a certificate revocation list"),
            (
                other.path().join(pki::CRL_FILE),
                "was not issued by a CA of [tls] client-ca",
            ),
        ];
        for (path, want) in cases {
            let err = config(&path).unwrap_err();
            assert_eq!(err.key, TlsKey::Crl, "{err}");
            assert!(err.to_string().starts_with("tls.crl: "), "{err}");
            assert!(err.message.contains(want), "{path:?}: {err}");
        }
    }
}
