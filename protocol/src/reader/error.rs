//! The errors of reading a trace stream: what is malformed, and at which
//! byte offset of the (decompressed) Trace stream.

/// A malformed trace stream, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset}: {kind}")]
pub struct ReadError {
    pub offset: u64,
    pub kind: ReadErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadErrorKind {
    #[error("malformed varint in a record header (over 10 bytes or over 64 bits)")]
    BadVarint,
    #[error(
        "not a packet record: field {field}, wire type {wire_type} \
         (a trace holds only field 1, length-delimited)"
    )]
    NotPacketRecord { field: u64, wire_type: u8 },
    #[error("input ends inside a record header ({available} bytes left)")]
    TruncatedHeader { available: u64 },
    #[error("record of {len} bytes runs past the end of input ({available} bytes left)")]
    LengthPastEnd { len: u64, available: u64 },
    #[error("packet of {len} bytes exceeds the limit of {max} bytes")]
    PacketTooLarge { len: u64, max: u64 },
    #[error("bad compressed bundle: {0}")]
    BadBundle(BundleError),
    #[error("bad gzip stream (after {compressed_read} compressed bytes read): {message}")]
    BadGzip {
        compressed_read: u64,
        message: String,
    },
}

/// What is wrong with a `compressed_packets` bundle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("inflate failed: {0}")]
    Inflate(String),
    #[error("compressed stream is truncated")]
    Truncated,
    #[error("expands past the limit of {max} bytes")]
    TooLarge { max: u64 },
    #[error("inner record at byte {offset} of the expanded bundle: {kind}")]
    Inner {
        offset: u64,
        kind: Box<ReadErrorKind>,
    },
}
