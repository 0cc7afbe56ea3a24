use std::collections::BTreeMap;

use super::*;

#[test]
fn table_shows_every_column_and_drop_reasons() {
    let report = StatusReport {
        version: "0.1.0".into(),
        data_addr: Some("0.0.0.0:7410".into()),
        machines: vec![
            MachineStatus {
                raw_id: 0,
                connected: true,
                packets: 12,
                bytes: 2048,
                ..Default::default()
            },
            MachineStatus {
                name: Some("phone".into()),
                raw_id: 3_000_000_000,
                connected: false,
                packets: 5,
                bytes: 3 << 20,
                drops: BTreeMap::from([("clock_sync_failure_no_path".into(), 4)]),
                pending: 7,
                offset_ns: Some(-2_500_000),
                drift_ppm: Some(12.345),
                error_bound_ns: Some(1_500),
                rtt_ns: Some(80_000),
                last_seen_unix_ms: Some(9_000),
                late_packets: 0,
                unprobed_packets: 0,
                remapped_packets: 0,
                clock_stalls: 0,
                clocks_refused: 0,
                future_packets: 0,
                max_err_ns: 0,
                sync: Some(MachineSync {
                    session_id: 9,
                    state: tracesync_core::sync::sessions::SyncState::Steady,
                    route: Some(tracesync_core::sync::sessions::RouteKind::Udp),
                    probe_rate_hz: 8.0,
                    epoch: Some(0),
                    freq_bound_ppm: Some(0.25),
                    sigma_ns: Some(900),
                    bound_now_ns: Some(2_500),
                    samples: Some(32),
                    last_sample_age_ns: Some(120_000_000),
                    probes: tracesync_core::sync::sessions::SessionCounters {
                        probes_sent: 100,
                        replies: 97,
                        timeouts: 2,
                        bad_mac: 1,
                        bursts: 1,
                        ..Default::default()
                    },
                }),
                sources: Vec::new(),
                mode: None,
                ring: None,
            },
        ],
        ..Default::default()
    };
    let t = table(&report, 10_500);
    let lines: Vec<&str> = t.lines().collect();
    assert!(lines[0].contains("data 0.0.0.0:7410"), "{t}");
    assert!(lines[1].starts_with("MACHINE"), "{t}");
    assert!(lines[2].starts_with("host "), "{t}");
    for cell in [
        "phone",
        "3000000000",
        "no",
        "3.0MiB",
        "4",
        "7",
        "-2.50ms",
        "+12.35ppm",
        "±1.5us",
        "80.0us",
        "1.5s ago",
    ] {
        assert!(lines[3].contains(cell), "{cell} missing in {}", lines[3]);
    }
    assert_eq!(lines[4], "drops on phone: clock_sync_failure_no_path=4");
    assert_eq!(
        lines[5],
        "sync on phone: steady via udp at 8.0 probes/s; epoch 0, 32 samples, last 120.00ms \
         ago; bound now ±2.5us, sigma 900ns, freq ±0.250ppm; probes sent=100 replies=97 \
         timeouts=2 bad_mac=1 replayed=0 nonce_mismatch=0 rejected=0 bursts=1"
    );
}

#[test]
fn control_characters_in_names_are_escaped_in_every_line() {
    let evil = "ph\none\r\u{1b}[2J\u{202e}x";
    let report = StatusReport {
        machines: vec![MachineStatus {
            name: Some(evil.into()),
            raw_id: 9,
            connected: true,
            drops: BTreeMap::from([("duplicates_dropped".into(), 1)]),
            sync: Some(MachineSync {
                session_id: 1,
                state: tracesync_core::sync::sessions::SyncState::Steady,
                route: None,
                probe_rate_hz: 1.0,
                epoch: None,
                freq_bound_ppm: None,
                sigma_ns: None,
                bound_now_ns: None,
                samples: None,
                last_sample_age_ns: None,
                probes: Default::default(),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let t = table(&report, 0);
    let want = "ph\\none\\r\\u{1b}[2J\\u{202e}x";
    let lines: Vec<&str> = t.lines().collect();
    // Header line, column names, one row, one drops line, one sync line.
    assert_eq!(lines.len(), 5, "{t}");
    assert!(lines[2].starts_with(want), "{t}");
    assert!(lines[3].starts_with(&format!("drops on {want}: ")), "{t}");
    assert!(lines[4].starts_with(&format!("sync on {want}: ")), "{t}");
    assert!(
        !t.chars()
            .any(|c| c != '\n' && tracesync_protocol::text::needs_escape(c)),
        "{t:?}"
    );
    // Columns stay aligned: the escaped name sets the width.
    let name_width = lines[1].find("ID").unwrap();
    assert!(name_width > want.len(), "{t}");
}

#[test]
fn an_unwritable_output_is_said_below_the_table() {
    let mut report = StatusReport {
        output: tracesync_core::status::OutputStatus {
            failing: true,
            errors: 3,
            episodes: 1,
            failing_since_unix_ms: Some(1),
            last_error: Some("cannot commit: No space left on device".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let t = table(&report, 2);
    let last = t.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("OUTPUT NOT WRITABLE (cannot commit: No space left on device)"),
        "{t}"
    );
    report.output.failing = false;
    let t = table(&report, 2);
    assert!(
        t.ends_with("output writable again after 1 write-error episode(s) (3 failed attempts)\n"),
        "{t}"
    );
    report.output.vanished = 1;
    report.output.symlinks_refused = 2;
    let t = table(&report, 2);
    assert!(t.contains("vanished 1 time(s)"), "{t}");
    assert!(
        t.ends_with(
            "2 symbolic link(s) in the output directory refused (never followed; see the \
             log)\n"
        ),
        "{t}"
    );
}

#[test]
fn clock_stalls_and_refused_clocks_get_a_line() {
    let report = StatusReport {
        machines: vec![
            MachineStatus {
                name: Some("phone".into()),
                raw_id: 3,
                clock_stalls: 1,
                clocks_refused: 12,
                future_packets: 5,
                ..Default::default()
            },
            MachineStatus {
                name: Some("quiet".into()),
                raw_id: 4,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let text = table(&report, 0);
    assert!(
        text.contains("watermark on phone: clock_stalls=1, clocks_refused=12\n"),
        "{text}"
    );
    assert!(!text.contains("watermark on quiet"), "{text}");
    assert!(
        text.contains("timestamps from the future on phone: future_packets=5 "),
        "{text}"
    );
    assert!(!text.contains("future on quiet"), "{text}");
    assert!(!text.contains("drops on phone"), "not drops: {text}");
}

/// A busy report: long names, large counters, every problem line.
fn busy_report() -> StatusReport {
    let machine = |name: &str, raw_id: u32| MachineStatus {
        name: Some(name.into()),
        raw_id,
        connected: true,
        packets: 123_456_789,
        bytes: 40 << 30,
        drops: BTreeMap::from([("clock_sync_failure_no_path".into(), 123_456)]),
        late_packets: 54_321,
        pending: 99_999,
        offset_ns: Some(-11_101_234_567),
        drift_ppm: Some(-12.345),
        error_bound_ns: Some(123_456),
        max_err_ns: 7_654_321,
        rtt_ns: Some(80_000),
        last_seen_unix_ms: Some(1_000),
        ..Default::default()
    };
    StatusReport {
        version: "0.1.0".into(),
        data_addr: Some("[2001:db8::1234:5678]:7410".into()),
        sync_addr: Some("[2001:db8::1234:5678]:7411".into()),
        current_file: Some("tracesync-20261125T222350Z-000001.pftrace".into()),
        machines: vec![
            machine("build-server-with-a-long-name.example.org", 3_000_000_000),
            MachineStatus {
                mode: Some("ring".into()),
                ring: Some(tracesync_core::status::RingStatus {
                    bytes_held: 12_897_485,
                    packets_held: 6000,
                    bytes_limit: 256 << 20,
                    seconds_limit: 120,
                    oldest_host_ns: Some(1),
                    oldest_age_ns: Some(58_200_000_000),
                    windows_owed: 1,
                }),
                ..machine("phone", 7)
            },
        ],
        relays_refused: BTreeMap::from([
            ("raw_id_conflict".into(), 3),
            ("bad_token".into(), 12),
            ("machine_not_allowed".into(), 1),
        ]),
        handshake_failures: BTreeMap::from([
            ("plaintext_relay".into(), 4),
            ("unknown_client_ca".into(), 2),
        ]),
        output: tracesync_core::status::OutputStatus {
            failing: true,
            errors: 3,
            episodes: 1,
            last_error: Some(
                "cannot commit /var/lib/tracesync/tracesync-20261125T222350Z-000001.pftrace: \
                 No space left on device"
                    .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn the_default_view_keeps_to_80_columns_and_shows_the_problems() {
    let t = compact(&busy_report(), 61_000);
    for line in t.lines() {
        assert!(
            line.chars().count() <= WIDTH,
            "{} columns: {line}",
            line.len()
        );
    }
    let lines: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.starts_with("MACHINE"))
        .collect();
    assert_eq!(
        lines[0],
        "MACHINE          CONN PACKETS  DROPS  LATE   OFFSET   PPM   BOUND MAXERR  SEEN"
    );
    assert_eq!(
        lines[1],
        "build-server-wi~ yes   123.5M 123.5k 54.3k -11.101s -12.3 123.5us 7.65ms 60.0s"
    );
    assert!(
        t.contains("relays refused: bad_token=12, machine_not_allowed=1, raw_id_conflict=3"),
        "{t}"
    );
    assert!(
        t.contains("TLS handshakes failed: plaintext_relay=4, unknown_client_ca=2"),
        "{t}"
    );
    assert!(t.contains("OUTPUT NOT WRITABLE"), "{t}");
    assert!(
        t.contains("ring mode (kept on the relay, shipped on a trigger): phone"),
        "{t}"
    );
    assert!(
        // Wrapped at 80 columns.
        t.contains(
            "ring on phone: 5% full, 12.3MiB of 256.0MiB, 6000 packets, oldest 58 s ago\n  \
             (keeps 120 s); 1 window(s) owed"
        ),
        "{t}"
    );
    // Continuations of a wrapped line are indented.
    assert!(t.lines().any(|l| l.starts_with("  ")), "{t}");
}

#[test]
fn the_legend_explains_every_column_of_both_views() {
    for column in COLUMNS {
        assert!(
            LEGEND
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{column} "))),
            "{column} is not in the legend"
        );
    }
    for line in LEGEND.lines() {
        assert!(line.chars().count() <= WIDTH, "{line}");
    }
}

#[test]
fn wrapping_breaks_at_spaces_and_keeps_long_words() {
    let mut out = String::new();
    let long = "x".repeat(100);
    wrap_into(&mut out, &format!("a {long} b"));
    assert_eq!(out, format!("a\n  {long}\n  b\n"));
}

#[test]
fn sizes_read_in_binary_units() {
    assert_eq!(super::human_bytes(512), "512B");
    assert_eq!(super::human_bytes(1536), "1.5KiB");
    assert_eq!(super::human_bytes(3 << 20), "3.0MiB");
    assert_eq!(super::human_bytes(5 << 30), "5.0GiB");
}
