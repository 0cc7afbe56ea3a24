//! A phone's path over USB with the real binaries (docs/operations-phones.md).
//! The "phone" is a relay that reaches the daemon only through a real
//! user-space TCP forwarder process, `tracesync-impair --profile usb`,
//! listening on 127.0.0.2 with the daemon's two port numbers, as `adb
//! reverse tcp:7410 tcp:7410` and `tcp:7411` give a phone its 127.0.0.1
//! (UDP to 127.0.0.2 reaches nothing: the daemon's sync socket is bound to
//! 127.0.0.1). The relay is given no `--name`: it runs with `ANDROID_ROOT`
//! set and a fake `getprop` on PATH, says that name with `--print-name`,
//! and presents a certificate issued (`pki issue`) for it, over mutual TLS.
//!
//! - Before the forward exists (connection refused) the relay says so in
//!   one line naming `adb reverse`, keeps spooling, and does not repeat it.
//! - Once it exists the relay connects as `Pixel-8-1A2B3C4D` and, no UDP
//!   passing, syncs over TCP: `tracesync status -v` says `via tcp`.
//! - The cable is pulled twice mid-capture (the forwarder killed: the
//!   connections reset, then connecting is refused for a few seconds) and
//!   put back (the forwarder started again on the same ports).
//! - At the end, counted by the synthetic identities, nothing was lost or
//!   written twice, and the relay stopped with everything acknowledged.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tracesync_common::tls::pki;
use tracesync_tests::faults::Counts;
use tracesync_tests::live::lab_pki::TwoCaPki;
use tracesync_tests::live::{Daemon, DaemonOpts, bin, check_output, judge, process};
use tracesync_tests::tp;

const PHONE_IP: &str = "127.0.0.2";
/// What the fake `getprop` answers, and the name the relay makes of it.
const MODEL: &str = "Pixel 8";
const SERIAL: &str = "1A2B3C4D";
const NAME: &str = "Pixel-8-1A2B3C4D";
const RATE: u64 = 1000;
const UNPLUGS: usize = 2;
/// How long the cable stays out (connecting is refused meanwhile).
const UNPLUGGED: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(60);
/// The start of the relay's one line about a refused loopback port.
const REFUSED: &str = "connection refused: nothing listens there";

/// `adb reverse` for the data and the sync port, as a process that can be
/// killed and started again.
struct UsbForward {
    ports: [u16; 2],
    dir: PathBuf,
    child: Option<Child>,
    starts: u32,
}

impl UsbForward {
    fn new(daemon: &Daemon, dir: &Path) -> UsbForward {
        UsbForward {
            ports: [daemon.data_addr.port(), daemon.sync_addr.port()],
            dir: dir.to_path_buf(),
            child: None,
            starts: 0,
        }
    }

    /// Starts the forwarder and waits until it listens; Err if it cannot
    /// (no 127.0.0.2 here).
    fn plug(&mut self) -> Result<(), String> {
        self.starts += 1;
        let log = self.dir.join(format!("forward-{}.log", self.starts));
        let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin("tracesync-impair"));
        cmd.args(["--profile", "usb", "--seed"])
            .arg(self.starts.to_string());
        for port in self.ports {
            cmd.arg("--tcp")
                .arg(format!("{PHONE_IP}:{port}=127.0.0.1:{port}"));
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .map_err(|e| format!("spawn tracesync-impair: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("tracesync-impair: profile usb") {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("tracesync-impair exited {status}: {text}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("tracesync-impair did not start: {text}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The cable pulled: SIGKILL, the kernel resets its connections.
    fn unplug(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for UsbForward {
    fn drop(&mut self) {
        self.unplug();
    }
}

/// The phone's relay, killed if the test ends before it stops.
struct PhoneRelay(Option<Child>);

impl PhoneRelay {
    /// SIGTERM and wait for it.
    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.0.take().expect("relay running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM");
        child.wait().expect("relay exit")
    }
}

impl Drop for PhoneRelay {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A `getprop` that knows the model and the serial, in `dir`.
fn fake_getprop(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("getprop");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  ro.product.model) echo '{MODEL}' ;;\n  \
             ro.serialno) echo '{SERIAL}' ;;\nesac\n"
        ),
    )
    .expect("write getprop");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// `tracesync-relay` as on a phone: `ANDROID_ROOT` set and the fake
/// `getprop` (made in `dir/bin`) first on PATH.
fn phone_relay_command(dir: &Path) -> Command {
    let bin_dir = dir.join("bin");
    std::fs::create_dir_all(&bin_dir).expect("bin dir");
    fake_getprop(&bin_dir);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin_dir];
    paths.extend(std::env::split_paths(&path));
    let mut cmd = Command::new(bin("tracesync-relay"));
    cmd.env("ANDROID_ROOT", "/system")
        .env("PATH", std::env::join_paths(paths).expect("PATH"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

/// What `tracesync-relay --print-name` says on the phone (the name to
/// issue its certificate for), with `args` more.
fn print_name(dir: &Path, args: &[&str]) -> String {
    let out = phone_relay_command(dir)
        .arg("--print-name")
        .args(args)
        .output()
        .expect("tracesync-relay --print-name");
    assert!(out.status.success(), "--print-name: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

/// The relay as a phone runs it: no `--name`, the host 127.0.0.1 of the
/// phone (here 127.0.0.2), its log in `dir/relay.log`.
fn start_phone_relay(daemon: &Daemon, pki: &TwoCaPki, dir: &Path) -> PhoneRelay {
    let log = std::fs::File::create(dir.join("relay.log")).expect("relay log");
    let cert = |ext: &str| pki.path("ca", &format!("{NAME}.{ext}"));
    let child = phone_relay_command(dir)
        .arg("--host")
        .arg(format!("{PHONE_IP}:{}", daemon.data_addr.port()))
        .arg("--token")
        .arg(&daemon.token)
        .arg("--source")
        .arg(format!("synthetic:{RATE}"))
        .arg("--spool")
        .arg(dir.join("spool"))
        .arg("--tls-ca")
        .arg(pki.path("ca", "ca.crt"))
        .arg("--tls-cert")
        .arg(cert("crt"))
        .arg("--tls-key")
        .arg(cert("key"))
        // The daemon's certificate names localhost and 127.0.0.1 (as
        // `pki init` does by default, what a phone connects to).
        .args(["--tls-server-name", "localhost", "--keep-retrying"])
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn tracesync-relay");
    PhoneRelay(Some(child))
}

fn relay_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("relay.log")).unwrap_or_default()
}

fn count(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

/// Waits until the relay's log says `what` `n` times.
fn wait_log(dir: &Path, what: &str, n: usize) {
    let deadline = Instant::now() + WAIT;
    while count(&relay_log(dir), what) < n {
        assert!(
            Instant::now() < deadline,
            "the relay did not say {what:?} {n} times:\n{}",
            relay_log(dir)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tracesync status -v` against the daemon: its text.
fn status_text(daemon: &Daemon) -> String {
    let out = Command::new(bin("tracesync"))
        .arg("status")
        .arg("--connect")
        .arg(&daemon.control)
        .arg("-v")
        .output()
        .expect("tracesync status");
    assert!(out.status.success(), "tracesync status -v: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn route(status: &serde_json::Value) -> Option<&str> {
    process::machine(status, NAME)?["sync"]["route"].as_str()
}

#[test]
fn a_phone_over_usb_syncs_over_tcp_and_loses_nothing_when_unplugged() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The name the relay will send, asked before any certificate exists,
    // and its certificate issued for it.
    assert_eq!(print_name(dir.path(), &[]), NAME);
    assert_eq!(
        print_name(dir.path(), &["--name", "bench-phone"]),
        "bench-phone"
    );
    let pki = TwoCaPki::new();
    pki::issue(&pki.path("ca", ""), NAME, None).expect("pki issue for the phone");
    let mut daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        merge_window_ms: Some(100),
        ..DaemonOpts::default()
    });
    let mut usb = UsbForward::new(&daemon, dir.path());

    // No `adb reverse` yet: refused, said once, spooled meanwhile.
    let mut relay = start_phone_relay(&daemon, &pki, dir.path());
    let hint = format!("adb reverse tcp:{0} tcp:{0}", daemon.data_addr.port());
    wait_log(dir.path(), &hint, 1);
    std::thread::sleep(Duration::from_secs(2));
    let log = relay_log(dir.path());
    assert_eq!(count(&log, REFUSED), 1, "said once while it lasts:\n{log}");
    if let Err(e) = usb.plug() {
        eprintln!("SKIPPED: cannot forward on {PHONE_IP} ({e}); this test needs 127.0.0.0/8 on lo");
        return;
    }

    // Forwarded: the device's name, probes over TCP.
    daemon.wait_connected(&[NAME], WAIT);
    let status = daemon.wait_status("the phone synced over TCP", WAIT, |s| {
        process::machine(s, NAME).is_some_and(|m| m["error_bound_ns"].is_u64())
            && route(s) == Some("tcp")
    });
    let text = status_text(&daemon);
    let sync_line = text
        .lines()
        .find(|l| l.starts_with(&format!("sync on {NAME}: ")))
        .unwrap_or_else(|| panic!("no sync line for {NAME}:\n{text}"));
    assert!(sync_line.contains(" via tcp "), "{sync_line}");
    let log = relay_log(dir.path());
    for said in [
        "name from ro.product.model and ro.serialno",
        "reachable again after",
        "no probes over UDP; trying TCP",
    ] {
        assert!(log.contains(said), "the relay did not say {said:?}:\n{log}");
    }
    eprintln!(
        "phone-usb: {NAME} synced, bound {} ns; {sync_line}",
        process::machine(&status, NAME).map_or(0, |m| m["error_bound_ns"].as_u64().unwrap_or(0))
    );

    // The cable out and back in, mid-capture.
    for round in 1..=UNPLUGS {
        daemon.wait_progress(&[NAME], RATE);
        usb.unplug();
        std::thread::sleep(UNPLUGGED);
        wait_log(dir.path(), REFUSED, 1 + round);
        usb.plug().expect("forward again");
        daemon.wait_connected(&[NAME], WAIT);
        wait_log(dir.path(), "reachable again after", 1 + round);
    }
    daemon.wait_synced(&[NAME], WAIT);
    daemon.wait_progress(&[NAME], RATE);

    // Stopped: everything acknowledged, every identity written once.
    let exit = relay.stop();
    let log = relay_log(dir.path());
    assert!(exit.success(), "relay exit {exit}:\n{log}");
    assert!(log.contains("everything acknowledged"), "{log}");
    assert_eq!(
        count(&log, REFUSED),
        1 + UNPLUGS,
        "one line per outage:\n{log}"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
    drop(usb);
    let check = check_output(&daemon.output);
    let counts = Counts::of(&check);
    eprintln!(
        "phone-usb: {} unplugs of {} s; produced {}, written {}, lost {}, duplicated {}; \
         {} files",
        UNPLUGS,
        UNPLUGGED.as_secs(),
        counts.produced,
        counts.written,
        counts.lost,
        counts.duplicated,
        check.files.len()
    );
    check.assert_complete();
    assert!(
        counts.produced > 0
            && counts.lost == 0
            && counts.duplicated == 0
            && counts.written == counts.produced,
        "{counts:?}\n{}",
        check.summary()
    );
    assert!(
        check.machine_names.values().any(|n| n == NAME),
        "{:?}",
        check.machine_names
    );
    if tp::require_or_skip("phone_usb") {
        judge::judge_all(&check).unwrap_or_else(|e| panic!("{e}"));
    }
}
