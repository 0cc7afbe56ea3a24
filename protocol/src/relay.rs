//! The relay <-> daemon protocol (`proto/relay.proto`): message types,
//! version, limits and default ports.

pub mod v1 {
    //! Generated from `proto/relay.proto`.
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/tracesync.relay.v1.rs"));
}

/// Version carried in `Hello` and `Welcome`; a daemon refuses other versions.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame either side accepts (LengthDelimitedCodec's max_frame_length).
/// A batch is cut well below this (see `MAX_BATCH_BYTES`).
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// A relay closes a batch at this many packet bytes.
pub const MAX_BATCH_BYTES: usize = 1 << 20;

/// A relay closes a batch at this many packets; a daemon refuses a batch
/// with more (tiny packets would otherwise cost far more memory decoded
/// than their frame's bytes).
pub const MAX_BATCH_PACKETS: usize = 65_536;

/// Largest probe datagram (UDP datagram or TCP-fallback frame) either side
/// sends or accepts.
pub const MAX_PROBE_DATAGRAM_BYTES: usize = 256;

/// Default daemon TCP port for relay data connections.
pub const DEFAULT_DATA_PORT: u16 = 7410;

/// Default daemon port for clock-sync probes (UDP, and TCP for the fallback).
pub const DEFAULT_SYNC_PORT: u16 = 7411;

/// Default daemon metrics address (off unless enabled).
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:7412";

/// `Refused.code`: why a daemon refused or closed a relay connection. The
/// daemon counts refusals by it; the relay decides by it whether retrying
/// can help ([`RefusalCode::is_final`]). The reason beside it is for people.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefusalCode {
    /// A frame that does not decode.
    BadFrame,
    /// A frame over the daemon's frame limit.
    FrameTooLarge,
    /// A batch over the packet or byte limits.
    BatchTooLarge,
    /// A frame out of place (a Batch before Hello, a second Hello, ...).
    UnexpectedFrame,
    /// No Hello within the daemon's hello timeout.
    NoHello,
    /// Another protocol version.
    BadVersion,
    /// The daemon's `[auth] token` was not given.
    BadToken,
    /// The machine is not in the daemon's `[auth] allow-machines`.
    MachineNotAllowed,
    /// The relay's certificate does not name the machine it claims.
    CertificateIdentityMismatch,
    /// The live core refused the Hello (raw id in use or reserved).
    RefusedByCore,
    /// The live core closed the session (a relay limit was broken).
    ClosedByCore,
    /// The daemon has `max-relays` relays connected.
    MaxRelays,
    /// A newer connection of the same relay instance took over this one.
    Replaced,
    /// The daemon failed on its side; retry later.
    InternalError,
}

impl RefusalCode {
    pub const ALL: [RefusalCode; 14] = [
        RefusalCode::BadFrame,
        RefusalCode::FrameTooLarge,
        RefusalCode::BatchTooLarge,
        RefusalCode::UnexpectedFrame,
        RefusalCode::NoHello,
        RefusalCode::BadVersion,
        RefusalCode::BadToken,
        RefusalCode::MachineNotAllowed,
        RefusalCode::CertificateIdentityMismatch,
        RefusalCode::RefusedByCore,
        RefusalCode::ClosedByCore,
        RefusalCode::MaxRelays,
        RefusalCode::Replaced,
        RefusalCode::InternalError,
    ];

    /// The code on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::BadFrame => "bad_frame",
            RefusalCode::FrameTooLarge => "frame_too_large",
            RefusalCode::BatchTooLarge => "batch_too_large",
            RefusalCode::UnexpectedFrame => "unexpected_frame",
            RefusalCode::NoHello => "no_hello",
            RefusalCode::BadVersion => "bad_version",
            RefusalCode::BadToken => "bad_token",
            RefusalCode::MachineNotAllowed => "machine_not_allowed",
            RefusalCode::CertificateIdentityMismatch => "certificate_identity_mismatch",
            RefusalCode::RefusedByCore => "refused_by_core",
            RefusalCode::ClosedByCore => "closed_by_core",
            RefusalCode::MaxRelays => "max_relays",
            RefusalCode::Replaced => "replaced",
            RefusalCode::InternalError => "internal_error",
        }
    }

    /// The code of a `Refused.code` string (None: empty, from an older
    /// daemon, or unknown, from a newer one).
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The relay's credentials or identity were refused: retrying with the
    /// same ones cannot help, so the relay stops and says what to fix.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RefusalCode::BadToken
                | RefusalCode::MachineNotAllowed
                | RefusalCode::CertificateIdentityMismatch
        )
    }
}

impl std::fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_codes_round_trip_and_only_credentials_are_final() {
        for code in RefusalCode::ALL {
            assert_eq!(RefusalCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(RefusalCode::parse(""), None);
        let finals: Vec<_> = RefusalCode::ALL
            .into_iter()
            .filter(|c| c.is_final())
            .collect();
        assert_eq!(
            finals,
            [
                RefusalCode::BadToken,
                RefusalCode::MachineNotAllowed,
                RefusalCode::CertificateIdentityMismatch
            ]
        );
    }
}
