//! The X.509 fields tracesync looks at, read with x509-parser: a
//! certificate's serial, issuer, subject, validity and subject alternative
//! names, and a CRL's issuer, number and revoked serials. Anything
//! x509-parser cannot read, and a DNS or URI name that is not ASCII, is an
//! error, never a panic. Signatures are not checked here (rustls/webpki
//! does that, before the daemon reads a relay's names).
//!
//! x509-parser reads the whole structure (key, algorithms, signature
//! encoding), so it refuses damaged certificates whose fields alone would
//! read; it ignores the class and constructed bits of some tags, which DER
//! fixes, so a few damaged ones read that a strict reader would refuse.

use std::net::IpAddr;

use x509_parser::asn1_rs::{Any, FromDer};
use x509_parser::error::X509Error as ParserError;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::oid_registry::OID_X509_EXT_CRL_NUMBER;
use x509_parser::x509::X509Name;

/// A subject alternative name tracesync reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum San {
    Dns(String),
    Uri(String),
    Ip(IpAddr),
}

/// What tracesync reads of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFields {
    /// The serial number's content bytes (as encoded, sign byte included).
    pub serial: Vec<u8>,
    /// The issuer Name, its whole DER (tag and length included).
    pub issuer: Vec<u8>,
    /// The subject Name, its whole DER.
    pub subject: Vec<u8>,
    /// notBefore and notAfter, seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// The DNS, URI and IP names of the subjectAltName extension, in order
    /// (other kinds of names are skipped).
    pub sans: Vec<San>,
}

/// What tracesync reads of a certificate revocation list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrlFields {
    /// The issuer Name, its whole DER.
    pub issuer: Vec<u8>,
    /// thisUpdate, seconds since the Unix epoch.
    pub this_update: i64,
    /// The cRLNumber extension, big-endian without leading zero bytes, if any.
    pub number: Option<Vec<u8>>,
    /// Revoked serial numbers (content bytes) and their revocation times.
    pub revoked: Vec<(Vec<u8>, i64)>,
}

/// Why a certificate or CRL could not be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum X509Error {
    /// Not a DER certificate (x509-parser's reason).
    #[error("malformed certificate: {0}")]
    Certificate(ParserError),
    /// A DNS or URI subject alternative name that is not ASCII.
    #[error("malformed certificate: a SAN is not ASCII")]
    SanNotAscii,
    /// An IP address subject alternative name of another length.
    #[error("malformed certificate: an IP address SAN is not 4 or 16 bytes")]
    SanIpLength,
    /// Not a DER certificate revocation list (x509-parser's reason).
    #[error("malformed CRL: {0}")]
    Crl(ParserError),
    /// A cRLNumber extension whose value is not a non-negative INTEGER.
    #[error("malformed CRL: cRLNumber is not an INTEGER")]
    CrlNumber,
}

/// Reads a DER certificate's serial, names, validity and SANs.
pub fn certificate(der: &[u8]) -> Result<CertFields, X509Error> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| X509Error::Certificate(ParserError::from(e)))?;
    let tbs = &cert.tbs_certificate;
    let mut sans = Vec::new();
    let extension = tbs
        .subject_alternative_name()
        .map_err(X509Error::Certificate)?;
    for name in extension.iter().flat_map(|e| &e.value.general_names) {
        match name {
            GeneralName::DNSName(text) => sans.push(San::Dns(ascii(text)?)),
            GeneralName::URI(text) => sans.push(San::Uri(ascii(text)?)),
            GeneralName::IPAddress(bytes) => sans.push(San::Ip(ip_address(bytes)?)),
            // A DNS or URI name that is not UTF-8 (x509-parser keeps it
            // as Invalid): not ASCII either.
            GeneralName::Invalid(tag, _) if matches!(tag.0, TAG_DNS | TAG_URI) => {
                return Err(X509Error::SanNotAscii);
            }
            _ => {} // e-mail, directory names, ...: not ours
        }
    }
    let validity = tbs.validity();
    Ok(CertFields {
        serial: tbs.raw_serial().to_vec(),
        issuer: whole_name(tbs.issuer()).map_err(X509Error::Certificate)?,
        subject: whole_name(tbs.subject()).map_err(X509Error::Certificate)?,
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
        sans,
    })
}

/// A Name's whole DER. x509-parser stops at the first relative name it
/// cannot read and keeps the bytes before it: a Name cut short there is
/// malformed, not a shorter name (two damaged names would compare equal).
fn whole_name(name: &X509Name<'_>) -> Result<Vec<u8>, ParserError> {
    let raw = name.as_raw();
    match Any::from_der(raw) {
        Ok(([], _)) => Ok(raw.to_vec()),
        _ => Err(ParserError::InvalidX509Name),
    }
}

/// The context tags of dNSName and uniformResourceIdentifier in GeneralName.
const TAG_DNS: u32 = 2;
const TAG_URI: u32 = 6;

fn ascii(text: &str) -> Result<String, X509Error> {
    if text.is_ascii() {
        Ok(text.to_owned())
    } else {
        Err(X509Error::SanNotAscii)
    }
}

fn ip_address(bytes: &[u8]) -> Result<IpAddr, X509Error> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        Ok(IpAddr::from(v4))
    } else if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
        Ok(IpAddr::from(v6))
    } else {
        Err(X509Error::SanIpLength)
    }
}

/// Reads a DER CRL's issuer, thisUpdate, number and revoked certificates.
pub fn crl(der: &[u8]) -> Result<CrlFields, X509Error> {
    let (_, crl) =
        x509_parser::parse_x509_crl(der).map_err(|e| X509Error::Crl(ParserError::from(e)))?;
    let mut number = None;
    for extension in crl.extensions() {
        if extension.oid != OID_X509_EXT_CRL_NUMBER {
            continue;
        }
        match extension.parsed_extension() {
            ParsedExtension::CRLNumber(n) => number = Some(n.to_bytes_be()),
            _ => return Err(X509Error::CrlNumber),
        }
    }
    Ok(CrlFields {
        issuer: whole_name(crl.issuer()).map_err(X509Error::Crl)?,
        this_update: crl.last_update().timestamp(),
        number,
        revoked: crl
            .iter_revoked_certificates()
            .map(|entry| {
                (
                    entry.raw_serial().to_vec(),
                    entry.revocation_date.timestamp(),
                )
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests;
