//! `tracesync demo`, live edition: starts `tracesyncd` and N
//! `tracesync-relay`s on loopback, each relay with its own simulated clock
//! (seconds of offset, one drifting), shows the daemon's status while they
//! stream, stops everything gracefully and checks the rolling output against
//! the synthetic packets' ground truth and identities.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::error::DemoError;
use super::interrupt::Interrupt;
use crate::check::{self, CheckReport};
use crate::connect::{self, Target};
use tracesync_core::control::Request;
use tracesync_core::status::StatusReport;

#[derive(Clone, Debug)]
pub struct LiveDemoOptions {
    pub relays: usize,
    pub seconds: u64,
    pub out: PathBuf,
    /// Synthetic packets per second per relay.
    pub rate: u32,
    /// The daemon's Prometheus endpoint, if any.
    pub metrics: Option<std::net::SocketAddr>,
}

/// Where the demo serves the daemon's metrics unless told otherwise.
pub const DEFAULT_DEMO_METRICS: &str = tracesync_protocol::relay::DEFAULT_METRICS_ADDR;

/// `--metrics-listen`: "off", or an address; the default one falls back to
/// a free loopback port when it is busy (a tracesyncd may be running).
pub fn metrics_addr(text: &str) -> Result<Option<std::net::SocketAddr>, String> {
    if text == "off" {
        return Ok(None);
    }
    let addr: std::net::SocketAddr = text
        .parse()
        .map_err(|_| format!("--metrics-listen: expected ADDR:PORT or off, got {text:?}"))?;
    if text == DEFAULT_DEMO_METRICS && std::net::TcpListener::bind(addr).is_err() {
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port for metrics: {e}"))?;
        return Ok(Some(free));
    }
    Ok(Some(addr))
}

/// One plain HTTP GET of the metrics page (the demo shows a few lines).
fn fetch_metrics(addr: std::net::SocketAddr) -> Option<String> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())
}

/// One simulated machine: name and clock model.
#[derive(Clone, Debug)]
pub struct DemoMachine {
    pub name: String,
    pub offset_ns: i64,
    pub drift_ppm: f64,
}

/// Machines of the demo: seconds apart, one drifting fast, one slow.
pub fn machines(n: usize) -> Vec<DemoMachine> {
    const NAMES: [&str; 4] = ["phone", "guest-vm", "server", "board"];
    const OFFSETS_MS: [i64; 4] = [3_700, 11_100, -1_250, 7_300];
    const DRIFTS: [f64; 4] = [8.0, 50.0, -12.0, 0.0];
    (0..n)
        .map(|i| DemoMachine {
            name: match i / NAMES.len() {
                0 => NAMES[i].to_owned(),
                k => format!("{}-{k}", NAMES[i % NAMES.len()]),
            },
            offset_ns: OFFSETS_MS[i % 4] * 1_000_000 + i as i64 * 1_000_003,
            drift_ppm: DRIFTS[i % 4],
        })
        .collect()
}

pub struct LiveDemoReport {
    pub machines: Vec<DemoMachine>,
    pub check: CheckReport,
    pub last_status: Option<StatusReport>,
    pub output_dir: PathBuf,
}

/// A child process killed on drop (no orphans if the demo fails half way).
struct Proc {
    name: String,
    child: Child,
    /// Where its stderr goes.
    log: PathBuf,
}

impl Proc {
    /// How it ended, if it ended by itself.
    fn ended(&mut self) -> Option<DemoError> {
        let status = self.child.try_wait().ok()??;
        Some(DemoError::Ended {
            name: self.name.clone(),
            status,
            log: self.log.clone(),
        })
    }

    /// Stops the process gracefully; what went wrong, in words, if it did.
    fn terminate(&mut self, wait: Duration) -> Result<(), String> {
        let pid = Pid::from_raw(self.child.id() as i32);
        // SIGTERM: the graceful path (flush, final commit, acks).
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + wait;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(format!("{} exited with {status}", self.name)),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!(
                        "{} did not stop within {wait:?}; killed",
                        self.name
                    ));
                }
                Err(e) => return Err(format!("cannot wait for {}: {e}", self.name)),
            }
        }
    }
}

/// SIGTERM to every process, then SIGKILL to those still running after
/// `wait`.
fn stop_all(procs: &mut [&mut Proc], wait: Duration) {
    for p in procs.iter() {
        let _ = kill(Pid::from_raw(p.child.id() as i32), Signal::SIGTERM);
    }
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline
        && procs
            .iter_mut()
            .any(|p| matches!(p.child.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Drop kills and reaps what is left.
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The binaries sit next to `tracesync` (same cargo target dir or install dir).
fn sibling_binary(name: &str) -> Result<PathBuf, DemoError> {
    let exe = std::env::current_exe().map_err(DemoError::OwnPath)?;
    let path = exe.with_file_name(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(DemoError::NoBinary {
            name: name.to_owned(),
            beside: exe,
        })
    }
}

fn random_token() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bound addresses from tracesyncd's startup line.
struct Listening {
    data: String,
}

fn parse_listening(line: &str) -> Option<Listening> {
    let rest = line.strip_prefix("tracesyncd: listening ")?;
    let data = rest
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("data="))?
        .to_owned();
    Some(Listening { data })
}

/// Copies a child's stderr to a log file; the first line matching `probe`
/// goes to `found` as well.
fn log_stderr(
    child: &mut Child,
    log: &Path,
    found: Option<mpsc::Sender<String>>,
) -> Result<(), DemoError> {
    let mut file = std::fs::File::create(log).map_err(DemoError::io("create", log))?;
    // Spawned with a piped stderr: it is there.
    let Some(stderr) = child.stderr.take() else {
        return Ok(());
    };
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(file, "{line}");
            if let Some(tx) = &found
                && line.starts_with("tracesyncd: listening ")
            {
                let _ = tx.send(line);
            }
        }
    });
    Ok(())
}

fn fresh_dir(path: &Path) -> Result<(), DemoError> {
    if path.exists() {
        std::fs::remove_dir_all(path).map_err(DemoError::io("clear", path))?;
    }
    std::fs::create_dir_all(path).map_err(DemoError::io("create", path))
}

fn query_status(control: &Target) -> Option<StatusReport> {
    let mut conn = connect::open(control, &Request::Status).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut line = String::new();
    BufReader::new(&mut conn).read_line(&mut line).ok()?;
    serde_json::from_str(&line).ok()
}

pub fn run(opts: &LiveDemoOptions) -> Result<LiveDemoReport, DemoError> {
    let daemon_bin = sibling_binary("tracesyncd")?;
    let relay_bin = sibling_binary("tracesync-relay")?;
    std::fs::create_dir_all(&opts.out).map_err(DemoError::io("create", &opts.out))?;
    let output_dir = opts.out.join("output");
    fresh_dir(&output_dir)?;
    let control_path = opts.out.join("control.sock");
    let token = random_token();
    let interrupt = Interrupt::install().map_err(DemoError::Signals)?;
    let (mut daemon, listening) =
        start_daemon(opts, &daemon_bin, &output_dir, &control_path, &token)?;
    let machines = machines(opts.relays);
    let mut relays = Vec::new();
    for m in &machines {
        relays.push(start_relay(opts, &relay_bin, m, &listening, &token)?);
    }
    if let Some(addr) = opts.metrics {
        say!("metrics while it runs: curl -s http://{addr}/metrics | grep '^tracesync_'");
    }
    let control = Target::Unix(control_path);
    let mut watch = Watch {
        control: &control,
        interrupt: &interrupt,
        last_status: None,
    };
    let stopped_early = watch.run(opts.seconds, &mut daemon, &mut relays);
    let mut last_status = watch.last_status;
    if let Some(stop) = stopped_early {
        // All at once and briefly: what is not acknowledged stays in the
        // relays' spools, what the daemon committed in its files; what
        // they say on the way out is in their logs.
        let mut all: Vec<&mut Proc> = relays.iter_mut().collect();
        all.push(&mut daemon);
        stop_all(&mut all, Duration::from_secs(3));
        return Err(match stop {
            Stop::Interrupted => DemoError::Interrupted {
                out: opts.out.clone(),
            },
            Stop::ReaderGone => DemoError::ReaderGone,
            Stop::Ended(e) => e,
        });
    }
    if let Some(page) = opts.metrics.and_then(fetch_metrics) {
        print_ingest_metrics(&page);
    }
    let mut problems = Vec::new();
    for relay in &mut relays {
        if let Err(e) = relay.terminate(Duration::from_secs(20)) {
            problems.push(e);
        }
    }
    if let Some(report) = query_status(&control) {
        last_status = Some(report);
    }
    if let Err(e) = daemon.terminate(Duration::from_secs(30)) {
        problems.push(e);
    }
    if !problems.is_empty() {
        return Err(DemoError::Stopping(problems));
    }
    let check = check::check_dir(&output_dir)?;
    Ok(LiveDemoReport {
        machines,
        check,
        last_status,
        output_dir,
    })
}

/// Starts `tracesyncd` on loopback ports of its choosing and waits for its
/// startup line, which names them.
fn start_daemon(
    opts: &LiveDemoOptions,
    daemon_bin: &Path,
    output_dir: &Path,
    control_path: &Path,
    token: &str,
) -> Result<(Proc, Listening), DemoError> {
    let (tx, rx) = mpsc::channel();
    let mut daemon_cmd = Command::new(daemon_bin);
    if let Some(addr) = opts.metrics {
        daemon_cmd.arg(format!("--metrics-listen={addr}"));
    }
    let mut daemon = Proc {
        name: "tracesyncd".into(),
        log: opts.out.join("tracesyncd.log"),
        child: daemon_cmd
            .arg("--listen=127.0.0.1:0")
            // Loopback only: plaintext, said explicitly (TLS is the default).
            .arg("--tls=off")
            .arg("--sync-listen=127.0.0.1:0")
            .arg(format!("--control={}", control_path.display()))
            .arg(format!("--output={}", output_dir.display()))
            .arg(format!("--rotate-seconds={}", (opts.seconds / 3).max(2)))
            .env("TRACESYNC_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(DemoError::io("start", daemon_bin))?,
    };
    log_stderr(&mut daemon.child, &daemon.log, Some(tx))?;
    let listening = rx
        .recv_timeout(Duration::from_secs(15))
        .ok()
        .and_then(|line| parse_listening(&line))
        .ok_or_else(|| DemoError::DaemonDidNotStart {
            log: opts.out.join("tracesyncd.log"),
        })?;
    Ok((daemon, listening))
}

/// Starts the relay of simulated machine `m`, with a fresh spool.
fn start_relay(
    opts: &LiveDemoOptions,
    relay_bin: &Path,
    m: &DemoMachine,
    listening: &Listening,
    token: &str,
) -> Result<Proc, DemoError> {
    let spool = opts.out.join(format!("spool-{}", m.name));
    fresh_dir(&spool)?;
    let mut child = Command::new(relay_bin)
        .arg(format!("--host={}", listening.data))
        .arg("--tls=off")
        .arg(format!("--name={}", m.name))
        .arg(format!("--spool={}", spool.display()))
        .arg(format!("--source=synthetic:{}", opts.rate))
        .arg(format!("--clock-offset-ns={}", m.offset_ns))
        .arg(format!("--clock-drift-ppm={}", m.drift_ppm))
        .env("TRACESYNC_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(DemoError::io("start", relay_bin))?;
    let log = opts.out.join(format!("relay-{}.log", m.name));
    log_stderr(&mut child, &log, None)?;
    Ok(Proc {
        name: format!("relay {}", m.name),
        child,
        log,
    })
}

/// Why a demo stops before its time.
enum Stop {
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// Standard output was closed.
    ReaderGone,
    /// The daemon or a relay ended by itself.
    Ended(DemoError),
}

/// The demo while it runs: the status every 2 s, an eye on Ctrl-C and on
/// the processes.
struct Watch<'a> {
    control: &'a Target,
    interrupt: &'a Interrupt,
    last_status: Option<StatusReport>,
}

impl Watch<'_> {
    /// Prints the daemon's status every 2 s for `seconds`; why it stopped
    /// early, if it did (checked every 100 ms).
    fn run(&mut self, seconds: u64, daemon: &mut Proc, relays: &mut [Proc]) -> Option<Stop> {
        let start = Instant::now();
        let mut next_print = Instant::now() + Duration::from_secs(1);
        while start.elapsed() < Duration::from_secs(seconds) {
            std::thread::sleep(Duration::from_millis(100));
            if self.interrupt.came() {
                return Some(Stop::Interrupted);
            }
            if let Some(e) = std::iter::once(&mut *daemon)
                .chain(relays.iter_mut())
                .find_map(Proc::ended)
            {
                return Some(Stop::Ended(e));
            }
            if Instant::now() < next_print {
                continue;
            }
            next_print += Duration::from_secs(2);
            if let Some(report) = query_status(self.control) {
                let shown = format!(
                    "--- t = {:>4.1} s\n{}",
                    start.elapsed().as_secs_f64(),
                    crate::status::table(&report, unix_ms())
                );
                self.last_status = Some(report);
                if std::io::stdout().write_all(shown.as_bytes()).is_err() {
                    // The reader went away (`| head`): nothing to show to.
                    return Some(Stop::ReaderGone);
                }
            }
        }
        None
    }
}

/// How many series the metrics page has, and the per-machine ingest ones.
fn print_ingest_metrics(page: &str) {
    let series: Vec<&str> = page
        .lines()
        .filter(|l| l.starts_with("tracesync_"))
        .collect();
    say!("--- metrics: {} series; ingest per machine:", series.len());
    for line in series
        .iter()
        .filter(|l| l.starts_with("tracesync_ingest_packets_total"))
    {
        say!("{line}");
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_startup_line() {
        let l = parse_listening(
            "tracesyncd: listening data=127.0.0.1:40001 sync=127.0.0.1:40002 control=/tmp/c.sock output=/tmp/o",
        )
        .unwrap();
        assert_eq!(l.data, "127.0.0.1:40001");
        assert!(parse_listening("something else").is_none());
    }

    #[test]
    fn demo_machines_are_distinct() {
        let m = machines(9);
        let mut names: Vec<_> = m.iter().map(|m| m.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 9);
        assert!(m.iter().any(|m| m.drift_ppm.abs() >= 50.0));
    }
}
