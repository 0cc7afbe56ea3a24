//! Live capture core (sans-IO): turns relay batches into the ordered,
//! resolved, stamped packets of the merged output.
//!
//! The server feeds [`LiveCore`] what arrives (Hello, Batch, Heartbeat,
//! sync estimates, ticks) with host BOOTTIME as `now`, drains packets for
//! the rolling writer and tail, and after each writer commit asks which
//! acks to send. The core never reads a clock or does IO.
//!
//! Driving it (the server's ingest loop, one thread):
//!
//! ```text
//! core = LiveCore::new(config, recovered)            // recovered from the rolling writer
//! on Hello:      core.connect(hello, now) -> Welcome or Refused (close `replaced` if any)
//! on Batch:      core.batch(slot, seq, first_index, packets, clocks, now)?  (Err: close)
//! on Heartbeat:  core.heartbeat(slot, clocks, now)
//! on SyncUpdate: core.sync(slot, estimate)
//! on close:      core.disconnect(slot)
//! every tick:    core.host_tick(now, &SystemClock::default().now().snapshot());
//!                core.drain(now, &mut out); write `out`; commit;
//!                for (slot, n) in core.committed() { send Ack { through_batch: n } }
//! on shutdown:   core.flush_all(&mut out); write; commit; committed()
//! ```
//!
//! If the writer commits on another thread while the loop keeps draining,
//! take `commit_point()` when handing it the last packet of a commit and
//! call `committed_through(point)` when that commit is done.
//!
//! Per packet: de-duplication by (relay instance, relay sequence, index)
//! against what was accepted or recovered as written; scan; the clock is
//! the packet's `timestamp_clock_id`, else its sequence's default, else
//! BOOTTIME; converted to the relay's BOOTTIME through the relay's clock
//! graph (its ClockSnapshots, in stream order), then to host BOOTTIME by
//! the relay's sync estimate. A packet with no timestamp takes its stream's
//! last time (else the batch's relay clock). Stamped: machine id = the
//! relay's raw id, output sequence id per (relay instance, relay sequence),
//! and the clock it was resolved with where it names none.
//!
//! Pending: a packet whose clock cannot be resolved yet (no snapshot path,
//! no sync estimate) waits in its relay's pending queue, with every later
//! packet of its stream behind it; the queue is retried whenever the
//! relay's snapshots or estimate change. When full (packets or bytes) the
//! oldest pending packet is dropped and counted as
//! `clock_sync_failure_no_path`: ingest never stops for one relay's
//! missing sync, and the loss is bounded and visible. A packet still
//! without a path `pending_max_age_ns` after arrival while its relay is
//! synced is dropped the same way.
//!
//! Order: one FIFO per stream, never reordered; stream heads merged by
//! time; drained up to the watermark (see [`LiveCore::watermark`]). A
//! packet older than one already written is written at once, counted as
//! `late_packets`.
//!
//! Sync points: a RemoteClockSync (Role::SyncPoint) before a relay
//! machine's first packet and whenever its offset moved by more than
//! `sync_threshold_ns` (DESIGN.md §2).
//!
//! Acks: a batch is acknowledged once every packet of it and of all
//! batches before it was written and committed, or dropped.
//!
//! State: [`LiveCore`] is a composition of sub-states, each in its own
//! file with private fields; `core.rs` (sessions, acks, status),
//! `ingest.rs` and `emit.rs` drive them through their methods:
//! - the machine table (`machines.rs`): per machine raw id (0 is the host)
//!   its name (the first one given, kept), the relay instance connected
//!   for it, packets, bytes, largest error bound, counters by [`reason`],
//!   last seen, the last sync point and the floor sync points stay above,
//!   the estimate shown; the status rows. A row is forgotten with the last
//!   relay instance and stream that refer to it (never the host's).
//! - the relays (`relays.rs`, one instance in `relay.rs`): relay instances
//!   by id, connected or not, and the slot -> instance map of the
//!   connections (one slot per instance at most; a stale one is replaced);
//!   per instance its clock graph, sync estimates (latest, earlier epochs',
//!   covering), batches (what may be acknowledged), pending queue and
//!   hold on the watermark; commit points; the longest-disconnected idle
//!   instances are forgotten past `max_relay_records`.
//! - the streams (`streams.rs`): per (relay instance, relay sequence) its
//!   output sequence id (allocated in turn from the recovered next one,
//!   never the daemon's own), the index written through, the sequence's
//!   default clock, its last resolved time, its packets pending, its `src`
//!   label; recovered ones resume where the output left them.
//! - the output (`output.rs`): the ordering queue, the latest time written,
//!   the host's SystemInfo and snapshot schedule, [`LiveStats`].
//! - the ingest scratch (`staging.rs`): the staging buffer reused from
//!   batch to batch, and whether the batch hit `max_sequences_per_relay`.

mod acks;
mod clocks;
mod core;
mod emit;
mod epochs;
pub mod estimate;
mod hash;
mod ingest;
mod machines;
mod order;
mod output;
pub mod packet;
mod recovered;
mod relay;
mod relays;
mod staging;
mod stamp;
mod streams;
pub mod types;

#[cfg(test)]
mod tests;

pub use self::core::LiveCore;
pub use estimate::SyncEstimate;
pub use machines::reason;
pub use packet::{Origin, OutPacket, Role, Stamped};
pub use recovered::{Recovered, RecoveredSequence, RecoveredStream};
pub use stamp::OWN_SEQUENCE_ID;
pub use types::{
    CommitPoint, Connected, HelloInfo, LiveConfig, LiveStats, Refusal, RelaySlot, SessionError,
};
