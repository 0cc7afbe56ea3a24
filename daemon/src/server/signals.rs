//! The daemon's signals: SIGTERM and SIGINT stop it (drain, final
//! commit, final acks); SIGHUP re-reads the config and applies what can
//! change while it runs ([`crate::reload`]), keeping the rest as it runs.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{info, warn};

use super::Shared;
use crate::config::{DaemonArgs, DaemonConfig, LogLevel};
use crate::reload::{self, OutputLimits};
use crate::sync::ProbeSessions;

/// SIGTERM / SIGINT: stop (drain, final commit, final acks). SIGHUP:
/// re-read the config and apply what can change live ([`crate::reload`]).
pub(super) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(super) fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    pub(super) async fn handle<P>(mut self, shared: Arc<Shared<P>>, mut reloader: Reloader) {
        loop {
            tokio::select! {
                _ = self.term.recv() => break,
                _ = self.int.recv() => break,
                _ = self.hup.recv() => reloader.reload(&shared),
            }
        }
        info!("stopping: finishing current frames, committing, acknowledging");
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        shared.shutdown.cancel();
    }
}

/// The running config and where to push what a reload changes.
pub(super) struct Reloader {
    pub running: DaemonConfig,
    pub path: Option<PathBuf>,
    pub args: DaemonArgs,
    pub limits: watch::Sender<OutputLimits>,
    /// The prober's registry: `[sync]` changes reach the prober through it.
    pub probes: ProbeSessions,
}

impl Reloader {
    /// Re-reads the file (flags still win), applies what can change at run
    /// time and logs one line saying what changed and what needs a restart.
    fn reload<P>(&mut self, shared: &Shared<P>) {
        let Some(path) = self.path.clone() else {
            info!("SIGHUP: started without a config file; nothing to reload");
            return;
        };
        let args = DaemonArgs {
            config: Some(path.clone()),
            ..self.args.clone()
        };
        let new = match DaemonConfig::load(&args) {
            Ok((config, _)) => config,
            Err(e) => {
                warn!("SIGHUP: keeping the running config: {e}");
                return;
            }
        };
        let plan = reload::plan(&self.running, &new);
        let mut applied = new.clone();
        if plan.log_level_changed() {
            match set_log_level(new.log.level) {
                Ok(()) => {}
                Err(e) => {
                    warn!("SIGHUP: cannot change the log level: {e}");
                    applied.log = self.running.log.clone();
                }
            }
        }
        shared.set_token(new.auth.required_token());
        shared.set_allow_machines(&new.auth.allow_machines);
        if plan.output_limits_changed() {
            self.limits.send_replace(OutputLimits::from_config(&new));
        }
        if plan.prober_changed() {
            self.probes.set_config(new.sync.prober_config());
        }
        info!("SIGHUP: reloaded {}: {}", path.display(), plan.summary());
        if applied.log.level != self.running.log.level {
            tracing::debug!("log level is now {}", applied.log.level.as_str());
        }
        // Keys that need a restart keep their running values, so the next
        // reload reports them again until the restart.
        keep_restart_only(&mut applied, &self.running);
        self.running = applied;
    }
}

/// `applied` takes the running values of every key a reload cannot change.
fn keep_restart_only(applied: &mut DaemonConfig, running: &DaemonConfig) {
    let mut kept = running.clone();
    kept.log = applied.log.clone();
    kept.auth = applied.auth.clone();
    kept.output.rotate_bytes = applied.output.rotate_bytes;
    kept.output.rotate_seconds = applied.output.rotate_seconds;
    kept.output.retain_bytes = applied.output.retain_bytes;
    kept.output.retain_seconds = applied.output.retain_seconds;
    kept.sync = crate::sync::config::SyncConfig {
        sync_point_threshold_ns: running.sync.sync_point_threshold_ns,
        ..applied.sync
    };
    *applied = kept;
}

/// The reload hook for `log.level` (SIGHUP): the one call site that changes
/// the running log level (RUST_LOG, when set, keeps winning).
fn set_log_level(level: LogLevel) -> Result<(), String> {
    match tracesync_common::logging::set_level(level.as_str()) {
        Ok(tracesync_common::logging::LevelChange::KeptEnv) => {
            info!(
                "SIGHUP: log.level {} ignored: RUST_LOG is set and wins",
                level.as_str()
            );
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}
