//! Fault injection for the live harness (issue 5): a seeded random source
//! that prints its seed, a small filesystem in a private mount namespace
//! (disk full), a TCP forwarder that can be partitioned or cut between a
//! relay and the daemon, SIGSTOP/SIGCONT, and the tally of faults and of
//! packets produced / written / lost / duplicated by synthetic identity.
//!
//! - [`rng`]: [`Rng`], seeded from `TRACESYNC_FAULT_SEED` or the clock.
//! - [`disk`]: [`SmallDisk`], a tmpfs of a given size only the daemon sees.
//! - [`flood`]: [`Flood`], idle TCP connections opened at a steady rate.
//! - [`forward`]: [`Forwarder`], a userspace TCP hop with partition / cut.
//! - [`tally`]: [`Tally`] (faults by kind) and [`Counts`] (by identity).
//! - [`cluster`]: [`Cluster`], a daemon and synthetic relays driven through
//!   faults and checked at the end.
//! - [`liar`]: [`LyingRelay`], a fake relay whose Hello and Heartbeats lie
//!   about its clock.
//! - [`hostile_peers`]: [`HostilePeers`], a flood, a squatter and a liar
//!   kept present under mutual TLS across daemon restarts.
//! - [`tls_peer`]: a hand-driven client of the data port under mutual TLS.
//! - [`peer`]: hostile peers driven by hand: protocol frames over blocking
//!   sockets, a fake daemon that lies in Welcome, a process's memory.

pub mod cluster;
pub mod disk;
pub mod flood;
pub mod forward;
pub mod hostile_peers;
pub mod liar;
pub mod peer;
pub mod rng;
pub mod tally;
pub mod tls_peer;

pub use cluster::{Cluster, ClusterOpts};
pub use disk::SmallDisk;
pub use flood::Flood;
pub use forward::Forwarder;
pub use hostile_peers::{HostileOpts, HostilePeers};
pub use liar::{LiarOpts, LyingRelay};
pub use rng::Rng;
pub use tally::{Counts, Row, Tally};

use std::sync::{Mutex, MutexGuard};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// SIGSTOP: the process freezes with its sockets open (a hung peer).
pub fn freeze(pid: u32) {
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP);
}

/// SIGCONT after [`freeze`].
pub fn thaw(pid: u32) {
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
}

/// Serializes the scenarios of one test binary: each runs many processes
/// and the suite must not overload a 2-core box by running them at once.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A positive integer from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}
