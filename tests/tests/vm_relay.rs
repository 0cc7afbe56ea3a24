//! `scripts/vm-relay.sh` end to end: a relay in a qemu guest (software
//! emulation) with its own kernel clocks, behind a virtual NIC, checked by
//! numbered pings over the guest's serial line. The script's last line
//! (docs/operations-machines.md) must name the architecture and say nothing
//! was lost or duplicated and every ping event lies inside its host [send,
//! receive] window widened by its `err_ns`; the guest run must take under
//! two minutes and leave no namespace behind.
//!
//! x86_64 needs root (the script installs qemu-system-x86, linux-image-amd64
//! and cpio with apt-get when missing); skips with the reason where qemu
//! cannot be had at all. It runs with every `cargo test`, CI included.
//!
//! aarch64 (an arm64 `virt` machine with the static arm64 relay, at least
//! 10 000 packets) is ignored by default: its release build with Debian's
//! compiler alone takes about 7 minutes on 2 cores from cold, which CI's
//! 40 minutes do not leave room for. It is run before an arm64 change is
//! resolved, by `sudo scripts/vm-relay.sh --arch aarch64` or
//! `cargo test -p tracesync-tests --test vm_relay -- --ignored`, where
//! `scripts/setup-arm64.sh` has installed its toolchain, qemu and kernel
//! (it skips with the reason elsewhere).

use std::process::Command;

use tracesync_tests::tp;

const PINGS: u64 = 150;

/// Why this machine cannot run qemu at all, if it cannot.
fn cannot_run_qemu() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (ip netns, apt-get)".into());
    }
    if !has("qemu-system-x86_64") && !has("apt-get") {
        return Some("no qemu-system-x86_64 and no apt-get to install it".into());
    }
    None
}

fn has(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Why this machine cannot run the arm64 guest, if it cannot: the run
/// needs what `scripts/setup-arm64.sh` installs, and building the arm64
/// relay from nothing takes a quarter of an hour, so it is not installed
/// on the way.
fn cannot_run_arm64() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (ip netns)".into());
    }
    let arm64_std = Command::new("/usr/bin/rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .is_some_and(|root| {
            std::path::Path::new(&root)
                .join("lib/rustlib/aarch64-unknown-linux-gnu/lib")
                .is_dir()
        });
    let arm64_kernel = std::fs::read_dir("/boot").is_ok_and(|dir| {
        dir.filter_map(Result::ok).any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("vmlinuz-") && name.ends_with("-arm64")
        })
    });
    if !(arm64_std && arm64_kernel && has("qemu-system-aarch64") && has("aarch64-linux-gnu-gcc")) {
        return Some(
            "no arm64 toolchain, qemu-system-aarch64 or arm64 kernel (sudo scripts/setup-arm64.sh)"
                .into(),
        );
    }
    None
}

/// `vm-relay: arch ARCH; packets N lost L dup D; causality K/T inside; drift X ppm`.
#[derive(Debug, PartialEq)]
struct Last {
    arch: String,
    packets: u64,
    lost: u64,
    dup: u64,
    inside: u64,
    total: u64,
    drift_ppm: f64,
}

fn parse_last(line: &str) -> Option<Last> {
    let (arch, rest) = line
        .strip_prefix("vm-relay: arch ")?
        .split_once("; packets ")?;
    let w: Vec<&str> = rest.split(' ').collect();
    if w.len() != 11
        || (w[1], w[3], w[5], w[7], w[8], w[10])
            != ("lost", "dup", "causality", "inside;", "drift", "ppm")
    {
        return None;
    }
    let (inside, total) = w[6].split_once('/')?;
    Some(Last {
        arch: arch.to_owned(),
        packets: w[0].parse().ok()?,
        lost: w[2].parse().ok()?,
        dup: w[4].strip_suffix(';')?.parse().ok()?,
        inside: inside.parse().ok()?,
        total: total.parse().ok()?,
        drift_ppm: w[9].parse().ok()?,
    })
}

#[test]
fn the_last_line_is_parsed_exactly() {
    assert_eq!(
        parse_last(
            "vm-relay: arch aarch64; packets 3210 lost 0 dup 0; causality 150/150 inside; \
             drift -1.250 ppm"
        ),
        Some(Last {
            arch: "aarch64".into(),
            packets: 3210,
            lost: 0,
            dup: 0,
            inside: 150,
            total: 150,
            drift_ppm: -1.25
        })
    );
    assert_eq!(
        parse_last("vm-relay: arch x86_64; packets 1 lost 0 dup 0; causality 1/1 inside"),
        None
    );
    // The line before the architecture was named.
    assert_eq!(
        parse_last("vm-relay: packets 1 lost 0 dup 0; causality 1/1 inside; drift 0 ppm"),
        None
    );
    assert_eq!(
        parse_last("packets 1 lost 0 dup 0; causality 1/1 inside; drift 0 ppm"),
        None
    );
}

#[test]
fn a_relay_in_a_qemu_guest_is_aligned_inside_an_independent_causality_window() {
    if let Some(why) = cannot_run_qemu() {
        eprintln!("SKIPPED vm_relay: {why}");
        return;
    }
    if !tp::require_or_skip("vm_relay") {
        return;
    }
    let Some(last) = run_script("x86_64", &[]) else {
        return;
    };
    assert!(last.packets > PINGS, "{last:?}");
}

#[test]
#[ignore = "the arm64 release build takes ~7 min from cold: run by hand (scripts/vm-relay.sh --arch aarch64)"]
fn a_relay_in_an_arm64_guest_carries_ten_thousand_packets_inside_the_same_check() {
    if let Some(why) = cannot_run_arm64() {
        eprintln!("SKIPPED vm_relay (aarch64): {why}");
        return;
    }
    if !tp::require_or_skip("vm_relay") {
        return;
    }
    let Some(last) = run_script("aarch64", &["--arch", "aarch64"]) else {
        return;
    };
    assert!(last.packets >= 10_000, "{last:?}");
}

/// Runs the script with `args` and checks what both architectures must
/// show; None when it cannot get qemu, a kernel or busybox (exit 69).
fn run_script(arch: &str, args: &[&str]) -> Option<Last> {
    let script = tp::repo_root().join("scripts").join("vm-relay.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .env("VM_RELAY_PINGS", PINGS.to_string())
        // Built from nothing on every run: the lighter release profile.
        .env("VM_RELAY_PROFILE", "guest")
        .current_dir(tp::repo_root())
        .output()
        .expect("run scripts/vm-relay.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}\n{stdout}");
    if out.status.code() == Some(69) {
        eprintln!(
            "SKIPPED vm_relay ({arch}): the script cannot get qemu, a kernel or busybox here"
        );
        return None;
    }
    assert!(out.status.success(), "vm-relay.sh failed: {}", out.status);
    let last = stdout.lines().last().unwrap_or_default();
    let last = parse_last(last).unwrap_or_else(|| panic!("last line {last:?}"));
    assert_eq!(last.arch, arch, "{last:?}");
    assert_eq!((last.lost, last.dup), (0, 0), "{last:?}");
    assert_eq!((last.inside, last.total), (PINGS, PINGS), "{last:?}");
    assert!(
        last.drift_ppm.is_finite() && last.drift_ppm.abs() < 500.0,
        "{last:?}"
    );
    let took: u64 = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("vm-relay: guest run took ")?
                .strip_suffix(" s")?
                .parse()
                .ok()
        })
        .expect("the script reports how long the guest run took");
    assert!(took < 120, "the guest run took {took} s");
    // Nothing left: not this run's namespace. Only its own: a namespace of
    // another run (one killed with the machine) is not this run's fault.
    let ours = stderr
        .lines()
        .find_map(|l| l.strip_prefix("vm-relay: network namespace "))
        .expect("the script names its network namespace");
    let netns = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let netns = String::from_utf8_lossy(&netns.stdout);
    assert!(
        !netns.split_whitespace().any(|name| name == ours),
        "namespace {ours} left: {netns}"
    );
    Some(last)
}
