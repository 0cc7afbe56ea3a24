use std::collections::BTreeMap;

use metrics_exporter_prometheus::PrometheusBuilder;

use super::*;
use tracesync_core::live::reason;
use tracesync_core::status::{MachineStatus, StatusReport};

fn machine(raw_id: u32, name: &str, packets: u64) -> MachineStatus {
    MachineStatus {
        name: Some(name.to_owned()),
        raw_id,
        connected: true,
        packets,
        bytes: packets * 10,
        drops: BTreeMap::from([
            (reason::DUPLICATE.to_owned(), 2),
            (reason::BATCHES_LOST.to_owned(), 1),
            ("some_future_reason".to_owned(), 5),
        ]),
        pending: 3,
        offset_ns: Some(1_500_000_000),
        drift_ppm: Some(8.0),
        error_bound_ns: Some(20_000),
        rtt_ns: Some(100_000),
        ..MachineStatus::default()
    }
}

/// Publishes `report` into a private recorder and returns the text page.
fn render(max_machines: usize, report: &StatusReport) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let mut m = IngestMetrics::new(max_machines);
        m.publish(report, 2, 1);
        // A second tick with grown counters moves them (absolute).
        m.publish(report, 2, 1);
    });
    handle.render()
}

#[test]
fn machines_get_series_and_reasons_map_to_fixed_labels() {
    let report = StatusReport {
        machines: vec![machine(0, "host", 5), machine(7, "phone", 100)],
        ..StatusReport::default()
    };
    let text = render(4, &report);
    assert!(
        text.contains("tracesync_ingest_packets_total{machine=\"phone\"} 100"),
        "{text}"
    );
    assert!(
        text.contains("tracesync_ingest_bytes_total{machine=\"phone\"} 1000"),
        "{text}"
    );
    assert!(
        text.contains(
            "tracesync_ingest_dropped_packets_total{machine=\"phone\",reason=\"duplicate\"} 2"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "tracesync_ingest_dropped_packets_total{machine=\"phone\",reason=\"other\"} 5"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "tracesync_ingest_dropped_packets_total{machine=\"phone\",reason=\"malformed\"} 0"
        ),
        "{text}"
    );
    assert!(
        text.contains("tracesync_ingest_lost_batches_total{machine=\"phone\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("tracesync_sync_offset_seconds{machine=\"phone\"} 1.5"),
        "{text}"
    );
    assert!(
        text.contains("tracesync_sync_drift_ppm{machine=\"phone\"} 8"),
        "{text}"
    );
    assert!(text.contains("tracesync_relays_connected 2"), "{text}");
    assert!(text.contains("tracesync_tail_subscribers 1"), "{text}");
}

#[test]
fn clock_stalls_and_refused_clocks_are_per_machine_counters() {
    let stalled = |raw_id, name| MachineStatus {
        clock_stalls: 2,
        clocks_refused: 40,
        future_packets: 3,
        ..machine(raw_id, name, 1)
    };
    let report = StatusReport {
        machines: vec![
            machine(0, "host", 5),
            stalled(7, "phone"),
            stalled(8, "a"),
            stalled(9, "b"),
        ],
        ..StatusReport::default()
    };
    let text = render(2, &report);
    for (line, n) in [
        ("tracesync_ingest_clock_stalls_total{machine=\"phone\"}", 2),
        (
            "tracesync_ingest_clocks_refused_total{machine=\"phone\"}",
            40,
        ),
        ("tracesync_ingest_clock_stalls_total{machine=\"host\"}", 0),
        (
            "tracesync_ingest_future_packets_total{machine=\"phone\"}",
            3,
        ),
        // At zero from the start.
        ("tracesync_ingest_future_packets_total{machine=\"host\"}", 0),
        (
            "tracesync_ingest_future_packets_total{machine=\"other\"}",
            6,
        ),
        // Past the label limit: summed into `other`.
        ("tracesync_ingest_clock_stalls_total{machine=\"other\"}", 4),
        (
            "tracesync_ingest_clocks_refused_total{machine=\"other\"}",
            80,
        ),
    ] {
        assert!(
            text.contains(&format!("{line} {n}\n")),
            "{line} {n}:\n{text}"
        );
    }
    // Not drops: no `reason` of the dropped-packets counter grows.
    assert!(
        text.contains(
            "tracesync_ingest_dropped_packets_total{machine=\"phone\",reason=\"other\"} 5"
        ),
        "{text}"
    );
}

#[test]
fn machines_past_the_limit_fold_into_other() {
    let report = StatusReport {
        machines: vec![
            machine(0, "host", 1),
            machine(1, "a", 10),
            machine(2, "b", 20),
            machine(3, "c", 30),
        ],
        ..StatusReport::default()
    };
    let text = render(2, &report);
    assert!(
        text.contains("tracesync_ingest_packets_total{machine=\"a\"} 10"),
        "{text}"
    );
    assert!(
        text.contains("tracesync_ingest_packets_total{machine=\"other\"} 50"),
        "{text}"
    );
    assert!(!text.contains("machine=\"b\""), "{text}");
}

#[test]
fn machines_sharing_a_name_keep_apart() {
    let report = StatusReport {
        machines: vec![machine(1, "vm", 10), machine(2, "vm", 20)],
        ..StatusReport::default()
    };
    let text = render(8, &report);
    assert!(
        text.contains("tracesync_ingest_packets_total{machine=\"vm\"} 10"),
        "{text}"
    );
    assert!(
        text.contains("tracesync_ingest_packets_total{machine=\"vm-id2\"} 20"),
        "{text}"
    );
}

#[test]
fn control_characters_in_machine_names_are_escaped_in_labels() {
    let report = StatusReport {
        machines: vec![machine(1, "evil\n# HELP forged\u{1b}[2J", 10)],
        ..StatusReport::default()
    };
    let text = render(8, &report);
    // One line per series: the name cannot start a line of its own.
    assert!(
        !text.lines().any(|l| l.starts_with("# HELP forged")),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("tracesync_ingest_packets_total{"))
        .expect("the machine's series");
    assert!(
        line.contains("evil\\\\n# HELP forged\\\\u{1b}[2J"),
        "{line}"
    );
}

#[test]
fn names_follow_the_conventions() {
    for spec in names::SPECS {
        let name = spec.name;
        assert!(name.starts_with("tracesync_"), "{name}");
        // Counters end in _total, nothing else does.
        assert_eq!(
            name.ends_with("_total"),
            spec.kind == tracesync_common::metrics::Kind::Counter,
            "{name}"
        );
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{name}"
        );
    }
    let mut sorted: Vec<&str> = names::SPECS.iter().map(|s| s.name).collect();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names::SPECS.len(), "duplicate names");
}

/// Every name is in the spec (docs/operations-metrics.md `## Metrics`).
#[test]
fn every_name_is_documented() {
    let doc = include_str!("../../../docs/operations-metrics.md");
    let spec = doc
        .split("\n## Metrics")
        .nth(1)
        .expect("docs/operations-metrics.md has a ## Metrics section");
    let spec = spec.split("\n## ").next().unwrap_or(spec);
    for name in names::SPECS.iter().map(|s| s.name) {
        assert!(
            spec.contains(&format!("`{name}`")),
            "{name} is not in the spec"
        );
    }
}

fn synced(machine_status: MachineStatus, session_id: u64, probes_sent: u64) -> MachineStatus {
    use tracesync_core::sync::sessions::{MachineSync, RouteKind, SessionCounters, SyncState};
    MachineStatus {
        sync: Some(MachineSync {
            session_id,
            state: SyncState::Steady,
            route: Some(RouteKind::Tcp),
            probe_rate_hz: 8.0,
            epoch: Some(1),
            freq_bound_ppm: Some(0.5),
            sigma_ns: Some(2_000),
            bound_now_ns: Some(30_000),
            samples: Some(40),
            last_sample_age_ns: Some(125_000_000),
            probes: SessionCounters {
                probes_sent,
                replies: probes_sent - 1,
                timeouts: 1,
                bad_mac: 2,
                ..SessionCounters::default()
            },
        }),
        ..machine_status
    }
}

#[test]
fn probe_sessions_give_sync_series_and_counters_survive_a_new_session() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let tick = |m: &mut IngestMetrics, phone: MachineStatus| {
        let report = StatusReport {
            machines: vec![machine(0, "host", 1), phone],
            ..StatusReport::default()
        };
        m.publish(&report, 1, 0);
    };
    let text = metrics::with_local_recorder(&recorder, || {
        let mut m = IngestMetrics::new(4);
        tick(&mut m, synced(machine(7, "phone", 10), 1, 10));
        tick(&mut m, synced(machine(7, "phone", 10), 1, 15));
        // Reconnect: a new session counts from zero again.
        tick(&mut m, synced(machine(7, "phone", 10), 2, 3));
        handle.render()
    });
    for line in [
        "tracesync_sync_probes_sent_total{machine=\"phone\"} 18",
        "tracesync_sync_replies_total{machine=\"phone\"} 16",
        "tracesync_sync_probe_timeouts_total{machine=\"phone\"} 2",
        "tracesync_sync_replies_rejected_total{machine=\"phone\",reason=\"bad_mac\"} 4",
        "tracesync_sync_replies_rejected_total{machine=\"phone\",reason=\"replayed\"} 0",
        "tracesync_sync_state{machine=\"phone\",state=\"steady\"} 1",
        "tracesync_sync_state{machine=\"phone\",state=\"unsynced\"} 0",
        "tracesync_sync_route{machine=\"phone\",route=\"tcp\"} 1",
        "tracesync_sync_route{machine=\"phone\",route=\"udp\"} 0",
        "tracesync_sync_epoch{machine=\"phone\"} 1",
        "tracesync_sync_frequency_bound_ppm{machine=\"phone\"} 0.5",
        "tracesync_sync_sigma_seconds{machine=\"phone\"} 0.000002",
        "tracesync_sync_error_bound_now_seconds{machine=\"phone\"} 0.00003",
        "tracesync_sync_samples{machine=\"phone\"} 40",
        "tracesync_sync_last_sample_age_seconds{machine=\"phone\"} 0.125",
        "tracesync_sync_probe_rate_hz{machine=\"phone\"} 8",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    // The host has no probe session: no session series.
    assert!(
        !text.contains("tracesync_sync_state{machine=\"host\""),
        "{text}"
    );
}

#[test]
fn a_machine_whose_session_ended_shows_unsynced() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let text = metrics::with_local_recorder(&recorder, || {
        let mut m = IngestMetrics::new(4);
        for phone in [synced(machine(7, "phone", 1), 1, 5), machine(7, "phone", 1)] {
            let report = StatusReport {
                machines: vec![phone],
                ..StatusReport::default()
            };
            m.publish(&report, 0, 0);
        }
        handle.render()
    });
    for line in [
        "tracesync_sync_state{machine=\"phone\",state=\"unsynced\"} 1",
        "tracesync_sync_state{machine=\"phone\",state=\"steady\"} 0",
        "tracesync_sync_route{machine=\"phone\",route=\"tcp\"} 0",
        "tracesync_sync_probes_sent_total{machine=\"phone\"} 5",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
}

#[test]
fn connection_counters_have_distinct_indices_series_and_codes() {
    let all: Vec<Counter> = Counter::all().collect();
    assert_eq!(all.len(), Counter::COUNT);
    let mut indices: Vec<usize> = all.iter().map(|c| c.index()).collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..Counter::COUNT).collect::<Vec<_>>());
    let mut series: Vec<_> = all.iter().map(|c| c.series()).collect();
    series.sort_unstable();
    series.dedup();
    assert_eq!(series.len(), Counter::COUNT, "two counters share a series");
    // A key of the status report's relays_refused names one counter.
    let mut keys: Vec<&str> = all.iter().filter_map(|c| c.report_key()).collect();
    let keyed = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), keyed, "two counters share a report key");
}

/// The `reason` values docs/operations-metrics.md lists for `name`.
fn documented_reasons(name: &str) -> Vec<String> {
    let doc = include_str!("../../../docs/operations-metrics.md");
    let row = doc
        .lines()
        .find(|l| l.starts_with(&format!("| `{name}` |")))
        .unwrap_or_else(|| panic!("{name} has no row in the spec"));
    let labels = row.split('|').nth(4).expect("a labels cell");
    let values = labels
        .split_once("`reason`:")
        .unwrap_or_else(|| panic!("{name}: no reason values in {labels:?}"))
        .1;
    values
        .split(',')
        .map(|v| v.trim().trim_matches('`').to_owned())
        .collect()
}

#[test]
fn connection_reasons_are_the_documented_ones() {
    let refused: Vec<&str> = Refused::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(documented_reasons(names::CONNECTIONS_REFUSED), refused);
    let failed: Vec<&str> = Failed::ALL.iter().map(|f| f.label()).collect();
    assert_eq!(documented_reasons(names::CONNECTIONS_FAILED), failed);
}

#[test]
fn fixed_series_start_at_zero() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let text = metrics::with_local_recorder(&recorder, || {
        fixed::register_fixed();
        handle.render()
    });
    let mut expected: Vec<String> = Counter::all()
        .map(|c| match c.series() {
            (name, Some(reason)) => format!("{name}{{reason=\"{reason}\"}} 0"),
            (name, None) => format!("{name} 0"),
        })
        .collect();
    expected.extend(Event::ALL.iter().map(|e| format!("{} 0", e.metric())));
    expected.extend(
        [
            names::INGEST_RECEIVED_PACKETS,
            names::OUTPUT_COMMITS,
            names::OUTPUT_CURRENT_FILE_SEQUENCE,
            names::RELAYS_CONNECTED,
            names::IDENTITY_BINDINGS_IGNORED_LINES,
        ]
        .map(|name| format!("{name} 0")),
    );
    for line in expected {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
}
