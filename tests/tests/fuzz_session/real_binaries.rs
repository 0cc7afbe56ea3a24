//! The real binaries: a bad relay beside a good one, and what the daemon
//! remembers of relays that come and go.

use super::*;

/// One frame on a blocking socket.
fn write_frame(s: &mut StdTcpStream, body: &[u8]) {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    s.write_all(&out).expect("write");
}

/// Reads frames until EOF; returns the Refused one (if any).
fn read_until_closed(s: &mut StdTcpStream) -> (Vec<v1::frame::Body>, Option<v1::Refused>) {
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let mut rest = &all[..];
    let (mut bodies, mut refused) = (Vec::new(), None);
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(body) = rest.get(4..4 + len) else {
            break;
        };
        match v1::Frame::decode(body).expect("daemon frame").body {
            Some(v1::frame::Body::Refused(r)) => refused = Some(r),
            Some(b) => bodies.push(b),
            None => {}
        }
        rest = &rest[4 + len..];
    }
    (bodies, refused)
}

#[test]
fn bad_relay_is_refused_while_a_good_relay_loses_nothing() {
    use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts, check_output};
    const TEST: &str = "bad_relay_is_refused_while_a_good_relay_loses_nothing";
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(200),
        ..DaemonOpts::default()
    });
    let mut good = Relay::start(&daemon, RelayOpts::synthetic("good", 400));
    daemon.wait_connected(&["good"], Duration::from_secs(60));
    daemon.wait_synced(&["good"], Duration::from_secs(60));

    let token = daemon.token.clone();
    let hello = |instance: u64| {
        v1::Frame {
            body: Some(v1::frame::Body::Hello(v1::Hello {
                protocol_version: PROTOCOL_VERSION,
                token: token.clone(),
                relay_instance_id: instance,
                boot_id: "bad-boot".into(),
                machine_name: "bad".into(),
                machine_raw_id: 0xbad,
                oldest_unacked_batch: 1,
                clocks: None,
                mode: String::new(),
            })),
        }
        .encode_to_vec()
    };
    let garbage: [(&str, Vec<u8>); 4] = [
        ("bad_frame", vec![0xff; 64]),
        ("unexpected_frame", hello(0xbad2)),
        ("frame_too_large", Vec::new()),
        // "GET " read as a length prefix is 1.2 GB.
        ("frame_too_large", Vec::new()),
    ];
    for (round, (code, body)) in garbage.iter().enumerate() {
        let mut s = StdTcpStream::connect(daemon.data_addr).expect("connect");
        write_frame(&mut s, &hello(0xbad1 + round as u64 * 16));
        match round {
            // Over the frame limit: only the prefix.
            2 => s.write_all(&u32::MAX.to_be_bytes()).expect("write"),
            // No framing at all.
            3 => s.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("write"),
            _ => write_frame(&mut s, body),
        }
        // Keep the write side open: the daemon must close by itself.
        let (bodies, refused) = read_until_closed(&mut s);
        let _ = s.shutdown(Shutdown::Both);
        assert!(
            matches!(bodies.first(), Some(v1::frame::Body::Welcome(_))),
            "{TEST}: round {round}: {bodies:?}"
        );
        let refused = refused.unwrap_or_else(|| panic!("{TEST}: round {round}: no Refused"));
        assert_eq!(&refused.code, code, "{TEST}: round {round}: {refused:?}");
        assert!(!refused.reason.is_empty());
        eprintln!("{TEST}: round {round}: refused {code}: {}", refused.reason);
    }
    let status = daemon.wait_status("refusals counted", Duration::from_secs(30), |s| {
        let r = &s["relays_refused"];
        r["bad_frame"].as_u64() >= Some(1)
            && r["unexpected_frame"].as_u64() >= Some(1)
            && r["frame_too_large"].as_u64() >= Some(2)
    });
    eprintln!("{TEST}: relays_refused {}", status["relays_refused"]);
    // The good relay kept streaming through all of it.
    std::thread::sleep(Duration::from_secs(1));
    let s = good.stop();
    assert!(s.success(), "relay exit: {s}");
    let s = daemon.stop();
    assert!(s.success(), "tracesyncd exit: {s}");
    let check = check_output(&daemon.output);
    eprintln!("{TEST}: {}", check.summary());
    check.assert_complete();
    assert!(check.source_of("good", 1).is_some(), "{}", check.summary());
}

/// Relays that come and go with new instance ids and raw ids: the core
/// remembers at most `max_relay_records` of them, and their machine rows
/// go with them.
#[test]
fn relay_records_and_machine_rows_stay_bounded() {
    use tracesync_core::live::{HelloInfo, Recovered};
    const RECORDS: usize = 16;
    let mut core = LiveCore::new(
        LiveConfig {
            max_relay_records: RECORDS,
            ..LiveConfig::default()
        },
        Recovered::default(),
    );
    for i in 1..=5_000u64 {
        let hello = HelloInfo {
            relay_instance: i,
            boot_id: "b".into(),
            machine_name: format!("m{i}"),
            machine_raw_id: i as u32,
            oldest_unacked_batch: 1,
            clocks: None,
            ring: false,
        };
        let connected = core.connect(hello, i).expect("admitted");
        core.disconnect(connected.slot);
    }
    let rows = core.status(5_000, 0).len();
    // The host, the remembered relays, and the one that just connected.
    assert!(rows <= RECORDS + 2, "{rows} machine rows");
}
