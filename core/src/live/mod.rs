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
//! Horizon: a resolved packet dated past host now by more than its
//! mapping's bound plus `CLOCK_AHEAD_SLACK_NS` (1 s, the slack a relay
//! clock gets) cannot have been sent yet by an honest relay. It is held
//! apart from the merge: written as soon as it is its stream's head (its
//! stream's order kept), counted as `future_packets`, and it does not move
//! the time written, so it makes no other packet late. Waiting for the
//! watermark instead, packets dated an hour ahead held the ordering queue
//! until its byte bound forced them out, and the first one forced out made
//! every later packet of every relay late.
//!
//! Watermark: the slowest connected, synced relay's latest *accepted*
//! clock on the host timeline (and host now), minus the merge window. A
//! relay cannot hold it hostage (`hold.rs`):
//! - Stall: a relay holds it only while its accepted clocks keep up with
//!   the ingest loop's reading time. Each accepted clock credits the time
//!   it moved past the last one (plus ~1000 ppm of drift allowance), never
//!   past its arrival; once the relay lags by more than
//!   [`LiveConfig::stall_after_ns`] (the merge window plus
//!   `stall_grace_ns`, 1 s by default) it stops holding the watermark and
//!   is counted once as `clock_stalls`: stopped (SIGSTOP), suspended, cut
//!   off, idle without heartbeats, or lying with a clock that stands still
//!   or creeps. It holds again as soon as a clock that keeps up arrives.
//!   The reading time runs with host time between drains, but a gap of
//!   more than `READING_STEP_MAX_NS` (250 ms) counts only that much, so
//!   the daemon's own pauses (stopped, starved, output failing: no frames
//!   were read) stall nobody; nor does the grace run for a relay the core
//!   holds back ([`LiveCore::held_back`]), and it starts again when that
//!   relay is read again.
//! - Refused: a clock (of a Hello, Batch or Heartbeat) earlier than the
//!   relay's last accepted one this session; or, with a sync estimate,
//!   mapping past host now by more than the estimate's bound there (its
//!   frequency bound grows with the distance from the estimate's
//!   reference: the relay's clock can have run at most that much faster
//!   than the host's) plus 1 s of slack; or a session's first clock mapping
//!   before host now by more than `stall_after_ns` (a frame's clocks are
//!   read when it is sent). A clock taken before the relay's first
//!   estimate is checked when the estimate comes. A refused clock never
//!   moves the watermark nor renews the grace; it is counted as
//!   `clocks_refused`.
//!
//! A stalled relay's packets, when they come, are written by their own
//! resolved times: those older than what was written meanwhile at once,
//! counted as `late_packets`, the others in order. Both counters are per
//! machine, reported apart from the drops (no packet is dropped for them).
//! A relay that no longer holds the watermark holds no other relay back.
//!
//! Sync points: a RemoteClockSync (Role::SyncPoint) before a relay
//! machine's first packet and whenever its offset moved by more than
//! `sync_threshold_ns` (docs/format.md, "Sync points").
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
//!   hold on the watermark (`hold.rs`: its accepted clocks, whether it
//!   stalled); commit points; the longest-disconnected idle instances are
//!   forgotten past `max_relay_records`.
//! - the streams (`streams.rs`): per (relay instance, relay sequence) its
//!   output sequence id (allocated in turn from the recovered next one,
//!   never the daemon's own), the index written through, the sequence's
//!   default clock, its last resolved time, its packets pending, its `src`
//!   label; recovered ones resume where the output left them.
//! - the reading clock (`hold.rs`): how long the ingest loop has been
//!   reading frames, the clock of the stall grace.
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
mod fifo;
mod hold;
mod ingest;
mod machines;
mod order;
mod output;
pub mod packet;
mod pending;
mod quality;
mod queued;
mod recovered;
mod relay;
mod relays;
mod shard_ids;
mod staging;
mod stamp;
mod streams;
pub mod types;

#[cfg(test)]
mod tests;

pub use self::core::LiveCore;
pub use emit::DRAIN_MAX_BYTES;
pub use estimate::SyncEstimate;
pub use machines::reason;
pub use packet::{Origin, OutPacket, Role, Stamped};
pub use recovered::{Recovered, RecoveredSequence, RecoveredStream};
pub use shard_ids::ShardIds;
pub use stamp::OWN_SEQUENCE_ID;
pub use types::{
    CommitPoint, Connected, HelloInfo, LiveConfig, LiveStats, Refusal, RelaySlot, SessionError,
};
