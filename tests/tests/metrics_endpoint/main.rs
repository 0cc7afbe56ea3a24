//! Operations surface of the real binaries: the Prometheus endpoints of
//! `tracesyncd` and `tracesync-relay` show every metric of the spec
//! (docs/operations-metrics.md `## Metrics`) with the traffic counted; the
//! logs (SIGHUP and `[log] level`, journald and JSON shapes) in `logs`.

#![allow(clippy::too_many_lines, reason = "a test reads top to bottom")]

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tracesync_tests::live::{self, Daemon, DaemonOpts, Relay, RelayOpts};

use tracesync_tests::faults::peer::{http_get, logged_metrics_addr};

mod at_start;
mod logs;

/// Samples of a Prometheus text page: (name{labels}, value).
fn samples(page: &str) -> Vec<(String, f64)> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn series_name(series: &str) -> &str {
    series.split('{').next().unwrap_or(series)
}

/// The value of the one series `name{labels}` (labels as rendered, or none).
fn value(samples: &[(String, f64)], series: &str) -> Option<f64> {
    samples.iter().find(|(s, _)| s == series).map(|(_, v)| *v)
}

/// Every name appears as a series (a histogram by its `_count`).
fn missing_names(samples: &[(String, f64)], names: &[&str]) -> Vec<String> {
    names
        .iter()
        .filter(|name| {
            !samples.iter().any(|(s, _)| {
                let n = series_name(s);
                n == **name || n == format!("{name}_count")
            })
        })
        .map(|n| (*n).to_owned())
        .collect()
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("waited {timeout:?} for {what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn daemon_and_relay_endpoints_show_every_metric_with_traffic() {
    let mut daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
        ..DaemonOpts::default()
    });
    let metrics = logged_metrics_addr(|| daemon.log());
    let mut phone = RelayOpts::synthetic("phone", 1000);
    phone.extra_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    // The VM probes over the TCP fallback, the phone over UDP.
    let mut vm = RelayOpts::synthetic("guest-vm", 1000);
    vm.extra_args = vec!["--sync-transport".into(), "tcp".into()];
    // A ring relay: its ring's gauges appear with its first heartbeat.
    let mut ring = RelayOpts::synthetic("recorder", 1000);
    ring.extra_args = vec!["--mode".into(), "ring".into()];
    let mut relays = vec![
        Relay::start(&daemon, phone),
        Relay::start(&daemon, vm),
        Relay::start(&daemon, ring),
    ];
    daemon.wait_synced(&["phone", "guest-vm", "recorder"], Duration::from_secs(60));

    let names: Vec<&str> = tracesync_daemon::metrics::names::SPECS
        .iter()
        .map(|s| s.name)
        .collect();
    let page = wait_for(
        "every daemon metric with traffic",
        Duration::from_secs(30),
        || {
            let page = http_get(metrics, "/metrics")?;
            let s = samples(&page);
            let missing = missing_names(&s, &names);
            if !missing.is_empty() {
                return Err(format!("missing {missing:?} in:\n{page}"));
            }
            for machine in ["phone", "guest-vm"] {
                for name in [
                    "tracesync_ingest_packets_total",
                    "tracesync_ingest_bytes_total",
                ] {
                    let series = format!("{name}{{machine=\"{machine}\"}}");
                    if !value(&s, &series).is_some_and(|v| v > 0.0) {
                        return Err(format!("{series} is not > 0 in:\n{page}"));
                    }
                }
            }
            for series in [
                "tracesync_output_bytes_total",
                "tracesync_output_packets_total",
                "tracesync_output_files_total",
                "tracesync_output_commits_total",
                "tracesync_output_current_file_bytes",
                "tracesync_ingest_received_packets_total",
                "tracesync_connections_accepted_total",
                "tracesync_sessions_welcomed_total",
                "tracesync_sync_probe_rtt_seconds_count",
                "tracesync_sync_points_written_total",
            ] {
                if !value(&s, series).is_some_and(|v| v > 0.0) {
                    return Err(format!("{series} is not > 0 in:\n{page}"));
                }
            }
            if value(&s, "tracesync_relays_connected") != Some(3.0) {
                return Err(format!("tracesync_relays_connected is not 3 in:\n{page}"));
            }
            for name in [
                "tracesync_ring_packets_held",
                "tracesync_ring_oldest_age_seconds",
            ] {
                let series = format!("{name}{{machine=\"recorder\"}}");
                if !value(&s, &series).is_some_and(|v| v > 0.0) {
                    return Err(format!("{series} is not > 0 in:\n{page}"));
                }
            }
            Ok(page)
        },
    );
    let s = samples(&page);
    // Bounded labels: only the fixed reasons, only known machines.
    use tracesync_daemon::metrics::{Failed, Refused};
    let refused = Refused::ALL.map(Refused::label);
    let failed = Failed::ALL.map(Failed::label);
    for (series, _) in &s {
        let reasons: &[&str] = if series.starts_with("tracesync_connections_refused_total{") {
            &refused
        } else if series.starts_with("tracesync_connections_failed_total{") {
            &failed
        } else {
            continue;
        };
        let ok = reasons
            .iter()
            .any(|r| series.contains(&format!("reason=\"{r}\"")));
        assert!(ok, "unexpected reason in {series}");
    }
    let error_bound = value(&s, "tracesync_sync_error_bound_seconds{machine=\"phone\"}")
        .expect("phone's error bound gauge");
    assert!(
        error_bound > 0.0 && error_bound < 1.0,
        "error bound {error_bound}"
    );

    check_probe_sessions(&daemon, metrics);

    let relay_names: Vec<&str> = tracesync_relay::metrics::SPECS
        .iter()
        .map(|s| s.name)
        .collect();
    let relay_metrics = logged_metrics_addr(|| relays[0].log());
    wait_for(
        "every relay metric with traffic",
        Duration::from_secs(30),
        || {
            let page = http_get(relay_metrics, "/metrics")?;
            let s = samples(&page);
            let missing = missing_names(&s, &relay_names);
            if !missing.is_empty() {
                return Err(format!("missing {missing:?} in:\n{page}"));
            }
            for series in [
                "tracesync_relay_source_packets_total",
                "tracesync_relay_spooled_bytes_total",
                "tracesync_relay_batches_sent_total",
                "tracesync_relay_sent_bytes_total",
                "tracesync_relay_batches_acked_total",
                "tracesync_relay_connected",
            ] {
                if !value(&s, series).is_some_and(|v| v > 0.0) {
                    return Err(format!("{series} is not > 0 in:\n{page}"));
                }
            }
            Ok(())
        },
    );

    for r in &mut relays {
        assert!(r.stop().success(), "relay {}:\n{}", r.name(), r.log());
    }
    assert!(daemon.stop().success(), "tracesyncd:\n{}", daemon.log());
}

/// Each relay's probe session, in the metrics (`machine` label) and in
/// `tracesync status` (JSON and table), with sane values once synced.
fn check_probe_sessions(daemon: &Daemon, metrics: SocketAddr) {
    let routes = [("phone", "udp"), ("guest-vm", "tcp"), ("recorder", "udp")];
    let page = wait_for(
        "probe-session series of both relays with samples",
        Duration::from_secs(30),
        || {
            let page = http_get(metrics, "/metrics")?;
            let s = samples(&page);
            for (machine, route) in routes {
                let get = |series: String| {
                    value(&s, &series).ok_or_else(|| format!("no {series} in:\n{page}"))
                };
                let plain = |name: &str| get(format!("{name}{{machine=\"{machine}\"}}"));
                let labelled = |name: &str, key: &str, v: &str| {
                    get(format!("{name}{{machine=\"{machine}\",{key}=\"{v}\"}}"))
                };
                if labelled("tracesync_sync_state", "state", "unsynced")? != 0.0 {
                    return Err(format!("{machine} is unsynced in:\n{page}"));
                }
                if labelled("tracesync_sync_route", "route", route)? != 1.0 {
                    return Err(format!("{machine} is not on {route} in:\n{page}"));
                }
                if plain("tracesync_sync_replies_total")? < 4.0 {
                    return Err(format!("{machine}: fewer than 4 replies in:\n{page}"));
                }
            }
            Ok(page)
        },
    );
    let s = samples(&page);
    for (machine, route) in routes {
        let v = |name: &str| {
            value(&s, &format!("{name}{{machine=\"{machine}\"}}"))
                .unwrap_or_else(|| panic!("no {name} of {machine}"))
        };
        let other_route = if route == "udp" { "tcp" } else { "udp" };
        let idle = value(
            &s,
            &format!("tracesync_sync_route{{machine=\"{machine}\",route=\"{other_route}\"}}"),
        );
        assert_eq!(idle, Some(0.0), "{machine}");
        let states: f64 = ["unsynced", "bursting", "steady"]
            .iter()
            .filter_map(|st| {
                value(
                    &s,
                    &format!("tracesync_sync_state{{machine=\"{machine}\",state=\"{st}\"}}"),
                )
            })
            .sum();
        assert_eq!(states, 1.0, "{machine}: exactly one state");
        let rate = v("tracesync_sync_probe_rate_hz");
        // Steady: 4..10 Hz with one follow-up each; a burst: 1 / 15 ms.
        assert!((4.0..=70.0).contains(&rate), "{machine}: rate {rate}");
        // 0 unless the estimator saw a step (two contradicting samples on
        // this loaded loopback): a small count either way.
        let epoch = v("tracesync_sync_epoch");
        assert!(
            (0.0..50.0).contains(&epoch) && epoch.fract() == 0.0,
            "{machine}: epoch {epoch}"
        );
        assert!(v("tracesync_sync_samples") >= 1.0, "{machine}");
        let age = v("tracesync_sync_last_sample_age_seconds");
        assert!(
            (0.0..5.0).contains(&age),
            "{machine}: last sample {age} s ago"
        );
        let bound = v("tracesync_sync_error_bound_now_seconds");
        assert!(bound > 0.0 && bound < 0.1, "{machine}: bound now {bound}");
        let sigma = v("tracesync_sync_sigma_seconds");
        assert!((0.0..0.1).contains(&sigma), "{machine}: sigma {sigma}");
        let freq_bound = v("tracesync_sync_frequency_bound_ppm");
        assert!(
            freq_bound > 0.0 && freq_bound <= 1000.0,
            "{machine}: frequency bound {freq_bound}"
        );
        let sent = v("tracesync_sync_probes_sent_total");
        let replies = v("tracesync_sync_replies_total");
        assert!(
            replies >= 4.0 && replies <= sent,
            "{machine}: {replies} of {sent}"
        );
        assert!(v("tracesync_sync_bursts_total") >= 1.0, "{machine}");
        for reason in ["bad_mac", "replayed"] {
            let series = format!(
                "tracesync_sync_replies_rejected_total{{machine=\"{machine}\",reason=\"{reason}\"}}"
            );
            assert_eq!(value(&s, &series), Some(0.0), "{series}");
        }
    }
    // The host has no probe session.
    assert!(
        !s.iter()
            .any(|(series, _)| series.starts_with("tracesync_sync_state{")
                && !routes
                    .iter()
                    .any(|(m, _)| series.contains(&format!("machine=\"{m}\"")))),
        "sync state of a machine without a relay"
    );

    // The same in `tracesync status --json`: the machine's `sync` object.
    let status = daemon.status_cli().unwrap_or_else(|e| panic!("{e}"));
    for (machine, route) in routes {
        let m = live::process::machine(&status, machine).expect("machine in status");
        let sync = &m["sync"];
        assert!(
            ["bursting", "steady"].contains(&sync["state"].as_str().unwrap_or("")),
            "{machine}: {sync}"
        );
        assert_eq!(sync["route"], route, "{machine}: {sync}");
        assert!(
            sync["epoch"].as_u64().is_some_and(|e| e < 50),
            "{machine}: {sync}"
        );
        assert!(sync["samples"].as_u64().is_some_and(|n| n >= 1), "{sync}");
        assert!(
            sync["bound_now_ns"]
                .as_u64()
                .is_some_and(|b| b > 0 && b < 100_000_000),
            "{sync}"
        );
        assert!(sync["sigma_ns"].is_u64(), "{sync}");
        assert!(
            sync["freq_bound_ppm"].as_f64().is_some_and(|f| f > 0.0),
            "{sync}"
        );
        assert!(
            sync["last_sample_age_ns"]
                .as_u64()
                .is_some_and(|a| a < 5_000_000_000),
            "{sync}"
        );
        assert!(
            sync["probe_rate_hz"].as_f64().is_some_and(|r| r > 0.0),
            "{sync}"
        );
        let probes = &sync["probes"];
        let sent = probes["probes_sent"].as_u64().unwrap_or(0);
        let replies = probes["replies"].as_u64().unwrap_or(0);
        assert!(replies >= 4 && replies <= sent, "{probes}");
        for key in [
            "timeouts",
            "bad_mac",
            "replayed",
            "nonce_mismatch",
            "bursts",
        ] {
            assert!(probes[key].is_u64(), "{key} in {probes}");
        }
        assert_eq!(probes["bad_mac"], 0, "{probes}");
    }
    let host = status["machines"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["raw_id"] == 0))
        .expect("the host");
    assert!(host.get("sync").is_none(), "{host}");
    assert!(
        status["sync"]["probe_timeouts"].is_u64(),
        "{}",
        status["sync"]
    );

    // And in the verbose table: one `sync on` line per relay.
    let out = Command::new(live::bin("tracesync"))
        .arg("status")
        .arg("-v")
        .arg("--connect")
        .arg(&daemon.control)
        .output()
        .expect("run tracesync status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    for (machine, route) in routes {
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("sync on {machine}: ")))
            .unwrap_or_else(|| panic!("no sync line of {machine} in:\n{table}"));
        assert!(line.contains(&format!(" via {route} at ")), "{line}");
        assert!(line.contains("; bound now ±"), "{line}");
        assert!(line.contains("; probes sent="), "{line}");
    }
}

#[test]
fn metrics_are_off_by_default_and_a_busy_address_is_refused() {
    // Taken: the daemon must refuse to start (exit 69) rather than run blind.
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(live::bin("tracesyncd"))
        .args(["--listen", "127.0.0.1:0", "--sync-listen", "127.0.0.1:0"])
        .args(["--tls", "off"])
        .arg("--control")
        .arg(dir.path().join("c.sock"))
        .arg("--output")
        .arg(dir.path().join("out"))
        .arg("--metrics-listen")
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run tracesyncd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot serve metrics on {addr} ([metrics] listen)"
        )),
        "{stderr}"
    );
    // Off by default: the shipped config has no [metrics] listen.
    let shipped = include_str!("../../../configs/daemon.toml");
    let config = tracesync_daemon::config::DaemonConfig::from_toml(
        shipped,
        std::path::Path::new("daemon.toml"),
    )
    .expect("configs/daemon.toml");
    assert_eq!(config.metrics.listen, None);
}
