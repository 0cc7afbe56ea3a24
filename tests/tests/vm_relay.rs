//! `scripts/vm-relay.sh` end to end: a relay in a qemu guest (software
//! emulation) with its own kernel clocks, behind a virtual NIC, checked by
//! numbered pings over the guest's serial port. The script's last line
//! (docs/operations-machines.md) must say nothing was lost or duplicated and every ping
//! event lies inside its host [send, receive] window widened by its
//! `err_ns`; the guest run must take under two minutes and leave no
//! namespace behind.
//!
//! Needs root (the script installs qemu-system-x86, linux-image-amd64,
//! busybox-static and cpio with apt-get when missing); skips with the reason
//! where qemu cannot be had at all.

use std::process::Command;

use tracesync_tests::tp;

const PINGS: u64 = 150;

/// Why this machine cannot run qemu at all, if it cannot.
fn cannot_run_qemu() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (ip netns, apt-get)".into());
    }
    let has = |cmd: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {cmd}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has("qemu-system-x86_64") && !has("apt-get") {
        return Some("no qemu-system-x86_64 and no apt-get to install it".into());
    }
    None
}

/// `vm-relay: packets N lost L dup D; causality K/T inside; drift X ppm`.
#[derive(Debug, PartialEq)]
struct Last {
    packets: u64,
    lost: u64,
    dup: u64,
    inside: u64,
    total: u64,
    drift_ppm: f64,
}

fn parse_last(line: &str) -> Option<Last> {
    let rest = line.strip_prefix("vm-relay: packets ")?;
    let w: Vec<&str> = rest.split(' ').collect();
    if w.len() != 11
        || (w[1], w[3], w[5], w[7], w[8], w[10])
            != ("lost", "dup", "causality", "inside;", "drift", "ppm")
    {
        return None;
    }
    let (inside, total) = w[6].split_once('/')?;
    Some(Last {
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
            "vm-relay: packets 3210 lost 0 dup 0; causality 150/150 inside; drift -1.250 ppm"
        ),
        Some(Last {
            packets: 3210,
            lost: 0,
            dup: 0,
            inside: 150,
            total: 150,
            drift_ppm: -1.25
        })
    );
    assert_eq!(
        parse_last("vm-relay: packets 1 lost 0 dup 0; causality 1/1 inside"),
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
    let script = tp::repo_root().join("scripts").join("vm-relay.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env("VM_RELAY_PINGS", PINGS.to_string())
        .current_dir(tp::repo_root())
        .output()
        .expect("run scripts/vm-relay.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}\n{stdout}");
    if out.status.code() == Some(69) {
        eprintln!("SKIPPED vm_relay: the script cannot get qemu, a kernel or busybox here");
        return;
    }
    assert!(out.status.success(), "vm-relay.sh failed: {}", out.status);
    let last = stdout.lines().last().unwrap_or_default();
    let last = parse_last(last).unwrap_or_else(|| panic!("last line {last:?}"));
    assert_eq!((last.lost, last.dup), (0, 0), "{last:?}");
    assert_eq!((last.inside, last.total), (PINGS, PINGS), "{last:?}");
    assert!(last.packets > PINGS, "{last:?}");
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
}
