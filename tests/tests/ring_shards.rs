//! The flight recorder at two ingest shards, with the real binaries over
//! loopback: two ring relays whose machines hash to different shards (both
//! are taken by the flight shard) and two stream relays, one on each
//! shard. A trigger from the machine of the stream relay on shard 1 is
//! placed with its estimate there, fired by the flight shard and answered
//! to the relay; a trigger from the control socket fires too; each
//! snapshot holds every machine's events of its window (the stream
//! relays' read back from the output the writer thread merged), and the
//! limit per name holds across the shards.

use std::time::Duration;

use tracesync_core::shard::shard_of;
use tracesync_protocol::relay::raw_machine_id;
use tracesync_tests::live::{self, Daemon, DaemonOpts, Relay};
use tracesync_tests::ring::{
    self, Fired, Window, check_snapshot, relay_trigger, stop_all, wait_for,
};

const SHARDS: usize = 2;

/// The first name `PREFIX-N` whose machine (raw id of `<boot id>/<name>`,
/// as a relay given a name makes it) hashes to `shard`.
fn name_on_shard(boot_id: &str, prefix: &str, shard: usize) -> String {
    (0..1000)
        .map(|n| format!("{prefix}-{n}"))
        .find(|name| shard_of(raw_machine_id(&format!("{boot_id}/{name}")), SHARDS) == shard)
        .unwrap_or_else(|| panic!("no {prefix}-N on shard {shard}"))
}

/// Waits for trigger `fired`'s snapshot, written with the output durable
/// past its window, and checks it holds every one of `names`.
fn check(daemon: &Daemon, fired: &Fired, names: &[&str], label: &str) {
    let name = &fired.snapshot;
    wait_for(
        Duration::from_secs(40),
        || daemon.log().contains(&format!("snapshot {name} written")),
        || format!("no {name}:\n{}", daemon.log()),
    );
    let log = daemon.log();
    let line = log
        .lines()
        .find(|l| l.contains(&format!("snapshot {name} written")))
        .unwrap_or_default();
    assert!(line.contains("output_whole=true"), "{line}");
    check_snapshot(
        label,
        &daemon.output.join(name),
        names,
        Window::two_one(fired.host_time),
        &[],
    );
}

#[test]
fn triggers_at_two_shards_fire_once_for_every_ring_relay_whatever_their_shards() {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_else(|e| panic!("boot id: {e}"));
    let boot_id = boot_id.trim();
    let ring0 = name_on_shard(boot_id, "ring", 0);
    let ring1 = name_on_shard(boot_id, "ring", 1);
    let stream0 = name_on_shard(boot_id, "stream", 0);
    let stream1 = name_on_shard(boot_id, "stream", 1);
    let mut daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--ingest-shards".into(), SHARDS.to_string()],
        ..DaemonOpts::default()
    });
    let mut relays = vec![
        Relay::start(&daemon, ring::relay_opts(&ring0, 7, true)),
        Relay::start(&daemon, ring::relay_opts(&ring1, 300, true)),
        Relay::start(&daemon, ring::relay_opts(&stream0, 40, false)),
        Relay::start(&daemon, ring::relay_opts(&stream1, 2000, false)),
    ];
    let names = [
        ring0.as_str(),
        ring1.as_str(),
        stream0.as_str(),
        stream1.as_str(),
    ];
    daemon.wait_connected(&names, Duration::from_secs(30));
    daemon.wait_synced(&names, Duration::from_secs(30));
    // The relays' machines are where this test placed them.
    let status = daemon.status_cli().unwrap_or_else(|e| panic!("{e}"));
    for (name, shard) in [(&ring0, 0), (&ring1, 1), (&stream0, 0), (&stream1, 1)] {
        let m = live::process::machine(&status, name).unwrap_or_else(|| panic!("{status}"));
        let raw = m["raw_id"].as_u64().unwrap_or_else(|| panic!("{m}"));
        let raw = u32::try_from(raw).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(shard_of(raw, SHARDS), shard, "{name}: {m}");
    }
    std::thread::sleep(Duration::from_secs(3));

    // From the stream relay's machine on shard 1: placed there, fired by
    // the flight shard, answered back to the relay.
    let origin = &relays[3];
    let asked_at = live::host_boottime_ns() as i64;
    let (code, stdout, stderr) = relay_trigger(origin, "crash", "2s", "1s");
    let answered_at = live::host_boottime_ns() as i64;
    assert_eq!(code, 0, "{stdout}{stderr}\n{}", origin.log());
    assert!(
        stdout.contains("trigger crash fired")
            && stdout.contains("placed by the daemon's estimate")
            && stdout.contains("2 ring relay(s) asked"),
        "{stdout}"
    );
    let fired = Fired::parse(&stdout);
    assert!(
        (asked_at..=answered_at).contains(&fired.host_time),
        "T {} not within the command's run [{asked_at}, {answered_at}]",
        fired.host_time
    );
    check(&daemon, &fired, &names, "ring_shards relay snapshot");

    // From the control socket, a name of its own.
    let (code, stdout, stderr) = ring::trigger(&daemon, "panel", "2s", "1s");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("2 ring relay(s) asked"), "{stdout}");
    check(
        &daemon,
        &Fired::parse(&stdout),
        &names,
        "ring_shards control snapshot",
    );

    // The limit per name counts the triggers of every shard: "crash" fired
    // once from shard 1; from shard 0's stream relay and the control
    // socket it fires until the name's 10, then is refused on both.
    let mut fired_count = 1;
    for i in 0..12 {
        let (code, stdout, stderr) = if i % 2 == 0 {
            relay_trigger(&relays[2], "crash", "100ms", "100ms")
        } else {
            ring::trigger(&daemon, "crash", "100ms", "100ms")
        };
        if code == 0 {
            fired_count += 1;
        } else {
            assert_eq!(code, 75, "{stdout}{stderr}");
            assert!(stderr.contains("fired 10 times"), "{stderr}");
        }
    }
    assert_eq!(fired_count, 10, "the name's limit is 10 whatever the shard");
    stop_all(&mut relays, &mut daemon);
}
