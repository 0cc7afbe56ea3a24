//! The relay child: its options (TLS, time namespace) and its process.

use super::*;

/// `tracesync-relay --tls-ca/--tls-cert/--tls-key` (cert and key optional,
/// to try a relay without a certificate).
#[derive(Clone, Debug)]
pub struct RelayTls {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
}

/// A relay's clocks shifted by a Linux time namespace (seconds).
#[derive(Clone, Copy, Debug)]
pub struct TimeNamespace {
    pub boottime_s: i64,
    pub monotonic_s: i64,
}

/// Options of [`Relay::start`].
#[derive(Clone, Debug, Default)]
pub struct RelayOpts {
    pub name: String,
    /// `--source` specs, e.g. `synthetic:1000`.
    pub sources: Vec<String>,
    /// Run under `unshare --time --boottime S --monotonic S`.
    pub time_namespace: Option<TimeNamespace>,
    pub clock_offset_ns: Option<i64>,
    pub clock_drift_ppm: Option<f64>,
    pub extra_args: Vec<String>,
    /// Mutual TLS files; None runs plaintext (`--tls off`).
    pub tls: Option<RelayTls>,
    /// Run in this network namespace (`ip netns exec NS`, which execs: the
    /// child's pid stays the relay's).
    pub netns: Option<String>,
}

impl RelayOpts {
    /// A relay named `name` with one `synthetic:RATE` source.
    pub fn synthetic(name: &str, rate: u64) -> Self {
        Self {
            name: name.into(),
            sources: vec![format!("synthetic:{rate}")],
            ..Self::default()
        }
    }

    /// The same in a time namespace shifted by `secs` (BOOTTIME and
    /// MONOTONIC alike).
    pub fn in_time_namespace(mut self, secs: i64) -> Self {
        self.time_namespace = Some(TimeNamespace {
            boottime_s: secs,
            monotonic_s: secs,
        });
        self
    }
}

/// A running `tracesync-relay` with its own spool dir.
pub struct Relay {
    dir: tempfile::TempDir,
    pub spool: PathBuf,
    /// Its control socket (`tracesync-relay trigger --connect`), in its
    /// own directory.
    pub control: PathBuf,
    pub host: SocketAddr,
    token: String,
    pub opts: RelayOpts,
    child: Option<Child>,
    log: Log,
}

impl Relay {
    /// Starts a relay sending to `daemon`.
    pub fn start(daemon: &Daemon, opts: RelayOpts) -> Relay {
        Self::start_to(daemon.data_addr, &daemon.token, opts)
    }

    /// Starts one relay per name (options from `opts(index, name)`) and
    /// waits (60 s at most) until the daemon has each connected and synced.
    pub fn start_synced(
        daemon: &Daemon,
        names: &[String],
        opts: impl Fn(usize, &str) -> RelayOpts,
    ) -> Vec<Relay> {
        let relays = names
            .iter()
            .enumerate()
            .map(|(i, n)| Relay::start(daemon, opts(i, n)))
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        daemon.wait_connected(&refs, Duration::from_secs(60));
        daemon.wait_synced(&refs, Duration::from_secs(60));
        relays
    }

    pub fn start_to(host: SocketAddr, token: &str, opts: RelayOpts) -> Relay {
        let dir = tempfile::tempdir().expect("tempdir");
        let spool = dir.path().join("spool");
        std::fs::create_dir_all(&spool).expect("create spool dir");
        let mut r = Relay {
            control: dir.path().join("control.sock"),
            spool,
            dir,
            host,
            token: token.into(),
            opts,
            child: None,
            log: Log::default(),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let relay = bin("tracesync-relay");
        let mut cmd = match (self.opts.time_namespace, &self.opts.netns) {
            (time, Some(net)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", net]);
                if let Some(ns) = time {
                    c.arg("unshare")
                        .arg("--time")
                        .arg("--boottime")
                        .arg(ns.boottime_s.to_string())
                        .arg("--monotonic")
                        .arg(ns.monotonic_s.to_string());
                }
                c.arg(relay);
                c
            }
            (Some(ns), None) => {
                // unshare execs the relay itself (no fork), so the child's
                // pid is the relay's and kill -9 reaches it.
                let mut c = Command::new("unshare");
                c.arg("--time")
                    .arg("--boottime")
                    .arg(ns.boottime_s.to_string())
                    .arg("--monotonic")
                    .arg(ns.monotonic_s.to_string())
                    .arg(relay);
                c
            }
            (None, None) => Command::new(relay),
        };
        cmd.arg("--host")
            .arg(self.host.to_string())
            .arg("--name")
            .arg(&self.opts.name)
            .arg("--token")
            .arg(&self.token)
            .arg("--spool")
            .arg(&self.spool)
            .arg("--control-socket")
            .arg(&self.control);
        for s in &self.opts.sources {
            cmd.arg("--source").arg(s);
        }
        if let Some(o) = self.opts.clock_offset_ns {
            cmd.arg("--clock-offset-ns").arg(o.to_string());
        }
        if let Some(d) = self.opts.clock_drift_ppm {
            cmd.arg("--clock-drift-ppm").arg(d.to_string());
        }
        match &self.opts.tls {
            None => {
                cmd.args(["--tls", "off"]);
            }
            Some(tls) => {
                cmd.arg("--tls-ca").arg(&tls.ca);
                if let Some(cert) = &tls.cert {
                    cmd.arg("--tls-cert").arg(cert);
                }
                if let Some(key) = &tls.key {
                    cmd.arg("--tls-key").arg(key);
                }
                if let Some(name) = &tls.server_name {
                    cmd.arg("--tls-server-name").arg(name);
                }
            }
        }
        cmd.args(&self.opts.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .current_dir(self.dir.path());
        let mut child = cmd.spawn().expect("spawn tracesync-relay");
        let label = format!("relay {}", self.opts.name);
        if let Some(out) = child.stdout.take() {
            drain(out, label.clone(), self.log.clone(), None);
        }
        if let Some(err) = child.stderr.take() {
            drain(err, label, self.log.clone(), None);
        }
        self.child = Some(child);
    }

    pub fn name(&self) -> &str {
        &self.opts.name
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the relay process has exited (e.g. refused by the daemon).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGTERM and wait.
    pub fn stop(&mut self) -> ExitStatus {
        let child = self.child.take().expect("relay is running");
        let what = format!("tracesync-relay {}", self.opts.name);
        terminate(child, &what).unwrap_or_else(|e| panic!("{e}; output:\n{}", self.log.text()))
    }

    /// SIGKILL: whatever is not in the spool's disk segments is lost to the
    /// relay, which must resume from its persisted cursors.
    pub fn kill9(&mut self) {
        if let Some(c) = self.child.take() {
            kill9(c);
        }
    }

    /// Starts the relay again on the same spool (and name, clocks, sources).
    pub fn restart(&mut self) {
        assert!(
            self.child.is_none(),
            "restart: stop or kill the relay first"
        );
        self.log.push("---- restart ----".into());
        self.spawn();
    }

    pub fn log(&self) -> String {
        self.log.text()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            kill9(c);
        }
        if std::thread::panicking() {
            eprintln!(
                "---- relay {} output (last lines) ----\n{}",
                self.opts.name,
                self.log.text()
            );
        }
    }
}
