//! Firing triggers with the real commands and reading what they print.

use std::path::Path;
use std::process::Command;

use crate::live::{Daemon, Relay, bin};

/// Runs `tracesync trigger NAME --before B --after A` against the daemon:
/// exit code, stdout, stderr.
pub fn trigger(daemon: &Daemon, name: &str, before: &str, after: &str) -> (i32, String, String) {
    run_trigger("tracesync", &daemon.control, [name, before, after])
}

/// Runs `tracesync-relay trigger` on `relay`'s machine (its control
/// socket): exit code, stdout, stderr.
pub fn relay_trigger(
    relay: &Relay,
    name: &str,
    before: &str,
    after: &str,
) -> (i32, String, String) {
    run_trigger("tracesync-relay", &relay.control, [name, before, after])
}

/// `PROGRAM trigger NAME --before B --after A --connect SOCKET`.
fn run_trigger(
    program: &str,
    socket: &Path,
    [name, before, after]: [&str; 3],
) -> (i32, String, String) {
    let out = Command::new(bin(program))
        .arg("trigger")
        .arg(name)
        .args(["--before", before, "--after", after, "--connect"])
        .arg(socket)
        .output()
        .unwrap_or_else(|e| panic!("run {program} trigger: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fired trigger as the trigger commands print it: `trigger NAME fired
/// at host time T ns (id 0123...) ...; snapshot FILE`.
#[derive(Debug, Clone)]
pub struct Fired {
    pub id: u64,
    /// The snapshot's file name in the daemon's output directory.
    pub snapshot: String,
    /// T on the host's clock (ns).
    pub host_time: i64,
}

impl Fired {
    /// Parses a trigger command's stdout; panics naming what is missing.
    pub fn parse(stdout: &str) -> Fired {
        let hex = between(stdout, "(id ", ")");
        let id = u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("id {hex}: {e}"));
        let snapshot = stdout
            .split_once("; snapshot ")
            .and_then(|(_, rest)| rest.lines().next())
            .map(|n| n.trim().to_owned())
            .unwrap_or_else(|| panic!("no snapshot in {stdout:?}"));
        let host_time = between(stdout, "at host time ", " ns")
            .parse()
            .unwrap_or_else(|e| panic!("host time in {stdout:?}: {e}"));
        Fired {
            id,
            snapshot,
            host_time,
        }
    }

    /// The line a ring relay logs once the daemon has its window.
    pub fn acked(&self) -> String {
        format!("trigger {:016x}: the daemon has the window", self.id)
    }
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    text.split_once(start)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(v, _)| v.trim())
        .unwrap_or_else(|| panic!("no {start:?}..{end:?} in {text:?}"))
}
