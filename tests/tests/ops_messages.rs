//! What an operator meets when a setup is wrong, through the real binaries
//! on loopback: each mistake gives one line that names the cause and the
//! fix, and a sysexits code; nothing loops silently.
//!
//! - (the relay against the wrong peer: tests/tests/ops_relay_faults.rs);
//! - a second `tracesyncd` on one output directory: one line naming the
//!   holder's pid, exit 75 within 2 s, the first one's output untouched;
//! - binary output to a terminal (`script` gives one): refused with the fix;
//! - a merge of a file that is not a trace: one line, no output file;
//! - a broken JSON input: its byte offset, the good file beside it merged;
//! - startup errors of the daemon: one line; `--metrics-listen` port 0
//!   logs the port bound; `--check-config` checks directories and files
//!   as the service user; `pki --group`.

#![allow(clippy::too_many_lines, reason = "a test reads top to bottom")]

use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tracesync_protocol::clock_ids::{BOOTTIME, MONOTONIC};
use tracesync_tests::build;
use tracesync_tests::live::{Daemon, DaemonOpts, bin};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

use tracesync_tests::live::lab_pki::TwoCaPki as Pki;

/// Names and bytes of the files in `dir`, sorted.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            let len = e.metadata().map_or(0, |m| m.len());
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_second_daemon_on_one_output_directory_names_the_holder() {
    let mut first = Daemon::start(DaemonOpts {
        rotate_seconds: Some(3600),
        ..DaemonOpts::default()
    });
    let pid = first.pid().expect("pid");
    let names = |l: Vec<(String, u64)>| l.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let before = listing(&first.output);
    let index_before = std::fs::read_to_string(first.output.join("index.jsonl")).ok();
    let other = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let mut second = Command::new(bin("tracesyncd"))
        .args(["--listen", "127.0.0.1:0", "--sync-listen", "127.0.0.1:0"])
        .args(["--tls", "off", "--control"])
        .arg(other.path().join("control.sock"))
        .arg("--output")
        .arg(&first.output)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the second tracesyncd");
    // A daemon that does not exit by itself is stopped after 5 s (and fails).
    while second.try_wait().expect("wait").is_none() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    let _ = second.kill();
    let out = second.wait_with_output().expect("second daemon's output");
    let err = stderr(&out);
    let dir = first.output.display();
    eprintln!(
        "ops-messages: second daemon: exit {:?} after {:.3} s: {}",
        out.status.code(),
        took.as_secs_f64(),
        err.trim_end()
    );
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(
        err,
        format!(
            "tracesyncd: [output] dir {dir} is in use by tracesyncd pid {pid} (it holds \
             {dir}/tracesyncd.lock); stop that daemon, or give this one another [output] dir \
             (--output)\n"
        )
    );
    // Nothing was added, renamed or removed; the index is the first one's.
    assert_eq!(names(listing(&first.output)), names(before));
    assert_eq!(
        std::fs::read_to_string(first.output.join("index.jsonl")).ok(),
        index_before
    );
    assert_eq!(
        std::fs::read_to_string(first.output.join("tracesyncd.lock")).expect("lock file"),
        format!("{pid}\n")
    );
    assert!(first.status().is_ok(), "the first daemon still answers");
    assert!(first.stop().success(), "{}", first.log());
}

/// `script` runs `command` on a pseudo-terminal: (exit code, what it printed).
fn on_a_terminal(command: &str, dir: &Path) -> (i32, String) {
    let out = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .current_dir(dir)
        .output()
        .expect("script (util-linux)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"),
    )
}

fn small_trace() -> Vec<u8> {
    let base = 1_000_000_000;
    let mut p = vec![build::on_sequence(
        build::clock_snapshot(&[(BOOTTIME, base), (MONOTONIC, base / 2)]),
        1,
    )];
    p.extend((0..50).map(|i| build::instant(base + 1000 * (i + 1), BOOTTIME, 1, 1, "e")));
    build::encode_trace(&p)
}

#[test]
fn binary_output_refuses_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("x.pftrace"), small_trace()).expect("write");
    let tracesync = bin("tracesync").display().to_string();
    let (code, said) = on_a_terminal(&format!("{tracesync} merge x.pftrace"), dir.path());
    eprintln!(
        "ops-messages: merge on a terminal: exit {code}: {}",
        said.trim_end()
    );
    assert_eq!(code, 64, "{said}");
    assert_eq!(
        said,
        "tracesync: merge: refusing to write a binary Perfetto trace to a terminal; give -o \
         FILE.pftrace, redirect standard output, or use --format jsonl\n"
    );
    let (code, said) = on_a_terminal(
        &format!("{tracesync} tail --format perfetto --connect nowhere.sock"),
        dir.path(),
    );
    assert_eq!(code, 64, "{said}");
    assert_eq!(
        said,
        "tracesync: tail --format perfetto: refusing to write a binary Perfetto trace to a \
         terminal; redirect standard output to a file or pipe (| trace_processor), or use \
         --format text or jsonl\n"
    );
    // jsonl and -o FILE are fine on a terminal.
    let (code, said) = on_a_terminal(
        &format!("{tracesync} merge -o out.pftrace x.pftrace"),
        dir.path(),
    );
    assert_eq!(code, 0, "{said}");
    let (code, said) = on_a_terminal(
        &format!("{tracesync} merge --format jsonl x.pftrace"),
        dir.path(),
    );
    assert_eq!(code, 0, "{said}");
    assert!(said.starts_with('{'), "{said}");
}

/// `tracesync ARGS` run in `dir`, waited for.
fn tracesync_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin("tracesync"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("tracesync")
}

#[test]
fn a_merge_of_a_non_trace_says_so_once_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("notes.txt"), "hello, this is text\n").expect("write");
    std::fs::write(d.join("good.pftrace"), small_trace()).expect("write");
    let tracesync = |args: &[&str]| tracesync_in(d, args);
    let not_trace = "tracesync: notes.txt: not a Perfetto trace (byte offset 0: not a packet \
                     record: field 13, wire type 0 (a trace holds only field 1, \
                     length-delimited)); give a trace file (plain, gzip, .zip or .tar), or \
                     remove the input\n";
    let out = tracesync(&["merge", "-o", "out.pftrace", "notes.txt"]);
    eprintln!(
        "ops-messages: merge of a text file: exit {:?}: {}",
        out.status.code(),
        stderr(&out).trim_end()
    );
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(stderr(&out), not_trace);
    assert!(!d.join("out.pftrace").exists());
    assert!(!d.join("out.pftrace.tmp").exists());

    // --strict: the same line, once, and nothing written.
    let out = tracesync(&[
        "merge",
        "--strict",
        "-o",
        "s.pftrace",
        "good.pftrace",
        "notes.txt",
    ]);
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(
        stderr(&out),
        not_trace.replace("tracesync: ", "tracesync: error: ")
    );
    assert!(!d.join("s.pftrace").exists());

    // No input at all is a usage error (64), as the README says.
    let out = tracesync(&["merge", "-o", "n.pftrace"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));

    // A closed reader ends `clocks` quietly.
    let mut child = Command::new(bin("tracesync"))
        .args(["clocks", "good.pftrace", "good.pftrace", "good.pftrace"])
        .current_dir(d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tracesync clocks");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

/// A broken Chrome JSON input names its byte offset and what was
/// expected, whether its first event or a later one is broken; the good
/// file beside it still merges (exit 65), and `--strict` writes nothing.
#[test]
fn broken_json_names_its_byte_offset_and_the_good_file_still_merges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let event = |ts: &str| format!(r#"{{"name":"a","ph":"X","ts":{ts},"dur":2,"pid":1,"tid":1}}"#);
    let head = r#"{"traceEvents":["#;
    // The `x` after `1` is the first byte that cannot be read.
    let first = format!("{head}{}]}}", event("1x"));
    let later = format!("{head}{},{}]}}", event("1"), event("1x"));
    std::fs::write(d.join("first.json"), &first).expect("write");
    std::fs::write(d.join("later.json"), &later).expect("write");
    std::fs::write(d.join("good.json"), format!("{head}{}]}}", event("5"))).expect("write");
    let tracesync = |args: &[&str]| tracesync_in(d, args);
    for (name, text, rest) in [
        (
            "first.json",
            &first,
            "nothing of this input is merged, fix the JSON or remove the input",
        ),
        (
            "later.json",
            &later,
            "the events before it are merged, the rest of this input is skipped",
        ),
    ] {
        let at = text.find("1x").expect("the broken ts") + 1;
        let line = format!(
            "tracesync: {name}: byte offset {at}: bad JSON in an event: expected `,` or `}}`; {rest}\n"
        );
        let out = tracesync(&["merge", "-o", "out.pftrace", name, "good.json"]);
        eprintln!(
            "ops-messages: {name}: exit {:?}: {}",
            out.status.code(),
            stderr(&out).trim_end()
        );
        assert_eq!(out.status.code(), Some(65), "{}", stderr(&out));
        assert!(stderr(&out).contains(&line), "{}", stderr(&out));
        assert_eq!(
            stderr(&out).matches("byte offset").count(),
            1,
            "{}",
            stderr(&out)
        );
        let merged = std::fs::metadata(d.join("out.pftrace")).expect("the good file merged");
        assert!(merged.len() > 0);
        std::fs::remove_file(d.join("out.pftrace")).expect("remove");

        let out = tracesync(&["merge", "--strict", "-o", "s.pftrace", name, "good.json"]);
        assert_eq!(out.status.code(), Some(65), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{name}: byte offset {at}: ")),
            "{}",
            stderr(&out)
        );
        assert!(!d.join("s.pftrace").exists());
    }
}

#[test]
fn daemon_startup_errors_are_one_line() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(bin("tracesyncd"))
        .arg("--listen")
        .arg(addr.to_string())
        .args(["--sync-listen", "127.0.0.1:0", "--tls", "off"])
        .arg("--control")
        .arg(dir.path().join("c.sock"))
        .arg("--output")
        .arg(dir.path().join("out"))
        .output()
        .expect("tracesyncd");
    assert_eq!(out.status.code(), Some(69));
    assert_eq!(
        stderr(&out),
        format!(
            "tracesyncd: cannot listen on {addr} (listen.data): Address already in use (os \
             error 98)\n"
        )
    );
}

#[test]
fn metrics_on_port_0_logs_the_port_bound() {
    let daemon = Daemon::start(DaemonOpts {
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
        ..DaemonOpts::default()
    });
    let log = daemon.log();
    let url = log
        .lines()
        .find_map(|l| l.split("metrics: Prometheus text on ").nth(1))
        .unwrap_or_else(|| panic!("no metrics line:\n{log}"))
        .trim()
        .to_owned();
    eprintln!("ops-messages: --metrics-listen 127.0.0.1:0 logged {url}");
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .parse()
        .expect("address");
    assert_ne!(addr.port(), 0, "{url}");
    let page = tracesync_tests::faults::peer::http_get(addr, "/metrics").expect("GET /metrics");
    assert!(page.contains("tracesync_"), "{page}");
}

#[test]
fn check_config_checks_directories_and_files_as_the_service_user() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let check = |args: &[&str]| {
        Command::new(bin("tracesyncd"))
            .arg("--check-config")
            .args(args)
            .env_remove("TRACESYNC_TOKEN")
            .output()
            .expect("tracesyncd --check-config")
    };
    std::fs::write(d.join("file"), "x").expect("write");
    let under = d.join("file/out");
    let control = d.join("c.sock").display().to_string();
    let out = check(&[
        "--tls",
        "off",
        "--control",
        &control,
        "--output",
        under.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(78));
    assert_eq!(
        stderr(&out),
        format!(
            "tracesyncd: --output: [output] dir: {}: {} is not a directory, so it \
             cannot be created\n",
            under.display(),
            d.join("file").display()
        )
    );
    let bad_control = d.join("file/c.sock").display().to_string();
    let out_dir = d.join("out").display().to_string();
    let out = check(&[
        "--tls",
        "off",
        "--control",
        &bad_control,
        "--output",
        &out_dir,
    ]);
    assert_eq!(out.status.code(), Some(78));
    assert_eq!(
        stderr(&out),
        format!(
            "tracesyncd: --control: [listen] control: {} exists and is not a \
             directory\n",
            d.join("file").display()
        )
    );

    // As the service user: a directory it cannot write, a key it cannot read.
    if nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .is_none()
    {
        eprintln!("skipped the --check-user part: no user nobody here");
        return;
    }
    let owned = d.join("owned");
    std::fs::create_dir(&owned).expect("mkdir");
    std::fs::set_permissions(&owned, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let meta = std::fs::metadata(&owned).expect("stat");
    let out = check(&[
        "--tls",
        "off",
        "--control",
        &control,
        "--output",
        owned.to_str().unwrap(),
        "--check-user",
        "nobody",
    ]);
    assert_eq!(out.status.code(), Some(78));
    assert_eq!(
        stderr(&out),
        format!(
            "tracesyncd: --output: [output] dir: {}: not writable by user nobody \
             (owner {}:{}, mode 0755)\n",
            owned.display(),
            meta.uid(),
            meta.gid()
        )
    );
    // The config file itself, installed 0640 root:root as the package
    // tree has it before systemd-tmpfiles gives it the service group.
    let config = d.join("daemon.toml");
    std::fs::copy(
        tracesync_tests::tp::repo_root().join("configs/daemon.toml"),
        &config,
    )
    .expect("copy the shipped config");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let cmeta = std::fs::metadata(&config).expect("stat");
    let out = check(&[
        "--config",
        config.to_str().unwrap(),
        "--tls",
        "off",
        "--check-user",
        "nobody",
    ]);
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "tracesyncd: {}: the config file is not readable by user nobody (owner {}:{}, \
             mode 0640); `systemd-tmpfiles --create tracesync.conf` (or chgrp tracesync and \
             chmod 0640 the file) lets the service user read it\n",
            config.display(),
            cmeta.uid(),
            cmeta.gid()
        )
    );
    let pki = Pki::new();
    std::fs::set_permissions(pki.root(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let writable = d.join("w");
    std::fs::create_dir(&writable).expect("mkdir");
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let tls = pki.daemon();
    let key = tls.key.display().to_string();
    let out = check(&[
        "--control",
        writable.join("c.sock").to_str().unwrap(),
        "--output",
        writable.join("out").to_str().unwrap(),
        "--tls-cert",
        tls.cert.to_str().unwrap(),
        "--tls-key",
        &key,
        "--tls-client-ca",
        tls.client_ca.to_str().unwrap(),
        "--check-user",
        "nobody",
    ]);
    let kmeta = std::fs::metadata(&tls.key).expect("stat");
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "tracesyncd: --tls-key: [tls] key: {key}: not readable by user nobody \
             (owner {}:{}, mode 0600); `tracesync pki init --group GROUP` (or chgrp GROUP and \
             chmod 0640) lets a service user in GROUP read it\n",
            kmeta.uid(),
            kmeta.gid()
        )
    );
}

#[test]
fn pki_group_makes_the_keys_readable_by_the_service_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gid = nix::unistd::Gid::effective();
    let group = nix::unistd::Group::from_gid(gid)
        .ok()
        .flatten()
        .expect("the caller's group has a name")
        .name;
    let tls = dir.path().join("tls");
    let out = Command::new(bin("tracesync"))
        .args(["pki", "init", "--group", &group])
        .arg(&tls)
        .output()
        .expect("tracesync pki init");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = Command::new(bin("tracesync"))
        .args(["pki", "issue", "--name", "phone", "--group", &group])
        .arg(&tls)
        .output()
        .expect("tracesync pki issue");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mode = |f: &str| {
        let m = std::fs::metadata(tls.join(f)).expect("stat");
        (m.mode() & 0o777, m.gid())
    };
    assert_eq!(mode("daemon.key"), (0o640, gid.as_raw()));
    assert_eq!(mode("phone.key"), (0o640, gid.as_raw()));
    assert_eq!(mode("ca.key").0, 0o600, "the CA key stays private");

    let fresh = dir.path().join("fresh");
    let out = Command::new(bin("tracesync"))
        .args(["pki", "init", "--group", "no-such-group-here"])
        .arg(&fresh)
        .output()
        .expect("tracesync pki init");
    assert_eq!(out.status.code(), Some(67));
    assert_eq!(
        stderr(&out),
        "tracesync: error: pki: --group no-such-group-here: no such group; create it \
         (systemd-sysusers systemd/tracesync.sysusers makes `tracesync`) or give an existing \
         one\n"
    );
    assert!(!fresh.exists(), "nothing is written for a bad group");
}

#[test]
fn the_daemon_names_machines_and_tail_warns_of_an_unknown_one() {
    use tracesync_tests::live::{Relay, RelayOpts};
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut relay = Relay::start(&daemon, RelayOpts::synthetic("named-one", 100));
    daemon.wait_connected(&["named-one"], Duration::from_secs(30));
    let mut tail = Command::new(bin("tracesync"))
        .args(["tail", "--machine", "nosuch", "--connect"])
        .arg(&daemon.control)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tracesync tail");
    std::thread::sleep(Duration::from_millis(1500));
    let _ = tail.kill();
    let out = tail.wait_with_output().expect("tail");
    let err = stderr(&out);
    eprintln!("ops-messages: tail --machine nosuch: {}", err.trim_end());
    // The daemon's machines by name: the host (named after this machine,
    // or `host`) and the relay.
    let status = daemon.status().expect("status");
    let host = status["machines"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["raw_id"] == 0))
        .and_then(|m| m["name"].as_str())
        .unwrap_or("host")
        .to_owned();
    assert_eq!(
        err.lines().next(),
        Some(
            format!(
                "tracesync: warning: the daemon knows no machine \"nosuch\" (known: {host}, \
                 named-one); showing its packets if it connects"
            )
            .as_str()
        ),
        "{err}"
    );
    assert!(relay.stop().success(), "{}", relay.log());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.log().contains("relay named-one disconnected") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = daemon.log();
    let connected = log
        .lines()
        .find(|l| l.contains("relay named-one (raw id "))
        .unwrap_or_else(|| panic!("no connect line naming the machine:\n{log}"));
    assert!(connected.contains(") connected"), "{connected}");
    assert!(log.contains("relay named-one disconnected"), "{log}");
    assert!(daemon.stop().success());
}

#[test]
fn a_healthy_run_shows_no_prober_rejections() {
    use tracesync_tests::live::{Relay, RelayOpts};
    let mut daemon = Daemon::start(DaemonOpts::default());
    let names = ["calm-a", "calm-b", "calm-c"];
    let mut relays: Vec<Relay> = names
        .iter()
        .map(|n| Relay::start(&daemon, RelayOpts::synthetic(n, 100)))
        .collect();
    daemon.wait_synced(&names, Duration::from_secs(30));
    // A relay restarted: a new session registers while the others run.
    relays[0].stop();
    relays[0].restart();
    daemon.wait_progress(&names, 200);
    let status = daemon.status().expect("status");
    let sync = &status["sync"];
    eprintln!(
        "ops-messages: healthy run: registers_accepted={} unknown_session={} after_end={} \
         bad_mac={} malformed={} nonce_mismatch={}",
        sync["registers_accepted"],
        sync["unknown_session"],
        sync["after_end"],
        sync["bad_mac"],
        sync["malformed"],
        sync["nonce_mismatch"]
    );
    for counter in ["unknown_session", "bad_mac", "malformed"] {
        assert_eq!(sync[counter], 0, "{counter} in a healthy run: {sync}");
    }
    for r in &mut relays {
        assert!(r.stop().success(), "{}", r.log());
    }
    assert!(daemon.stop().success());
}
