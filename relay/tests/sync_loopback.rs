//! The daemon's prober against the relay's responder on loopback, with the
//! relay posing as a machine 5 s ahead that runs 30 ppm fast. Both run in
//! this process, so the host BOOTTIME truth is exact.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tracesync_core::sync::{Registration, SyncEstimate};
use tracesync_daemon::sync::{ProbeSessions, SyncSockets, spawn_prober};
use tracesync_relay::clocks::{Clock, SharedClock, SimulatedClock};
use tracesync_relay::probe::{ProbeTarget, SyncConfig, SyncTransport, run_probe_responder};

const SESSION: u64 = 0x0123_4567_89ab_cdef;
const SLOT: u32 = 4;
const MACHINE: u32 = 0x00c0_ffee;
const KEY: [u8; 32] = [0x5a; 32];

/// True host BOOTTIME, as this process reads it, for a relay BOOTTIME.
fn truth_host(clock: &SimulatedClock, relay_ns: u64) -> i64 {
    // truth_host_boottime answers outside any time namespace; the prober
    // reads BOOTTIME inside this process's namespace, so add the offset back.
    clock.truth_host_boottime(relay_ns) as i64 + clock.inner.timens_boottime_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prober_and_responder_find_the_simulated_offset() {
    let sockets = SyncSockets::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind sync sockets");
    let sync_addr = sockets.udp.local_addr().expect("local addr");
    let sessions = ProbeSessions::new();
    sessions.register(
        SESSION,
        Registration {
            slot: SLOT,
            machine_raw_id: MACHINE,
            probe_key: KEY,
        },
    );
    let (updates_tx, mut updates) = mpsc::channel(64);
    let shutdown = CancellationToken::new();
    let prober = spawn_prober(sockets, sessions.clone(), updates_tx, shutdown.clone());

    let simulated = SimulatedClock::new(5_000_000_000, 30.0);
    let clock: SharedClock = Arc::new(simulated);
    let responder = tokio::spawn(run_probe_responder(
        clock.clone(),
        ProbeTarget {
            daemon: sync_addr,
            session_id: SESSION,
            probe_key: KEY.to_vec(),
        },
        SyncConfig {
            transport: SyncTransport::Udp,
            ..SyncConfig::default()
        },
        shutdown.clone(),
    ));

    let deadline = Instant::now() + Duration::from_millis(3_000);
    let mut latest: Option<SyncEstimate> = None;
    let mut samples = 0;
    let mut least_delay = u64::MAX;
    let mut most_delay = 0;
    while let Ok(Some(update)) = timeout_at(deadline, updates.recv()).await {
        assert_eq!((update.slot, update.session_id), (SLOT, SESSION));
        for sample in &update.samples {
            assert_eq!(sample.machine_raw_id, MACHINE);
            assert!(sample.t1 <= sample.t4 && sample.t2 <= sample.t3);
            let delay = (sample.t4 - sample.t1).saturating_sub(sample.t3 - sample.t2);
            least_delay = least_delay.min(delay);
            most_delay = most_delay.max(delay);
        }
        samples += update.samples.len();
        latest = Some(update.estimate);
    }
    let estimate = latest.expect("updates within 3 s");

    // Burst of 8, then 4 Hz.
    assert!(samples >= 14, "{samples} samples in 3 s");
    let stats = sessions.stats();
    assert_eq!(
        stats.malformed + stats.bad_mac + stats.nonce_mismatch + stats.replayed,
        0,
        "{stats:?}"
    );
    // No step on a quiet loopback. On a loaded box (a thread woken late
    // delays a probe's leg) the step tests may start a new epoch: seen
    // once, in a clean-clone CI run (epoch 1; not reproduced in 15 runs
    // beside another CI). Only with such a delayed probe is it let pass,
    // and the new epoch's estimate must still hold the truth (below).
    assert!(
        estimate.epoch == 0 || most_delay >= 20 * least_delay.max(1),
        "epoch {} with round trips {least_delay}-{most_delay} ns: {estimate:?}",
        estimate.epoch
    );

    // Within 50 µs on a quiet machine. Under CPU contention one-way
    // delays grow and become asymmetric (a sleeping thread wakes late), so
    // no estimator can promise 50 µs; the reported bound must still hold.
    let at_ref = estimate.ref_relay_ns;
    let error = (estimate.to_host(at_ref) - truth_host(&simulated, at_ref)).unsigned_abs();
    let allowed = estimate.error_bound_ns.max(50_000);
    eprintln!("error {error} ns at the latest sample, allowed {allowed} ns: {estimate:?}");
    assert!(
        error <= allowed,
        "error {error} ns > {allowed} ns: {estimate:?}"
    );
    // The hard bound is never below half the best round trip: a sample
    // says no more about the offset than its delay allows. (`rtt_ns` is
    // the window's delay floor, a low quantile, which may be larger.)
    assert!(
        least_delay <= 2 * estimate.error_bound_ns,
        "bound {} ns below half the least delay {least_delay} ns",
        estimate.error_bound_ns
    );
    // A second later the drift term has been applied, not ignored.
    let later = at_ref + 1_000_000_000;
    let error_later = (estimate.to_host(later) - truth_host(&simulated, later)).unsigned_abs();
    assert!(
        error_later <= allowed + 20_000,
        "error {error_later} ns 1 s on: {estimate:?}"
    );

    shutdown.cancel();
    for task in [prober, responder] {
        timeout(Duration::from_secs(5), task)
            .await
            .expect("stops on shutdown")
            .expect("no panic");
    }
}
