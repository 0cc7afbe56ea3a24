//! A ring relay's disk and memory stay within the ring's bounds at any
//! offered rate (the flight recorder between triggers): one `--mode ring`
//! relay at a time on loopback, a synthetic source from 1k packets/s to as
//! fast as it goes, sampled every 250 ms for ~10 s: the spool directory's
//! bytes on disk (sum of file sizes), the relay's VmRSS, and the ring's
//! oldest age from its metrics endpoint. No trigger fires, so nothing may
//! hold the ring past its bounds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use tracesync_tests::live::{Daemon, DaemonOpts, Relay, RelayOpts};

const MIB: u64 = 1 << 20;
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
const SAMPLE_FOR: Duration = Duration::from_secs(10);
/// The relay's VmRSS at most, whatever the rate: its spool's memory
/// (`spool-memory-bytes`, 64 MiB by default) plus the process itself.
const RSS_BOUND: u64 = 64 * MIB + 48 * MIB;
/// The synthetic source's highest rate: as fast as it goes.
const UNLIMITED: u64 = 100_000_000;

#[derive(Debug, Default)]
struct Peaks {
    disk: u64,
    rss: u64,
    /// The ring's oldest age (seconds) over the samples after warm-up.
    age_min: f64,
    age_max: f64,
    ring_bytes_max: f64,
    samples: usize,
}

/// Bytes of every file under `dir` (what the spool holds on disk).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// VmRSS of `pid` in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    l.local_addr().unwrap_or_else(|e| panic!("local addr: {e}"))
}

/// One gauge from the relay's `/metrics` page.
fn gauge(addr: SocketAddr, name: &str) -> Option<f64> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut page = String::new();
    s.read_to_string(&mut page).ok()?;
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Runs one ring relay at `rate` with the ring's bounds, samples it.
fn run(daemon: &Daemon, name: &str, rate: u64, seconds: u64, bytes: u64) -> Peaks {
    let metrics = free_port();
    let opts = RelayOpts {
        extra_args: vec![
            "--mode".into(),
            "ring".into(),
            "--ring-seconds".into(),
            seconds.to_string(),
            "--ring-bytes".into(),
            bytes.to_string(),
            "--metrics-listen".into(),
            metrics.to_string(),
        ],
        ..RelayOpts::synthetic(name, rate)
    };
    let mut relay = Relay::start(daemon, opts);
    daemon.wait_connected(&[name], Duration::from_secs(30));
    let pid = relay
        .pid()
        .unwrap_or_else(|| panic!("relay {name} has no pid"));
    let start = Instant::now();
    let mut peaks = Peaks {
        age_min: f64::MAX,
        ..Peaks::default()
    };
    while start.elapsed() < SAMPLE_FOR {
        std::thread::sleep(SAMPLE_EVERY);
        peaks.disk = peaks.disk.max(dir_bytes(&relay.spool));
        peaks.rss = peaks.rss.max(rss(pid));
        peaks.samples += 1;
        if let Some(b) = gauge(metrics, "tracesync_relay_ring_bytes") {
            peaks.ring_bytes_max = peaks.ring_bytes_max.max(b);
        }
        // The age settles once the ring has been full for a while.
        if seconds < 10
            && start.elapsed() > Duration::from_secs(seconds + 3)
            && let Some(age) = gauge(metrics, "tracesync_relay_ring_oldest_age_seconds")
        {
            peaks.age_min = peaks.age_min.min(age);
            peaks.age_max = peaks.age_max.max(age);
        }
    }
    let age = if peaks.age_max > 0.0 {
        format!("{:.2}..{:.2} s", peaks.age_min, peaks.age_max)
    } else {
        "-".to_owned()
    };
    eprintln!(
        "ring_bounds {name}: rate {rate}/s, ring {seconds} s / {bytes} B: disk max {} B, \
         RSS max {} B, ring bytes max {}, oldest age {age} over {} samples",
        peaks.disk, peaks.rss, peaks.ring_bytes_max, peaks.samples
    );
    let status = relay.stop();
    assert!(status.success(), "relay {name}: {status}\n{}", relay.log());
    peaks
}

/// A batch at most (the spool cuts at up to 1 MiB of packets).
const BATCH: u64 = MIB;

/// The spool on disk may hold, besides the `held` packet bytes of the
/// ring: the oldest segment's batches already released (a segment is
/// deleted only once all of its are; a segment is the ring's bytes / 8,
/// at least 64 KiB), the batch just cut before the ring releases the
/// oldest, and the records' framing (1/16 of it, generous).
fn disk_bound(held: u64, ring_bytes: u64) -> u64 {
    let segment = (ring_bytes / 8).max(64 << 10);
    held + held / 16 + segment + BATCH
}

#[test]
fn ring_disk_and_memory_stay_bounded_at_any_rate() {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let ring_bytes = 8 * MIB;
    let mut failures = Vec::new();
    // Bytes bind: 600 s would hold far more than 8 MiB at these rates.
    for (name, rate) in [
        ("ring-bytes-1k", 1_000),
        ("ring-bytes-100k", 100_000),
        ("ring-bytes-max", UNLIMITED),
    ] {
        let p = run(&daemon, name, rate, 600, ring_bytes);
        if p.disk > disk_bound(ring_bytes, ring_bytes) {
            failures.push(format!(
                "{name}: spool on disk {} B > {} B (ring {ring_bytes} B plus a segment)",
                p.disk,
                disk_bound(ring_bytes, ring_bytes)
            ));
        }
        if p.rss > RSS_BOUND {
            failures.push(format!("{name}: RSS {} B > {RSS_BOUND} B", p.rss));
        }
    }
    // Seconds bind: 2 s at 100k packets/s is far below 256 MiB.
    let seconds = 2;
    let big = 256 * MIB;
    let p = run(&daemon, "ring-seconds-100k", 100_000, seconds, big);
    // The ring holds what `seconds` brought, its metric read up to a
    // publish (1 s) late: a quarter more, generous.
    let held = (p.ring_bytes_max * 1.25) as u64;
    if p.disk > disk_bound(held, big) {
        failures.push(format!(
            "ring-seconds-100k: spool on disk {} B > {} B (ring held up to {} B)",
            p.disk,
            disk_bound(held, big),
            p.ring_bytes_max
        ));
    }
    if p.rss > RSS_BOUND {
        failures.push(format!(
            "ring-seconds-100k: RSS {} B > {RSS_BOUND} B",
            p.rss
        ));
    }
    // Held: the last `seconds`, a batch cut up to a linger late, the
    // metric published once a second.
    if !(p.age_min >= seconds as f64 - 0.5 && p.age_max <= seconds as f64 + 1.5) {
        failures.push(format!(
            "ring-seconds-100k: oldest age {:.2}..{:.2} s, expected near {seconds} s",
            p.age_min, p.age_max
        ));
    }
    let status = daemon.stop();
    assert!(status.success(), "tracesyncd: {status}\n{}", daemon.log());
    assert!(
        failures.is_empty(),
        "ring bounds exceeded:\n{}",
        failures.join("\n")
    );
}
