//! Fault injection suite, bounded CI edition (scripts/fault-suite.sh runs
//! the long edition: the same scenarios with more cycles).
//!
//! - disk full: the daemon's output is a small tmpfs in a private mount
//!   namespace; filled mid-stream, the daemon stops acknowledging (relays
//!   keep their data), says so in its status, and resumes once space
//!   returns.
//! - random faults (seeded, printed): kill -9 of the daemon and of relays
//!   at random points, SIGSTOP of either, a silent partition and a reset of
//!   a relay's link (through a userspace forwarder), forward relay clock
//!   steps, and a stuck tail subscriber all along.
//! - a reconnect storm: 64 relays reconnecting at once after a daemon
//!   restart.
//!
//! Every scenario counts the synthetic packets produced, written, lost and
//! duplicated by identity and requires lost = 0 and duplicated = 0; every
//! relay must stop with everything acknowledged, and every rolled file must
//! load alone in the trace processor.
//!
//! Knobs (environment): TRACESYNC_FAULT_SEED, TRACESYNC_FAULT_CYCLES (kill
//! -9 cycles, default 6), TRACESYNC_FAULT_DISK_EPISODES (default 1),
//! TRACESYNC_FAULT_STORMS (default 1), TRACESYNC_FAULT_STORM_RELAYS
//! (default 64), TRACESYNC_FAULT_BACKWARD_STEPS=1 (clock steps may go
//! back: the trace processor then counts invalid_clock_snapshots).

use std::time::Duration;

use tracesync_tests::faults::{self, Cluster, ClusterOpts, Rng, SmallDisk, env_u64};
use tracesync_tests::live::DaemonOpts;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[test]
fn disk_full_stops_acks_then_resumes_losing_nothing() {
    const TEST: &str = "disk_full_stops_acks_then_resumes_losing_nothing";
    const RATE: u64 = 2000;
    let _one = faults::one_at_a_time();
    if !faults::disk::require_or_skip(TEST) {
        return;
    }
    let rng = Rng::from_env(TEST);
    let episodes = env_u64("TRACESYNC_FAULT_DISK_EPISODES", 1).max(1);
    let disk = SmallDisk::mount(48 << 20).unwrap_or_else(|e| panic!("{e}"));
    let out = disk.dir.join("out");
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "disk".into(),
        relays: 2,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(100),
            // Rotations fall into the full-disk episodes too.
            rotate_bytes: Some(1 << 20),
            output_dir: Some(out.clone()),
            command_prefix: disk.command_prefix(),
            ..DaemonOpts::default()
        },
        output_view: Some(disk.view(&out)),
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.wait_progress(RATE / 2);
    for episode in 1..=episodes {
        let filled = disk.fill().unwrap_or_else(|e| panic!("fill: {e}"));
        c.tally.add("disk-full");
        let s = c
            .daemon
            .wait_status("the output to fail", Duration::from_secs(30), |s| {
                s["output"]["failing"] == true
            });
        eprintln!(
            "{TEST}: episode {episode}: filled {filled} bytes; daemon: {}",
            s["output"]
        );
        // Full for a while: the relays keep generating into their spools.
        std::thread::sleep(Duration::from_secs(2));
        let s = c.daemon.status().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s["output"]["failing"], true, "{}", s["output"]);
        assert!(
            disk.free_bytes().unwrap_or(0) < 64 << 10,
            "the disk is not full"
        );
        disk.release().unwrap_or_else(|e| panic!("release: {e}"));
        let s = c
            .daemon
            .wait_status("the output to recover", Duration::from_secs(30), |s| {
                s["output"]["failing"] == false
            });
        assert!(
            s["output"]["episodes"].as_u64() >= Some(episode)
                && s["output"]["errors"].as_u64() >= Some(1),
            "status does not count the episode: {}",
            s["output"]
        );
        c.wait_progress(RATE / 2);
    }
    // One error line and one recovery line per episode, however many
    // retries failed.
    let s = c.daemon.status().unwrap_or_else(|e| panic!("{e}"));
    let counted = s["output"]["episodes"].as_u64().unwrap_or(0);
    let log = c.daemon.log();
    let said = log.matches("relays are not acknowledged and wait").count() as u64;
    let recovered = log.matches("the output is writable again").count() as u64;
    assert!(
        counted >= episodes && said == counted && recovered == counted,
        "{counted} episodes in status, {said} error lines, {recovered} recovery lines:\n{log}"
    );
    let (row, check) = c.finish(TEST, rng.seed, true);
    assert!(row.tally.faults["disk-full"] >= 1);
    assert!(check.files.len() >= 2, "{}", check.summary());
}

/// One fault of the random plan.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill9,
    FreezeDaemon,
    FreezeRelay,
    Partition,
    Cut,
    ClockStep,
}

#[test]
fn random_kills_partitions_freezes_and_clock_steps_lose_nothing() {
    const TEST: &str = "random_kills_partitions_freezes_and_clock_steps_lose_nothing";
    const RATE: u64 = 1000;
    const RELAYS: usize = 3;
    let _one = faults::one_at_a_time();
    let mut rng = Rng::from_env(TEST);
    let kills = env_u64("TRACESYNC_FAULT_CYCLES", 6).max(1);
    let backward_steps = env_u64("TRACESYNC_FAULT_BACKWARD_STEPS", 0) != 0;
    let others = (kills / 5).max(1);
    let mut plan = vec![Fault::Kill9; kills as usize];
    for f in [
        Fault::FreezeDaemon,
        Fault::FreezeRelay,
        Fault::Partition,
        Fault::Cut,
        Fault::ClockStep,
    ] {
        plan.extend(std::iter::repeat_n(f, others as usize));
    }
    rng.shuffle(&mut plan);

    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "mix".into(),
        relays: RELAYS,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(100),
            rotate_bytes: Some(4 << 20),
            ..DaemonOpts::default()
        },
        forwarders: true,
        time_namespace_s: Some(1000),
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.hold_stuck_tail();
    c.wait_progress(RATE / 2);
    for (i, fault) in plan.iter().enumerate() {
        // A random point mid-stream.
        std::thread::sleep(ms(rng.range(0, 700)));
        let relay = rng.below(RELAYS);
        match fault {
            Fault::Kill9 => match rng.below(3) {
                0 => c.kill9_daemon(ms(rng.range(0, 1000))),
                1 => c.kill9_relay(relay, ms(rng.range(0, 1000))),
                _ => {
                    // Both at once: the relay comes back first or last.
                    c.relays[relay].kill9();
                    c.tally.add("kill9-relay");
                    c.kill9_daemon(ms(rng.range(0, 500)));
                    std::thread::sleep(ms(rng.range(0, 500)));
                    c.relays[relay].restart();
                }
            },
            Fault::FreezeDaemon => c.freeze_daemon(ms(rng.range(500, 3000))),
            Fault::FreezeRelay => c.freeze_relay(relay, ms(rng.range(500, 3000))),
            Fault::Partition => c.partition(relay, ms(rng.range(500, 3000))),
            Fault::Cut => c.cut(relay),
            // Forward only: BOOTTIME and MONOTONIC never go back within
            // one boot, and a relay that did would give the trace
            // processor non-monotonic clock snapshots
            // (invalid_clock_snapshots), whatever the daemon does.
            // TRACESYNC_FAULT_BACKWARD_STEPS=1 allows backward steps (to
            // reproduce that).
            Fault::ClockStep => {
                let step = rng.range(100, 5000) as i64 * 1_000_000;
                let back = backward_steps && rng.below(2) == 0;
                c.step_clock(relay, if back { -step } else { step });
            }
        }
        eprintln!(
            "{TEST}: fault {}/{}: {fault:?} (relay {relay})",
            i + 1,
            plan.len()
        );
        c.wait_progress(RATE / 5);
    }
    let seed = rng.seed;
    let (row, _) = c.finish(TEST, seed, true);
    assert!(row.tally.total() as usize > plan.len());
}

#[test]
fn reconnect_storm_of_64_relays_loses_nothing() {
    const TEST: &str = "reconnect_storm_of_64_relays_loses_nothing";
    const RATE: u64 = 20;
    let relays = env_u64("TRACESYNC_FAULT_STORM_RELAYS", 64) as usize;
    let _one = faults::one_at_a_time();
    let mut rng = Rng::from_env(TEST);
    let storms = env_u64("TRACESYNC_FAULT_STORMS", 1).max(1);
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "storm".into(),
        relays,
        rate: RATE,
        daemon: DaemonOpts {
            merge_window_ms: Some(200),
            max_relays: Some(128),
            ..DaemonOpts::default()
        },
        // Low-rate relays batch longer (fewer, larger batches).
        relay_args: vec!["--linger-ms".into(), "200".into()],
        ..ClusterOpts::default()
    });
    let first = c.wait_connected();
    eprintln!("{TEST}: {relays} relays connected in {first:?}");
    c.wait_progress(RATE / 2);
    for storm in 1..=storms {
        // Down long enough that every relay is retrying, then all at once.
        c.kill9_daemon(ms(rng.range(1000, 2000)));
        c.tally.add("reconnect-storm-64");
        let took = c.wait_connected();
        eprintln!("{TEST}: storm {storm}: all {relays} relays back in {took:?}");
        c.wait_progress(RATE / 2);
    }
    let seed = rng.seed;
    c.finish(TEST, seed, true);
}
