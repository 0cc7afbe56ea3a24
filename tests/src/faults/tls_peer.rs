//! A peer of the daemon's data port under mutual TLS, driven by hand over a
//! blocking socket: rustls with a certificate of the lab CA, frames of the
//! relay protocol written and read by the test (hostile peers that a real
//! relay would never be).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tracesync_protocol::relay::{MAX_FRAME_BYTES, PROTOCOL_VERSION, v1};

pub type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Connects to `addr` trusting the CA certificate `ca` and presenting
/// `cert_dir/<cert>.crt` and its key; the handshake completes on the first
/// write or read.
pub fn connect(addr: SocketAddr, ca: &Path, cert_dir: &Path, cert: &str) -> io::Result<TlsStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).map_err(io::Error::other)? {
        roots
            .add(c.map_err(io::Error::other)?)
            .map_err(io::Error::other)?;
    }
    let chain = CertificateDer::pem_file_iter(cert_dir.join(format!("{cert}.crt")))
        .map_err(io::Error::other)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io::Error::other)?;
    let key = PrivateKeyDer::from_pem_file(cert_dir.join(format!("{cert}.key")))
        .map_err(io::Error::other)?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(io::Error::other)?;
    let name = ServerName::try_from(addr.ip().to_string()).map_err(io::Error::other)?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(io::Error::other)?;
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(rustls::StreamOwned::new(conn, sock))
}

/// Sends one frame with `body`.
pub fn send(tls: &mut TlsStream, body: v1::frame::Body) -> io::Result<()> {
    super::peer::write_frame(tls, &v1::Frame { body: Some(body) })?;
    tls.flush()
}

/// The daemon's answer to a Hello: the first frame within `within`.
pub fn answer(tls: &mut TlsStream, within: Duration) -> io::Result<v1::frame::Body> {
    let mut frames = FrameBuffer::default();
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Some(frame) = frames.next(tls)? {
            return frame
                .body
                .ok_or_else(|| io::Error::other("a frame without a body"));
        }
    }
    Err(io::ErrorKind::TimedOut.into())
}

/// Connects as [`connect`], sends `hello` (its protocol version set) and
/// returns the daemon's answer (Welcome or Refused) with the connection.
pub fn hello(
    addr: SocketAddr,
    ca: &Path,
    cert_dir: &Path,
    cert: &str,
    hello: v1::Hello,
) -> io::Result<(v1::frame::Body, TlsStream)> {
    let mut tls = connect(addr, ca, cert_dir, cert)?;
    let hello = v1::Hello {
        protocol_version: PROTOCOL_VERSION,
        ..hello
    };
    send(&mut tls, v1::frame::Body::Hello(hello))?;
    let answer = answer(&mut tls, Duration::from_secs(10))?;
    Ok((answer, tls))
}

/// Frames read from a stream with a short read timeout, so one thread can
/// both write and read: bytes are kept across timeouts until a frame is
/// whole.
#[derive(Default)]
pub struct FrameBuffer {
    bytes: Vec<u8>,
}

impl FrameBuffer {
    /// The next whole frame, reading once if none is buffered; Ok(None)
    /// when the read timed out first. EOF and a bad frame are errors.
    pub fn next(&mut self, s: &mut impl Read) -> io::Result<Option<v1::Frame>> {
        if let Some(body) = self.take()? {
            return Ok(Some(body));
        }
        let mut chunk = [0u8; 16 << 10];
        match s.read(&mut chunk) {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                self.bytes.extend_from_slice(&chunk[..n]);
                self.take()
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn take(&mut self) -> io::Result<Option<v1::Frame>> {
        let Some(head) = self.bytes.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(io::Error::other(format!("{len}-byte frame announced")));
        }
        if self.bytes.len() < 4 + len {
            return Ok(None);
        }
        let frame = v1::Frame::decode(&self.bytes[4..4 + len]).map_err(io::Error::other)?;
        self.bytes.drain(..4 + len);
        Ok(Some(frame))
    }
}
