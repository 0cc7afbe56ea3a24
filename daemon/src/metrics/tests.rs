use std::collections::BTreeMap;

use metrics_exporter_prometheus::PrometheusBuilder;

use super::*;
use crate::live::reason;

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
fn names_follow_the_conventions() {
    for name in names::ALL {
        assert!(name.starts_with("tracesync_"), "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{name}"
        );
    }
    let mut sorted = names::ALL.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names::ALL.len(), "duplicate names");
}

/// Every name is in the spec (docs/operations.md `## Metrics`).
#[test]
fn every_name_is_documented() {
    let doc = include_str!("../../../docs/operations.md");
    let spec = doc
        .split("\n## Metrics")
        .nth(1)
        .expect("docs/operations.md has a ## Metrics section");
    let spec = spec.split("\n## ").next().unwrap_or(spec);
    for name in names::ALL {
        assert!(
            spec.contains(&format!("`{name}`")),
            "{name} is not in the spec"
        );
    }
}
