//! `tracesyncd`: configuration, logging, sockets, the output, the tasks,
//! systemd notification and signals.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::ingest::IngestSettings;
use super::run::{self, Parts};
use super::{SessionSettings, Shared, listener};
use crate::config::{DaemonArgs, DaemonConfig};
use crate::control::{self, ControlHub, DEFAULT_TAIL_CAPACITY};
use crate::exit;
use crate::live::{LiveConfig, LiveCore};
use crate::rolling::{RollingConfig, RollingWriter};
use crate::status::StatusReport;
use crate::sync::{ProbeSessions, spawn_prober};

/// Sync updates waiting for the ingest loop (the prober holds its samples
/// when this is full).
const SYNC_QUEUE: usize = 256;

/// A startup failure: one line and its exit code.
struct Fatal {
    code: u8,
    message: String,
}

impl Fatal {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Permission problems are 77; anything else gets `code`.
    fn io(code: u8, what: String, e: &std::io::Error) -> Self {
        let code = if e.kind() == std::io::ErrorKind::PermissionDenied {
            exit::NOPERM
        } else {
            code
        };
        Self::new(code, format!("{what}: {e}"))
    }
}

pub fn main() -> ExitCode {
    let args = match exit::parse_args::<DaemonArgs>() {
        Ok(parsed) => parsed,
        Err(code) => return code,
    };
    let (config, config_path) = match DaemonConfig::load(&args) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("tracesyncd: {e}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    if args.check_config {
        println!("ok");
        return ExitCode::from(exit::OK);
    }
    init_logging(&config);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tracesyncd")
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tracesyncd: cannot start the async runtime: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let code = match runtime.block_on(run_daemon(config, config_path, args)) {
        Ok(()) => exit::OK,
        Err(fatal) => {
            error!("{}", fatal.message);
            eprintln!("tracesyncd: {}", fatal.message);
            fatal.code
        }
    };
    // Tasks still blocked (a relay that never reads) must not hold exit up.
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::from(code)
}

/// RUST_LOG wins; else the config's level (see [`crate::logging`]).
fn init_logging(config: &DaemonConfig) {
    crate::logging::init(config.log.level.as_str(), config.log.format);
}

async fn run_daemon(
    config: DaemonConfig,
    config_path: Option<PathBuf>,
    args: DaemonArgs,
) -> Result<(), Fatal> {
    // Installed first, so a SIGTERM during startup still stops us cleanly.
    let signals = Signals::install()
        .map_err(|e| Fatal::io(exit::SOFTWARE, "cannot install signal handlers".into(), &e))?;
    let data = listener::bind_data(config.listen.data).map_err(|e| {
        Fatal::io(
            exit::UNAVAILABLE,
            format!("cannot listen on {} (listen.data)", config.listen.data),
            &e,
        )
    })?;
    let sync = UdpSocket::bind(config.listen.sync).await.map_err(|e| {
        Fatal::io(
            exit::UNAVAILABLE,
            format!("cannot bind {} (listen.sync)", config.listen.sync),
            &e,
        )
    })?;
    let control_path = config.listen.control.clone();
    let control_listener = control::bind_unix(&control_path).map_err(|e| {
        let what = format!(
            "cannot create the control socket {} (listen.control)",
            control_path.display()
        );
        Fatal::io(exit::CANTCREAT, what, &e)
    })?;
    let data_addr = data
        .local_addr()
        .map_err(|e| Fatal::io(exit::IOERR, "data socket".into(), &e))?;
    let sync_addr = sync
        .local_addr()
        .map_err(|e| Fatal::io(exit::IOERR, "sync socket".into(), &e))?;
    if let Some(addr) = config.metrics.listen {
        crate::metrics::install(addr).map_err(|e| {
            Fatal::new(
                exit::UNAVAILABLE,
                format!("cannot serve metrics on {addr} (metrics.listen): {e}"),
            )
        })?;
        info!("metrics: Prometheus text on http://{addr}/metrics");
    }

    let rolling = rolling_config(&config);
    let (writer, recovered) = tokio::task::spawn_blocking(move || RollingWriter::open(rolling))
        .await
        .map_err(|e| Fatal::new(exit::SOFTWARE, format!("opening the output panicked: {e}")))?
        .map_err(|e| Fatal::new(exit::CANTCREAT, format!("{e} (output.dir)")))?;
    let core = LiveCore::new(live_config(&config), recovered.clone());

    let shutdown = CancellationToken::new();
    let (status_tx, status_rx) = watch::channel(Arc::new(StatusReport::default()));
    let hub = ControlHub::new(DEFAULT_TAIL_CAPACITY, status_rx);
    let probes = ProbeSessions::new();
    let (sync_tx, sync_updates) = mpsc::channel(SYNC_QUEUE);
    let prober = spawn_prober(sync, probes.clone(), sync_tx, shutdown.clone());
    let control_task = tokio::spawn(control::serve(
        control_listener,
        hub.clone(),
        shutdown.clone(),
    ));

    let token = config.auth.required_token();
    if token.is_none() {
        warn!("no auth.token configured: any relay that can reach {data_addr} is accepted");
    }
    let session = SessionSettings {
        max_relays: usize::try_from(config.limits.max_relays).unwrap_or(usize::MAX),
        hello_timeout: Duration::from_millis(config.limits.hello_timeout_ms),
        max_frame_bytes: usize::try_from(config.limits.max_frame_bytes).unwrap_or(usize::MAX),
        sync_udp_port: sync_addr.port(),
        final_ack_timeout: Duration::from_secs(5),
    };
    let mut ingest = IngestSettings::new(Duration::from_millis(config.output.commit_interval_ms));
    // Machine labels of the metrics: the host and every relay slot.
    ingest.metrics_machines = session.max_relays.saturating_add(1);
    ingest.data_addr = Some(data_addr.to_string());
    ingest.sync_addr = Some(sync_addr.to_string());
    let parts = Parts {
        core,
        writer,
        probes,
        sync_updates,
        packets: hub,
        status: status_tx,
    };
    let running = run::start(data, session, token, ingest, parts, shutdown.clone())
        .map_err(|e| Fatal::io(exit::SOFTWARE, "cannot start the ingest thread".into(), &e))?;

    let signals = tokio::spawn(signals.handle(running.shared.clone(), config_path, args));
    announce(&format!(
        "tracesyncd: listening data={data_addr} sync={sync_addr} control={} output={}",
        control_path.display(),
        config.output.dir.display()
    ));
    info!(
        %data_addr, %sync_addr, control = %control_path.display(), output = %config.output.dir.display(),
        relays_recovered = recovered.streams.len(), "ready"
    );
    // Listeners are bound and the output is open: only now is the service ready.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);

    let summary = running.stopped().await;
    signals.abort();
    // The prober and control server stop on the same token.
    let _ = tokio::time::timeout(Duration::from_secs(2), prober).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), control_task).await;
    remove_socket(&control_path);
    let summary =
        summary.map_err(|e| Fatal::io(exit::IOERR, "the output could not be closed".into(), &e))?;
    info!(packets = summary.packets_written, "stopped");
    Ok(())
}

/// The startup line tests and operators read the bound addresses from.
fn announce(line: &str) {
    // stderr, with the logs: journald keeps it, and tools wait for it there.
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
    let _ = stderr.flush();
}

/// SIGTERM / SIGINT: stop (drain, final commit, final acks). SIGHUP:
/// re-read the config and apply what can change live (the auth token).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn handle<P>(
        mut self,
        shared: Arc<Shared<P>>,
        config_path: Option<PathBuf>,
        args: DaemonArgs,
    ) {
        loop {
            tokio::select! {
                _ = self.term.recv() => break,
                _ = self.int.recv() => break,
                _ = self.hup.recv() => reload(&shared, config_path.as_deref(), &args),
            }
        }
        info!("stopping: finishing current frames, committing, acknowledging");
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        shared.shutdown.cancel();
    }
}

fn reload<P>(shared: &Shared<P>, config_path: Option<&Path>, args: &DaemonArgs) {
    let Some(path) = config_path else {
        info!("SIGHUP: no config file to reload");
        return;
    };
    let args = DaemonArgs {
        config: Some(path.to_path_buf()),
        ..args.clone()
    };
    match DaemonConfig::load(&args) {
        Ok((config, _)) => {
            shared.set_token(config.auth.required_token());
            apply_log_level(config.log.level.as_str());
            info!(
                "SIGHUP: reloaded {} (auth.token and log.level applied; other changes need a restart)",
                path.display()
            );
        }
        Err(e) => warn!("SIGHUP: keeping the running config: {e}"),
    }
}

/// `[log] level` on reload (RUST_LOG, when set, keeps winning).
fn apply_log_level(level: &str) {
    match crate::logging::set_level(level) {
        Ok(crate::logging::LevelChange::KeptEnv) => {
            info!("SIGHUP: log.level {level} ignored: RUST_LOG is set and wins")
        }
        Ok(_) => {}
        Err(e) => warn!("SIGHUP: {e}"),
    }
}

fn remove_socket(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        warn!("cannot remove the control socket {}: {e}", path.display());
    }
}

fn rolling_config(config: &DaemonConfig) -> RollingConfig {
    let out = &config.output;
    let mut rolling = RollingConfig::new(&out.dir);
    // 0 means "no limit" in the config.
    rolling.max_file_bytes = nonzero_or(out.rotate_bytes, u64::MAX);
    rolling.max_file_age = match out.rotate_seconds {
        0 => Duration::MAX,
        s => Duration::from_secs(s),
    };
    rolling.retain_bytes = nonzero_or(out.retain_bytes, u64::MAX);
    rolling.retain_age = Duration::from_secs(out.retain_seconds); // zero: no age limit
    rolling.fsync = out.fsync;
    rolling
}

fn live_config(config: &DaemonConfig) -> LiveConfig {
    LiveConfig {
        merge_window_ns: config.merge.window_ms.saturating_mul(1_000_000),
        pending_max_packets: usize::try_from(config.merge.pending_packets).unwrap_or(usize::MAX),
        host_name: host_name(),
        ..LiveConfig::default()
    }
}

fn nonzero_or(v: u64, unlimited: u64) -> u64 {
    if v == 0 { unlimited } else { v }
}

fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_owned()).filter(|n| !n.is_empty())
}
