//! How relays reach the daemon in a real-socket run, and the addresses of
//! the namespaces that wiring makes.

/// The daemon's address in its namespace (H).
pub const DAEMON_IP: &str = "10.201.0.1";
/// The proxy's address on its link to the daemon.
pub const PROXY_UPSTREAM_IP: &str = "10.201.0.2";

/// How relays reach the daemon in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wiring {
    /// Relays in the daemon's namespace, over `lo`; no proxy.
    Loopback,
    /// A veth pair from each relay's namespace straight to the daemon's.
    Veth,
    /// Through `tracesync-impair` with this link profile.
    Proxy(&'static str),
}

impl Wiring {
    /// The wiring of a harness profile name: `loopback` and `veth` are
    /// direct, `proxy-loopback` is the proxy's `loopback` profile (no
    /// impairment), any other name a proxy profile. None: unknown.
    pub fn of(profile: &str) -> Option<Wiring> {
        match profile {
            "loopback" => Some(Wiring::Loopback),
            "veth" => Some(Wiring::Veth),
            "proxy-loopback" => Some(Wiring::Proxy("loopback")),
            other => crate::impair::model::profile_names()
                .into_iter()
                .find(|p| *p == other && *p != "loopback")
                .map(Wiring::Proxy),
        }
    }

    /// Every profile name [`Wiring::of`] knows.
    pub fn profile_names() -> Vec<String> {
        let mut names = vec!["loopback".to_owned(), "veth".to_owned()];
        names.push("proxy-loopback".to_owned());
        names.extend(
            crate::impair::model::profile_names()
                .into_iter()
                .filter(|p| *p != "loopback")
                .map(String::from),
        );
        names
    }

    pub fn proxy_profile(self) -> Option<&'static str> {
        match self {
            Wiring::Proxy(p) => Some(p),
            _ => None,
        }
    }

    /// Whether the relays reach the daemon over TCP only (the proxy's
    /// profile says so): probes take the relay's TCP transport.
    pub fn tcp_only(self) -> bool {
        self.proxy_profile()
            .and_then(crate::impair::model::profile)
            .is_some_and(|p| p.tcp_only)
    }
}
