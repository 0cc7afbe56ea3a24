//! The client end of the control socket (blocking: the CLI has nothing
//! else to do while it waits).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use tracesync_common::exit;
use tracesync_core::control::Request;

/// Where `tracesyncd` listens by default.
pub const DEFAULT_CONTROL: &str = "/run/tracesync/control.sock";

/// `--connect` value: a socket path, or HOST:PORT of the control socket
/// forwarded over TCP (tracesyncd itself opens no TCP control listener).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Unix(PathBuf),
    Tcp(String),
}

impl Target {
    /// A path if it has a `/` or does not look like HOST:PORT.
    pub fn parse(s: &str) -> Self {
        let looks_tcp = !s.contains('/')
            && s.rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if looks_tcp {
            Self::Tcp(s.to_owned())
        } else {
            Self::Unix(PathBuf::from(s))
        }
    }

    pub fn display(&self) -> String {
        match self {
            Self::Unix(p) => p.display().to_string(),
            Self::Tcp(a) => a.clone(),
        }
    }
}

pub enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Unix(s) => s.read(buf),
            Self::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Unix(s) => s.write(buf),
            Self::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Unix(s) => s.flush(),
            Self::Tcp(s) => s.flush(),
        }
    }
}

/// Connects and sends `request`; on failure prints the one-line error and
/// returns the exit code (69: daemon unreachable).
pub fn open(target: &Target, request: &Request) -> Result<Conn, u8> {
    open_quiet(target, request).map_err(|e| unreachable(target, &e))
}

/// [`open`] without the error line.
pub fn open_quiet(target: &Target, request: &Request) -> io::Result<Conn> {
    let connected = match target {
        Target::Unix(p) => UnixStream::connect(p).map(Conn::Unix),
        Target::Tcp(a) => TcpStream::connect(a.as_str()).map(Conn::Tcp),
    };
    connected.and_then(|mut conn| {
        let mut line = serde_json::to_vec(request).map_err(io::Error::other)?;
        line.push(b'\n');
        conn.write_all(&line)?;
        Ok(conn)
    })
}

/// Prints why the daemon could not be reached; returns exit code 69.
pub fn unreachable(target: &Target, e: &dyn std::fmt::Display) -> u8 {
    eprintln!(
        "tracesync: cannot reach the daemon at {}: {e}; is tracesyncd running? (--connect)",
        target.display()
    );
    exit::UNAVAILABLE
}

/// The daemon's `{"error":"..."}` refusal in `line`, if it is one.
pub fn refusal(line: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    Some(v.get("error")?.as_str()?.to_owned())
}

impl Conn {
    pub fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        match self {
            Self::Unix(s) => s.set_read_timeout(t),
            Self::Tcp(s) => s.set_read_timeout(t),
        }
    }
}
