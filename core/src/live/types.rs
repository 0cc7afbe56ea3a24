//! The live core's inputs and answers (everything the server passes in or
//! gets back, apart from packets).

use tracesync_protocol::relay::v1::RelayClocks;

/// Index of a connected relay session. Stable for the life of one
/// connection; a reconnect gets a new slot.
pub type RelaySlot = u32;

/// Tuning of the live core; every queue's bound is here.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// How far behind the slowest connected relay (and host now) packets
    /// wait to be ordered before they are written.
    pub merge_window_ns: u64,
    /// After a relay connects without a sync estimate, it holds the
    /// watermark at its connect time for at most this long (until its
    /// first estimate), so the packets it sends meanwhile, pending until
    /// that estimate, are ordered with the others instead of written late.
    pub connect_grace_ns: u64,
    /// A connected, synced relay whose clock has not advanced for
    /// `merge_window_ns` plus this long (of the ingest loop's reading time:
    /// pauses of the daemon itself do not count) stops holding the
    /// watermark, and holds it again once its clock catches up (see
    /// [`Self::stall_after_ns`] and the module docs, "Watermark"). The
    /// same span bounds how far before host time a session's first clock
    /// may map. Default 1 s: a healthy relay sends a frame at least every
    /// 250 ms (a Heartbeat when idle) and is probed every 100-250 ms, so
    /// four of those intervals go by before a silent relay is taken for
    /// stalled, and the merge window is what every packet waits anyway; so
    /// a relay that stops costs the others at most one second more.
    pub stall_grace_ns: u64,
    /// A new sync point is written when a relay's offset moved by more.
    pub sync_threshold_ns: u64,
    /// Host name: machine_name of the host's SystemInfo (machine 0).
    pub host_name: Option<String>,
    /// Interval of the host's own ClockSnapshot packets.
    pub host_snapshot_interval_ns: u64,
    /// Per relay: packets waiting for a resolvable clock (count, and bytes
    /// with each packet's queue entry, copies as allocated). Relays still
    /// waiting for their first estimate are held back once they hold
    /// `pending_max_bytes` together.
    pub pending_max_packets: usize,
    pub pending_max_bytes: usize,
    /// A pending packet whose clock still has no path this long after it
    /// arrived, while its relay is synced, is dropped (the producer never
    /// wrote the snapshot it needs); waiting for sync has no age limit.
    pub pending_max_age_ns: u64,
    /// All relays: resolved packets waiting for the watermark (bytes, each
    /// packet's own plus its queue entry's). Past
    /// it the oldest are written before the watermark reaches them, so a
    /// stalled relay cannot make memory grow.
    pub queue_max_bytes: usize,
    /// Per relay: batches accepted but not yet acknowledged. A relay past it
    /// ignores the acks' back-pressure: its connection should be closed.
    pub max_unacked_batches: usize,
    /// Relay instances remembered (connected or not); past it the oldest
    /// idle disconnected one is forgotten.
    pub max_relay_records: usize,
    /// Per relay instance: sequences (streams) remembered. A packet that
    /// would open one more is dropped (`sequences_over_limit`) and the
    /// connection is closed with a reason.
    pub max_sequences_per_relay: usize,
    /// The output sequence ids this core allocates: all of them, or its
    /// ingest shard's class (`crate::shard`), disjoint from the other
    /// shards'.
    pub ids: super::ShardIds,
}

impl Default for LiveConfig {
    fn default() -> Self {
        Self {
            merge_window_ns: 1_000_000_000,
            connect_grace_ns: 1_000_000_000,
            stall_grace_ns: 1_000_000_000,
            sync_threshold_ns: 1_000,
            host_name: None,
            host_snapshot_interval_ns: 1_000_000_000,
            pending_max_packets: 200_000,
            pending_max_bytes: 16 << 20,
            pending_max_age_ns: 10_000_000_000,
            queue_max_bytes: 64 << 20,
            max_unacked_batches: 65_536,
            max_relay_records: 1_024,
            max_sequences_per_relay: 16_384,
            ids: super::ShardIds::all(),
        }
    }
}

impl LiveConfig {
    /// How long a relay's clock may stand still before it stops holding the
    /// watermark: `merge_window_ns + stall_grace_ns`.
    pub fn stall_after_ns(&self) -> u64 {
        self.merge_window_ns.saturating_add(self.stall_grace_ns)
    }
}

/// What a relay says about itself in its Hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloInfo {
    pub relay_instance: u64,
    pub boot_id: String,
    pub machine_name: String,
    pub machine_raw_id: u32,
    /// Oldest batch still in the relay's spool: batches before it that the
    /// core never accepted were lost by the relay (drop-oldest).
    pub oldest_unacked_batch: u64,
    pub clocks: Option<RelayClocks>,
    /// A relay in ring mode (`Hello.mode` "ring"): it streams no batches,
    /// and its spool's start moves as its ring lets batches go, so a gap
    /// before it is not a loss (its windows come as Window frames).
    pub ring: bool,
}

/// A relay accepted: its slot and where it resumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connected {
    pub slot: RelaySlot,
    /// Welcome.acked_through_batch: every batch <= this is durable.
    pub acked_through_batch: u64,
    /// The same relay instance was still connected on this slot (a stale
    /// connection): the core forgot it; the server should close it.
    pub replaced: Option<RelaySlot>,
}

/// Why a relay is refused (Refused.reason is its Display).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("machine raw id 0 is the host's; give the relay another --name")]
    ReservedRawId,
    /// Names the holder by its instance's first 4 hex digits only: in
    /// plaintext mode the whole id would let the refused peer resume it.
    #[error(
        "machine raw id {raw_id} is in use by connected relay instance {:04x}... \
         ({holder_name}); give this relay another --name",
        holder_instance >> 48
    )]
    RawIdInUse {
        raw_id: u32,
        holder_instance: u64,
        holder_name: String,
    },
}

/// A frame the core cannot take from this session.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("relay slot {0} is not connected (closed or replaced); close the connection")]
    UnknownSlot(RelaySlot),
    #[error(
        "relay slot {slot} has {unacked} unacknowledged batches (limit {limit}); \
         close the connection, it will resume from the last ack"
    )]
    TooManyUnackedBatches {
        slot: RelaySlot,
        unacked: usize,
        limit: usize,
    },
    #[error(
        "relay slot {slot} opened more than {limit} sequences (limits.max-sequences-per-relay); \
         packets of the extra sequences were dropped"
    )]
    TooManySequences { slot: RelaySlot, limit: usize },
}

/// Marks "everything drained so far" for [`crate::live::LiveCore::committed_through`].
#[must_use = "pass it to committed_through once the writer committed what was drained before it"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CommitPoint(pub(crate) u64);

/// Core-wide counters (per-machine ones are in the status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveStats {
    pub packets_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub sync_points_written: u64,
    pub late_packets: u64,
    /// Packets written before the watermark reached them because the
    /// ordering queue hit `queue_max_bytes`.
    pub forced_by_queue_limit: u64,
}

/// Identifies a stream within the core.
pub type StreamId = u32;
