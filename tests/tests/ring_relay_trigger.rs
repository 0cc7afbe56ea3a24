//! Triggers from any machine, with the real binaries over loopback:
//! `tracesync-relay trigger NAME` run on a relay's machine reaches the
//! running relay on its control socket, the relay stamps the moment on its
//! own clock and carries it to the daemon, which places it on the host's
//! timeline with its estimate and fans it out: one snapshot with every
//! ring relay's window (four relays in time namespaces, one drifting),
//! checked against the generators' identities as `ring_trigger` checks
//! them; `tracesync status` shows each ring relay's fill and oldest time;
//! a storm of triggers from a stream relay's machine is held to the
//! name's limit while capture runs on; an offline relay says so; a
//! Perfetto trigger (TracePacket.trigger) of a `--trigger-on` name in a
//! relay's file source fires at the packet's own time.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tracesync_tests::live::{self, Daemon, DaemonOpts, Relay, RelayOpts, bin};
use tracesync_tests::ring::{
    FLEET, Fired, RATE, Window, check_snapshot, relay_trigger, start_fleet, stop_all, wait_for,
};

#[test]
fn a_trigger_from_a_relay_machine_saves_every_ring_relay_and_status_shows_the_rings() {
    let (_pki, mut daemon, mut relays) = start_fleet();
    let names = FLEET;

    // `tracesync status` shows each ring relay's fill and oldest time.
    let status = wait_ring_fill(&daemon, &names);
    let table = status_table(&daemon);
    for name in &names {
        let m = live::process::machine(&status, name).unwrap_or_else(|| panic!("{status}"));
        let ring = &m["ring"];
        assert!(ring["packets_held"].as_u64().unwrap_or(0) > 0, "{m}");
        assert_eq!(ring["bytes_limit"].as_u64(), Some(256 << 20), "{m}");
        let age = ring["oldest_age_ns"].as_u64().unwrap_or(0);
        // The oldest packet held was cut 3-20 s ago, on the host's clock
        // (the relay's clock is seconds to an hour apart).
        assert!(
            (1_000_000_000..30_000_000_000).contains(&age),
            "{name}: {m}"
        );
        let line = format!("ring on {name}: ");
        assert!(table.contains(&line), "no {line:?} in:\n{table}");
    }
    let flat = table.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(" s ago (keeps 120 s)"), "{table}");
    eprintln!("status:\n{table}");

    // From the machine 300 s ahead: the daemon places the relay's moment
    // on the host's clock.
    let origin = &relays[1];
    let asked_at = live::host_boottime_ns() as i64;
    let (code, stdout, stderr) = relay_trigger(origin, "crash", "2s", "1s");
    let answered_at = live::host_boottime_ns() as i64;
    assert_eq!(
        code,
        0,
        "tracesync-relay trigger: {stdout}{stderr}\n{}",
        origin.log()
    );
    assert!(
        stdout.contains("trigger crash fired")
            && stdout.contains("placed by the daemon's estimate")
            && stdout.contains("4 ring relay(s) asked"),
        "{stdout}"
    );
    let fired = Fired::parse(&stdout);
    let host_time = fired.host_time;
    assert!(
        (asked_at..=answered_at).contains(&host_time),
        "T {host_time} not within the command's run [{asked_at}, {answered_at}]"
    );
    eprintln!(
        "relay trigger: T {} ms after the command started, answered after {} ms",
        (host_time - asked_at) / 1_000_000,
        (answered_at - asked_at) / 1_000_000
    );
    let acked = fired.acked();
    for relay in &relays {
        wait_for(
            Duration::from_secs(40),
            || relay.log().contains(&acked),
            || format!("relay {}: no {acked:?}:\n{}", relay.name(), relay.log()),
        );
    }
    let name = &fired.snapshot;
    let path = daemon.output.join(name);
    wait_for(
        Duration::from_secs(30),
        || path.exists(),
        || format!("no {name}:\n{}", daemon.log()),
    );
    check_snapshot(
        "ring_relay_trigger snapshot",
        &path,
        &names,
        Window::two_one(host_time),
        &[],
    );
    stop_all(&mut relays, &mut daemon);
}

/// Waits until the status has every ring relay's fill; the status.
fn wait_ring_fill(daemon: &Daemon, names: &[&str]) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = daemon.status_cli().unwrap_or_else(|e| panic!("{e}"));
        let all = names.iter().all(|n| {
            live::process::machine(&status, n)
                .is_some_and(|m| m["ring"]["packets_held"].as_u64().unwrap_or(0) > 0)
        });
        if all {
            return status;
        }
        assert!(Instant::now() < deadline, "no ring fill in {status}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `tracesync status` as a person reads it.
fn status_table(daemon: &Daemon) -> String {
    let out = Command::new(bin("tracesync"))
        .arg("status")
        .arg("--connect")
        .arg(&daemon.control)
        .output()
        .unwrap_or_else(|e| panic!("tracesync status: {e}"));
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_storm_from_a_stream_relay_machine_stays_within_the_limit_and_offline_says_so() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let ring = Relay::start(
        &daemon,
        RelayOpts {
            extra_args: vec!["--mode".into(), "ring".into()],
            ..RelayOpts::synthetic("ring-storm", RATE)
        },
    );
    let stream = Relay::start(&daemon, RelayOpts::synthetic("stream-storm", RATE));
    let mut relays = vec![ring, stream];
    daemon.wait_connected(&["ring-storm", "stream-storm"], Duration::from_secs(30));
    daemon.wait_synced(&["ring-storm", "stream-storm"], Duration::from_secs(30));
    let before = live::process::total_packets(&daemon.status().unwrap_or_default());

    // 1000 triggers of one name on the stream relay's socket, each carried
    // to the daemon and answered.
    let started = Instant::now();
    let (mut fired, mut refused) = (0, 0);
    let line = "{\"cmd\":\"trigger\",\"name\":\"storm\",\"before_ns\":1000000000,\"after_ns\":0}\n";
    for _ in 0..1000 {
        let answer = socket_request(&relays[1].control, line);
        if answer.contains("\"fired\"") {
            fired += 1;
        } else {
            assert!(answer.contains("refused: it fired 10 times"), "{answer}");
            assert!(answer.contains("\"not_fired\":\"refused\""), "{answer}");
            refused += 1;
        }
    }
    let took = started.elapsed();
    eprintln!("relay storm: 1000 triggers in {took:?}: {fired} fired, {refused} refused");
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert_eq!((fired, refused), (10, 990));
    // The command says the refusal and exits 75.
    let (code, _, stderr) = relay_trigger(&relays[1], "storm", "1s", "0s");
    assert_eq!(code, 75, "{stderr}");
    assert!(stderr.contains("trigger storm not fired"), "{stderr}");
    // Another name fires from the stream relay's machine: the ring relay
    // is asked for its window.
    let (code, stdout, stderr) = relay_trigger(&relays[1], "other", "1s", "0s");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("1 ring relay(s) asked"), "{stdout}");
    std::thread::sleep(Duration::from_secs(2));
    let after = live::process::total_packets(&daemon.status().unwrap_or_default());
    assert!(
        after > before,
        "no packets since the storm: {before} -> {after}"
    );
    let log = daemon.log();
    assert!(log.contains("refused"), "{log}");

    // The daemon gone: the relay says it is offline, exit 69.
    let status = daemon.stop();
    assert!(status.success(), "{}", daemon.log());
    std::thread::sleep(Duration::from_millis(500));
    let (code, _, stderr) = relay_trigger(&relays[1], "late", "1s", "0s");
    assert_eq!(code, 69, "{stderr}");
    assert!(stderr.contains("not connected to its daemon"), "{stderr}");
    // No relay listening: said too.
    let (code, _, stderr) = {
        let out = Command::new(bin("tracesync-relay"))
            .args(["trigger", "x", "--connect"])
            .arg(relays[0].control.with_file_name("none.sock"))
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        (
            out.status.code().unwrap_or(-1),
            (),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, 69, "{stderr}");
    assert!(stderr.contains("no relay listens at"), "{stderr}");
    for r in &mut relays {
        r.stop();
    }
}

#[test]
fn a_perfetto_trigger_in_a_relay_stream_fires_at_the_packet_time() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let app = dir.path().join("app.pftrace");
    std::fs::write(&app, b"").unwrap_or_else(|e| panic!("{e}"));
    let ring = |name: &str| RelayOpts {
        extra_args: vec!["--mode".into(), "ring".into()],
        ..RelayOpts::synthetic(name, RATE)
    };
    let mut watched = ring("ring-watched");
    watched.sources.push(format!("file:{}", app.display()));
    watched
        .extra_args
        .extend(["--trigger-on".into(), "app-crash".into()]);
    let mut relays = vec![
        Relay::start(&daemon, watched),
        Relay::start(&daemon, ring("ring-other")),
    ];
    let names = ["ring-watched", "ring-other"];
    daemon.wait_connected(&names, Duration::from_secs(30));
    daemon.wait_synced(&names, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(2));

    // The app's trace gets a trigger not in trigger-on, then one that is,
    // stamped on BOOTTIME as Perfetto's service stamps them.
    let at = live::host_boottime_ns();
    let mut trace = trigger_record("not-listed", at - 1_000_000);
    trace.extend(trigger_record("app-crash", at));
    std::fs::write(&app, &trace).unwrap_or_else(|e| panic!("{e}"));

    let fired = "trigger app-crash fired at host time ";
    wait_for(
        Duration::from_secs(20),
        || daemon.log().contains(fired),
        || format!("{}\n{}", relays[0].log(), daemon.log()),
    );
    let log = daemon.log();
    let host_time: u64 = log
        .split_once(fired)
        .and_then(|(_, rest)| rest.split_once(" ns"))
        .and_then(|(t, _)| t.parse().ok())
        .unwrap_or_else(|| panic!("{log}"));
    // The packet's own time, through the relay's estimate (its clock is
    // the host's here): within the estimate's bound, far under a ms.
    let off = host_time.abs_diff(at);
    eprintln!("packet trigger: T - packet time = {off} ns");
    assert!(off < 1_000_000, "T {host_time}, packet {at}");
    assert!(!log.contains("trigger not-listed fired"), "{log}");
    assert!(
        relays[0]
            .log()
            .contains("Perfetto trigger app-crash in the packets")
    );
    // Both ring relays ship their windows into one snapshot.
    for relay in &relays {
        wait_for(
            Duration::from_secs(40),
            || relay.log().contains("the daemon has the window"),
            || format!("relay {}:\n{}\n{}", relay.name(), relay.log(), daemon.log()),
        );
    }
    let snapshot = std::fs::read_dir(&daemon.output)
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| n.starts_with("snapshot-") && n.ends_with("-app-crash.pftrace"))
        })
        .unwrap_or_else(|| panic!("no app-crash snapshot in {}", daemon.output.display()));
    let scan = live::output::scan_file(&snapshot, None);
    assert!(scan.error.is_none(), "{:?}", scan.error);
    for name in names {
        let machine = scan
            .machine_names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(&m, _)| m)
            .unwrap_or_else(|| panic!("{name} not in {:?}", scan.machine_names));
        let events = scan.events.iter().filter(|e| e.machine == machine).count();
        eprintln!("packet trigger snapshot: {name}: {events} events");
        assert!(events > 500, "{name}: {events} events");
    }
    stop_all(&mut relays, &mut daemon);
}

/// One Trace record (field 1) holding a TracePacket with a Perfetto
/// trigger `name` (TracePacket.trigger = 46, Trigger.trigger_name = 1) at
/// BOOTTIME `ts`.
fn trigger_record(name: &str, ts: u64) -> Vec<u8> {
    use tracesync_protocol::wire;
    let mut trigger = Vec::new();
    wire::put_len_field(&mut trigger, 1, name.as_bytes());
    wire::put_len_field(&mut trigger, 2, b"app");
    let mut packet = Vec::new();
    wire::put_varint_field(&mut packet, 8, ts);
    wire::put_len_field(&mut packet, 46, &trigger);
    let mut record = Vec::new();
    wire::put_len_field(&mut record, 1, &packet);
    record
}

/// One request line on a relay's control socket; the answer line.
fn socket_request(socket: &Path, line: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::os::unix::net::UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("{}: {e}", socket.display()));
    conn.write_all(line.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap_or_default();
    answer
}
