//! Sharded ingest, the sans-IO pieces: which shard owns a relay, which
//! output sequence ids a shard may allocate, how the rolling writer merges
//! the shards' ordered runs, and which run positions a durable commit
//! covers.
//!
//! With N shards the daemon runs N live cores ([`crate::live::LiveCore`]),
//! each owning the relays of its machines (sessions, resolution,
//! de-duplication, ordering); one writer merges their output. The pieces:
//! - [`shard_of`]: a relay goes to the shard of its machine raw id at its
//!   first Hello, a pure function of the id and N, so a reconnect (and the
//!   state the output recovered for it) lands on the same shard;
//!   [`InstanceShards`] keeps a renamed relay on the shard that holds its
//!   state. [`split_recovered`] splits the writer's recovered state the
//!   same way.
//! - [`ShardIds`]: shard k of N allocates output sequence ids from the
//!   residue class k mod N only (never the daemon's own id nor the
//!   sync-quality range), so ids are disjoint across shards without any
//!   coordination.
//! - [`ShardMerge`]: each shard hands the writer runs (packets in its own
//!   output order, the watermark it drained through, a position). The
//!   writer writes a packet once its time is <= the lowest shard
//!   watermark (a shard without relays still sends empty runs, its
//!   watermark following host now minus the merge window); across shards
//!   the output is in time order. Packets a shard
//!   forced out past its watermark (dated in the future, or its queue
//!   full) are written at once without moving the time written, as a
//!   single core does; a packet older than what was written is written at
//!   once and counted late.
//! - [`DurablePositions`]: the run positions each commit covers, so a
//!   shard acknowledges its relays only once what they sent is durable.
//!
//! Invariants: every packet pushed is handed out exactly once, in its
//! shard's order; a run's position is reported written only after every
//! packet of it and of the runs before it was handed out; memory is bounded
//! by the queue bound given to [`ShardMerge::new`] (past it, the lowest
//! head is forced out and counted).

mod assign;
mod durable;
mod merge;

#[cfg(test)]
mod tests;

pub use crate::live::ShardIds;
pub use assign::{
    InstanceShards, MAX_REMEMBERED_INSTANCES, MAX_SHARDS, resolve_shards, shard_of, split_recovered,
};
pub use durable::DurablePositions;
pub use merge::{MergeStats, Run, ShardMerge, Timed};
