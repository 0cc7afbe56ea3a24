//! A perfetto tail of the real daemon, started in the middle of a capture,
//! loads alone in the real trace processor: its first packets are the same
//! preamble a rolled file starts with (taken from the rolling writer at the
//! tail's subscription point), so no slice is skipped for missing interned
//! data, every slice is named and placed where the tail's own sync points
//! say, and the tail's events are the files' events at the same times.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::{Duration, Instant};

use tracesync_protocol::reader::TraceReader;
use tracesync_tests::live::output::scan_file;
use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, check_output, judge};
use tracesync_tests::tp;

/// Reads a perfetto tail for `secs` and keeps its whole packets as a Trace.
fn read_tail(daemon: &Daemon, secs: u64) -> Vec<u8> {
    let mut stream = daemon
        .control_request("{\"cmd\":\"tail\",\"format\":\"perfetto\"}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("reading the tail: {e}"),
        }
    }
    // The tail was cut mid-packet: keep the whole records only.
    let mut reader = TraceReader::new();
    reader.push(&bytes);
    let mut whole = Vec::new();
    while let Ok(Some(packet)) = reader.next_packet() {
        tracesync_protocol::wire::put_len_field(&mut whole, 1, packet.bytes);
    }
    whole
}

#[test]
fn a_perfetto_tail_started_mid_capture_loads_alone() {
    const TEST: &str = "a_perfetto_tail_started_mid_capture_loads_alone";
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(100),
        ..DaemonOpts::default()
    });
    let mut relays = vec![
        Relay::start(&daemon, RelayOpts::synthetic("tail-a", 2000)),
        Relay::start(
            &daemon,
            RelayOpts {
                clock_offset_ns: Some(7_000_000_000),
                ..RelayOpts::synthetic("tail-b", 2000)
            },
        ),
    ];
    daemon.wait_synced(&["tail-a", "tail-b"], Duration::from_secs(30));
    // Mid-stream: the producers interned their names long before.
    daemon.wait_progress(&["tail-a", "tail-b"], 4000);
    let tail = read_tail(&daemon, 3);
    for r in &mut relays {
        assert!(r.stop().success(), "{}", r.log());
    }
    assert!(daemon.stop().success(), "{}", daemon.log());

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tail.pftrace");
    std::fs::write(&path, &tail).expect("write the tail");
    let scan = scan_file(&path, None);
    assert!(scan.error.is_none(), "{:?}", scan.error);
    assert!(
        scan.events.len() > 1000,
        "only {} synthetic events in 3 s of tail",
        scan.events.len()
    );
    assert_eq!(
        scan.machine_names
            .values()
            .filter(|n| n.starts_with("tail-"))
            .count(),
        2,
        "the preamble names both relays: {:?}",
        scan.machine_names
    );

    // The same events, at the same times, as in the rolled files.
    let files = check_output(&daemon.output);
    let mut in_files: BTreeMap<(String, u64, u64), i64> = BTreeMap::new();
    for file in &files.files {
        for e in &file.events {
            in_files.insert((e.id.src.to_string(), e.id.n, e.kind), e.ts_host);
        }
    }
    for e in &scan.events {
        let key = (e.id.src.to_string(), e.id.n, e.kind);
        assert_eq!(
            in_files.get(&key),
            Some(&e.ts_host),
            "tail event {key:?} differs from the files"
        );
    }

    if !tp::require_or_skip(TEST) {
        return;
    }
    let judged = judge::judge_file(&scan).unwrap_or_else(|e| panic!("{e}"));
    assert!(judged.slices > 100, "{} slices", judged.slices);
}
