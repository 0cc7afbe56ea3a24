//! Why a relay's TLS handshake failed, told from rustls's error: counted
//! by reason for the status report, and logged with the fix.

use std::io;

/// A failed handshake's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The relay speaks plaintext (its first bytes are not a TLS record).
    PlaintextRelay,
    /// The relay presented no certificate.
    NoClientCertificate,
    /// The relay's certificate is not signed by `[tls] client-ca`.
    UnknownClientCa,
    /// The relay's certificate is revoked by `[tls] crl`.
    Revoked,
    /// The relay's certificate expired or is not valid yet.
    Expired,
    /// The relay refused the daemon's certificate (an alert from it).
    RelayRefusedDaemonCertificate,
    /// Not done within the hello timeout.
    Timeout,
    /// The relay closed the connection during the handshake.
    Closed,
    Other,
}

impl HandshakeFailure {
    pub const ALL: [HandshakeFailure; 9] = [
        HandshakeFailure::PlaintextRelay,
        HandshakeFailure::NoClientCertificate,
        HandshakeFailure::UnknownClientCa,
        HandshakeFailure::Revoked,
        HandshakeFailure::Expired,
        HandshakeFailure::RelayRefusedDaemonCertificate,
        HandshakeFailure::Timeout,
        HandshakeFailure::Closed,
        HandshakeFailure::Other,
    ];

    /// The status report's key.
    pub fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::PlaintextRelay => "plaintext_relay",
            HandshakeFailure::NoClientCertificate => "no_client_certificate",
            HandshakeFailure::UnknownClientCa => "unknown_client_ca",
            HandshakeFailure::Revoked => "revoked",
            HandshakeFailure::Expired => "expired",
            HandshakeFailure::RelayRefusedDaemonCertificate => "relay_refused_daemon_certificate",
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::Other => "other",
        }
    }

    /// What to change, for the log line ("" when nothing is known).
    pub fn fix(self) -> &'static str {
        match self {
            HandshakeFailure::PlaintextRelay => {
                "the relay speaks plaintext: drop its --tls off and give it --tls-ca, \
                 --tls-cert, --tls-key (or run this daemon with --tls off)"
            }
            HandshakeFailure::NoClientCertificate => {
                "the relay sent no certificate: give it --tls-cert and --tls-key \
                 (tracesync pki issue --name NAME)"
            }
            HandshakeFailure::UnknownClientCa => {
                "the relay's certificate is not signed by [tls] client-ca: issue it from this \
                 daemon's CA (tracesync pki issue --name NAME)"
            }
            HandshakeFailure::Revoked => "the relay's certificate is revoked by [tls] crl",
            HandshakeFailure::Expired => {
                "the relay's certificate is expired or not valid yet: renew it \
                 (tracesync pki renew --name NAME), or check the relay's clock"
            }
            HandshakeFailure::RelayRefusedDaemonCertificate => {
                "the relay does not accept this daemon's certificate: give the relay this \
                 daemon's CA as --tls-ca, and connect to a name the certificate carries"
            }
            HandshakeFailure::Timeout | HandshakeFailure::Closed | HandshakeFailure::Other => "",
        }
    }

    /// The reason of a handshake error.
    pub fn of(e: &io::Error) -> Self {
        use rustls::{AlertDescription as A, CertificateError as C, Error as E};
        let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<E>()) else {
            return match e.kind() {
                io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe => HandshakeFailure::Closed,
                _ => HandshakeFailure::Other,
            };
        };
        match tls {
            E::InvalidMessage(_) | E::InappropriateHandshakeMessage { .. } => {
                HandshakeFailure::PlaintextRelay
            }
            E::NoCertificatesPresented => HandshakeFailure::NoClientCertificate,
            E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
                HandshakeFailure::UnknownClientCa
            }
            E::InvalidCertificate(C::Revoked) => HandshakeFailure::Revoked,
            E::InvalidCertificate(
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. },
            ) => HandshakeFailure::Expired,
            E::AlertReceived(
                A::UnknownCA
                | A::BadCertificate
                | A::CertificateUnknown
                | A::CertificateExpired
                | A::CertificateRevoked
                | A::UnsupportedCertificate
                | A::DecryptError,
            ) => HandshakeFailure::RelayRefusedDaemonCertificate,
            _ => HandshakeFailure::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_of_rustls_errors() {
        let wrap = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let plain = wrap(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert_eq!(
            HandshakeFailure::of(&plain),
            HandshakeFailure::PlaintextRelay
        );
        let alert = wrap(rustls::Error::AlertReceived(
            rustls::AlertDescription::UnknownCA,
        ));
        assert_eq!(
            HandshakeFailure::of(&alert),
            HandshakeFailure::RelayRefusedDaemonCertificate
        );
        assert_eq!(
            HandshakeFailure::of(&wrap(rustls::Error::NoCertificatesPresented)),
            HandshakeFailure::NoClientCertificate
        );
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(HandshakeFailure::of(&eof), HandshakeFailure::Closed);
        for r in HandshakeFailure::ALL {
            assert!(!r.as_str().is_empty());
        }
    }
}
