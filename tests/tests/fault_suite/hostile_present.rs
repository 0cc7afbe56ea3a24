//! Mixed faults while hostile peers stay present (docs/reliability-faults.md,
//! "Faults with hostile peers present"): at the shipped defaults (mutual
//! TLS, the default merge window), kill -9 of the daemon and of relays,
//! SIGSTOP of either, partitions, resets, forward clock steps and disk-full
//! episodes, while a connection flood, a squatter claiming a relay's raw id
//! and a relay lying about its clock run throughout and come back after
//! every daemon restart. Nothing lost, nothing duplicated, every file judged
//! by the trace processor, the squatter never welcomed.
//!
//! Knobs: TRACESYNC_FAULT_HOSTILE_FAULTS (faults in all, default 16; the
//! long edition's `scripts/fault-suite.sh` passes 2 x CYCLES),
//! TRACESYNC_FAULT_FLOOD_PER_S (default 200; the long edition 1000).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tracesync_tests::faults::hostile_peers::LIAR;
use tracesync_tests::faults::{
    self, Cluster, ClusterOpts, HostileOpts, HostilePeers, Rng, SmallDisk, env_u64,
};
use tracesync_tests::live::DaemonOpts;

use super::{Fault, counter_of, inject, ms};

/// A disk-full episode: filled, seen failing, held, freed, seen writing.
fn disk_full_episode(c: &mut Cluster, disk: &SmallDisk, held: Duration) {
    disk.fill().unwrap_or_else(|e| panic!("fill: {e}"));
    c.tally.add("disk-full");
    c.daemon
        .wait_status("the output to fail", Duration::from_secs(60), |s| {
            s["output"]["failing"] == true
        });
    std::thread::sleep(held);
    disk.release().unwrap_or_else(|e| panic!("release: {e}"));
    c.daemon
        .wait_status("the output to recover", Duration::from_secs(60), |s| {
            s["output"]["failing"] == false
        });
}

/// The plan: two in five kill -9, the rest spread over the other kinds.
fn plan(total: usize, disk: bool, rng: &mut Rng) -> Vec<Option<Fault>> {
    let mut others: Vec<Option<Fault>> = [
        Fault::FreezeDaemon,
        Fault::FreezeRelay,
        Fault::Partition,
        Fault::Cut,
        Fault::ClockStep,
    ]
    .into_iter()
    .map(Some)
    .collect();
    // None: a disk-full episode.
    if disk {
        others.push(None);
    }
    let mut plan: Vec<Option<Fault>> = (0..total)
        .map(|i| {
            if i % 5 < 2 {
                Some(Fault::Kill9)
            } else {
                others[(i / 5 * 3 + i % 5 - 2) % others.len()]
            }
        })
        .collect();
    rng.shuffle(&mut plan);
    plan
}

#[test]
fn mixed_faults_with_a_flood_a_squatter_and_a_liar_present_lose_nothing() {
    const TEST: &str = "mixed_faults_with_a_flood_a_squatter_and_a_liar_present_lose_nothing";
    const RATE: u64 = 1000;
    const RELAYS: usize = 3;
    let _one = faults::one_at_a_time();
    let mut rng = Rng::from_env(TEST);
    let total = env_u64("TRACESYNC_FAULT_HOSTILE_FAULTS", 16).max(1) as usize;
    let flood_per_second = env_u64("TRACESYNC_FAULT_FLOOD_PER_S", 200);
    let disk = if faults::disk::available().is_ok() {
        // Room for an hour of output; only what is used costs memory.
        Some(SmallDisk::mount(3 << 30).unwrap_or_else(|e| panic!("{e}")))
    } else {
        eprintln!(
            "{TEST}: no disk-full episodes: {:?}",
            faults::disk::available()
        );
        None
    };
    let plan = plan(total, disk.is_some(), &mut rng);
    let mut daemon = DaemonOpts {
        rotate_bytes: Some(4 << 20),
        ..DaemonOpts::default()
    };
    let mut output_view = None;
    if let Some(disk) = &disk {
        let out = disk.dir.join("out");
        daemon.output_dir = Some(out.clone());
        daemon.command_prefix = disk.command_prefix();
        output_view = Some(disk.view(&out));
    }
    let mut c = Cluster::start(ClusterOpts {
        name_prefix: "besieged".into(),
        relays: RELAYS,
        rate: RATE,
        daemon,
        output_view,
        forwarders: true,
        time_namespace_s: Some(1000),
        tls: true,
        ..ClusterOpts::default()
    });
    let ca_dir = c
        .pki
        .as_ref()
        .map(|p| p.root().join("ca"))
        .unwrap_or_default();
    HostilePeers::issue(&ca_dir).unwrap_or_else(|e| panic!("{e}"));
    c.wait_connected();
    let hostile = HostilePeers::start(HostileOpts {
        data: c.daemon.data_addr,
        ca_dir,
        token: c.daemon.token.clone(),
        victim: c.names[0].clone(),
        flood_per_second,
    });
    c.tally.add("connection-flood");
    c.tally.add("squatter");
    c.tally.add("lying-relay");
    c.daemon
        .wait_synced(&[LIAR], faults::cluster::RECOVERY_TIMEOUT);
    c.hold_stuck_tail();
    c.wait_progress(RATE / 2);
    for (i, fault) in plan.iter().enumerate() {
        std::thread::sleep(ms(rng.range(0, 700)));
        let what = match (fault, &disk) {
            (Some(f), _) => format!("{f:?} (relay {})", inject(&mut c, &mut rng, *f, false)),
            (None, Some(disk)) => {
                disk_full_episode(&mut c, disk, ms(rng.range(500, 3000)));
                "disk full".to_owned()
            }
            (None, None) => unreachable!("no disk-full episodes planned without a disk"),
        };
        eprintln!("{TEST}: fault {}/{}: {what}", i + 1, plan.len());
        if (i + 1) % 50 == 0 {
            eprintln!("{TEST}: hostile peers so far: {}", hostile.summary());
        }
        c.wait_progress(RATE / 5);
    }
    // The liar is still connected (or back) at the end, its lie counted.
    c.daemon
        .wait_synced(&[LIAR], faults::cluster::RECOVERY_TIMEOUT);
    let clocks_refused = counter_of(&c, LIAR, "clocks_refused");
    let summary = hostile.summary();
    let counts = hostile.counts.clone();
    drop(hostile);
    eprintln!(
        "hostile-peers: {TEST}: {} faults; {summary}; liar clocks_refused {clocks_refused} (since the last daemon start)",
        plan.len()
    );
    let seed = rng.seed;
    let (row, _) = c.finish(TEST, seed, true);
    assert!(row.tally.total() as usize > plan.len());
    assert_eq!(
        counts.squats_welcomed.load(Ordering::Relaxed),
        0,
        "the squatter was welcomed: {summary}"
    );
    assert!(
        counts.squats_refused.load(Ordering::Relaxed) > 0,
        "the squatter was never refused: {summary}"
    );
    assert!(
        counts.liar.heartbeats.load(Ordering::Relaxed) > 0 && clocks_refused > 0,
        "the liar did not lie or was not counted: {summary}; clocks_refused {clocks_refused}"
    );
}
