//! `tracesyncd`: configuration, logging, sockets, the output, the tasks,
//! systemd notification and signals.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::ingest::IngestSettings;
use super::run::{self, Parts};
use super::signals::{Reloader, Signals};
use super::{SessionSettings, listener};
use crate::config::{DaemonArgs, DaemonConfig};
use crate::control::{self, ControlHub, DEFAULT_TAIL_CAPACITY};
use crate::reload::OutputLimits;
use crate::rolling::{RollingConfig, RollingWriter};
use crate::sync::ProbeSessions;
use crate::sync::SyncSockets;
use crate::sync::prober::spawn_prober_with;
use crate::tls::DataTls;
use tracesync_common::exit;
use tracesync_core::live::{LiveConfig, LiveCore, Recovered};
use tracesync_core::status::StatusReport;

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
    if args.man {
        use clap::CommandFactory;
        return exit::print_man_page(DaemonArgs::command());
    }
    let (config, config_path) = match DaemonConfig::load(&args) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("tracesyncd: {e}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    if args.check_config {
        let who = match args.check_user.as_deref() {
            None => tracesync_common::access::Who::current(),
            Some(name) => match tracesync_common::access::Who::named(name) {
                Ok(who) => who,
                Err(e) => {
                    eprintln!("tracesyncd: --check-user: {e}");
                    return ExitCode::from(exit::NOUSER);
                }
            },
        };
        if let Err(e) = config.check_paths(config_path.as_deref(), &who, &args) {
            eprintln!("tracesyncd: {e}");
            return ExitCode::from(exit::CONFIG);
        }
        let file = config_path.as_ref().map_or_else(
            || "built-in defaults".to_owned(),
            |p| p.display().to_string(),
        );
        println!("{file}: ok");
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
            // One line: the log goes to stderr too, so it is not logged as well.
            print_fatal(&fatal.message);
            fatal.code
        }
    };
    // Tasks still blocked (a relay that never reads) must not hold exit up.
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::from(code)
}

/// A startup failure on stderr, once: with a syslog priority prefix when
/// stderr is the journal (as the log lines have).
fn print_fatal(message: &str) {
    let priority = if tracesync_common::logging::stderr_is_journal() {
        "<3>"
    } else {
        ""
    };
    eprintln!("{priority}tracesyncd: {message}");
}

/// RUST_LOG wins; else the config's level (see [`tracesync_common::logging`]).
fn init_logging(config: &DaemonConfig) {
    tracesync_common::logging::init(config.log.level.as_str(), config.log.format);
}

async fn run_daemon(
    config: DaemonConfig,
    config_path: Option<PathBuf>,
    args: DaemonArgs,
) -> Result<(), Fatal> {
    // Installed first, so a SIGTERM during startup still stops us cleanly.
    let signals = Signals::install()
        .map_err(|e| Fatal::io(exit::SOFTWARE, "cannot install signal handlers".into(), &e))?;
    // Before the sockets: a second daemon on this directory is named as
    // such even when its ports are taken too.
    let output_lock = tracesync_capture::lock::lock(&config.output.dir)
        .map_err(|e| Fatal::new(lock_exit_code(&e), e.to_string()))?;
    let shards = ingest_shards(&config);
    let sockets = Sockets::bind(&config).await?;
    serve_metrics(&config)?;
    let (writer, recovered) = open_output(&config).await?;
    let core = LiveCore::new(live_config(&config), recovered.clone());

    let shutdown = CancellationToken::new();
    let (status_tx, status_rx) = watch::channel(Arc::new(StatusReport::default()));
    // The ingest thread publishes the status every 250 ms: the watchdog's
    // sign of life.
    let ingest_alive = status_tx.subscribe();
    let (mut hub, preamble_requests) = ControlHub::new(DEFAULT_TAIL_CAPACITY, status_rx);
    let trigger_requests = hub.take_trigger_requests();
    let probes = ProbeSessions::new();
    let (sync_tx, sync_updates) = mpsc::channel(SYNC_QUEUE);
    let prober = spawn_prober_with(
        sockets.sync,
        probes.clone(),
        sync_tx,
        shutdown.clone(),
        config.sync.prober_config(),
        config.sync.kernel_rx_timestamps,
    );
    let control_task = tokio::spawn(control::serve(
        sockets.control,
        hub.clone(),
        shutdown.clone(),
    ));

    let token = config.auth.required_token();
    let tls = relay_tls(&config).await?;
    say_relay_security(&config, tls.is_some(), token.is_some(), sockets.addrs.data);
    let session = session_settings(&config, sockets.addrs.sync.port(), tls);
    let (limits_tx, limits_rx) = watch::channel(OutputLimits::from_config(&config));
    let ingest = ingest_settings(&config, &session, sockets.addrs, probes.clone(), limits_rx);
    let reloader = Reloader {
        running: config.clone(),
        path: config_path,
        args,
        limits: limits_tx,
        probes: probes.clone(),
    };
    let parts = Parts {
        core,
        writer,
        probes,
        sync_updates,
        packets: hub,
        status: status_tx,
        preamble_requests: Some(preamble_requests),
        trigger_requests: Some(trigger_requests),
    };
    let running = if shards > 1 {
        info!(shards, "sharded ingest");
        let setup = super::shards::ShardSetup {
            shards,
            live: live_config(&config),
            recovered: recovered.clone(),
        };
        super::shards::start(
            sockets.data,
            session,
            token,
            ingest,
            parts,
            setup,
            shutdown.clone(),
        )
    } else {
        run::start(
            sockets.data,
            session,
            token,
            ingest,
            parts,
            shutdown.clone(),
        )
    }
    .map_err(|e| Fatal::io(exit::SOFTWARE, "cannot start the ingest thread".into(), &e))?;
    // No await since the accept loop started: set before any Hello is read.
    running
        .shared
        .set_allow_machines(&config.auth.allow_machines);
    let signals = tokio::spawn(signals.handle(running.shared.clone(), reloader));
    say_ready(&config, sockets.addrs, recovered.streams.len());

    let summary = keep_alive(running.stopped(), ingest_alive).await;
    signals.abort();
    // The prober and control server stop on the same token.
    let _ = tokio::time::timeout(Duration::from_secs(2), prober).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), control_task).await;
    remove_socket(&config.listen.control);
    let summary =
        summary.map_err(|e| Fatal::io(exit::IOERR, "the output could not be closed".into(), &e))?;
    info!(packets = summary.packets_written, "stopped");
    drop(output_lock);
    Ok(())
}

/// The daemon's sockets, bound (data, sync) or made (control).
struct Sockets {
    data: tokio::net::TcpListener,
    sync: SyncSockets,
    control: tokio::net::UnixListener,
    addrs: Addrs,
}

/// The addresses the data and sync sockets are bound to.
#[derive(Clone, Copy)]
struct Addrs {
    data: SocketAddr,
    sync: SocketAddr,
}

impl Sockets {
    async fn bind(config: &DaemonConfig) -> Result<Self, Fatal> {
        let data = listener::bind_data(config.listen.data).map_err(|e| {
            Fatal::io(
                exit::UNAVAILABLE,
                format!("cannot listen on {} (listen.data)", config.listen.data),
                &e,
            )
        })?;
        let sync = SyncSockets::bind(config.listen.sync).await.map_err(|e| {
            Fatal::io(
                exit::UNAVAILABLE,
                format!("cannot bind {} (listen.sync)", config.listen.sync),
                &e,
            )
        })?;
        let control_path = &config.listen.control;
        let control = control::bind_unix(control_path).map_err(|e| {
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
            .udp
            .local_addr()
            .map_err(|e| Fatal::io(exit::IOERR, "sync socket".into(), &e))?;
        Ok(Self {
            data,
            sync,
            control,
            addrs: Addrs {
                data: data_addr,
                sync: sync_addr,
            },
        })
    }
}

/// Serves `[metrics] listen`, if set.
fn serve_metrics(config: &DaemonConfig) -> Result<(), Fatal> {
    if let Some(addr) = config.metrics.listen {
        let bound = crate::metrics::install(addr).map_err(|e| {
            Fatal::new(
                exit::UNAVAILABLE,
                format!("cannot serve metrics on {addr} ([metrics] listen): {e}"),
            )
        })?;
        info!("metrics: Prometheus text on http://{bound}/metrics");
    }
    Ok(())
}

/// The ingest shards `merge.ingest-shards` asks for on this host.
fn ingest_shards(config: &DaemonConfig) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    config.merge.shards(cores)
}

/// Opens the rolling output, recovering what the last run left.
async fn open_output(config: &DaemonConfig) -> Result<(RollingWriter, Recovered), Fatal> {
    let rolling = rolling_config(config);
    tokio::task::spawn_blocking(move || RollingWriter::open(rolling))
        .await
        .map_err(|e| Fatal::new(exit::SOFTWARE, format!("opening the output panicked: {e}")))?
        .map_err(|e| Fatal::new(exit::CANTCREAT, format!("{e} (output.dir)")))
}

/// Mutual TLS for relay connections, unless `tls.mode` is off, with the
/// identity bindings it keeps.
async fn relay_tls(config: &DaemonConfig) -> Result<Option<DataTls>, Fatal> {
    // Checked when the config was loaded; read again here (same files).
    let tls = config
        .tls
        .load()
        .map_err(|e| Fatal::new(exit::CONFIG, e.to_string()))?;
    let Some(tls) = tls else {
        return Ok(None);
    };
    // Rule 4's bindings persist beside the journal, in the output (state)
    // directory, opened above.
    let path = config
        .output
        .dir
        .join(tracesync_capture::names::BINDINGS_NAME);
    let (bindings, loaded) = tokio::task::spawn_blocking(move || crate::tls::Bindings::open(&path))
        .await
        .map_err(|e| Fatal::new(exit::SOFTWARE, format!("loading panicked: {e}")))?
        .map_err(|e| Fatal::new(e.exit_code(), e.to_string()))?;
    crate::metrics::record_identity_bindings_ignored_lines(loaded.ignored_lines);
    if loaded.ignored_lines > 0 {
        error!("{}", loaded.summary());
    } else {
        info!("{}", loaded.summary());
    }
    Ok(Some(tls.with_bindings(Arc::new(bindings))))
}

/// Says how relay connections are protected, warning when they are not.
fn say_relay_security(config: &DaemonConfig, tls: bool, token: bool, data_addr: SocketAddr) {
    match (tls, token) {
        (false, false) => warn!(
            "plaintext relay connections (tls.mode = \"off\") and no auth.token: any relay \
             that can reach {data_addr} is accepted, and traffic is readable on the network"
        ),
        (false, true) => warn!(
            "plaintext relay connections (tls.mode = \"off\"): the token and the traces cross \
             the network unencrypted and relay identities are not verified"
        ),
        (true, _) => info!(
            client_ca = %config.tls.client_ca.get_ref().display(),
            crl = %config.tls.crl.as_ref().map_or_else(|| "none".into(), |c| c.get_ref().display().to_string()),
            "mutual TLS on relay connections; relay identities bound to certificates"
        ),
    }
}

/// The ingest thread's settings: commit interval, what the status report
/// names, and where reloaded limits come from.
fn ingest_settings(
    config: &DaemonConfig,
    session: &SessionSettings,
    addrs: Addrs,
    probes: ProbeSessions,
    limits: watch::Receiver<OutputLimits>,
) -> IngestSettings {
    IngestSettings {
        // Machine labels of the metrics: the host and every relay slot.
        metrics_machines: session.max_relays.saturating_add(1),
        data_addr: Some(addrs.data.to_string()),
        sync_addr: Some(addrs.sync.to_string()),
        probes: Some(probes),
        limits: Some(limits),
        triggers: config.trigger.trigger_config(),
        ..IngestSettings::new(Duration::from_millis(config.output.commit_interval_ms))
    }
}

fn session_settings(
    config: &DaemonConfig,
    sync_udp_port: u16,
    tls: Option<DataTls>,
) -> SessionSettings {
    SessionSettings {
        max_relays: usize::try_from(config.limits.max_relays).unwrap_or(usize::MAX),
        hello_timeout: Duration::from_millis(config.limits.hello_timeout_ms),
        max_frame_bytes: usize::try_from(config.limits.max_frame_bytes).unwrap_or(usize::MAX),
        frame_timeout: Duration::from_millis(config.limits.frame_timeout_ms),
        idle_timeout: Duration::from_millis(config.limits.idle_timeout_ms),
        sync_udp_port,
        final_ack_timeout: Duration::from_secs(5),
        tls,
    }
}

/// The startup line, the "ready" log line and systemd's READY=1: the
/// listeners are bound and the output is open.
fn say_ready(config: &DaemonConfig, addrs: Addrs, recovered: usize) {
    let Addrs {
        data: data_addr,
        sync: sync_addr,
    } = addrs;
    let control_path = &config.listen.control;
    announce(&format!(
        "tracesyncd: listening data={data_addr} sync={sync_addr} control={} output={}",
        control_path.display(),
        config.output.dir.display()
    ));
    info!(
        %data_addr, %sync_addr, control = %control_path.display(), output = %config.output.dir.display(),
        relays_recovered = recovered, "ready"
    );
    // Listeners are bound and the output is open: only now is the service ready.
    let status = format!("listening data={data_addr} sync={sync_addr}");
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&status),
    ]);
}

/// Waits for `stopped`; meanwhile, when systemd's watchdog is on
/// (`WATCHDOG_USEC`), sends WATCHDOG=1 at half its interval as long as the
/// ingest thread is alive (it published a status within the interval).
async fn keep_alive<T>(
    stopped: impl std::future::Future<Output = T>,
    mut ingest_alive: watch::Receiver<Arc<StatusReport>>,
) -> T {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return stopped.await;
    };
    info!(
        "systemd watchdog: {interval:?}, keep-alives every {:?}",
        interval / 2
    );
    let stale_after = interval.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval(interval / 2);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_sign = tokio::time::Instant::now();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            result = &mut stopped => return result,
            _ = tick.tick() => {
                if ingest_alive.has_changed().unwrap_or(false) {
                    ingest_alive.mark_unchanged();
                    last_sign = tokio::time::Instant::now();
                }
                if last_sign.elapsed() <= stale_after {
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                } else {
                    warn!(
                        "the ingest thread has not reported for {:?}: withholding the watchdog \
                         keep-alive",
                        last_sign.elapsed()
                    );
                }
            }
        }
    }
}

/// The startup line tests and operators read the bound addresses from.
fn announce(line: &str) {
    // stderr, with the logs: journald keeps it, and tools wait for it there.
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
    let _ = stderr.flush();
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
    let limits = OutputLimits::from_config(config);
    rolling.max_file_bytes = limits.max_file_bytes;
    rolling.max_file_age = limits.max_file_age;
    rolling.retain_bytes = limits.retain_bytes;
    rolling.retain_age = limits.retain_age;
    rolling.fsync = out.fsync;
    rolling
}

fn live_config(config: &DaemonConfig) -> LiveConfig {
    LiveConfig {
        merge_window_ns: config.merge.window_ms.saturating_mul(1_000_000),
        pending_max_packets: usize::try_from(config.merge.pending_packets).unwrap_or(usize::MAX),
        queue_max_bytes: usize::try_from(config.merge.queue_bytes).unwrap_or(usize::MAX),
        host_name: host_name(),
        max_sequences_per_relay: usize::try_from(config.limits.max_sequences_per_relay)
            .unwrap_or(usize::MAX),
        sync_threshold_ns: config.sync.sync_point_threshold_ns,
        ..LiveConfig::default()
    }
}

fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_owned()).filter(|n| !n.is_empty())
}

/// A held lock is 75 (try again once the holder stopped), a permission
/// problem 77, anything else 73.
fn lock_exit_code(e: &tracesync_capture::lock::LockError) -> u8 {
    match e {
        tracesync_capture::lock::LockError::Held { .. } => exit::TEMPFAIL,
        e if e.is_permission() => exit::NOPERM,
        _ => exit::CANTCREAT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keys_reach_the_live_core() {
        let mut config = DaemonConfig::default();
        config.merge.window_ms = 250;
        config.merge.queue_bytes = 256 << 20;
        let live = live_config(&config);
        assert_eq!(live.merge_window_ns, 250_000_000);
        assert_eq!(live.queue_max_bytes, 256 << 20);
        // The default is the core's own.
        let shipped = live_config(&DaemonConfig::default());
        assert_eq!(
            shipped.queue_max_bytes,
            LiveConfig::default().queue_max_bytes
        );
    }
}
