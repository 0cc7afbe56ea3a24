//! The spool's public types: configuration, input, output, counters, errors.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use tracesync_protocol::relay::MAX_BATCH_BYTES;

/// What to do when the spool's disk limit is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenFull {
    /// Stop taking packets from sources until acks free space.
    #[default]
    Block,
    /// Drop the oldest unacked batches (counted, marked on the next packet).
    DropOldest,
}

impl WhenFull {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "block" => Ok(Self::Block),
            "drop-oldest" => Ok(Self::DropOldest),
            _ => Err(format!(
                "unknown when-full policy {text:?}; give block or drop-oldest"
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub struct SpoolConfig {
    pub dir: PathBuf,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub when_full: WhenFull,
    pub linger: Duration,
    /// Packet bytes at which a batch is cut (0: derived from the limits).
    pub batch_bytes: usize,
    /// Size at which a segment is closed and a new one started (0: derived).
    pub segment_bytes: u64,
}

impl SpoolConfig {
    pub fn new(dir: PathBuf, memory_bytes: u64, disk_bytes: u64, when_full: WhenFull) -> Self {
        Self {
            dir,
            memory_bytes,
            disk_bytes,
            when_full,
            linger: Duration::from_millis(20),
            batch_bytes: 0,
            segment_bytes: 0,
        }
    }

    pub(super) fn batch_bytes(&self) -> usize {
        if self.batch_bytes > 0 {
            return self.batch_bytes;
        }
        let quarter = |n: u64| usize::try_from(n / 4).unwrap_or(usize::MAX);
        MAX_BATCH_BYTES
            .min(quarter(self.memory_bytes))
            .min(quarter(self.disk_bytes))
            .max(4 << 10)
    }

    pub(super) fn segment_bytes(&self) -> u64 {
        if self.segment_bytes > 0 {
            return self.segment_bytes;
        }
        (self.disk_bytes / 8).clamp(64 << 10, 64 << 20)
    }
}

/// Packets from one source with that source's cursor after the last of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    pub source: u16,
    pub packets: Vec<Bytes>,
    pub cursor: Bytes,
}

/// A batch ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutBatch {
    pub seq: u64,
    pub first_packet_index: u64,
    pub packet_count: u32,
    /// The packets as the `packets` fields of the protocol's `Batch`
    /// message, ready to go on the wire (shares the spool's buffer).
    pub wire: Bytes,
    /// Packet bytes (for the in-flight window).
    pub bytes: usize,
}

impl OutBatch {
    /// The packets (slices of `wire`, no copy).
    pub fn packets(&self) -> Vec<Bytes> {
        super::record::wire_packets(&self.wire).unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpoolStats {
    pub batches_written: u64,
    pub packets_written: u64,
    pub bytes_written: u64,
    pub batches_dropped: u64,
    pub packets_dropped: u64,
    /// Packets larger than MAX_PACKET_BYTES, never spooled.
    pub oversize_packets_dropped: u64,
    /// Batches that could not be read back (sent empty).
    pub batches_unreadable: u64,
    pub sequences_marked: u64,
    /// Closed segments synced to disk because they still held unacked
    /// batches when the next one closed (or at shutdown).
    pub segments_synced: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: cannot {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("spool {path}: offset {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("spool {path}: used by another relay (locked); give each relay its own --spool")]
    Locked { path: PathBuf },
    /// The next batch would overflow its seq or packet index (u64).
    #[error(
        "spool {path}: batch or packet numbers are used up (2^64); move the spool directory \
         away to start a new relay instance"
    )]
    Exhausted { path: PathBuf },
}

pub(super) fn io_error(
    path: &Path,
    action: &'static str,
) -> impl FnOnce(io::Error) -> SpoolError + use<> {
    let path = path.to_path_buf();
    move |source| SpoolError::Io {
        path,
        action,
        source,
    }
}
