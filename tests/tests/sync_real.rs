//! Clock sync over real sockets (docs/clock-sync-accuracy.md), bounded:
//! `tracesyncd` and two relays in time namespaces with known offsets (one
//! with 50 ppm simulated drift). Three runs, ~25 s each: the loopback
//! profile (relays and daemon in one network namespace over `lo`, nothing
//! in between), the LAN profile (relays in their own namespaces, everything
//! through the impairment proxy `tracesync-impair`: 90 µs each way + exp
//! 25 µs queueing) and the USB profile (a phone behind `adb reverse`: TCP
//! only, so the relays' probes must fall back to TCP, 300 µs + exp 300 µs
//! each way and 1% stalls of ~10 ms). Every event after the 10 s warm-up must lie
//! inside the error bound the daemon reported for its packet, none lost or
//! duplicated, and the p99 error must be sane (< 1 ms). The capture is then
//! refined (`tracesync refine`): every event inside its refined bound and
//! the refined p99 within 5 µs of the live one. A third run, ~30 s, puts
//! a relay whose clock is slewed (1 ms in 2 s) behind the Wi-Fi profile,
//! with the same checks (its refined-to-live ratio printed). The accuracy
//! figures
//! themselves are reported by scripts/sync-real.sh, not gated here.
//!
//! Needs root, `ip netns` and `unshare --time`; skips with the reason
//! otherwise.

use tracesync_tests::impair::realsock::{self, Bins, RunResult, RunSpec, Wiring};
use tracesync_tests::live::bin;

const SECONDS: u64 = 25;
const SANE_P99_NS: u64 = 1_000_000;
/// How much worse than live a refined p99 may be before the test fails:
/// this much, plus a twentieth of the relay's median live bound. On 25 s
/// runs both rest on the few legs near the link's floor, so they differ
/// by an amount that grows with the link's queueing: a few µs on
/// loopback, up to ~11 µs on the LAN profile (bound ~180 µs) and 14-16 µs
/// on the usb profile (bound 700-1050 µs, TCP probes stamped in
/// userspace), either way (docs/clock-sync-refine.md, "Short captures").
const REFINED_SLACK_NS: u64 = 5_000;

/// The refined p99 a relay may reach: live p99 + [`REFINED_SLACK_NS`] +
/// 5% of its median bound.
fn refined_limit(live_p99: u64, bound_p50: u64) -> u64 {
    live_p99 + REFINED_SLACK_NS + bound_p50 / 20
}

fn bins() -> Bins {
    Bins {
        daemon: bin("tracesyncd"),
        relay: bin("tracesync-relay"),
        impair: bin("tracesync-impair"),
        cli: bin("tracesync"),
    }
}

fn check(r: &RunResult, relays: usize) {
    let table = realsock::table(std::slice::from_ref(r));
    eprintln!("{table}");
    let proxy = &r.proxy;
    let tcp_only = Wiring::of(&r.profile).is_some_and(Wiring::tcp_only);
    if r.profile == "loopback" {
        assert!(!r.proxied, "loopback runs without the proxy");
    } else if tcp_only {
        // adb's link: no UDP crosses it, the probes ride the relays' TCP
        // connections to the sync port.
        assert!(r.proxied);
        assert_eq!(proxy["profile"], r.profile.as_str(), "proxy stats: {proxy}");
        assert!(
            proxy["udp_up"]["units"] == 0
                && proxy["tcp_down"]["units"].as_u64() > Some(100)
                && proxy["tcp_up"]["bytes"].as_u64() > Some(10_000),
            "probes and data must cross the proxy over TCP only: {proxy}"
        );
    } else {
        assert!(r.proxied);
        assert_eq!(proxy["profile"], r.profile.as_str(), "proxy stats: {proxy}");
        assert!(
            proxy["udp_up"]["units"].as_u64() > Some(10)
                && proxy["udp_down"]["units"].as_u64() > Some(10)
                && proxy["tcp_up"]["bytes"].as_u64() > Some(10_000),
            "probes and data must cross the proxy: {proxy}"
        );
    }
    // Kernel receive timestamps are on by default: both ends used them
    // (UDP only: TCP probes are stamped in userspace).
    let used = |c: Option<(u64, u64)>| c.is_some_and(|(kernel, _)| kernel > 0);
    assert!(
        tcp_only || used(r.daemon_rx_stamps),
        "daemon: no kernel-stamped t4 ({:?})",
        r.daemon_rx_stamps
    );
    assert_eq!(r.relays.len(), relays);
    for x in &r.relays {
        assert_eq!(
            (x.missing, x.duplicates),
            (0, 0),
            "{}: events lost or duplicated\n{table}",
            x.name
        );
        assert!(
            x.measured >= 1000,
            "{}: only {} events after the warm-up\n{table}",
            x.name,
            x.measured
        );
        assert!(
            x.no_bound * 10 <= x.measured,
            "{}: {} of {} events had no tail record (tail lagged {})\n{table}",
            x.name,
            x.no_bound,
            x.measured,
            r.tail_lagged
        );
        assert_eq!(
            x.in_bound,
            x.measured - x.no_bound,
            "{}: events outside the reported per-packet bound\n{table}",
            x.name
        );
        assert!(
            x.merged.p99 < SANE_P99_NS,
            "{}: p99 {} ns\n{table}",
            x.name,
            x.merged.p99
        );
        // The capture refined afterwards: every event inside its refined
        // bound, and placed about as well as live. The figure
        // (refined p99 <= live p99) is reported in the table, not gated: on
        // 25 s runs the two differ by a few µs either way (docs/clock-sync-refine.md).
        let refined = x.refined.expect("refined figures");
        assert_eq!(
            x.refined_inside.0, x.refined_inside.1,
            "{}: events outside the refined bound\n{table}",
            x.name
        );
        let limit = refined_limit(x.merged.p99, x.bound_p50_ns);
        assert!(
            refined.p99 <= limit,
            "{}: refined p99 {} ns, live {} ns (limit {limit} ns)\n{table}",
            x.name,
            refined.p99,
            x.merged.p99
        );
        assert!(
            x.probe_samples > 0,
            "{}: no probe samples in the sidecar",
            x.name
        );
        let want_route = if tcp_only { "tcp" } else { "udp" };
        assert_eq!(
            x.probe_route.as_deref(),
            Some(want_route),
            "{}: probes via {:?}\n{table}",
            x.name,
            x.probe_route
        );
        // The relay logs its counts when its UDP responder ends, which a
        // relay exiting at once may not get to: checked when logged.
        assert!(
            tcp_only || x.relay_rx_stamps.is_none_or(|(kernel, _)| kernel > 0),
            "{}: no kernel-stamped t2 ({:?})",
            x.name,
            x.relay_rx_stamps
        );
    }
}

#[test]
fn real_sockets_over_loopback_and_through_the_impairment_proxy() {
    if let Err(why) = realsock::available() {
        eprintln!("SKIPPED real_sockets_over_loopback_and_through_the_impairment_proxy: {why}");
        return;
    }
    let bins = bins();
    for profile in ["loopback", "lan", "usb"] {
        let spec = RunSpec::standard(profile, SECONDS, bins.clone());
        let result = realsock::run(&spec).unwrap_or_else(|e| panic!("{profile}: {e}"));
        check(&result, 2);
    }
    // A relay whose clock an NTP daemon slews (+500 ppm for 2 s, 1 ms)
    // behind the Wi-Fi profile: the same checks (every event inside the
    // live and the refined bound, refined p99 within 5 µs of live or
    // below). The refined capture places its events along a ramp
    // (core/src/sync/smoother/slew/mod.rs): 0.09-0.30 of live in 16 of 17
    // runs here, 0.49 in one where the estimator confirmed the slew 2 s
    // after its end and the run was too short after it for a ramp's
    // neighbours (docs/clock-sync-refine.md): not gated, the ratio is
    // printed. Run after the others: the namespaces' names are fixed.
    let mut spec = RunSpec::standard("wifi", SLEW_SECONDS, bins);
    spec.relays = vec![RunSpec::slewing_relay(SLEW_AT_S)];
    // SYNC_REAL_KEEP=1 keeps this run's directory (logs, captures, each
    // event's errors) to look into a ratio printed below.
    spec.keep = std::env::var_os("SYNC_REAL_KEEP").is_some();
    let result = realsock::run(&spec).unwrap_or_else(|e| panic!("wifi slew: {e}"));
    check(&result, 1);
    let slew = &result.relays[0];
    let refined = slew.refined.expect("refined figures");
    eprintln!(
        "slewed relay: refined p99 {} ns, live {} ns ({:.2} of live)",
        refined.p99,
        slew.merged.p99,
        refined.p99 as f64 / slew.merged.p99.max(1) as f64
    );
    if let Some(dir) = &result.dir {
        eprintln!("slewed relay's run kept in {}", dir.display());
    }
}

/// The slewing relay's run: its slew starts this many seconds in, with
/// at least the 10 s of steady clock either side that a ramp needs
/// (`MIN_NEIGHBOUR_NS`).
const SLEW_AT_S: u64 = 14;
const SLEW_SECONDS: u64 = 30;
