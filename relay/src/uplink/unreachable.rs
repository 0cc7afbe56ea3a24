//! A daemon the relay cannot reach: the connection is refused, gets no
//! answer, or the network has no route. Unlike a configuration fault
//! ([`super::misconfig`]) this is retried forever (a daemon restarting, a
//! phone's USB cable out and back in), and the spool keeps everything
//! meanwhile. Each outage is said once, in one line naming what to check
//! (on a loopback address: the daemon on this machine, or the `adb
//! reverse` that forwards a phone's port to the host); its repeats go to
//! the debug log, and the first connection after it says how long it took.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Why one connection attempt did not connect.
#[derive(Debug)]
pub enum ConnectFailure {
    Io(io::Error),
    TimedOut(Duration),
}

/// The one line an outage is told with (after `daemon HOST: `), ending in
/// what the relay does about it.
pub fn describe(host: &str, failure: &ConnectFailure) -> String {
    let port = port_of(host);
    let what = match failure {
        ConnectFailure::Io(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            if is_loopback(host) {
                format!(
                    "connection refused: nothing listens there; start tracesyncd on this \
                     machine, or, on a phone over USB, run `adb reverse tcp:{port} tcp:{port}` \
                     on the host (and `adb reverse tcp:7411 tcp:7411` for clock sync)"
                )
            } else {
                format!(
                    "connection refused: check that tracesyncd runs there, listens on that \
                     address ([listen] data) and that port {port} is open to this machine"
                )
            }
        }
        ConnectFailure::Io(e) => format!("cannot connect ({e}): check the address and the network"),
        ConnectFailure::TimedOut(after) => format!(
            "no answer within {} s: check the address, and that the network and firewalls let \
             this machine reach port {port}",
            after.as_secs_f64().ceil()
        ),
    };
    format!("daemon {host}: {what}; keeping the spool and retrying with backoff")
}

fn port_of(host: &str) -> String {
    host.rsplit_once(':')
        .map_or_else(String::new, |(_, port)| port.to_owned())
}

/// Whether `host` (`HOST:PORT`) is this machine: a loopback address or
/// `localhost`.
fn is_loopback(host: &str) -> bool {
    if let Ok(addr) = host.parse::<SocketAddr>() {
        return addr.ip().is_loopback();
    }
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    name.eq_ignore_ascii_case("localhost")
        || name
            .trim_matches(['[', ']'])
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One outage: when it started and the attempts that failed in it.
#[derive(Debug)]
pub struct Outage {
    since: Instant,
    attempts: u32,
}

impl Outage {
    /// A failed attempt: the outage's line when it starts it (to be said
    /// as a warning), None while it goes on.
    pub fn failed(outage: &mut Option<Outage>, reason: &str, now: Instant) -> Option<String> {
        match outage {
            Some(run) => {
                run.attempts += 1;
                tracing::debug!("{reason}; attempt {}", run.attempts);
                None
            }
            None => {
                *outage = Some(Outage {
                    since: now,
                    attempts: 1,
                });
                Some(reason.to_owned())
            }
        }
    }

    /// How long it has lasted, in whole seconds.
    pub fn seconds(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.since).as_secs()
    }

    /// The line saying the outage is over (a connection was made).
    pub fn over(self, host: &str, now: Instant) -> String {
        format!(
            "daemon {host}: reachable again after {} failed attempts in {:.0} s",
            self.attempts,
            now.saturating_duration_since(self.since).as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> ConnectFailure {
        ConnectFailure::Io(io::Error::from(io::ErrorKind::ConnectionRefused))
    }

    #[test]
    fn a_refused_loopback_port_names_adb_reverse() {
        let line = describe("127.0.0.1:7410", &refused());
        assert_eq!(
            line,
            "daemon 127.0.0.1:7410: connection refused: nothing listens there; start tracesyncd \
             on this machine, or, on a phone over USB, run `adb reverse tcp:7410 tcp:7410` on \
             the host (and `adb reverse tcp:7411 tcp:7411` for clock sync); keeping the spool \
             and retrying with backoff"
        );
        assert!(describe("localhost:9000", &refused()).contains("adb reverse tcp:9000 tcp:9000"));
        assert!(describe("[::1]:7410", &refused()).contains("adb reverse"));
        assert!(!line.contains('\n'));
    }

    #[test]
    fn a_remote_daemon_gets_the_network_checks() {
        let line = describe("192.0.2.7:7410", &refused());
        assert!(line.contains("tracesyncd runs there"), "{line}");
        assert!(!line.contains("adb"), "{line}");
        let slow = describe(
            "tracehost:7410",
            &ConnectFailure::TimedOut(Duration::from_secs(5)),
        );
        assert!(
            slow.starts_with("daemon tracehost:7410: no answer within 5 s"),
            "{slow}"
        );
        let unreachable = describe(
            "192.0.2.7:7410",
            &ConnectFailure::Io(io::Error::from(io::ErrorKind::NetworkUnreachable)),
        );
        assert!(unreachable.contains("cannot connect ("), "{unreachable}");
    }

    #[test]
    fn an_outage_is_said_once_and_its_end_with_its_attempts() {
        let t0 = Instant::now();
        let mut outage = None;
        assert_eq!(
            Outage::failed(&mut outage, "down", t0).as_deref(),
            Some("down")
        );
        for i in 1..5 {
            assert_eq!(
                Outage::failed(&mut outage, "down", t0 + Duration::from_secs(i)),
                None
            );
        }
        let over = outage
            .take()
            .unwrap()
            .over("127.0.0.1:7410", t0 + Duration::from_secs(12));
        assert_eq!(
            over,
            "daemon 127.0.0.1:7410: reachable again after 5 failed attempts in 12 s"
        );
        // The next outage is said again.
        assert!(Outage::failed(&mut outage, "down", t0).is_some());
    }
}
