//! The real-socket accuracy run (docs/clock-sync-accuracy.md): `tracesyncd`
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
//!   impairment (its own forwarding only). A TCP-only profile (`usb`, the
//!   `adb reverse` of a phone) forwards the sync port as TCP and no UDP:
//!   the relays' probes must fall back to their TCP transport.
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use super::baselines::{Baselines, Sample, read_samples};

pub use super::netns::available;
use super::netns::{Net, Proc, TailLog, have_chrt, in_netns, start_tail, status};
use super::sched::quantile;
use crate::live::output::{Event, OutputCheck, check_output};

mod results;
mod spec;
mod table;

use super::wiring::DAEMON_IP;
pub use super::wiring::Wiring;
pub use results::{ErrStats, RelayResult, RunResult, rx_stamp_counts};
pub use spec::{Bins, RelaySpec, RunSpec};
pub use table::table;

const DATA_PORT: u16 = 7400;
const SYNC_PORT: u16 = 7401;

pub(crate) fn us(ns: u64) -> String {
    if ns >= 100_000 {
        format!("{:.0}", ns as f64 / 1e3)
    } else {
        format!("{:.1}", ns as f64 / 1e3)
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
    let launch = Launch {
        spec,
        root: &root,
        net: &net,
        control_path: &control_path,
        token: &token,
        rx_switch: spec.kernel_timestamps.map(|on| {
            (
                tracesync_common::rx_stamp::KERNEL_RX_TIMESTAMPS_ENV,
                if on { "on" } else { "off" },
            )
        }),
    };

    let mut daemon = launch.daemon(&out_dir)?;
    let proxy_stats = root.join("impair-stats.json");
    let mut proxy = launch.proxy(wiring, &proxy_stats)?;
    let (tail, tail_thread) = start_tail(&control_path)?;
    let start = host_boottime_ns();
    let mut relays = launch.relays()?;
    watch_relays(&mut relays, Duration::from_secs(spec.seconds))?;
    let routes = probe_routes(&control_path);
    stop_all(&mut relays, &mut daemon, proxy.as_mut(), tail_thread)?;
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
    let measure = Measure {
        spec,
        root: &root,
        check: &check,
        tail: &tail,
        samples: &samples,
        start,
        warm,
    };
    for (i, r) in spec.relays.iter().enumerate() {
        let relay_log = relays.get(i).map(|p| p.log.clone());
        let mut relay = measure.relay(r, relay_log)?;
        relay.probe_route = routes.get(&r.name).cloned();
        result.relays.push(relay);
    }
    super::refined::measure(
        &spec.bins.cli,
        &out_dir,
        &root.join("refined"),
        warm,
        spec.keep.then_some((root.as_path(), start)),
        &mut result.relays,
    )?;
    drop(net);
    if spec.keep {
        result.dir = Some(dir.keep());
    }
    Ok(result)
}

/// What starting the run's processes takes: where they run and what they
/// are told.
struct Launch<'a> {
    spec: &'a RunSpec,
    root: &'a Path,
    net: &'a Net,
    control_path: &'a Path,
    token: &'a str,
    /// The kernel receive timestamps switch, when the spec sets it.
    rx_switch: Option<(&'static str, &'static str)>,
}

impl Launch<'_> {
    /// `tracesyncd` in H, once its control socket answers.
    fn daemon(&self, out_dir: &Path) -> Result<Proc, String> {
        let (spec, net) = (self.spec, self.net);
        let mut daemon = {
            let mut c = in_netns(&net.host, &spec.bins.daemon);
            c.arg("--listen")
                .arg(format!("{}:{DATA_PORT}", net.daemon_ip))
                .arg("--sync-listen")
                .arg(format!("{}:{SYNC_PORT}", net.daemon_ip))
                .arg("--control")
                .arg(self.control_path)
                .arg("--output")
                .arg(out_dir)
                .arg("--token")
                .arg(self.token)
                .args(["--tls", "off"])
                .current_dir(self.root);
            if let Some(config) = &spec.daemon_config {
                c.arg("--config").arg(config);
            }
            c.envs(self.rx_switch);
            Proc::spawn(c, "tracesyncd", self.root.join("tracesyncd.log"))?
        };
        wait_for(
            "tracesyncd's control socket",
            Duration::from_secs(30),
            || {
                if let Some(s) = daemon.exited() {
                    return Err(format!("tracesyncd exited: {s}\n{}", daemon.log_tail()));
                }
                Ok(status(self.control_path).is_ok())
            },
        )?;
        Ok(daemon)
    }

    /// `tracesync-impair` in X when the wiring has one, once it wrote its
    /// stats file.
    fn proxy(&self, wiring: Wiring, proxy_stats: &Path) -> Result<Option<Proc>, String> {
        let (Some(proxy_ns), Some(profile)) = (&self.net.proxy, wiring.proxy_profile()) else {
            return Ok(None);
        };
        // Real-time priority (bounded by the kernel's RT throttling) keeps
        // the proxy's release thread from waiting behind other work on a
        // busy box; without `chrt` it runs at normal priority.
        let mut c = Command::new("ip");
        c.args(["netns", "exec", proxy_ns]);
        if self.spec.realtime_proxy && have_chrt() {
            c.args(["chrt", "--fifo", "10"]);
        }
        c.arg(&self.spec.bins.impair);
        // A TCP-only link (adb's) forwards the sync port as TCP and no UDP
        // at all: the relays' UDP probes go nowhere, as through `adb
        // reverse`, and they must fall back to their TCP transport.
        let sync_forward = if wiring.tcp_only() { "--tcp" } else { "--udp" };
        c.arg("--profile")
            .arg(profile)
            .arg("--seed")
            .arg(self.spec.seed.to_string())
            .arg("--tcp")
            .arg(format!("0.0.0.0:{DATA_PORT}={DAEMON_IP}:{DATA_PORT}"))
            .arg(sync_forward)
            .arg(format!("0.0.0.0:{SYNC_PORT}={DAEMON_IP}:{SYNC_PORT}"))
            .arg("--stats")
            .arg(proxy_stats);
        let mut proxy = Proc::spawn(c, "tracesync-impair", self.root.join("impair.log"))?;
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
        Ok(Some(proxy))
    }

    /// Every relay, each in its namespace and its time namespace.
    fn relays(&self) -> Result<Vec<Proc>, String> {
        let (spec, net) = (self.spec, self.net);
        let mut relays = Vec::new();
        for (i, r) in spec.relays.iter().enumerate() {
            let spool = self.root.join(format!("spool-{}", r.name));
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
                .arg(self.token)
                .args(["--tls", "off"])
                .arg("--spool")
                .arg(&spool)
                .arg("--source")
                .arg(format!("synthetic:{}", r.rate))
                .current_dir(self.root);
            c.envs(self.rx_switch);
            if let Some(d) = r.drift_ppm {
                c.arg("--clock-drift-ppm").arg(d.to_string());
            }
            c.args(&r.extra_args);
            let log = self.root.join(format!("relay-{}.log", r.name));
            relays.push(Proc::spawn(c, &format!("relay {}", r.name), log)?);
        }
        Ok(relays)
    }
}

/// The route each machine's probes take at the end of the run (`udp`,
/// `tcp`), by name, from the daemon's status; empty if it does not answer.
fn probe_routes(control: &Path) -> BTreeMap<String, String> {
    let Ok(report) = status(control) else {
        return BTreeMap::new();
    };
    report["machines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let name = m["name"].as_str()?;
            let route = m["sync"]["route"].as_str()?;
            Some((name.to_owned(), route.to_owned()))
        })
        .collect()
}

/// Lets the relays run for `run_for`; none may exit meanwhile.
fn watch_relays(relays: &mut [Proc], run_for: Duration) -> Result<(), String> {
    let end = Instant::now() + run_for;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(500));
        for r in relays.iter_mut() {
            if let Some(s) = r.exited() {
                return Err(format!("{} exited early: {s}\n{}", r.what, r.log_tail()));
            }
        }
    }
    Ok(())
}

/// Stops the relays, then the daemon (each must exit 0), then the proxy,
/// and waits for the tail to end.
fn stop_all(
    relays: &mut [Proc],
    daemon: &mut Proc,
    proxy: Option<&mut Proc>,
    tail_thread: std::thread::JoinHandle<()>,
) -> Result<(), String> {
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
    if let Some(proxy) = proxy {
        let _ = proxy.stop();
    }
    let _ = tail_thread.join();
    if !failures.is_empty() {
        return Err(failures.join("\n"));
    }
    Ok(())
}

/// What measuring a relay's events takes: the output as checked, the
/// daemon's tail, the probe samples, the run's start and warm-up end (host
/// BOOTTIME, ns).
struct Measure<'a> {
    spec: &'a RunSpec,
    root: &'a Path,
    check: &'a OutputCheck,
    tail: &'a TailLog,
    samples: &'a BTreeMap<u64, Vec<Sample>>,
    start: u64,
    warm: u64,
}

impl Measure<'_> {
    /// Relay `r`'s figures over its events after the warm-up.
    fn relay(&self, r: &RelaySpec, relay_log: Option<PathBuf>) -> Result<RelayResult, String> {
        let machine = self.check.machine_named(&r.name);
        let source = self.check.source_of(&r.name, 1);
        let raw_id = self.tail.raw_ids.get(&r.name).copied();
        let no_samples = Vec::new();
        let relay_samples = raw_id
            .and_then(|id| self.samples.get(&id))
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
        let mut errors = Errors::default();
        let events = self
            .check
            .files
            .iter()
            .flat_map(|f| f.events.iter())
            .filter(|e| Some(e.machine) == machine && !e.in_preamble);
        for e in events {
            if e.id.truth_ns >= self.warm {
                self.add(&mut errors, &mut rr, &r.name, e, &base);
            }
        }
        if self.spec.keep {
            let path = self.root.join(format!("errors-{}.tsv", r.name));
            let header = "seconds\tmerged_err_ns\tlive_err_ns\tlive_bound_ns\n";
            std::fs::write(&path, format!("{header}{}", errors.series))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        errors.summarize(&mut rr);
        Ok(rr)
    }

    /// One event of relay `name`: its merged error, the daemon's own
    /// mapping and bound (if the tail saw it), and the baselines' errors.
    fn add(
        &self,
        errors: &mut Errors,
        rr: &mut RelayResult,
        name: &str,
        e: &Event,
        base: &Baselines<'_>,
    ) {
        let truth = e.id.truth_ns;
        let err = e.ts_host - truth as i64;
        errors.signed_sum += err as i128;
        errors.merged.push(err.unsigned_abs());
        let live_event = self.tail.events.get(&(name.to_owned(), e.ts));
        if self.spec.keep {
            let (live_err, bound) = live_event
                .map_or((String::new(), String::new()), |&(ts, bound)| {
                    ((ts - truth as i64).to_string(), bound.to_string())
                });
            let since_start = truth.saturating_sub(self.start) as f64 * 1e-9;
            errors
                .series
                .push_str(&format!("{since_start:.3}\t{err}\t{live_err}\t{bound}\n"));
        }
        match live_event {
            Some(&(ts, bound)) => {
                errors.live.push((ts - truth as i64).unsigned_abs());
                errors.bounds.push(bound);
                if err.unsigned_abs() <= bound {
                    rr.in_bound += 1;
                }
            }
            None => rr.no_bound += 1,
        }
        let at = |o: Option<i64>| o.map(|o| (e.ts as i64 - o - truth as i64).unsigned_abs());
        if let Some(v) = at(base.naive(truth)) {
            errors.naive.push(v);
        }
        if let Some(v) = at(base.perfetto(truth)) {
            errors.perfetto.push(v);
        }
    }
}

/// One relay's errors (ns), event by event.
#[derive(Default)]
struct Errors {
    merged: Vec<u64>,
    live: Vec<u64>,
    bounds: Vec<u64>,
    naive: Vec<u64>,
    perfetto: Vec<u64>,
    signed_sum: i128,
    /// With --keep, every measured event's errors over time, to see
    /// when a p99 was made (a short excursion or a steady bias).
    series: String,
}

impl Errors {
    fn summarize(self, rr: &mut RelayResult) {
        rr.measured = self.merged.len();
        rr.mean_signed_ns = if self.merged.is_empty() {
            0
        } else {
            (self.signed_sum / self.merged.len() as i128) as i64
        };
        rr.merged = ErrStats::of(self.merged);
        rr.live = ErrStats::of(self.live);
        rr.bound_p50_ns = ErrStats::of(self.bounds).p50;
        rr.naive = (!self.naive.is_empty()).then(|| ErrStats::of(self.naive));
        rr.perfetto = (!self.perfetto.is_empty()).then(|| ErrStats::of(self.perfetto));
    }
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
