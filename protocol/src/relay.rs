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
