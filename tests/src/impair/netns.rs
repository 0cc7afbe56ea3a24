//! Network and time namespaces, the processes run in them, and the
//! daemon's control socket, for the real-socket accuracy run
//! ([`super::realsock`]).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wiring::{DAEMON_IP, PROXY_UPSTREAM_IP, Wiring};

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

pub(super) fn run_cmd(cmd: &mut Command) -> Result<(), String> {
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

pub(super) fn ip(args: &[&str]) -> Result<(), String> {
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
    pub(super) fn all(&self) -> Vec<&String> {
        let mut v = vec![&self.host];
        v.extend(self.proxy.iter());
        for r in &self.relays {
            if !v.contains(&r) {
                v.push(r);
            }
        }
        v
    }

    pub(super) fn link(
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

pub(super) fn relay_side_proxy_ip(i: usize) -> String {
    format!("10.201.{}.1", i + 1)
}

pub(super) fn relay_ip(i: usize) -> String {
    format!("10.201.{}.2", i + 1)
}

/// A child process, killed on drop, its output in a log file.
pub(super) struct Proc {
    pub(super) child: Option<Child>,
    pub(super) what: String,
    pub(super) log: PathBuf,
}

impl Proc {
    pub(super) fn spawn(mut cmd: Command, what: &str, log: PathBuf) -> Result<Proc, String> {
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

    pub(super) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    pub(super) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// SIGTERM, then wait up to 30 s (SIGKILL after that).
    pub(super) fn stop(&mut self) -> Result<ExitStatus, String> {
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

pub(super) fn in_netns(ns: &str, program: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

pub(super) fn have_chrt() -> bool {
    Command::new("chrt")
        .args(["--fifo", "10", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(super) fn control(path: &Path, request: &str) -> Result<UnixStream, String> {
    let mut s =
        UnixStream::connect(path).map_err(|e| format!("connect {}: {e}", path.display()))?;
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    Ok(s)
}

pub(super) fn status(path: &Path) -> Result<serde_json::Value, String> {
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
pub(super) struct TailLog {
    /// (machine name, relay clock ts) -> (ts, err_ns)
    pub(super) events: HashMap<(String, u64), (i64, u64)>,
    pub(super) raw_ids: BTreeMap<String, u64>,
    pub(super) lagged: u64,
}

pub(super) fn start_tail(
    path: &Path,
) -> Result<(Arc<Mutex<TailLog>>, std::thread::JoinHandle<()>), String> {
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
