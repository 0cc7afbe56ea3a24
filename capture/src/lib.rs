//! The capture directory: what `tracesyncd` writes into `[output] dir` and
//! what every reader of it (`tracesync merge DIR`, `tail DIR`, `report`,
//! `refine`, a restarted daemon) reads back. This crate is the one
//! definition of its format; the daemon keeps only the writing IO.
//!
//! A capture directory holds:
//! - rolled trace files, [`names::RolledName`]:
//!   `tracesync-<UTC start>-<seq>.pftrace`, ordered by `seq`;
//! - flight recorder snapshots, [`names::SnapshotName`]:
//!   `snapshot-<UTC of the trigger>-<trigger name>.pftrace` (named here;
//!   no daemon writes them yet, issue 52);
//! - [`index`]: `index.jsonl`, one [`index::IndexEntry`] line per rolled
//!   file, rewritten whole (never torn);
//! - [`journal`]: the commit journal, crc-checked records of the current
//!   file's durable length and the de-duplication state;
//! - [`sidecar`]: a `.sync.jsonl` file beside each trace file, one raw
//!   probe sample a line;
//! - [`lock`]: `tracesyncd.lock`, held by the one daemon writing there.
//!
//! No async runtime: readers are the offline CLI as much as the daemon.

pub mod index;
pub mod journal;
pub mod lock;
pub mod modes;
pub mod names;
pub mod sidecar;
