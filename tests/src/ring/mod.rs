//! Flight-recorder harness: what the ring tests (tests/tests/ring_*.rs)
//! share to run ring relays against the real daemon and judge the
//! snapshots a trigger makes.
//!
//! - [`fleet`]: a lab PKI per relay name and the four-relay ring fleet
//!   (clocks seconds to an hour apart, one drifting).
//! - [`cli`]: `tracesync trigger` / `tracesync-relay trigger` runs and the
//!   fired trigger's id, snapshot name and host time parsed from stdout.
//! - [`snapshot`]: the snapshot check: every machine's synthetic events of
//!   the window, each once, none missing, each at its true host time within
//!   the error bound the file gives that very packet (its machine's
//!   error-bound track in force at it), not a later, tighter estimate's.

pub mod cli;
pub mod fleet;
pub mod snapshot;

pub use cli::{Fired, relay_trigger, trigger};
pub use fleet::{FLEET, Pki, RATE, start_fleet};
pub use snapshot::{MachineFigures, Window, check_snapshot};

use std::time::{Duration, Instant};

use crate::live::{self, Daemon, Relay, RelayOpts};

/// A synthetic relay at RATE named `name`, its clock `offset_s` seconds
/// off (a time namespace where there is one), in ring mode if `ring`.
pub fn relay_opts(name: &str, offset_s: i64, ring: bool) -> RelayOpts {
    let extra_args = if ring {
        vec!["--mode".into(), "ring".into()]
    } else {
        Vec::new()
    };
    let opts = RelayOpts {
        extra_args,
        ..RelayOpts::synthetic(name, RATE)
    };
    if live::time_namespaces().is_ok() {
        opts.in_time_namespace(offset_s)
    } else {
        RelayOpts {
            clock_offset_ns: Some(offset_s * 1_000_000_000),
            ..opts
        }
    }
}

/// Polls `done` every 200 ms for up to `limit`; panics with `what()` then.
pub fn wait_for(limit: Duration, mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{}", what());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until index.jsonl in `daemon`'s output lists snapshot `name` as
/// complete. At one ingest shard the line is saved before the relays'
/// windows are acknowledged; with more, the merge thread saves it shortly
/// after.
pub fn wait_listed(daemon: &Daemon, name: &str) {
    let listed = || {
        live::output::read_index(&daemon.output)
            .iter()
            .any(|e| e["name"] == name && e["complete"] == true)
    };
    wait_for(Duration::from_secs(10), listed, || {
        let index = live::output::read_index(&daemon.output);
        format!("{name} not complete in index.jsonl: {index:?}")
    });
}

/// Stops every relay, then the daemon; each must exit cleanly.
pub fn stop_all(relays: &mut [Relay], daemon: &mut Daemon) {
    for r in relays.iter_mut() {
        let status = r.stop();
        assert!(
            status.success(),
            "relay {}: {status}\n{}",
            r.name(),
            r.log()
        );
    }
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd: {status}\n{}", daemon.log());
}
