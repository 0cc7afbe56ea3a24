//! Streaming reader of Trace framing: a trace file is a concatenation of
//! `Trace.packet` (field 1, length-delimited) records.
//!
//! Input may arrive in chunks of any size ([`TraceReader`]); gzip'd files are
//! detected by magic ([`TraceFile`]); `compressed_packets` bundles (field 50,
//! zlib deflate) are expanded into their inner packets (`bundle`). Every
//! error names the byte offset of the record it concerns, counted in the
//! (decompressed) Trace stream.
//!
//! The record headers are read by `framing`; the errors are in `error`;
//! `boundaries` guesses record starts for reading one file in pieces.

mod boundaries;
mod bundle;
mod error;
mod framing;
mod trace_file;
mod trace_reader;

pub use boundaries::likely_record_start;
pub use bundle::bundle_range;
pub use error::{BundleError, ReadError, ReadErrorKind};
pub use trace_file::{FileReadError, TraceFile};
pub use trace_reader::TraceReader;

/// Default limit of one packet, and of one expanded bundle.
pub const DEFAULT_MAX_PACKET_SIZE: usize = 128 << 20;

/// Bytes read per call by [`TraceFile`].
pub const FILE_CHUNK_SIZE: usize = 256 << 10;

/// One TracePacket's bytes (no framing), borrowed from the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub bytes: &'a [u8],
    /// Byte offset of the field-1 record in the (decompressed) Trace stream;
    /// for packets expanded from a compressed bundle, the offset of the
    /// bundle's outer record.
    pub offset: u64,
    pub in_bundle: bool,
}

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod tests;
