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
//! - a relay stopped (SIGSTOP) for 40 s, and a fake relay whose clocks say
//!   BOOTTIME = 1 ns: the healthy relay's output keeps up with what it
//!   sends (>= 90%) all along; the stall and the lie are counted.
//! - the output directory (`output`): deleted while running, symlinks
//!   planted at the daemon's file names.
//! - hostile peers (`hostile`, at the end): a fake daemon lying in Welcome,
//!   unauthenticated 4 MiB frames, 300 idle connections, a trickled frame,
//!   Hellos with 1 MiB machine names.
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
//! back: the trace processor then counts invalid_clock_snapshots),
//! TRACESYNC_FAULT_STOP_S (default 40), TRACESYNC_FAULT_LIE_S (default 20).

#![allow(clippy::too_many_lines, reason = "a test reads top to bottom")]

use std::time::{Duration, Instant};

use tracesync_tests::faults::{
    self, Cluster, ClusterOpts, LiarOpts, LyingRelay, Rng, SmallDisk, env_u64,
};
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill9,
    FreezeDaemon,
    FreezeRelay,
    Partition,
    Cut,
    ClockStep,
}

/// Injects `fault` on a random relay (or the daemon); returns the relay.
fn inject(c: &mut Cluster, rng: &mut Rng, fault: Fault, backward_steps: bool) -> usize {
    let relay = rng.below(c.relays.len());
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
        // Forward only: BOOTTIME and MONOTONIC never go back within one
        // boot, and a relay that did would give the trace processor
        // non-monotonic clock snapshots (invalid_clock_snapshots), whatever
        // the daemon does. TRACESYNC_FAULT_BACKWARD_STEPS=1 allows backward
        // steps (to reproduce that).
        Fault::ClockStep => {
            let step = rng.range(100, 5000) as i64 * 1_000_000;
            let back = backward_steps && rng.below(2) == 0;
            c.step_clock(relay, if back { -step } else { step });
        }
    }
    relay
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
        let relay = inject(&mut c, &mut rng, *fault, backward_steps);
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

/// Output of machine `name` so far: (when, packets written).
fn output_of(c: &Cluster, name: &str) -> (Instant, u64) {
    let status = c.daemon.status().unwrap_or_default();
    (Instant::now(), faults::cluster::packets_of(&status, name))
}

/// Packets per second between two [`output_of`] samples.
fn rate_between(from: (Instant, u64), to: (Instant, u64)) -> f64 {
    let secs = to.0.duration_since(from.0).as_secs_f64();
    to.1.saturating_sub(from.1) as f64 / secs.max(1e-3)
}

/// Samples the output of `name` every second for `d`; returns the samples
/// (first and last included).
fn sample_output(c: &Cluster, name: &str, d: Duration) -> Vec<(Instant, u64)> {
    let start = Instant::now();
    let mut samples = vec![output_of(c, name)];
    while start.elapsed() < d {
        std::thread::sleep(ms(1000).min(d.saturating_sub(start.elapsed())));
        samples.push(output_of(c, name));
    }
    samples
}

/// The slowest rate over any `window` of consecutive samples.
fn slowest_window(samples: &[(Instant, u64)], window: usize) -> f64 {
    samples
        .windows(window + 1)
        .map(|w| rate_between(w[0], w[window]))
        .fold(f64::INFINITY, f64::min)
}

/// A counter of machine `name` in the status.
fn counter_of(c: &Cluster, name: &str, key: &str) -> u64 {
    let status = c.daemon.status().unwrap_or_default();
    tracesync_tests::live::process::machine(&status, name)
        .and_then(|m| m[key].as_u64())
        .unwrap_or(0)
}

#[test]
fn a_relay_stopped_for_40_s_does_not_stop_the_others() {
    const TEST: &str = "a_relay_stopped_for_40_s_does_not_stop_the_others";
    const RATE: u64 = 1000;
    let _one = faults::one_at_a_time();
    let rng = Rng::from_env(TEST);
    let stop_for = Duration::from_secs(env_u64("TRACESYNC_FAULT_STOP_S", 40));
    // The daemon's default merge window: the stall grace adds 1 s to it.
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "stall".into(),
        relays: 2,
        rate: RATE,
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.daemon
        .wait_synced(&c.name_refs(), faults::cluster::RECOVERY_TIMEOUT);
    c.wait_progress(RATE / 2);
    let (stopped, healthy) = (c.names[0].clone(), c.names[1].clone());
    let before = sample_output(&c, &healthy, Duration::from_secs(5));
    let pid = c.relays[0].pid().expect("relay running");
    faults::freeze(pid);
    c.tally.add("sigstop-relay-40s");
    let during = sample_output(&c, &healthy, stop_for);
    faults::thaw(pid);
    let rate_before = rate_between(before[0], before[before.len() - 1]);
    let rate = rate_between(during[0], during[during.len() - 1]);
    let slowest = slowest_window(&during, 5);
    eprintln!(
        "{TEST}: {healthy} sends {RATE} events/s; written {rate_before:.0}/s before, \
         {rate:.0}/s ({:.1}%) while {stopped} was stopped for {:.0} s (slowest 5 s: {slowest:.0}/s)",
        100.0 * rate / RATE as f64,
        stop_for.as_secs_f64()
    );
    assert!(
        rate >= 0.9 * RATE as f64,
        "{healthy}: {rate:.0} packets/s written while {stopped} was stopped, sending {RATE}/s"
    );
    // The stopped relay comes back and catches up.
    c.wait_progress(RATE / 2);
    let (stalls, late, refused) = (
        counter_of(&c, &stopped, "clock_stalls"),
        counter_of(&c, &stopped, "late_packets"),
        counter_of(&c, &stopped, "clocks_refused"),
    );
    eprintln!(
        "{TEST}: {stopped}: clock_stalls {stalls}, late_packets {late}, clocks_refused {refused}; \
         {healthy}: clock_stalls {}",
        counter_of(&c, &healthy, "clock_stalls")
    );
    assert!(stalls >= 1, "{stopped}'s stall is not counted");
    assert_eq!(counter_of(&c, &healthy, "clock_stalls"), 0);
    let seed = rng.seed;
    c.finish(TEST, seed, true);
}

#[test]
fn a_relay_lying_about_its_clock_does_not_stop_the_others() {
    const TEST: &str = "a_relay_lying_about_its_clock_does_not_stop_the_others";
    const RATE: u64 = 1000;
    let _one = faults::one_at_a_time();
    let rng = Rng::from_env(TEST);
    let lie_for = Duration::from_secs(env_u64("TRACESYNC_FAULT_LIE_S", 20));
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "honest".into(),
        relays: 1,
        rate: RATE,
        ..ClusterOpts::default()
    });
    c.wait_connected();
    c.daemon
        .wait_synced(&c.name_refs(), faults::cluster::RECOVERY_TIMEOUT);
    c.wait_progress(RATE / 2);
    let healthy = c.names[0].clone();
    let before = sample_output(&c, &healthy, Duration::from_secs(5));
    // BOOTTIME = 1 ns in its Hello and every Heartbeat; honest probes, so
    // the daemon has a sync estimate for it (its clock would hold the
    // watermark at host time ~0).
    let liar = LyingRelay::start(
        c.daemon.data_addr,
        &c.daemon.token,
        LiarOpts {
            name: "liar".into(),
            raw_id: 0x11a5,
            instance: 0x11a5_11a5,
            clock_ns: 1,
        },
    )
    .unwrap_or_else(|e| panic!("{TEST}: the liar: {e}"));
    c.tally.add("lying-relay");
    c.daemon
        .wait_synced(&["liar"], faults::cluster::RECOVERY_TIMEOUT);
    let during = sample_output(&c, &healthy, lie_for);
    let rate_before = rate_between(before[0], before[before.len() - 1]);
    let rate = rate_between(during[0], during[during.len() - 1]);
    let slowest = slowest_window(&during, 5);
    let refused = counter_of(&c, "liar", "clocks_refused");
    eprintln!(
        "{TEST}: {healthy} sends {RATE} events/s; written {rate_before:.0}/s before, \
         {rate:.0}/s ({:.1}%) over {:.0} s with the liar synced (slowest 5 s: {slowest:.0}/s); \
         liar: {} heartbeats, {} probes answered, clocks_refused {refused}, clock_stalls {}",
        100.0 * rate / RATE as f64,
        lie_for.as_secs_f64(),
        liar.heartbeats(),
        liar.probes_answered(),
        counter_of(&c, "liar", "clock_stalls"),
    );
    assert!(
        rate >= 0.9 * RATE as f64,
        "{healthy}: {rate:.0} packets/s written while the liar was connected, sending {RATE}/s"
    );
    assert!(
        refused >= 1 && refused >= liar.heartbeats() / 2,
        "the lie is not counted: clocks_refused {refused} after {} heartbeats",
        liar.heartbeats()
    );
    drop(liar);
    let seed = rng.seed;
    c.finish(TEST, seed, true);
}

mod flood;
mod hostile;
mod hostile_present;
mod output;
mod resources;
mod trust;
mod udp_flood;
