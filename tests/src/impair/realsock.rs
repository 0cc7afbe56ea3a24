//! The real-socket accuracy run (clock-sync.md §8.2 Layer B): `tracesyncd`
//! in network namespace H, each relay in a time namespace with a known
//! offset (optionally with the relay's simulated drift on top). How relays
//! reach the daemon depends on the profile ([`Wiring`]):
//!
//! - `loopback`: the relays run in H too and talk to the daemon over `lo`,
//!   nothing in between (real loopback sockets);
//! - `veth`: each relay in its own namespace Ri with a veth pair straight
//!   to H, nothing in between;
//! - every other profile: `tracesync-impair` in X, veth pairs from X to H
//!   and to every Ri; relays reach the daemon only through the proxy (data
//!   over TCP, probes over UDP), so every probe and every byte of trace
//!   data crosses the modelled link. `proxy-loopback` is the proxy with no
//!   impairment (its own forwarding only).
//!
//! After the run every synthetic event of the rolled output is compared
//! with its ground truth (`tracesync_truth_ns`, exact: time-namespace
//! offsets and the simulated clock are known). Figures, per relay, over
//! the events after the warm-up:
//!
//! - merged: |host time as the output resolves it (the sync point in
//!   effect, as Perfetto does) - truth|;
//! - live: |ts of the daemon's own mapping (tail record) - truth|;
//! - bound coverage: merged error <= that packet's `err_ns` (tail record);
//! - baselines from the probe samples in the `.sync.jsonl` sidecars: the
//!   naive last-sample offset (latest sample received before the event)
//!   and a Perfetto-style constant (per 30 s round, the mean offset of the
//!   previous round's samples).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::sched::quantile;
use crate::live::output::check_output;

const DATA_PORT: u16 = 7400;
const SYNC_PORT: u16 = 7401;
const DAEMON_IP: &str = "10.201.0.1";
const PROXY_UPSTREAM_IP: &str = "10.201.0.2";

/// How relays reach the daemon in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wiring {
    /// Relays in the daemon's namespace, over `lo`; no proxy.
    Loopback,
    /// A veth pair from each relay's namespace straight to the daemon's.
    Veth,
    /// Through `tracesync-impair` with this link profile.
    Proxy(&'static str),
}

impl Wiring {
    /// The wiring of a harness profile name: `loopback` and `veth` are
    /// direct, `proxy-loopback` is the proxy's `loopback` profile (no
    /// impairment), any other name a proxy profile. None: unknown.
    pub fn of(profile: &str) -> Option<Wiring> {
        match profile {
            "loopback" => Some(Wiring::Loopback),
            "veth" => Some(Wiring::Veth),
            "proxy-loopback" => Some(Wiring::Proxy("loopback")),
            other => super::model::profile_names()
                .into_iter()
                .find(|p| *p == other && *p != "loopback")
                .map(Wiring::Proxy),
        }
    }

    /// Every profile name [`Wiring::of`] knows.
    pub fn profile_names() -> Vec<String> {
        let mut names = vec!["loopback".to_owned(), "veth".to_owned()];
        names.push("proxy-loopback".to_owned());
        names.extend(
            super::model::profile_names()
                .into_iter()
                .filter(|p| *p != "loopback")
                .map(String::from),
        );
        names
    }

    fn proxy_profile(self) -> Option<&'static str> {
        match self {
            Wiring::Proxy(p) => Some(p),
            _ => None,
        }
    }
}

/// Perfetto-style baseline: one averaged constant per round of this length.
const PERFETTO_ROUND_NS: u64 = 30_000_000_000;

/// Where the three binaries are.
#[derive(Clone, Debug)]
pub struct Bins {
    pub daemon: PathBuf,
    pub relay: PathBuf,
    pub impair: PathBuf,
}

impl Bins {
    /// `tracesyncd`, `tracesync-relay` and `tracesync-impair` in `dir`.
    pub fn in_dir(dir: &Path) -> Bins {
        Bins {
            daemon: dir.join("tracesyncd"),
            relay: dir.join("tracesync-relay"),
            impair: dir.join("tracesync-impair"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RelaySpec {
    pub name: String,
    /// Time-namespace offset of BOOTTIME and MONOTONIC (s).
    pub timens_s: i64,
    /// `--clock-drift-ppm` (the relay's simulated clock), if any.
    pub drift_ppm: Option<f64>,
    /// Synthetic events per second.
    pub rate: u64,
    /// More relay flags (e.g. `--clock-wander`, `--clock-step`).
    pub extra_args: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct RunSpec {
    pub profile: String,
    pub seed: u64,
    pub seconds: u64,
    pub warmup_s: u64,
    pub relays: Vec<RelaySpec>,
    pub bins: Bins,
    /// Keep the run directory (logs, output) instead of deleting it.
    pub keep: bool,
    /// Run the proxy with `chrt --fifo 10` when `chrt` is there.
    pub realtime_proxy: bool,
    /// Kernel receive timestamps on both probe ends (the
    /// `TRACESYNC_KERNEL_RX_TIMESTAMPS` switch); None: the binaries' default.
    pub kernel_timestamps: Option<bool>,
}

impl RunSpec {
    /// The standard pair: one relay offset by a time namespace only, one
    /// with 50 ppm simulated drift on top of another offset.
    /// A relay whose simulated clock also wanders (5 ppm sine, 60 s) and
    /// steps forward by 200 µs `step_at_s` after start (20 ppm drift, +3000 s).
    pub fn wander_and_step_relay(step_at_s: u64) -> RelaySpec {
        RelaySpec {
            name: "r-wander-step".into(),
            timens_s: 3000,
            drift_ppm: Some(20.0),
            rate: 200,
            extra_args: vec![
                "--clock-wander".into(),
                "5:60".into(),
                "--clock-step".into(),
                format!("{step_at_s}:200000"),
            ],
        }
    }

    pub fn standard(profile: &str, seconds: u64, bins: Bins) -> RunSpec {
        RunSpec {
            profile: profile.into(),
            seed: 1,
            seconds,
            warmup_s: 10,
            relays: vec![
                RelaySpec {
                    name: "r-offset".into(),
                    timens_s: 1000,
                    drift_ppm: None,
                    rate: 200,
                    extra_args: Vec::new(),
                },
                RelaySpec {
                    name: "r-drift50".into(),
                    timens_s: 5000,
                    drift_ppm: Some(50.0),
                    rate: 200,
                    extra_args: Vec::new(),
                },
            ],
            bins,
            keep: false,
            realtime_proxy: true,
            kernel_timestamps: None,
        }
    }
}

/// p50 / p99 / max of absolute errors (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrStats {
    pub n: usize,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl ErrStats {
    pub fn of(mut v: Vec<u64>) -> ErrStats {
        v.sort_unstable();
        ErrStats {
            n: v.len(),
            p50: quantile(&v, 0.5),
            p99: quantile(&v, 0.99),
            max: v.last().copied().unwrap_or(0),
        }
    }

    fn cells(&self) -> String {
        format!("{} / {} / {}", us(self.p50), us(self.p99), us(self.max))
    }
}

fn us(ns: u64) -> String {
    if ns >= 100_000 {
        format!("{:.0}", ns as f64 / 1e3)
    } else {
        format!("{:.1}", ns as f64 / 1e3)
    }
}

#[derive(Clone, Debug, Default)]
pub struct RelayResult {
    pub name: String,
    pub timens_s: i64,
    pub drift_ppm: Option<f64>,
    pub extra_args: Vec<String>,
    pub events_total: u64,
    pub missing: u64,
    pub duplicates: u64,
    /// Events after the warm-up.
    pub measured: usize,
    pub merged: ErrStats,
    pub live: ErrStats,
    /// Mean of (merged - truth) (ns): the bias, e.g. of an asymmetric path.
    pub mean_signed_ns: i64,
    /// Measured events whose merged error is within their packet's bound.
    pub in_bound: usize,
    /// Measured events with no tail record (no per-packet bound known).
    pub no_bound: usize,
    pub bound_p50_ns: u64,
    pub probe_samples: usize,
    pub naive: Option<ErrStats>,
    pub perfetto: Option<ErrStats>,
    /// The relay's UDP probes: (t2 from the kernel, stamped in userspace
    /// instead), from its log; None when it logged none.
    pub relay_rx_stamps: Option<(u64, u64)>,
}

impl RelayResult {
    pub fn coverage(&self) -> f64 {
        let known = self.measured - self.no_bound;
        if known == 0 {
            return 0.0;
        }
        self.in_bound as f64 / known as f64
    }
}

#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub profile: String,
    pub seed: u64,
    pub seconds: u64,
    pub warmup_s: u64,
    pub relays: Vec<RelayResult>,
    /// The proxy's final stats (JSON it wrote).
    pub proxy: serde_json::Value,
    pub tail_lagged: u64,
    pub dir: Option<PathBuf>,
    /// None: the proxy was not in the path (direct wiring).
    pub proxied: bool,
    /// What the run asked for (None: the binaries' default).
    pub kernel_timestamps: Option<bool>,
    /// The daemon's UDP sync socket: (t4 from the kernel, stamped in
    /// userspace instead), from its log; None when it logged none.
    pub daemon_rx_stamps: Option<(u64, u64)>,
}

/// (kernel, fallbacks) from the last "receive timestamps" summary line of a
/// log (`kernel=N missing=N after_now=N before_anchor=N clocks_moved=N`).
pub fn rx_stamp_counts(log: &str) -> Option<(u64, u64)> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("receive timestamps (kernel used"))?;
    let field = |name: &str| -> Option<u64> {
        let at = line.find(&format!("{name}="))? + name.len() + 1;
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let fallbacks = ["missing", "after_now", "before_anchor", "clocks_moved"]
        .iter()
        .map(|f| field(f).unwrap_or(0))
        .sum();
    Some((field("kernel")?, fallbacks))
}

/// Whether this machine can run it: root, `ip netns`, `unshare --time`.
pub fn available() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root (ip netns, unshare --time)".into());
    }
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`ip netns` does not work here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // Listing may work where creating does not (an unprivileged container).
    let probe = format!("tsr{}-probe", std::process::id());
    let made = ip(&["netns", "add", &probe]);
    let _ = ip(&["netns", "del", &probe]);
    made.map_err(|e| format!("cannot create a network namespace: {e}"))?;
    crate::live::time_namespaces()
}

fn run_cmd(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run_cmd(Command::new("ip").args(args))
}

/// The run's namespaces; deleted on drop (their veths go with them).
pub struct Net {
    pub host: String,
    /// None: no proxy (direct wiring).
    pub proxy: Option<String>,
    /// Each relay's namespace (the host's for [`Wiring::Loopback`]).
    pub relays: Vec<String>,
    /// Where the daemon listens and where each relay connects to.
    pub daemon_ip: &'static str,
    pub relay_targets: Vec<String>,
}

impl Net {
    pub fn create(relays: usize, wiring: Wiring) -> Result<Net, String> {
        static RUN: AtomicU64 = AtomicU64::new(0);
        let prefix = format!(
            "tsr{}-{}",
            std::process::id(),
            RUN.fetch_add(1, Ordering::Relaxed)
        );
        let host = format!("{prefix}-h");
        let own: Vec<String> = (1..=relays).map(|i| format!("{prefix}-r{i}")).collect();
        let net = match wiring {
            Wiring::Loopback => Net {
                relays: vec![host.clone(); relays],
                host,
                proxy: None,
                daemon_ip: "127.0.0.1",
                relay_targets: vec!["127.0.0.1".to_owned(); relays],
            },
            Wiring::Veth => Net {
                host,
                proxy: None,
                relays: own,
                daemon_ip: "0.0.0.0",
                relay_targets: (0..relays).map(relay_side_proxy_ip).collect(),
            },
            Wiring::Proxy(_) => Net {
                host,
                proxy: Some(format!("{prefix}-x")),
                relays: own,
                daemon_ip: DAEMON_IP,
                relay_targets: (0..relays).map(relay_side_proxy_ip).collect(),
            },
        };
        for ns in net.all() {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        match (&net.proxy, wiring) {
            (Some(proxy), _) => {
                net.link(proxy, "xh", PROXY_UPSTREAM_IP, &net.host, "hx", DAEMON_IP)?;
                for (i, r) in net.relays.iter().enumerate() {
                    let (x, rr) = (relay_side_proxy_ip(i), relay_ip(i));
                    net.link(proxy, &format!("xr{i}"), &x, r, "rx", &rr)?;
                }
            }
            (None, Wiring::Veth) => {
                // The daemon's side takes the address the proxy has in the
                // proxied wiring: relays connect to it directly.
                for (i, r) in net.relays.iter().enumerate() {
                    let (h, rr) = (relay_side_proxy_ip(i), relay_ip(i));
                    net.link(&net.host, &format!("hr{i}"), &h, r, "rh", &rr)?;
                }
            }
            (None, _) => {}
        }
        Ok(net)
    }

    /// Every namespace of the run, once each.
    fn all(&self) -> Vec<&String> {
        let mut v = vec![&self.host];
        v.extend(self.proxy.iter());
        for r in &self.relays {
            if !v.contains(&r) {
                v.push(r);
            }
        }
        v
    }

    fn link(
        &self,
        a: &str,
        a_if: &str,
        a_ip: &str,
        b: &str,
        b_if: &str,
        b_ip: &str,
    ) -> Result<(), String> {
        ip(&[
            "link", "add", "name", a_if, "netns", a, "type", "veth", "peer", "name", b_if, "netns",
            b,
        ])?;
        for (ns, dev, addr) in [(a, a_if, a_ip), (b, b_if, b_ip)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.all() {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn relay_side_proxy_ip(i: usize) -> String {
    format!("10.201.{}.1", i + 1)
}

fn relay_ip(i: usize) -> String {
    format!("10.201.{}.2", i + 1)
}

/// A child process, killed on drop, its output in a log file.
struct Proc {
    child: Option<Child>,
    what: String,
    log: PathBuf,
}

impl Proc {
    fn spawn(mut cmd: Command, what: &str, log: PathBuf) -> Result<Proc, String> {
        let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("spawn {what}: {e}"))?;
        Ok(Proc {
            child: Some(child),
            what: what.into(),
            log,
        })
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// SIGTERM, then wait up to 30 s (SIGKILL after that).
    fn stop(&mut self) -> Result<ExitStatus, String> {
        let Some(mut child) = self.child.take() else {
            return Err(format!("{} already stopped", self.what));
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{} did not stop within 30 s", self.what));
                }
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn in_netns(ns: &str, program: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

fn have_chrt() -> bool {
    Command::new("chrt")
        .args(["--fifo", "10", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn control(path: &Path, request: &str) -> Result<UnixStream, String> {
    let mut s =
        UnixStream::connect(path).map_err(|e| format!("connect {}: {e}", path.display()))?;
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    Ok(s)
}

fn status(path: &Path) -> Result<serde_json::Value, String> {
    let s = control(path, "{\"cmd\":\"status\"}\n")?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&line).map_err(|e| format!("status {line:?}: {e}"))
}

/// What the tail told about one relay event: (daemon's ts, err_ns).
#[derive(Default)]
struct TailLog {
    /// (machine name, relay clock ts) -> (ts, err_ns)
    events: HashMap<(String, u64), (i64, u64)>,
    raw_ids: BTreeMap<String, u64>,
    lagged: u64,
}

fn start_tail(path: &Path) -> Result<(Arc<Mutex<TailLog>>, std::thread::JoinHandle<()>), String> {
    let s = control(path, "{\"cmd\":\"tail\",\"format\":\"jsonl\"}\n")?;
    let log = Arc::new(Mutex::new(TailLog::default()));
    let l = Arc::clone(&log);
    let thread = std::thread::spawn(move || {
        for line in BufReader::new(s).lines() {
            let Ok(line) = line else { break };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let Ok(mut log) = l.lock() else { break };
            if let Some(n) = v["lagged"].as_u64() {
                log.lagged += n;
                continue;
            }
            let (Some(name), Some(raw_id)) = (v["machine"].as_str(), v["raw_id"].as_u64()) else {
                continue;
            };
            if raw_id == 0 || v["kind"] != "track_event" {
                continue;
            }
            let (Some(ts), Some(clock_ts), Some(err)) = (
                v["ts"].as_i64(),
                v["clock_ts"].as_u64(),
                v["err_ns"].as_u64(),
            ) else {
                continue;
            };
            if !log.raw_ids.contains_key(name) {
                log.raw_ids.insert(name.to_owned(), raw_id);
            }
            log.events.insert((name.to_owned(), clock_ts), (ts, err));
        }
    });
    Ok((log, thread))
}

/// One raw probe exchange from a `.sync.jsonl` sidecar.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub t1: u64,
    pub t2: u64,
    pub t3: u64,
    pub t4: u64,
}

impl Sample {
    /// Relay minus host, assuming a symmetric path (ns).
    pub fn offset(&self) -> i64 {
        ((self.t2 as i128 - self.t1 as i128 + self.t3 as i128 - self.t4 as i128) / 2) as i64
    }
}

/// Probe samples by machine raw id, sorted by t4.
pub fn read_samples(dir: &Path) -> BTreeMap<u64, Vec<Sample>> {
    let mut out: BTreeMap<u64, Vec<Sample>> = BTreeMap::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.to_string_lossy().ends_with(".sync.jsonl"));
    for f in files {
        for line in std::fs::read_to_string(&f).unwrap_or_default().lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let get = |k: &str| v[k].as_u64();
            if let (Some(id), Some(t1), Some(t2), Some(t3), Some(t4)) = (
                get("machine_raw_id"),
                get("t1"),
                get("t2"),
                get("t3"),
                get("t4"),
            ) {
                out.entry(id).or_default().push(Sample { t1, t2, t3, t4 });
            }
        }
    }
    for v in out.values_mut() {
        v.sort_by_key(|s| s.t4);
    }
    out
}

/// The two baselines' offsets at host time `t` (causal: samples received
/// by then). None before the first sample.
pub struct Baselines<'a> {
    samples: &'a [Sample],
}

impl<'a> Baselines<'a> {
    pub fn new(samples: &'a [Sample]) -> Self {
        Self { samples }
    }

    fn received_by(&self, t: u64) -> usize {
        self.samples.partition_point(|s| s.t4 <= t)
    }

    /// Offset of the latest sample received by `t`.
    pub fn naive(&self, t: u64) -> Option<i64> {
        let k = self.received_by(t);
        (k > 0).then(|| self.samples[k - 1].offset())
    }

    /// Perfetto-style: rounds of 30 s from the first sample; in round r the
    /// mean offset of round r-1's samples (in round 0, of those so far).
    pub fn perfetto(&self, t: u64) -> Option<i64> {
        let first = self.samples.first()?.t4;
        if t < first {
            return None;
        }
        let round = (t - first) / PERFETTO_ROUND_NS;
        let (from, to) = if round == 0 {
            (first, t)
        } else {
            (
                first + (round - 1) * PERFETTO_ROUND_NS,
                first + round * PERFETTO_ROUND_NS - 1,
            )
        };
        let used: Vec<i64> = self
            .samples
            .iter()
            .filter(|s| s.t4 >= from && s.t4 <= to)
            .map(Sample::offset)
            .collect();
        if used.is_empty() {
            return self.naive(t);
        }
        Some((used.iter().map(|&o| o as i128).sum::<i128>() / used.len() as i128) as i64)
    }
}

fn host_boottime_ns() -> u64 {
    crate::live::host_boottime_ns()
}

/// Runs one profile end to end. `Err` says what broke (with logs).
pub fn run(spec: &RunSpec) -> Result<RunResult, String> {
    available()?;
    let dir = tempfile::Builder::new()
        .prefix("tracesync-sync-real-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let root = dir.path().to_path_buf();
    let out_dir = root.join("out");
    std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
    let control_path = root.join("control.sock");
    let token = crate::live::random_token();
    let wiring = Wiring::of(&spec.profile).ok_or_else(|| {
        format!(
            "unknown profile {:?}; one of {:?}",
            spec.profile,
            Wiring::profile_names()
        )
    })?;
    let net = Net::create(spec.relays.len(), wiring)?;
    let rx_switch = spec.kernel_timestamps.map(|on| {
        (
            tracesync_protocol::probe::KERNEL_RX_TIMESTAMPS_ENV,
            if on { "on" } else { "off" },
        )
    });

    let mut daemon = {
        let mut c = in_netns(&net.host, &spec.bins.daemon);
        c.arg("--listen")
            .arg(format!("{}:{DATA_PORT}", net.daemon_ip))
            .arg("--sync-listen")
            .arg(format!("{}:{SYNC_PORT}", net.daemon_ip))
            .arg("--control")
            .arg(&control_path)
            .arg("--output")
            .arg(&out_dir)
            .arg("--token")
            .arg(&token)
            .args(["--tls", "off"])
            .current_dir(&root);
        c.envs(rx_switch);
        Proc::spawn(c, "tracesyncd", root.join("tracesyncd.log"))?
    };
    wait_for(
        "tracesyncd's control socket",
        Duration::from_secs(30),
        || {
            if let Some(s) = daemon.exited() {
                return Err(format!("tracesyncd exited: {s}\n{}", daemon.log_tail()));
            }
            Ok(status(&control_path).is_ok())
        },
    )?;

    let proxy_stats = root.join("impair-stats.json");
    let mut proxy = match (&net.proxy, wiring.proxy_profile()) {
        (Some(proxy_ns), Some(profile)) => {
            // Real-time priority (bounded by the kernel's RT throttling) keeps
            // the proxy's release thread from waiting behind other work on a
            // busy box; without `chrt` it runs at normal priority.
            let mut c = Command::new("ip");
            c.args(["netns", "exec", proxy_ns]);
            if spec.realtime_proxy && have_chrt() {
                c.args(["chrt", "--fifo", "10"]);
            }
            c.arg(&spec.bins.impair);
            c.arg("--profile")
                .arg(profile)
                .arg("--seed")
                .arg(spec.seed.to_string())
                .arg("--tcp")
                .arg(format!("0.0.0.0:{DATA_PORT}={DAEMON_IP}:{DATA_PORT}"))
                .arg("--udp")
                .arg(format!("0.0.0.0:{SYNC_PORT}={DAEMON_IP}:{SYNC_PORT}"))
                .arg("--stats")
                .arg(&proxy_stats);
            let mut proxy = Proc::spawn(c, "tracesync-impair", root.join("impair.log"))?;
            wait_for(
                "tracesync-impair's stats file",
                Duration::from_secs(30),
                || {
                    if let Some(s) = proxy.exited() {
                        return Err(format!(
                            "tracesync-impair exited: {s}\n{}",
                            proxy.log_tail()
                        ));
                    }
                    Ok(proxy_stats.exists())
                },
            )?;
            Some(proxy)
        }
        _ => None,
    };

    let (tail, tail_thread) = start_tail(&control_path)?;
    let start = host_boottime_ns();
    let mut relays = Vec::new();
    for (i, r) in spec.relays.iter().enumerate() {
        let spool = root.join(format!("spool-{}", r.name));
        std::fs::create_dir_all(&spool).map_err(|e| e.to_string())?;
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &net.relays[i], "unshare", "--time"])
            .arg("--boottime")
            .arg(r.timens_s.to_string())
            .arg("--monotonic")
            .arg(r.timens_s.to_string())
            .arg(&spec.bins.relay)
            .arg("--host")
            .arg(format!("{}:{DATA_PORT}", net.relay_targets[i]))
            .arg("--name")
            .arg(&r.name)
            .arg("--token")
            .arg(&token)
            .args(["--tls", "off"])
            .arg("--spool")
            .arg(&spool)
            .arg("--source")
            .arg(format!("synthetic:{}", r.rate))
            .current_dir(&root);
        c.envs(rx_switch);
        if let Some(d) = r.drift_ppm {
            c.arg("--clock-drift-ppm").arg(d.to_string());
        }
        c.args(&r.extra_args);
        let log = root.join(format!("relay-{}.log", r.name));
        relays.push(Proc::spawn(c, &format!("relay {}", r.name), log)?);
    }
    let end = Instant::now() + Duration::from_secs(spec.seconds);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(500));
        for r in relays.iter_mut() {
            if let Some(s) = r.exited() {
                return Err(format!("{} exited early: {s}\n{}", r.what, r.log_tail()));
            }
        }
    }
    let mut failures = Vec::new();
    for r in relays.iter_mut() {
        match r.stop() {
            Ok(s) if s.success() => {}
            Ok(s) => failures.push(format!("{} exit {s}\n{}", r.what, r.log_tail())),
            Err(e) => failures.push(format!("{e}\n{}", r.log_tail())),
        }
    }
    match daemon.stop() {
        Ok(s) if s.success() => {}
        Ok(s) => failures.push(format!("tracesyncd exit {s}\n{}", daemon.log_tail())),
        Err(e) => failures.push(format!("{e}\n{}", daemon.log_tail())),
    }
    if let Some(proxy) = proxy.as_mut() {
        let _ = proxy.stop();
    }
    let _ = tail_thread.join();
    if !failures.is_empty() {
        return Err(failures.join("\n"));
    }
    let proxy_json = std::fs::read_to_string(&proxy_stats)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);

    let tail = std::mem::take(&mut *tail.lock().map_err(|_| "tail log poisoned")?);
    let check = check_output(&out_dir);
    if !check.errors.is_empty() {
        return Err(format!("output: {}", check.summary()));
    }
    let samples = read_samples(&out_dir);
    let warm = start + spec.warmup_s * 1_000_000_000;
    let mut result = RunResult {
        profile: spec.profile.clone(),
        seed: spec.seed,
        seconds: spec.seconds,
        warmup_s: spec.warmup_s,
        proxy: proxy_json,
        tail_lagged: tail.lagged,
        proxied: proxy.is_some(),
        kernel_timestamps: spec.kernel_timestamps,
        daemon_rx_stamps: rx_stamp_counts(
            &std::fs::read_to_string(&daemon.log).unwrap_or_default(),
        ),
        ..RunResult::default()
    };
    for (i, r) in spec.relays.iter().enumerate() {
        let relay_log = relays.get(i).map(|p| p.log.clone());
        let machine = check.machine_named(&r.name);
        let source = check.source_of(&r.name, 1);
        let raw_id = tail.raw_ids.get(&r.name).copied();
        let no_samples = Vec::new();
        let relay_samples = raw_id
            .and_then(|id| samples.get(&id))
            .unwrap_or(&no_samples);
        let base = Baselines::new(relay_samples);
        let mut rr = RelayResult {
            name: r.name.clone(),
            timens_s: r.timens_s,
            drift_ppm: r.drift_ppm,
            extra_args: r.extra_args.clone(),
            events_total: source.map_or(0, |s| s.events),
            missing: source.map_or(0, |s| s.missing),
            duplicates: source.map_or(0, |s| s.duplicates),
            probe_samples: relay_samples.len(),
            relay_rx_stamps: relay_log
                .and_then(|l| rx_stamp_counts(&std::fs::read_to_string(l).unwrap_or_default())),
            ..RelayResult::default()
        };
        let (mut merged, mut live, mut naive, mut perfetto, mut bounds) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut signed_sum: i128 = 0;
        let events = check
            .files
            .iter()
            .flat_map(|f| f.events.iter())
            .filter(|e| Some(e.machine) == machine && !e.in_preamble);
        for e in events {
            let truth = e.id.truth_ns;
            if truth < warm {
                continue;
            }
            let err = e.ts_host - truth as i64;
            signed_sum += err as i128;
            merged.push(err.unsigned_abs());
            match tail.events.get(&(r.name.clone(), e.ts)) {
                Some(&(ts, bound)) => {
                    live.push((ts - truth as i64).unsigned_abs());
                    bounds.push(bound);
                    if err.unsigned_abs() <= bound {
                        rr.in_bound += 1;
                    }
                }
                None => rr.no_bound += 1,
            }
            let at = |o: Option<i64>| o.map(|o| (e.ts as i64 - o - truth as i64).unsigned_abs());
            if let Some(v) = at(base.naive(truth)) {
                naive.push(v);
            }
            if let Some(v) = at(base.perfetto(truth)) {
                perfetto.push(v);
            }
        }
        rr.measured = merged.len();
        rr.mean_signed_ns = if merged.is_empty() {
            0
        } else {
            (signed_sum / merged.len() as i128) as i64
        };
        rr.merged = ErrStats::of(merged);
        rr.live = ErrStats::of(live);
        rr.bound_p50_ns = ErrStats::of(bounds).p50;
        rr.naive = (!naive.is_empty()).then(|| ErrStats::of(naive));
        rr.perfetto = (!perfetto.is_empty()).then(|| ErrStats::of(perfetto));
        result.relays.push(rr);
    }
    drop(net);
    if spec.keep {
        result.dir = Some(dir.keep());
    }
    Ok(result)
}

fn wait_for(
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> Result<bool, String>,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ready()? {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("waited {timeout:?} for {what}"))
}

/// The markdown table of results (µs).
pub fn table(results: &[RunResult]) -> String {
    let mut s = String::from(
        "| profile | rx stamps | relay | events | merged p50 / p99 / max (µs) | live p99 (µs) | bias (µs) \
         | in bound | bound p50 (µs) | naive p50 / p99 / max (µs) | Perfetto-style p50 / p99 / max (µs) \
         | lost / dup | kernel-stamped t4 / t2 | proxy release late p50 / p99 / max (µs) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let late = &r.proxy["release_late_ns"];
        let late_cells = if r.proxied {
            let late = |k: &str| us(late[k].as_u64().unwrap_or(0));
            format!("{} / {} / {}", late("p50"), late("p99"), late("max"))
        } else {
            "no proxy".to_owned()
        };
        let stamps = match r.kernel_timestamps {
            Some(true) => "kernel",
            Some(false) => "user",
            None => "default",
        };
        let share = |c: Option<(u64, u64)>| match c {
            Some((k, f)) if k + f > 0 => format!("{:.0}%", 100.0 * k as f64 / (k + f) as f64),
            _ => "-".to_owned(),
        };
        for x in &r.relays {
            let mut relay = match x.drift_ppm {
                Some(d) => format!("{} (+{} s, {d} ppm", x.name, x.timens_s),
                None => format!("{} (+{} s", x.name, x.timens_s),
            };
            if !x.extra_args.is_empty() {
                relay.push_str(&format!(", {}", x.extra_args.join(" ")));
            }
            relay.push(')');
            let base = |b: &Option<ErrStats>| b.map_or_else(|| "n/a".into(), |b| b.cells());
            s.push_str(&format!(
                "| {} | {stamps} | {relay} | {} | {} | {} | {:.1} | {:.2}%{} | {} | {} | {} | {} / {} | {} / {} | {late_cells} |\n",
                r.profile,
                x.measured,
                x.merged.cells(),
                us(x.live.p99),
                x.mean_signed_ns as f64 / 1e3,
                x.coverage() * 100.0,
                if x.no_bound > 0 {
                    format!(" ({} unknown)", x.no_bound)
                } else {
                    String::new()
                },
                us(x.bound_p50_ns),
                base(&x.naive),
                base(&x.perfetto),
                x.missing,
                x.duplicates,
                share(r.daemon_rx_stamps),
                share(x.relay_rx_stamps),
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t1: u64, t2: u64, t3: u64, t4: u64) -> Sample {
        Sample { t1, t2, t3, t4 }
    }

    #[test]
    fn baselines_are_causal() {
        // Relay is 1000 ahead; symmetric 10 each way.
        let samples = vec![
            s(100, 1110, 1111, 121),
            s(200, 1210, 1211, 221),
            s(
                PERFETTO_ROUND_NS + 200,
                PERFETTO_ROUND_NS + 1250,
                PERFETTO_ROUND_NS + 1251,
                PERFETTO_ROUND_NS + 221,
            ),
        ];
        let b = Baselines::new(&samples);
        assert_eq!(b.naive(50), None);
        assert_eq!(b.naive(121), Some(1000));
        assert_eq!(b.perfetto(150), Some(1000));
        let last = PERFETTO_ROUND_NS + 300;
        assert_eq!(b.naive(last), Some(1040));
        // Round 1 uses round 0's mean (1000), not the newer sample.
        assert_eq!(b.perfetto(last), Some(1000));
    }
}
