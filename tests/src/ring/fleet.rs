//! The ring tests' relays: a lab PKI with one certificate per relay name,
//! and the four-relay ring fleet over mutual TLS.

use std::time::Duration;

use tracesync_common::tls::pki;

use crate::live::{self, Daemon, DaemonOpts, DaemonTls, Relay, RelayOpts, RelayTls};

/// Each synthetic generator's events per second.
pub const RATE: u64 = 500;

/// The names of `ring_relays`'s relays, in order.
pub const FLEET: [&str; 4] = [
    "ring-plus-7",
    "ring-plus-300",
    "ring-plus-4000",
    "ring-drift-50ppm",
];

/// A lab PKI: the daemon's certificate and one per relay name, as
/// `tracesync pki` makes them (mutual TLS, as shipped).
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new(relays: &[&str]) -> Pki {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let names = ["127.0.0.1".to_owned(), "localhost".to_owned()];
        pki::init(dir.path(), &names).unwrap_or_else(|e| panic!("pki init: {e}"));
        for name in relays {
            pki::issue(dir.path(), name, None).unwrap_or_else(|e| panic!("pki issue: {e}"));
        }
        Pki { dir }
    }

    pub fn daemon(&self) -> DaemonTls {
        DaemonTls {
            cert: self.dir.path().join("daemon.crt"),
            key: self.dir.path().join("daemon.key"),
            client_ca: self.dir.path().join("ca.crt"),
        }
    }

    pub fn relay(&self, name: &str) -> RelayTls {
        RelayTls {
            ca: self.dir.path().join("ca.crt"),
            cert: Some(self.dir.path().join(format!("{name}.crt"))),
            key: Some(self.dir.path().join(format!("{name}.key"))),
            server_name: None,
        }
    }
}

/// The [`FLEET`] as ring relays over mutual TLS: three clocks seconds
/// apart (time namespaces, or simulated offsets without them), one
/// drifting 50 ppm.
fn ring_relays(daemon: &Daemon, pki: &Pki) -> Vec<Relay> {
    let namespaces = live::time_namespaces().is_ok();
    let ring = |name: &str, offset_s: i64| {
        let opts = RelayOpts {
            extra_args: vec!["--mode".into(), "ring".into()],
            ..RelayOpts::synthetic(name, RATE)
        };
        if namespaces {
            opts.in_time_namespace(offset_s)
        } else {
            RelayOpts {
                clock_offset_ns: Some(offset_s * 1_000_000_000),
                ..opts
            }
        }
    };
    let mut specs = vec![ring(FLEET[0], 7), ring(FLEET[1], 300), ring(FLEET[2], 4000)];
    specs.push(RelayOpts {
        clock_offset_ns: Some(2_500_000_000),
        clock_drift_ppm: Some(50.0),
        extra_args: vec!["--mode".into(), "ring".into()],
        ..RelayOpts::synthetic(FLEET[3], RATE)
    });
    specs
        .into_iter()
        .map(|o| {
            let tls = Some(pki.relay(&o.name));
            Relay::start(daemon, RelayOpts { tls, ..o })
        })
        .collect()
}

/// A daemon under mutual TLS with the [`FLEET`] of ring relays,
/// connected and synced, their rings filled for 3 s (a window's start is
/// inside them). The PKI's files live as long as it does.
pub fn start_fleet() -> (Pki, Daemon, Vec<Relay>) {
    let pki = Pki::new(&FLEET);
    let daemon = Daemon::start(DaemonOpts {
        tls: Some(pki.daemon()),
        ..DaemonOpts::default()
    });
    let relays = ring_relays(&daemon, &pki);
    daemon.wait_connected(&FLEET, Duration::from_secs(30));
    daemon.wait_synced(&FLEET, Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(3));
    (pki, daemon, relays)
}
