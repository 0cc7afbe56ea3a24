//! The capture the tests read back, recorded once per test binary, and
//! the commands and readers they share.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tracesync_protocol::reader::TraceReader;
use tracesync_relay::source::synthetic::read_identity;
use tracesync_tests::live::{self, Daemon, DaemonOpts, Relay, RelayOpts};

pub const RELAYS: [(&str, i64); 2] = [("ns-a-1000", 1000), ("ns-b-5000", 5000)];
const RATE: u64 = 2000;

pub struct Capture {
    pub dir: PathBuf,
    /// The live jsonl tail's records.
    pub live: Vec<serde_json::Value>,
}

static CAPTURE: OnceLock<Option<Capture>> = OnceLock::new();

/// The shared capture; None when time namespaces are not available here.
pub fn capture(test: &str) -> Option<&'static Capture> {
    if !live::require_time_namespaces_or_skip(test) {
        return None;
    }
    CAPTURE.get_or_init(record).as_ref()
}

fn record() -> Option<Capture> {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capture_readback");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("capture dir");
    let dir = root.join("output");
    let mut daemon = Daemon::start(DaemonOpts {
        merge_window_ms: Some(200),
        rotate_seconds: Some(2),
        output_dir: Some(dir.clone()),
        ..DaemonOpts::default()
    });
    let tail = daemon
        .control_request("{\"cmd\":\"tail\",\"format\":\"jsonl\"}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    tail.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let lines = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(tail).lines() {
                let Ok(line) = line else { break };
                lines.lock().expect("lines").push(line);
            }
        })
    };
    let mut relays: Vec<Relay> = RELAYS
        .iter()
        .map(|&(name, secs)| {
            Relay::start(
                &daemon,
                RelayOpts::synthetic(name, RATE).in_time_namespace(secs),
            )
        })
        .collect();
    let names: Vec<&str> = RELAYS.iter().map(|r| r.0).collect();
    daemon.wait_synced(&names, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(9));
    for r in &mut relays {
        assert!(r.stop().success(), "{}", r.log());
    }
    assert!(daemon.stop().success(), "{}", daemon.log());
    reader.join().expect("tail reader");
    let live: Vec<serde_json::Value> = lines
        .lock()
        .expect("lines")
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        live.iter().all(|r| r.get("lagged").is_none()),
        "the live tail lagged"
    );
    Some(Capture { dir, live })
}

pub fn tracesync(args: &[&str]) -> Output {
    Command::new(live::bin("tracesync"))
        .args(args)
        .output()
        .expect("run tracesync")
}

pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "exit {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn jsonl(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

pub fn packets(path: &Path) -> Vec<Vec<u8>> {
    let mut reader = TraceReader::new();
    reader.push(&std::fs::read(path).expect("read trace"));
    let mut out = Vec::new();
    while let Some(p) = reader.next_packet().expect("frames") {
        out.push(p.bytes.to_vec());
    }
    out
}

pub fn int(r: &serde_json::Value, key: &str) -> i64 {
    r[key].as_i64().unwrap_or_else(|| panic!("{key} in {r}"))
}

/// The merged Perfetto output and its jsonl, record for record.
pub struct Merged {
    pub pftrace: PathBuf,
    pub packets: Vec<Vec<u8>>,
    pub records: Vec<serde_json::Value>,
}

pub fn merge(c: &Capture, extra: &[&str], name: &str) -> Merged {
    let dir = c.dir.to_str().expect("utf-8");
    let pftrace = c.dir.parent().expect("root").join(name);
    let out = pftrace.to_str().expect("utf-8");
    let mut args = vec!["merge", "-o", out];
    args.extend_from_slice(extra);
    args.push(dir);
    ok(tracesync(&args));
    let mut args = vec!["merge", "--format", "jsonl"];
    args.extend_from_slice(extra);
    args.push(dir);
    let records = jsonl(&ok(tracesync(&args)));
    let mut packets = packets(&pftrace);
    // A window's Perfetto output starts with its own preamble (state only,
    // not printed in jsonl).
    let preamble = if extra.is_empty() {
        0
    } else {
        packets.len().saturating_sub(records.len())
    };
    packets.drain(..preamble);
    assert_eq!(packets.len(), records.len(), "one record per packet");
    for (p, r) in packets.iter().zip(&records) {
        assert_eq!(p.len() as i64, int(r, "size"));
    }
    Merged {
        pftrace,
        packets,
        records,
    }
}

/// Synthetic packets of a merge: (src, n, truth, record).
pub fn identities(m: &Merged) -> Vec<(String, u64, u64, &serde_json::Value)> {
    m.packets
        .iter()
        .zip(&m.records)
        .filter_map(|(p, r)| read_identity(p).map(|id| (id.src, id.n, id.truth_ns, r)))
        .collect()
}
