//! A daemon and N synthetic relays (optionally each behind its own
//! [`Forwarder`]) driven through faults, then stopped and checked: every
//! relay must stop with everything acknowledged, and the output must hold
//! every synthetic counter exactly once.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Counts, Forwarder, Row, Tally, freeze, thaw};
use crate::live::lab_pki::TwoCaPki;
use crate::live::{
    Daemon, DaemonOpts, OutputCheck, Relay, RelayOpts, RelayTls, check_output, judge, process,
};
use crate::tp;

/// How long a relay may take to be seen flowing again after a fault (its
/// reconnect backoff is capped at 10 s).
pub const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Options of [`Cluster::start`].
#[derive(Clone, Debug, Default)]
pub struct ClusterOpts {
    pub name_prefix: String,
    pub relays: usize,
    /// Synthetic events per second per relay.
    pub rate: u64,
    pub daemon: DaemonOpts,
    /// Where the test reads the output (the daemon's dir seen from the
    /// test's mount namespace); None: the daemon's own path.
    pub output_view: Option<PathBuf>,
    /// Each relay connects through its own [`Forwarder`].
    pub forwarders: bool,
    /// The first relay runs in a time namespace shifted by this many
    /// seconds (when time namespaces work here).
    pub time_namespace_s: Option<i64>,
    /// Extra flags of every relay.
    pub relay_args: Vec<String>,
    /// Mutual TLS, as shipped (a lab CA; a certificate per relay); else
    /// plaintext with the daemon's token.
    pub tls: bool,
}

/// See the module docs.
pub struct Cluster {
    pub daemon: Daemon,
    pub relays: Vec<Relay>,
    pub forwarders: Vec<Option<Forwarder>>,
    pub names: Vec<String>,
    pub tally: Tally,
    pub opts: ClusterOpts,
    /// The lab CA when [`ClusterOpts::tls`].
    pub pki: Option<TwoCaPki>,
    stuck_tail: Option<UnixStream>,
    started: Instant,
}

impl Cluster {
    pub fn start(opts: ClusterOpts) -> Cluster {
        let pki = opts.tls.then(TwoCaPki::new);
        let daemon = Daemon::start(DaemonOpts {
            max_relays: Some(opts.daemon.max_relays.unwrap_or(128)),
            tls: pki.as_ref().map(TwoCaPki::daemon),
            ..opts.daemon.clone()
        });
        let names: Vec<String> = (0..opts.relays)
            .map(|i| format!("{}-{i:02}", opts.name_prefix))
            .collect();
        let tns = opts
            .time_namespace_s
            .filter(|_| crate::live::time_namespaces().is_ok());
        let mut relays = Vec::new();
        let mut forwarders = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let mut ro = RelayOpts {
                // Distinct offsets and one drifting relay, as machines are.
                clock_offset_ns: Some(
                    (i as i64 + 1) * 1_000_000_007 * if i % 2 == 0 { 1 } else { -1 },
                ),
                clock_drift_ppm: (i == 1).then_some(20.0),
                extra_args: opts.relay_args.clone(),
                tls: pki.as_ref().map(|pki| relay_tls(pki, name)),
                ..RelayOpts::synthetic(name, opts.rate)
            };
            if i == 0
                && let Some(s) = tns
            {
                ro = ro.in_time_namespace(s);
            }
            let fwd = opts
                .forwarders
                .then(|| Forwarder::start(daemon.data_addr).expect("start forwarder"));
            let host = fwd.as_ref().map_or(daemon.data_addr, |f| f.addr);
            relays.push(Relay::start_to(host, &daemon.token, ro));
            forwarders.push(fwd);
        }
        Cluster {
            daemon,
            relays,
            forwarders,
            names,
            tally: Tally::default(),
            opts,
            pki,
            stuck_tail: None,
            started: Instant::now(),
        }
    }

    pub fn name_refs(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// Waits until every relay is connected; returns how long it took.
    pub fn wait_connected(&self) -> Duration {
        let t = Instant::now();
        self.daemon
            .wait_connected(&self.name_refs(), RECOVERY_TIMEOUT);
        t.elapsed()
    }

    /// Waits until the daemon has taken `more` packets from every relay
    /// past what it reported when called.
    pub fn wait_progress(&self, more: u64) {
        // From a status read, not a failed one: a baseline of 0 would let
        // counts the daemon recovered pass for progress.
        let status = self
            .daemon
            .wait_status("a status", RECOVERY_TIMEOUT, |_| true);
        let start: Vec<u64> = self.names.iter().map(|n| packets_of(&status, n)).collect();
        self.daemon.wait_status(
            &format!("{more} more packets from each relay"),
            RECOVERY_TIMEOUT,
            |s| {
                self.names
                    .iter()
                    .zip(&start)
                    .all(|(n, &from)| packets_of(s, n) >= from + more)
            },
        );
    }

    /// Opens a tail subscriber that never reads (reopened after every
    /// daemon restart until the end).
    pub fn hold_stuck_tail(&mut self) {
        self.stuck_tail = Some(self.daemon.stuck_tail());
        self.tally.add("stuck-tail-subscriber");
    }

    /// kill -9 of the daemon; restarted after `down`.
    pub fn kill9_daemon(&mut self, down: Duration) {
        self.daemon.kill9();
        self.tally.add("kill9-daemon");
        std::thread::sleep(down);
        self.daemon.restart();
        if self.stuck_tail.take().is_some() {
            self.hold_stuck_tail();
        }
    }

    /// kill -9 of relay `i`; restarted on its spool after `down`.
    pub fn kill9_relay(&mut self, i: usize, down: Duration) {
        self.relays[i].kill9();
        self.tally.add("kill9-relay");
        std::thread::sleep(down);
        self.relays[i].restart();
    }

    /// SIGSTOP of the daemon for `d`, then SIGCONT.
    pub fn freeze_daemon(&mut self, d: Duration) {
        let pid = self.daemon.pid().expect("daemon running");
        freeze(pid);
        self.tally.add("sigstop-daemon");
        std::thread::sleep(d);
        thaw(pid);
    }

    /// SIGSTOP of relay `i` for `d`, then SIGCONT.
    pub fn freeze_relay(&mut self, i: usize, d: Duration) {
        let pid = self.relays[i].pid().expect("relay running");
        freeze(pid);
        self.tally.add("sigstop-relay");
        std::thread::sleep(d);
        thaw(pid);
    }

    /// Relay `i`'s link goes silent for `d` (no bytes either way), then
    /// heals. Needs `forwarders`.
    pub fn partition(&mut self, i: usize, d: Duration) {
        let f = self.forwarders[i]
            .as_ref()
            .expect("relay behind a forwarder");
        f.partition();
        self.tally.add("partition");
        std::thread::sleep(d);
        f.heal();
    }

    /// Relay `i`'s connections are reset. Needs `forwarders`.
    pub fn cut(&mut self, i: usize) {
        let f = self.forwarders[i]
            .as_ref()
            .expect("relay behind a forwarder");
        f.cut();
        self.tally.add("connection-reset");
    }

    /// Relay `i`'s clock steps by `step_ns`: it is stopped and started
    /// again on its spool (same boot id) with its simulated clock offset
    /// moved, so every clock it reports jumps at once.
    pub fn step_clock(&mut self, i: usize, step_ns: i64) {
        let r = &mut self.relays[i];
        let status = r.stop();
        assert!(
            status.success(),
            "relay {} exit: {status}; its log:\n{}",
            r.name(),
            tail_of(&r.log(), 40)
        );
        r.opts.clock_offset_ns = Some(r.opts.clock_offset_ns.unwrap_or(0) + step_ns);
        r.restart();
        self.tally.add("clock-step");
    }

    /// Stops every relay (each must have everything acknowledged), then
    /// the daemon; checks the output by identity and, when it is here,
    /// with the trace processor. Returns the row and the check.
    pub fn finish(self, scenario: &str, seed: u64, judge_files: bool) -> (Row, OutputCheck) {
        let names = self.names.clone();
        let (row, check) = self.stop_and_check(scenario, seed, judge_files);
        if row.counts.lost != 0 || row.counts.duplicated != 0 {
            eprintln!("{}", check.summary());
        }
        row.assert_clean();
        check.assert_complete();
        for n in &names {
            assert!(
                check.source_of(n, 1).is_some_and(|s| s.events > 0),
                "no events of {n}:\n{}",
                check.summary()
            );
        }
        (row, check)
    }

    /// [`finish`](Self::finish) up to the counts: every relay stops with
    /// everything acknowledged, the daemon stops cleanly, every file
    /// loads alone in the trace processor (with `judge_files`); what was
    /// lost or duplicated is left to the caller (a scenario that deletes
    /// acknowledged data on purpose judges it by itself).
    pub fn stop_and_check(
        mut self,
        scenario: &str,
        seed: u64,
        judge_files: bool,
    ) -> (Row, OutputCheck) {
        self.stuck_tail = None;
        // Every relay synced and flowing, so its last batches can be
        // written (and acknowledged) within its drain timeout.
        self.daemon.wait_synced(&self.name_refs(), RECOVERY_TIMEOUT);
        self.wait_progress(1);
        // SIGTERM to all first, so they drain at once, then wait for each.
        for r in &self.relays {
            if let Some(pid) = r.pid() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        for r in &mut self.relays {
            let status = r.stop();
            assert!(
                status.success(),
                "relay {} exit: {status}; its log:\n{}",
                r.name(),
                tail_of(&r.log(), 40)
            );
        }
        let secs = self.started.elapsed().as_secs_f64();
        for r in &self.relays {
            assert_acknowledged(r);
        }
        let status = self.daemon.stop();
        assert!(status.success(), "tracesyncd exit: {status}");
        let dir = self
            .opts
            .output_view
            .clone()
            .unwrap_or_else(|| self.daemon.output.clone());
        let check = check_output(&dir);
        let counts = Counts::of(&check);
        let mut row = Row {
            scenario: scenario.to_owned(),
            seed,
            relays: self.relays.len(),
            offered_per_s: self.opts.rate * self.relays.len() as u64,
            held_per_s: (counts.written as f64 / secs) as u64,
            secs,
            tally: self.tally.clone(),
            counts,
            files: check.files.len(),
            files_judged: None,
        };
        if std::env::var_os("TRACESYNC_FAULT_KEEP_ALL").is_some() {
            keep_output(&dir, scenario);
        }
        if judge_files && tp::require_or_skip(scenario) {
            match judge::judge_all(&check) {
                Ok(j) => row.files_judged = Some(j.len()),
                Err(e) => {
                    row.print();
                    keep_output(&dir, scenario);
                    panic!("{scenario}: the trace processor rejects files:\n{e}");
                }
            }
        }
        row.print();
        (row, check)
    }
}

/// The last `n` lines of `log`.
fn tail_of(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A certificate of the lab CA for relay `name`.
fn relay_tls(pki: &TwoCaPki, name: &str) -> RelayTls {
    let ca = pki.root().join("ca");
    tracesync_common::tls::pki::issue(&ca, name, None)
        .unwrap_or_else(|e| panic!("issue a certificate for {name}: {e}"));
    RelayTls {
        ca: ca.join("ca.crt"),
        cert: Some(ca.join(format!("{name}.crt"))),
        key: Some(ca.join(format!("{name}.key"))),
        server_name: None,
    }
}

/// Copies the output dir to `$TRACESYNC_FAULT_KEEP_DIR/<scenario>` when
/// that is set (to look at rejected files after the test; every run's
/// output with `TRACESYNC_FAULT_KEEP_ALL` set too).
fn keep_output(dir: &std::path::Path, scenario: &str) {
    let Some(keep) = std::env::var_os("TRACESYNC_FAULT_KEEP_DIR") else {
        return;
    };
    let to = PathBuf::from(keep).join(scenario);
    let _ = std::fs::create_dir_all(&to);
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let _ = std::fs::copy(entry.path(), to.join(entry.file_name()));
    }
    eprintln!("{scenario}: output kept in {}", to.display());
}

/// Packets the daemon reports for the machine named `name`.
pub fn packets_of(status: &serde_json::Value, name: &str) -> u64 {
    process::machine(status, name).map_or(0, |m| m["packets"].as_u64().unwrap_or(0))
}

/// The relay's last words say it stopped with every batch acknowledged
/// (its log is read by a thread: give it a moment).
fn assert_acknowledged(r: &Relay) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = r.log();
        let last_run = log.rsplit("---- restart ----").next().unwrap_or_default();
        if last_run.contains("everything acknowledged") {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "relay {} did not stop with everything acknowledged:\n{log}",
                r.name()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
