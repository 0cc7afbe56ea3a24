//! The real `tracesyncd` (here) and `tracesync-relay` (process/relay.rs) as
//! child processes.
//!
//! Every child is killed (SIGKILL) and reaped on drop, so a failing test
//! leaves no orphans. Their stderr is kept (last lines) for failure
//! messages, and echoed live when `TRACESYNC_LIVE_LOG` is set.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{bin, random_token};

mod relay;

pub use relay::{Relay, RelayOpts, RelayTls, TimeNamespace};

/// How long a daemon may take to print its startup line (a loaded 2-core
/// CI box can be slow to start processes).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long SIGTERM may take before the child is killed and the stop fails.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
const LOG_LINES: usize = 200;

/// The last lines a child wrote to stderr/stdout.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<VecDeque<String>>>);

impl Log {
    fn push(&self, line: String) {
        if let Ok(mut q) = self.0.lock() {
            if q.len() == LOG_LINES {
                q.pop_front();
            }
            q.push_back(line);
        }
    }

    fn text(&self) -> String {
        self.0
            .lock()
            .map(|q| q.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }
}

/// Reads `stream` line by line into `log` (and `lines`, if given) until EOF.
fn drain<R: Read + Send + 'static>(
    stream: R,
    label: String,
    log: Log,
    lines: Option<mpsc::Sender<String>>,
) {
    let echo = std::env::var_os("TRACESYNC_LIVE_LOG").is_some();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if echo {
                eprintln!("[{label}] {line}");
            }
            if let Some(tx) = &lines {
                let _ = tx.send(line.clone());
            }
            log.push(line);
        }
    });
}

fn signal(child: &Child, sig: Signal) {
    // The child may have exited already: nothing to signal then.
    let _ = kill(Pid::from_raw(child.id() as i32), sig);
}

/// SIGTERM, then wait up to [`STOP_TIMEOUT`]; SIGKILL after that.
fn terminate(mut child: Child, what: &str) -> Result<ExitStatus, String> {
    signal(&child, Signal::SIGTERM);
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{what} did not exit within {STOP_TIMEOUT:?} of SIGTERM"
                ));
            }
        }
    }
}

fn kill9(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// `TRACESYNC_TEST_INGEST_SHARDS=N`: every daemon a test starts runs with
/// `--ingest-shards N` unless its options name a count already, so a suite
/// (the fault suite, the hostile peers) runs at N shards unchanged.
pub const INGEST_SHARDS_ENV: &str = "TRACESYNC_TEST_INGEST_SHARDS";

fn env_ingest_shards() -> Option<String> {
    let v = std::env::var(INGEST_SHARDS_ENV).ok()?;
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_owned())
}

/// Options of [`Daemon::start`] (flags of `tracesyncd`; None = default).
#[derive(Clone, Debug, Default)]
pub struct DaemonOpts {
    pub merge_window_ms: Option<u64>,
    pub rotate_bytes: Option<u64>,
    pub rotate_seconds: Option<u64>,
    pub max_relays: Option<u64>,
    pub extra_args: Vec<String>,
    /// Write the output here instead of a new temporary dir (e.g. a small
    /// filesystem mounted by the test).
    pub output_dir: Option<PathBuf>,
    /// Run the daemon through this command (e.g. `nsenter -t PID -m --`);
    /// it must exec the daemon, so the child's pid stays the daemon's.
    pub command_prefix: Vec<String>,
    /// Mutual TLS files; None runs plaintext (`--tls off`, said explicitly).
    pub tls: Option<DaemonTls>,
    /// Listen on this address (data and sync, free ports) instead of
    /// 127.0.0.1: relays in a network namespace of the test's reach it
    /// over a veth.
    pub listen_ip: Option<std::net::IpAddr>,
}

/// `tracesyncd --tls-cert/--tls-key/--tls-client-ca`.
#[derive(Clone, Debug)]
pub struct DaemonTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// A running `tracesyncd` with its own temporary output dir and control
/// socket, on free loopback ports.
pub struct Daemon {
    dir: tempfile::TempDir,
    pub output: PathBuf,
    pub control: PathBuf,
    pub token: String,
    /// Relay data address (TCP) and sync address (UDP) actually bound.
    pub data_addr: SocketAddr,
    pub sync_addr: SocketAddr,
    opts: DaemonOpts,
    child: Option<Child>,
    log: Log,
}

impl Daemon {
    /// Starts `tracesyncd` on `127.0.0.1:0` (data and sync) and waits for
    /// its startup line. Panics with the daemon's output if it does not come.
    pub fn start(opts: DaemonOpts) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let output = opts
            .output_dir
            .clone()
            .unwrap_or_else(|| dir.path().join("out"));
        let control = dir.path().join("control.sock");
        std::fs::create_dir_all(&output).expect("create output dir");
        let ip = opts
            .listen_ip
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let unbound = SocketAddr::new(ip, 0);
        let mut d = Daemon {
            output,
            control,
            token: random_token(),
            data_addr: unbound,
            sync_addr: unbound,
            opts,
            child: None,
            log: Log::default(),
            dir,
        };
        d.spawn(unbound, unbound);
        d
    }

    fn spawn(&mut self, data: SocketAddr, sync: SocketAddr) {
        let mut cmd = match self.opts.command_prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin("tracesyncd"));
                c
            }
            None => Command::new(bin("tracesyncd")),
        };
        cmd.arg("--listen")
            .arg(data.to_string())
            .arg("--sync-listen")
            .arg(sync.to_string())
            .arg("--control")
            .arg(&self.control)
            .arg("--output")
            .arg(&self.output)
            .arg("--token")
            .arg(&self.token);
        let o = &self.opts;
        match &o.tls {
            None => {
                cmd.args(["--tls", "off"]);
            }
            Some(tls) => {
                cmd.arg("--tls-cert")
                    .arg(&tls.cert)
                    .arg("--tls-key")
                    .arg(&tls.key)
                    .arg("--tls-client-ca")
                    .arg(&tls.client_ca);
            }
        }
        for (flag, v) in [
            ("--merge-window-ms", o.merge_window_ms),
            ("--rotate-bytes", o.rotate_bytes),
            ("--rotate-seconds", o.rotate_seconds),
            ("--max-relays", o.max_relays),
        ] {
            if let Some(v) = v {
                cmd.arg(flag).arg(v.to_string());
            }
        }
        cmd.args(&o.extra_args);
        if let Some(shards) = env_ingest_shards()
            && !o.extra_args.iter().any(|a| a == "--ingest-shards")
        {
            cmd.arg("--ingest-shards").arg(shards);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .current_dir(self.dir.path());
        let mut child = cmd.spawn().expect("spawn tracesyncd");
        let (tx, rx) = mpsc::channel();
        // The startup line belongs on stderr; stdout is watched too so a
        // daemon that prints it there still starts.
        if let Some(out) = child.stdout.take() {
            drain(out, "tracesyncd".into(), self.log.clone(), Some(tx.clone()));
        }
        if let Some(err) = child.stderr.take() {
            drain(err, "tracesyncd".into(), self.log.clone(), Some(tx));
        }
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some((d, s)) = parse_startup_line(&line) {
                        self.data_addr = d;
                        self.sync_addr = s;
                        return;
                    }
                }
                Err(_) => panic!(
                    "tracesyncd printed no `tracesyncd: listening data=... sync=...` line \
                     within {STARTUP_TIMEOUT:?} (exited: {:?}); output:\n{}",
                    self.child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten()),
                    self.log.text()
                ),
            }
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM and wait: the daemon drains and commits everything received.
    pub fn stop(&mut self) -> ExitStatus {
        let child = self.child.take().expect("daemon is running");
        terminate(child, "tracesyncd")
            .unwrap_or_else(|e| panic!("{e}; output:\n{}", self.log.text()))
    }

    /// SIGKILL: no drain, no commit; a torn file is left for recovery.
    pub fn kill9(&mut self) {
        if let Some(c) = self.child.take() {
            kill9(c);
        }
    }

    /// Starts the daemon again on the same output dir, control socket,
    /// token and addresses (relays reconnect to the address they know).
    pub fn restart(&mut self) {
        assert!(
            self.child.is_none(),
            "restart: stop or kill the daemon first"
        );
        self.log.push("---- restart ----".into());
        let (data, sync) = (self.data_addr, self.sync_addr);
        self.spawn(data, sync);
    }

    /// The daemon's stderr/stdout (last lines).
    pub fn log(&self) -> String {
        self.log.text()
    }

    /// One `{"cmd":"status"}` request on the control socket: the
    /// StatusReport as JSON.
    pub fn status(&self) -> Result<serde_json::Value, String> {
        let mut s = self.control_request("{\"cmd\":\"status\"}\n")?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(&mut s)
            .read_line(&mut line)
            .map_err(|e| format!("status: reading {}: {e}", self.control.display()))?;
        serde_json::from_str(&line).map_err(|e| format!("status: bad JSON {line:?}: {e}"))
    }

    /// `tracesync status --connect <control> --json`.
    pub fn status_cli(&self) -> Result<serde_json::Value, String> {
        let out = Command::new(bin("tracesync"))
            .arg("status")
            .arg("--connect")
            .arg(&self.control)
            .arg("--json")
            .output()
            .map_err(|e| format!("run tracesync status: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "tracesync status failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| format!("tracesync status --json: {e}"))
    }

    /// Connects to the control socket and sends `request`.
    pub fn control_request(&self, request: &str) -> Result<UnixStream, String> {
        let mut s = UnixStream::connect(&self.control)
            .map_err(|e| format!("connect {}: {e}", self.control.display()))?;
        s.write_all(request.as_bytes())
            .map_err(|e| format!("write {}: {e}", self.control.display()))?;
        Ok(s)
    }

    /// A tail subscriber (jsonl) that never reads: keep it alive as long as
    /// it should stay stuck.
    pub fn stuck_tail(&self) -> UnixStream {
        let s = self
            .control_request("{\"cmd\":\"tail\",\"format\":\"jsonl\"}\n")
            .unwrap_or_else(|e| panic!("{e}"));
        // The smallest receive buffer, so the daemon's side fills quickly.
        let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &4096);
        s
    }

    /// Polls the status until `ready` holds, for at most `timeout`.
    pub fn wait_status(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        let mut last = Err(String::from("no status yet"));
        while Instant::now() < deadline {
            last = self.status();
            if let Ok(s) = &last
                && ready(s)
            {
                return s.clone();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "waited {timeout:?} for {what}; last status: {last:?}\ndaemon output:\n{}",
            self.log.text()
        );
    }

    /// Waits until the daemon has taken `more` packets from each machine in
    /// `names` past what it reported when called (so the next fault lands
    /// mid-stream and every relay is seen flowing again after the last one).
    pub fn wait_progress(&self, names: &[&str], more: u64) {
        let packets = |status: &serde_json::Value, name: &str| {
            machine(status, name).map_or(0, |m| m["packets"].as_u64().unwrap_or(0))
        };
        let status = self.status().unwrap_or_default();
        let start: Vec<u64> = names.iter().map(|n| packets(&status, n)).collect();
        self.wait_status(
            &format!("{more} more packets from each relay"),
            Duration::from_secs(30),
            |s| {
                names
                    .iter()
                    .zip(&start)
                    .all(|(n, &from)| packets(s, n) >= from + more)
            },
        );
    }

    /// Waits until every relay named in `names` is connected.
    pub fn wait_connected(&self, names: &[&str], timeout: Duration) -> serde_json::Value {
        self.wait_status(&format!("relays {names:?} connected"), timeout, |s| {
            names
                .iter()
                .all(|n| machine(s, n).is_some_and(|m| m["connected"] == true))
        })
    }

    /// Waits until every relay named in `names` has a sync estimate
    /// (`error_bound_ns` set).
    pub fn wait_synced(&self, names: &[&str], timeout: Duration) -> serde_json::Value {
        self.wait_status(&format!("relays {names:?} synced"), timeout, |s| {
            names
                .iter()
                .all(|n| machine(s, n).is_some_and(|m| m["error_bound_ns"].is_u64()))
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            kill9(c);
        }
        if std::thread::panicking() {
            eprintln!(
                "---- tracesyncd output (last lines) ----\n{}",
                self.log.text()
            );
        }
    }
}

/// `tracesyncd: listening data=ADDR sync=ADDR control=PATH output=DIR`
pub fn parse_startup_line(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let rest = line.split_once("listening")?.1;
    let mut data = None;
    let mut sync = None;
    for word in rest.split_whitespace() {
        if let Some(v) = word.strip_prefix("data=") {
            data = v.parse().ok();
        } else if let Some(v) = word.strip_prefix("sync=") {
            sync = v.parse().ok();
        }
    }
    Some((data?, sync?))
}

/// The status entry of the machine named `name`.
pub fn machine<'a>(status: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    status["machines"]
        .as_array()?
        .iter()
        .find(|m| m["name"].as_str() == Some(name))
}

/// Packets the daemon has taken from all relays so far (status).
pub fn total_packets(status: &serde_json::Value) -> u64 {
    status["machines"]
        .as_array()
        .map(|ms| ms.iter().filter_map(|m| m["packets"].as_u64()).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_line() {
        let line = "tracesyncd: listening data=127.0.0.1:4100 sync=127.0.0.1:4101 \
                    control=/tmp/x/control.sock output=/tmp/x/out";
        let (d, s) = parse_startup_line(line).expect("parses");
        assert_eq!(d.port(), 4100);
        assert_eq!(s.port(), 4101);
        assert!(parse_startup_line("tracesyncd: starting").is_none());
    }
}
