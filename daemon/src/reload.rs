//! SIGHUP: what of a re-read configuration the running daemon applies, and
//! what needs a restart.
//!
//! Applied at once: `log.level`, `auth.token`, `auth.allow-machines` (for
//! the next connections), and the output's rotation and retention
//! (`output.rotate-*`, `output.retain-*`, pushed to the rolling writer by
//! the ingest thread), and the prober's schedule (`sync.*` but
//! `sync.sync-point-threshold-ns`, handed to the prober thread through its
//! registry; running sessions keep their estimators). Everything else (listen addresses, the output
//! directory, commit interval, fsync, merge and limits, and any section this
//! module does not know) is reported as needing a restart and keeps its
//! running value; so are `[tls]` certificates, keys and the CRL, which are
//! read at startup only.
//!
//! [`plan`] is pure: it compares two configs and says which keys changed.

use std::time::Duration;

use crate::config::DaemonConfig;

/// Rotation and retention of the rolling output (the reloadable part of
/// `[output]`), in the rolling writer's terms: `u64::MAX` / `Duration::MAX`
/// for "no limit" on rotation, zero age for "keep all" on retention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimits {
    pub max_file_bytes: u64,
    pub max_file_age: Duration,
    pub retain_bytes: u64,
    pub retain_age: Duration,
}

impl OutputLimits {
    /// From the config, where 0 means "no limit".
    pub fn from_config(config: &DaemonConfig) -> Self {
        let out = &config.output;
        Self {
            max_file_bytes: nonzero_or_max(out.rotate_bytes),
            max_file_age: match out.rotate_seconds {
                0 => Duration::MAX,
                s => Duration::from_secs(s),
            },
            retain_bytes: nonzero_or_max(out.retain_bytes),
            // Zero age is "no age limit" in the rolling writer too.
            retain_age: Duration::from_secs(out.retain_seconds),
        }
    }
}

fn nonzero_or_max(v: u64) -> u64 {
    if v == 0 { u64::MAX } else { v }
}

/// What changed between the running config and the re-read one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// Changed keys applied without a restart.
    pub applied: Vec<&'static str>,
    /// Changed keys that keep their running value until a restart.
    pub need_restart: Vec<&'static str>,
}

impl ReloadPlan {
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.need_restart.is_empty()
    }

    pub fn log_level_changed(&self) -> bool {
        self.applied.contains(&"log.level")
    }

    pub fn output_limits_changed(&self) -> bool {
        self.applied.iter().any(|k| k.starts_with("output."))
    }

    /// A key of the prober's schedule changed (`sync.*`, applied live).
    pub fn prober_changed(&self) -> bool {
        self.applied.iter().any(|k| k.starts_with("sync."))
    }

    /// The one log line: what changed, and what needs a restart.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return "no changes".to_owned();
        }
        let list = |keys: &[&str]| {
            if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.join(", ")
            }
        };
        format!(
            "applied: {}; need a restart (running values kept): {}",
            list(&self.applied),
            list(&self.need_restart)
        )
    }
}

/// Compares the running config with a re-read one.
pub fn plan(running: &DaemonConfig, new: &DaemonConfig) -> ReloadPlan {
    let mut plan = ReloadPlan::default();
    let mut live = |changed: bool, key: &'static str| {
        if changed {
            plan.applied.push(key);
        }
    };
    live(running.log.level != new.log.level, "log.level");
    live(running.auth.token != new.auth.token, "auth.token");
    live(
        running.auth.allow_machines != new.auth.allow_machines,
        "auth.allow-machines",
    );
    let (o, n) = (&running.output, &new.output);
    live(o.rotate_bytes != n.rotate_bytes, "output.rotate-bytes");
    live(
        o.rotate_seconds != n.rotate_seconds,
        "output.rotate-seconds",
    );
    live(o.retain_bytes != n.retain_bytes, "output.retain-bytes");
    live(
        o.retain_seconds != n.retain_seconds,
        "output.retain-seconds",
    );
    let (s, t) = (&running.sync, &new.sync);
    live(s.burst_probes != t.burst_probes, "sync.burst-probes");
    live(
        s.burst_interval_ms != t.burst_interval_ms,
        "sync.burst-interval-ms",
    );
    live(
        s.steady_interval_ms != t.steady_interval_ms,
        "sync.steady-interval-ms",
    );
    live(
        s.min_interval_ms != t.min_interval_ms,
        "sync.min-interval-ms",
    );
    live(
        s.max_interval_ms != t.max_interval_ms,
        "sync.max-interval-ms",
    );
    live(s.warmup_ms != t.warmup_ms, "sync.warmup-ms");
    live(s.train_length != t.train_length, "sync.train-length");
    live(
        s.probe_timeout_ms != t.probe_timeout_ms,
        "sync.probe-timeout-ms",
    );

    let mut restart = |changed: bool, key: &'static str| {
        if changed {
            plan.need_restart.push(key);
        }
    };
    let (l, m) = (&running.listen, &new.listen);
    restart(l.data != m.data, "listen.data");
    restart(l.sync != m.sync, "listen.sync");
    restart(l.control != m.control, "listen.control");
    restart(running.metrics != new.metrics, "metrics.listen");
    restart(running.log.format != new.log.format, "log.format");
    restart(o.dir != n.dir, "output.dir");
    restart(
        o.commit_interval_ms != n.commit_interval_ms,
        "output.commit-interval-ms",
    );
    restart(o.fsync != n.fsync, "output.fsync");
    // Certificates, keys and the CRL are read at startup only.
    restart(running.tls != new.tls, "tls");
    restart(running.merge != new.merge, "merge");
    restart(running.limits != new.limits, "limits");
    restart(
        s.sync_point_threshold_ns != t.sync_point_threshold_ns,
        "sync.sync-point-threshold-ns",
    );
    restart(
        s.kernel_rx_timestamps != t.kernel_rx_timestamps,
        "sync.kernel-rx-timestamps",
    );

    // Sections this function does not name (added later): compare what is
    // left once every named key is made equal.
    let mut rest = new.clone();
    rest.log = running.log.clone();
    rest.auth = running.auth.clone();
    rest.output = running.output.clone();
    rest.listen = running.listen.clone();
    rest.merge = running.merge.clone();
    rest.limits = running.limits.clone();
    rest.sync = running.sync;
    rest.tls = running.tls.clone();
    restart(&rest != running, "other sections");
    plan
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::LogLevel;

    fn parse(text: &str) -> DaemonConfig {
        DaemonConfig::from_toml(text, Path::new("daemon.toml")).expect("config")
    }

    #[test]
    fn same_config_changes_nothing() {
        let config = parse(include_str!("../../configs/daemon.toml"));
        let plan = plan(&config, &config.clone());
        assert!(plan.is_empty());
        assert_eq!(plan.summary(), "no changes");
    }

    #[test]
    fn live_keys_are_applied_and_the_rest_need_a_restart() {
        let running = DaemonConfig::default();
        let new = parse(
            r#"
            [listen]
            data = "127.0.0.1:9"
            [auth]
            token = "t"
            allow-machines = ["vm-1"]
            [output]
            dir = "/elsewhere"
            retain-bytes = 1000
            rotate-seconds = 60
            [log]
            level = "debug"
            [limits]
            max-relays = 3
            "#,
        );
        let plan = plan(&running, &new);
        assert_eq!(
            plan.applied,
            [
                "log.level",
                "auth.token",
                "auth.allow-machines",
                "output.rotate-seconds",
                "output.retain-bytes"
            ]
        );
        assert_eq!(plan.need_restart, ["listen.data", "output.dir", "limits"]);
        assert!(plan.log_level_changed());
        assert!(plan.output_limits_changed());
        assert_eq!(
            plan.summary(),
            "applied: log.level, auth.token, auth.allow-machines, output.rotate-seconds, \
             output.retain-bytes; need a restart (running values kept): listen.data, \
             output.dir, limits"
        );
    }

    #[test]
    fn certificates_and_the_crl_need_a_restart() {
        let running = DaemonConfig::default();
        let new = parse("[tls]\ncrl = \"/etc/tracesync/tls/ca.crl\"\n");
        let plan = plan(&running, &new);
        assert!(plan.applied.is_empty());
        assert_eq!(plan.need_restart, ["tls"]);
    }

    #[test]
    fn only_the_log_level() {
        let running = DaemonConfig::default();
        let mut new = running.clone();
        new.log.level = LogLevel::Trace;
        let plan = plan(&running, &new);
        assert_eq!(plan.applied, ["log.level"]);
        assert!(plan.need_restart.is_empty());
        assert!(!plan.output_limits_changed());
    }

    #[test]
    fn the_probers_schedule_is_applied_and_the_threshold_needs_a_restart() {
        let running = DaemonConfig::default();
        let new = parse(
            "[sync]\nmax-interval-ms = 1000\nprobe-timeout-ms = 500\n\
             sync-point-threshold-ns = 10\nkernel-rx-timestamps = false\n",
        );
        assert!(!new.sync.kernel_rx_timestamps);
        let plan = plan(&running, &new);
        assert_eq!(
            plan.applied,
            ["sync.max-interval-ms", "sync.probe-timeout-ms"]
        );
        assert_eq!(
            plan.need_restart,
            ["sync.sync-point-threshold-ns", "sync.kernel-rx-timestamps"]
        );
        assert!(plan.prober_changed());
        assert!(!plan.output_limits_changed());
    }

    #[test]
    fn zero_means_no_limit() {
        let mut config = DaemonConfig::default();
        config.output.rotate_bytes = 0;
        config.output.rotate_seconds = 0;
        config.output.retain_bytes = 0;
        config.output.retain_seconds = 0;
        let limits = OutputLimits::from_config(&config);
        assert_eq!(limits.max_file_bytes, u64::MAX);
        assert_eq!(limits.max_file_age, Duration::MAX);
        assert_eq!(limits.retain_bytes, u64::MAX);
        assert_eq!(limits.retain_age, Duration::ZERO);
    }
}
