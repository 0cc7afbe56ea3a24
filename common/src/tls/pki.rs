//! A lab PKI for `tracesync pki`: one CA, the daemon's certificate, and
//! one certificate per relay machine (rcgen, ECDSA P-256).
//!
//! Files in DIR: `ca.crt` `ca.key` (keep the key off the relays),
//! `daemon.crt` `daemon.key`, and `<name>.crt` `<name>.key` per relay. The
//! CA's subject is fixed, so `issue` rebuilds the issuer from `ca.key`
//! alone.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::{URI_MACHINE, URI_MACHINE_ID};

/// The lab CA's common name, followed by a short id of its key (so two
/// lab CAs never share a subject, and `issue` can rebuild it from the key).
pub const CA_NAME: &str = "tracesync lab CA";

fn error(what: impl std::fmt::Display) -> String {
    what.to_string()
}

fn ca_params(key: &KeyPair) -> CertificateParams {
    let mut params = CertificateParams::default();
    let id: String = params
        .key_identifier(key)
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{CA_NAME} {id}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn leaf_params(
    common_name: &str,
    sans: Vec<SanType>,
    eku: ExtendedKeyUsagePurpose,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![eku];
    params.use_authority_key_identifier_extension = true;
    params
}

/// A certificate and its key, PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A new self-signed CA.
pub fn new_ca() -> Result<Issued, String> {
    let key = KeyPair::generate().map_err(error)?;
    let cert = ca_params(&key).self_signed(&key).map_err(error)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The SAN for a name: an IP address, a DNS name, or else a
/// `tracesync:machine/` URI (names DNS does not allow, e.g. with spaces).
fn san_for(name: &str) -> Result<SanType, String> {
    if let Ok(ip) = name.parse() {
        return Ok(SanType::IpAddress(ip));
    }
    if let Ok(dns) = name.try_into()
        && is_dns_name(name)
    {
        return Ok(SanType::DnsName(dns));
    }
    let uri = format!("{URI_MACHINE}{name}");
    Ok(SanType::URI(uri.as_str().try_into().map_err(error)?))
}

fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Signs a daemon (server) certificate for `names` (host names, IPs).
pub fn daemon_cert(ca_key_pem: &str, names: &[String]) -> Result<Issued, String> {
    let sans = names.iter().map(|n| san_for(n)).collect::<Result<_, _>>()?;
    let first = names.first().map_or("tracesyncd", String::as_str);
    sign(
        ca_key_pem,
        leaf_params(first, sans, ExtendedKeyUsagePurpose::ServerAuth),
    )
}

/// Signs a relay (client) certificate for machine `name`, optionally
/// binding its raw machine id too.
pub fn relay_cert(ca_key_pem: &str, name: &str, raw_id: Option<u32>) -> Result<Issued, String> {
    // A machine name is never an IP SAN (the daemon reads DNS and URI SANs).
    let mut sans = vec![if name.parse::<std::net::IpAddr>().is_ok() {
        let uri = format!("{URI_MACHINE}{name}");
        SanType::URI(uri.as_str().try_into().map_err(error)?)
    } else {
        san_for(name)?
    }];
    if let Some(id) = raw_id {
        let uri = format!("{URI_MACHINE_ID}{id}");
        sans.push(SanType::URI(uri.as_str().try_into().map_err(error)?));
    }
    sign(
        ca_key_pem,
        leaf_params(name, sans, ExtendedKeyUsagePurpose::ClientAuth),
    )
}

fn sign(ca_key_pem: &str, params: CertificateParams) -> Result<Issued, String> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| format!("the CA key: {e}"))?;
    let issuer = Issuer::new(ca_params(&ca_key), ca_key);
    let key = KeyPair::generate().map_err(error)?;
    let cert = params.signed_by(&key, &issuer).map_err(error)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Writes `issued` as `<dir>/<stem>.crt` and `.key` (the key mode 0600);
/// refuses to overwrite.
pub fn write(dir: &Path, stem: &str, issued: &Issued) -> Result<(PathBuf, PathBuf), String> {
    let cert = dir.join(format!("{stem}.crt"));
    let key = dir.join(format!("{stem}.key"));
    write_new(&key, &issued.key_pem, 0o600)?;
    write_new(&cert, &issued.cert_pem, 0o644)?;
    Ok((cert, key))
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `tracesync pki init DIR`: a CA and a daemon certificate for
/// `daemon_names`. Returns the files written.
pub fn init(dir: &Path, daemon_names: &[String]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let ca = new_ca()?;
    let daemon = daemon_cert(&ca.key_pem, daemon_names)?;
    let (ca_crt, ca_key) = write(dir, "ca", &ca)?;
    let (d_crt, d_key) = write(dir, "daemon", &daemon)?;
    Ok(vec![ca_crt, ca_key, d_crt, d_key])
}

/// `tracesync pki issue --name NAME DIR`: a relay certificate signed by
/// `DIR/ca.key`.
pub fn issue(dir: &Path, name: &str, raw_id: Option<u32>) -> Result<Vec<PathBuf>, String> {
    let ca_key_path = dir.join("ca.key");
    let ca_key = std::fs::read_to_string(&ca_key_path).map_err(|e| {
        format!(
            "cannot read {}: {e}; run `tracesync pki init` first",
            ca_key_path.display()
        )
    })?;
    let stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let relay = relay_cert(&ca_key, name, raw_id)?;
    let (crt, key) = write(dir, &stem, &relay)?;
    Ok(vec![crt, key])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path(), &["localhost".into()]).unwrap();
        assert!(init(dir.path(), &["localhost".into()]).is_err());
        issue(dir.path(), "relay-a", None).unwrap();
        assert!(dir.path().join("relay-a.crt").exists());
    }
}
