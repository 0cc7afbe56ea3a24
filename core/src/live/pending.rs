//! A packet whose clock ingest could not resolve yet: what ingest learned
//! of it in stream order ([`Meta`]) and its bytes, held in its relay's
//! pending queue until a snapshot or an estimate resolves it.

use bytes::Bytes;

use super::streams::StreamKey;

/// What ingest learned about a packet in stream order.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub key: StreamKey,
    pub index: u64,
    pub batch: u64,
    /// Clock of the timestamp, and whether to stamp it (the packet names none).
    pub clock: u32,
    pub stamp_clock: bool,
    /// Relay BOOTTIME of the batch: time of a packet with no timestamp on a
    /// stream with no earlier time.
    pub fallback_boottime: Option<u64>,
    /// Host BOOTTIME of arrival: the last resort for such a packet.
    pub arrival: u64,
}

/// A packet waiting for its clock to become resolvable.
#[derive(Debug)]
pub(super) struct PendingPacket {
    pub meta: Meta,
    pub bytes: Bytes,
}

impl PendingPacket {
    /// Memory it holds, as counted against `pending_max_bytes`: its bytes
    /// (a copy of its own, an allocation of its own) plus the queue entry.
    pub(super) fn held(&self) -> usize {
        allocated(self.bytes.len()) + std::mem::size_of::<PendingPacket>()
    }
}

/// Heap memory of an allocation of `len` bytes: the allocator's header and
/// rounding (16-byte chunks, 32 at least, as glibc's malloc), none for 0.
pub(super) fn allocated(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len + 8).next_multiple_of(16).max(32)
    }
}

/// Size of a pending queue entry (the packet's bytes are apart).
#[cfg(test)]
pub(super) fn pending_entry_size() -> usize {
    std::mem::size_of::<PendingPacket>()
}
