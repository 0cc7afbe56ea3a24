//! Connection failures that point at a configuration: one side speaks TLS
//! and the other does not, the relay reaches the sync port instead of the
//! data port, or a certificate is not accepted. Each is told apart from
//! what the peer sent (or did not) and named with its fix; the uplink logs
//! it once and backs off.
//!
//! Only a fault with positive evidence (a TLS record, a frame, a
//! certificate error or alert) can end the relay, after
//! `give-up-after-seconds`. A peer that closes without a word
//! ([`Misconfig::NotDataPort`]) proves nothing: a daemon shedding load
//! under a connection flood, or a forwarder whose daemon is not up yet,
//! closes the same way, and both pass by themselves; the relay names the
//! likely cause and retries for as long as it runs
//! ([`Misconfig::can_pass`]).

use std::fmt;
use std::io::{self, IoSlice};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use tracesync_common::exit;

/// A configuration fault seen on one connection attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misconfig {
    /// A plaintext relay got a TLS record back: the daemon runs TLS.
    DaemonWantsTls,
    /// A TLS relay got a relay-protocol frame back: the daemon runs plaintext.
    DaemonIsPlaintext,
    /// The peer closed before saying anything the relay protocol or TLS
    /// would: not a tracesync data port (the sync port, most likely), or
    /// a forwarder whose far end refused it (`adb reverse` with the
    /// daemon down: the phone's side accepts, then closes).
    NotDataPort,
    /// The daemon's certificate is not signed by `[tls] ca`.
    UnknownIssuer,
    /// The daemon's certificate does not name the host connected to.
    WrongServerName,
    /// The daemon refused this relay's certificate (a TLS alert).
    CertificateRefused,
}

impl Misconfig {
    /// The exit code when the relay gives up: 77 for credentials the
    /// daemon refuses (as for a wrong token), 78 for the rest.
    pub fn exit_code(self) -> u8 {
        match self {
            Misconfig::CertificateRefused => exit::NOPERM,
            _ => exit::CONFIG,
        }
    }

    /// Whether the fault may pass without anyone changing this relay's
    /// configuration: then the relay never gives up on it.
    pub fn can_pass(self) -> bool {
        matches!(self, Misconfig::NotDataPort)
    }

    /// A short label (logs, tests).
    pub fn label(self) -> &'static str {
        match self {
            Misconfig::DaemonWantsTls => "daemon_wants_tls",
            Misconfig::DaemonIsPlaintext => "daemon_is_plaintext",
            Misconfig::NotDataPort => "not_data_port",
            Misconfig::UnknownIssuer => "unknown_issuer",
            Misconfig::WrongServerName => "wrong_server_name",
            Misconfig::CertificateRefused => "certificate_refused",
        }
    }
}

impl fmt::Display for Misconfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Misconfig::DaemonWantsTls => {
                "the daemon speaks TLS and this relay plaintext: drop --tls off / [tls] mode = \
                 \"off\" and give --tls-ca, --tls-cert, --tls-key (tracesync pki issue)"
            }
            Misconfig::DaemonIsPlaintext => {
                "the daemon speaks plaintext (its [tls] mode = \"off\") and this relay TLS: \
                 turn TLS on at the daemon, or run this relay with --tls off"
            }
            Misconfig::NotDataPort => {
                "the peer closed the connection without a word: this is not the daemon's data \
                 port (7410 by default; is it the sync port, 7411?), or a forwarder (adb \
                 reverse, ssh -L) with no daemon behind it, or a daemon shedding a flood of \
                 connections; fix --host, or start tracesyncd"
            }
            Misconfig::UnknownIssuer => {
                "the daemon's certificate is not signed by this relay's CA: give the daemon's \
                 ca.crt as --tls-ca / [tls] ca"
            }
            Misconfig::WrongServerName => {
                "the daemon's certificate does not name the host connected to: give \
                 --tls-server-name NAME (a name it carries), or reissue it from the same CA \
                 on the daemon's host: tracesync pki renew --daemon --daemon-name HOST DIR"
            }
            Misconfig::CertificateRefused => {
                "the daemon refused this relay's certificate: check --tls-cert and --tls-key, \
                 and that the daemon's client-ca issued them (tracesync pki issue --name NAME)"
            }
        })
    }
}

/// An io::Error that carries a [`Misconfig`] (the frame decoder's way to
/// say it).
#[derive(Debug)]
pub struct MisconfigError(pub Misconfig);

impl fmt::Display for MisconfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for MisconfigError {}

impl MisconfigError {
    pub fn io(m: Misconfig) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, MisconfigError(m))
    }
}

/// The misconfiguration an io::Error stands for, if any: ours (from the
/// frame decoder), or a certificate error or alert from rustls.
pub fn classify(e: &io::Error) -> Option<Misconfig> {
    let inner = e.get_ref()?;
    if let Some(MisconfigError(m)) = inner.downcast_ref::<MisconfigError>() {
        return Some(*m);
    }
    let tls = inner.downcast_ref::<rustls::Error>()?;
    classify_tls(tls)
}

fn classify_tls(e: &rustls::Error) -> Option<Misconfig> {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            Some(Misconfig::UnknownIssuer)
        }
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => Some(Misconfig::WrongServerName),
        rustls::Error::AlertReceived(
            rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::UnknownCA
            | rustls::AlertDescription::CertificateRequired
            | rustls::AlertDescription::CertificateRevoked
            | rustls::AlertDescription::CertificateExpired
            | rustls::AlertDescription::CertificateUnknown
            | rustls::AlertDescription::UnsupportedCertificate
            | rustls::AlertDescription::DecryptError,
        ) => Some(Misconfig::CertificateRefused),
        _ => None,
    }
}

/// What the first bytes a TLS relay read during a failed handshake say:
/// a relay-protocol frame (a 4-byte big-endian length below the frame
/// limit) is a plaintext daemon; nothing at all is not a data port.
pub fn classify_handshake_bytes(first: &[u8]) -> Option<Misconfig> {
    match first {
        [] => Some(Misconfig::NotDataPort),
        [0, b1, _, _, ..] if *b1 < 0x10 => Some(Misconfig::DaemonIsPlaintext),
        _ => None,
    }
}

/// Whether the first bytes a plaintext relay read are a TLS record (an
/// alert or handshake, version 3.x): no frame length starts that way
/// (it would exceed every frame limit).
pub fn looks_like_tls(first: &[u8]) -> bool {
    matches!(first, [0x15 | 0x16, 0x03, ..])
}

/// A stream that keeps the first bytes read from it (what a peer sent
/// before a TLS handshake failed tells a plaintext daemon from a port that
/// is not a data port).
pub struct FirstBytes<S> {
    inner: S,
    first: Arc<std::sync::Mutex<Vec<u8>>>,
    done: bool,
}

/// Bytes kept by [`FirstBytes`].
const FIRST_BYTES: usize = 8;

impl<S> FirstBytes<S> {
    pub fn wrap(inner: S) -> (Self, Arc<std::sync::Mutex<Vec<u8>>>) {
        let first = Arc::new(std::sync::Mutex::new(Vec::with_capacity(FIRST_BYTES)));
        (
            Self {
                inner,
                first: first.clone(),
                done: false,
            },
            first,
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytes<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if !self.done && matches!(polled, std::task::Poll::Ready(Ok(()))) {
            let new = &buf.filled()[before..];
            let full = match self.first.lock() {
                Ok(mut first) => {
                    let room = FIRST_BYTES.saturating_sub(first.len());
                    first.extend_from_slice(&new[..new.len().min(room)]);
                    first.len() >= FIRST_BYTES
                }
                Err(_) => true,
            };
            self.done = full || new.is_empty();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstBytes<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_tell_tls_from_frames_and_silence() {
        // A TLS alert record (what a TLS daemon sends a plaintext Hello).
        assert!(looks_like_tls(&[0x15, 0x03, 0x03, 0x00, 0x02]));
        assert!(looks_like_tls(&[0x16, 0x03, 0x01]));
        // A Refused frame of 40 bytes.
        assert!(!looks_like_tls(&[0x00, 0x00, 0x00, 0x28]));
        assert_eq!(
            classify_handshake_bytes(&[0x00, 0x00, 0x00, 0x28, 0x2a]),
            Some(Misconfig::DaemonIsPlaintext)
        );
        assert_eq!(classify_handshake_bytes(&[]), Some(Misconfig::NotDataPort));
        assert_eq!(classify_handshake_bytes(b"HTTP/1.1 400"), None);
    }

    #[test]
    fn certificate_errors_are_named() {
        let unknown = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(classify(&unknown), Some(Misconfig::UnknownIssuer));
        let alert = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::BadCertificate),
        );
        assert_eq!(classify(&alert), Some(Misconfig::CertificateRefused));
        assert_eq!(Misconfig::CertificateRefused.exit_code(), exit::NOPERM);
        assert_eq!(Misconfig::UnknownIssuer.exit_code(), exit::CONFIG);
        let other = io::Error::new(io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(classify(&other), None);
    }
}
