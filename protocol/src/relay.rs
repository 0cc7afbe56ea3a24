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

/// Largest first frame (the Hello) a daemon reads before the relay is
/// authenticated: an unauthenticated peer never makes the daemon hold a
/// buffer larger than this. A Hello is well under 2 KiB; the daemon raises
/// its frame limit to `limits.max-frame-bytes` once the Hello is accepted.
pub const MAX_HELLO_FRAME_BYTES: usize = 64 << 10;

/// Longest `Hello.machine_name`, in bytes (the relay's config enforces it
/// too: 1-255 printable characters).
pub const MAX_MACHINE_NAME_BYTES: usize = 255;

/// Longest `Hello.boot_id`, in bytes (a kernel boot id is a 36-character
/// UUID; a relay without one sends `pseudo-` and 16 hex digits).
pub const MAX_BOOT_ID_BYTES: usize = 128;

/// Longest `Hello.token`, in bytes; both configs refuse a longer token.
pub const MAX_TOKEN_BYTES: usize = 1024;
/// Longest `Hello.mode`, in bytes (the modes are short words).
pub const MAX_MODE_BYTES: usize = 16;
/// Sources of one relay the daemon keeps the states of.
pub const MAX_SOURCES: usize = 64;
/// Bytes of a source's spec or detail the daemon keeps.
pub const MAX_SOURCE_TEXT_BYTES: usize = 256;

/// Checks the lengths of a Hello's strings against their limits; the
/// error names the field, its length and its limit (never its text).
pub fn check_hello_strings(hello: &v1::Hello) -> Result<(), String> {
    for (field, len, limit) in [
        (
            "machine_name",
            hello.machine_name.len(),
            MAX_MACHINE_NAME_BYTES,
        ),
        ("boot_id", hello.boot_id.len(), MAX_BOOT_ID_BYTES),
        ("token", hello.token.len(), MAX_TOKEN_BYTES),
        ("mode", hello.mode.len(), MAX_MODE_BYTES),
    ] {
        if len > limit {
            return Err(format!(
                "Hello.{field} of {len} bytes is over its {limit}-byte limit"
            ));
        }
    }
    Ok(())
}

/// Perfetto's machine id of a hint string: FNV-1a-64, low 32 bits, 0 mapped
/// to 1 (0 is the host).
pub fn raw_machine_id(hint: &str) -> u32 {
    match fnv1a64(hint.as_bytes()) as u32 {
        0 => 1,
        id => id,
    }
}

/// The raw id a relay named `machine_name` on the kernel `boot_id` sends
/// under TLS: the hash of `<boot_id>/<machine_name>`, so one machine's
/// certificate cannot compute another machine's raw id from its boot id
/// alone (a daemon with `[tls] raw-id-rule = "name"` checks it).
pub fn name_bound_raw_id(boot_id: &str, machine_name: &str) -> u32 {
    raw_machine_id(&format!("{boot_id}/{machine_name}"))
}

/// 64-bit FNV-1a.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET_BASIS, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

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
    /// A frame over the daemon's frame limit (after Hello).
    FrameTooLarge,
    /// A first frame over `MAX_HELLO_FRAME_BYTES`, or a Hello string over
    /// its limit (`MAX_MACHINE_NAME_BYTES`, `MAX_BOOT_ID_BYTES`,
    /// `MAX_TOKEN_BYTES`). Final: the same Hello is refused again.
    HelloTooLarge,
    /// A frame that had begun did not arrive whole within the daemon's
    /// `limits.frame-timeout-ms` (a peer trickling bytes).
    FrameTimeout,
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
    /// The relay's certificate has `[tls] max-sessions-per-certificate`
    /// sessions open; retried (one of them may be a stale connection).
    CertificateSessionLimit,
    /// The daemon failed on its side; retry later.
    InternalError,
    /// `Hello.mode` names a mode this daemon does not know (a newer relay):
    /// retried, as a daemon upgrade fixes it; the relay keeps its spool.
    UnknownMode,
}

impl RefusalCode {
    pub const ALL: [RefusalCode; 18] = [
        RefusalCode::BadFrame,
        RefusalCode::FrameTooLarge,
        RefusalCode::HelloTooLarge,
        RefusalCode::FrameTimeout,
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
        RefusalCode::CertificateSessionLimit,
        RefusalCode::InternalError,
        RefusalCode::UnknownMode,
    ];

    /// The code on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::BadFrame => "bad_frame",
            RefusalCode::FrameTooLarge => "frame_too_large",
            RefusalCode::HelloTooLarge => "hello_too_large",
            RefusalCode::FrameTimeout => "frame_timeout",
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
            RefusalCode::CertificateSessionLimit => "certificate_session_limit",
            RefusalCode::InternalError => "internal_error",
            RefusalCode::UnknownMode => "unknown_mode",
        }
    }

    /// The code of a `Refused.code` string (None: empty, from an older
    /// daemon, or unknown, from a newer one).
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// The relay's credentials, identity or Hello were refused: retrying
    /// with the same ones cannot help, so the relay stops and says what to
    /// fix.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RefusalCode::BadToken
                | RefusalCode::MachineNotAllowed
                | RefusalCode::CertificateIdentityMismatch
                | RefusalCode::HelloTooLarge
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
    fn refusal_codes_round_trip_and_only_credentials_and_hello_limits_are_final() {
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
                RefusalCode::HelloTooLarge,
                RefusalCode::BadToken,
                RefusalCode::MachineNotAllowed,
                RefusalCode::CertificateIdentityMismatch
            ]
        );
        assert_eq!(RefusalCode::HelloTooLarge.as_str(), "hello_too_large");
        assert_eq!(RefusalCode::FrameTimeout.as_str(), "frame_timeout");
        assert!(!RefusalCode::FrameTimeout.is_final());
    }

    fn hello(name: usize, boot_id: usize, token: usize) -> v1::Hello {
        v1::Hello {
            machine_name: "n".repeat(name),
            boot_id: "b".repeat(boot_id),
            token: "t".repeat(token),
            ..v1::Hello::default()
        }
    }

    #[test]
    fn hello_strings_are_checked_at_their_limits() {
        let at = hello(MAX_MACHINE_NAME_BYTES, MAX_BOOT_ID_BYTES, MAX_TOKEN_BYTES);
        assert_eq!(check_hello_strings(&at), Ok(()));
        let name = check_hello_strings(&hello(MAX_MACHINE_NAME_BYTES + 1, 0, 0));
        assert_eq!(
            name,
            Err("Hello.machine_name of 256 bytes is over its 255-byte limit".into())
        );
        let boot = check_hello_strings(&hello(1, 1 << 20, 1)).unwrap_err();
        assert!(boot.starts_with("Hello.boot_id of 1048576 bytes"), "{boot}");
        let token = check_hello_strings(&hello(1, 1, MAX_TOKEN_BYTES + 1)).unwrap_err();
        assert!(token.starts_with("Hello.token of 1025 bytes"), "{token}");
        // Bytes, not characters: 128 two-byte characters are 256 bytes.
        let wide = v1::Hello {
            machine_name: "é".repeat(128),
            ..v1::Hello::default()
        };
        assert!(check_hello_strings(&wide).is_err());
        // A Hello at every limit fits the Hello frame limit with room to spare.
        use prost::Message;
        let frame = v1::Frame {
            body: Some(v1::frame::Body::Hello(at)),
        };
        assert!(frame.encoded_len() < MAX_HELLO_FRAME_BYTES / 16);
    }
}
