//! The relay process (`tracesync-relay`): flags and config, then the
//! tasks, until a signal or a refusal ends it.
//!
//! Tasks: each source and the relay's own packets send batches on one
//! bounded channel to the uplink, which owns the spool and the daemon
//! connection (and starts the probe responder per session). SIGTERM or
//! SIGINT stops the sources; the uplink writes the last batch, syncs the
//! spool, waits a few seconds for acks, and the relay exits 0.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::clocks::{ScheduledClock, SharedClock, SimulatedClock, SystemClock};
use crate::config::{ClockChoice, Flags, RelayConfig};
use crate::spool::{Incoming, Spool, SpoolConfig};
use crate::uplink::{self, HelloInfo, UplinkConfig, UplinkExit};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::identity::MachineIdentity;
use crate::probe::SyncConfig;
use crate::sequences::SequenceAllocator;
use crate::source::{self, Cursor, SourceBatch, SourceContext, SourceSpec, SourceStats};

use tracesync_common::exit;

/// Batches in flight from sources to the spool at most; their bytes are
/// bounded apart (`source::SOURCE_QUEUE_BYTES`).
const SOURCE_CHANNEL: usize = 64;

/// The whole `tracesync-relay` process: flags, config, runtime, exit code.
pub fn main() -> ExitCode {
    let flags: Flags = match exit::parse_args() {
        Ok(flags) => flags,
        Err(code) => return code,
    };
    if flags.man {
        use clap::CommandFactory;
        return exit::print_man_page(Flags::command());
    }
    if flags.print_name {
        return print_name(&flags);
    }
    if let Some(crate::config::RelayCommand::Trigger {
        name,
        before,
        after,
        connect,
    }) = &flags.command
    {
        let socket = match connect {
            Some(socket) => socket.clone(),
            None => match RelayConfig::load_without_tls(&flags) {
                Ok(config) => config.control.socket,
                Err(e) => {
                    eprintln!("tracesync-relay: {e}");
                    return ExitCode::from(exit::CONFIG);
                }
            },
        };
        return ExitCode::from(crate::control::client::run(&socket, name, *before, *after));
    }
    let config = match load_config(&flags) {
        Ok(config) => config,
        Err(line) => {
            eprintln!("tracesync-relay: {line}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    // journald-friendly by default, JSON on request; RUST_LOG wins.
    tracesync_common::logging::init(config.log.level.as_str(), config.log.format);
    if flags.check_config {
        let file = config.file.as_ref().map_or_else(
            || "built-in defaults".to_owned(),
            |p| p.display().to_string(),
        );
        println!("{file}: ok");
        return ExitCode::from(exit::OK);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("tracesync-relay: cannot start the runtime: {error}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    ExitCode::from(runtime.block_on(run(config, flags)))
}

/// `--print-name`: the machine name Hello will carry, which a relay
/// certificate must name, found before any TLS file exists.
fn print_name(flags: &Flags) -> ExitCode {
    match RelayConfig::load_without_tls(flags) {
        Ok(config) => {
            println!(
                "{}",
                MachineIdentity::detect(config.name.as_deref()).machine_name
            );
            ExitCode::from(exit::OK)
        }
        Err(e) => {
            eprintln!("tracesync-relay: {e}");
            ExitCode::from(exit::CONFIG)
        }
    }
}

/// The merged configuration, sources fully parsed: one error line.
fn load_config(flags: &Flags) -> Result<RelayConfig, String> {
    let config = RelayConfig::load(flags).map_err(|e| e.to_string())?;
    for spec in &config.sources {
        SourceSpec::parse(spec).map_err(|e| {
            let place = config.file.as_ref().filter(|_| flags.sources.is_empty());
            match place {
                Some(file) => format!("{}: sources: {e}", file.display()),
                None => format!("--source: {e}"),
            }
        })?;
    }
    Ok(config)
}

async fn run(config: RelayConfig, flags: Flags) -> u8 {
    // Before anything slow (the spool's recovery): a SIGTERM from here on
    // stops the relay cleanly instead of killing it.
    let stop_signal = StopSignal::install();
    tokio::spawn(reload_on_sighup(flags));
    if let Err(code) = serve_metrics(&config) {
        return code;
    }
    let clock = relay_clock(&config);
    let mut identity = MachineIdentity::detect(config.name.as_deref());
    if config.tls.mode != crate::tls::TlsMode::Off {
        // A certificate-authenticated relay's raw id is bound to its name.
        identity = identity.bound_to_name();
    }
    let spool = match open_spool(&config) {
        Ok(spool) => spool,
        Err(code) => return code,
    };
    tracing::info!(
        "relay {} ({}, raw id {}, instance {}) -> {}; spool {} resumes at batch {}",
        identity.machine_name,
        identity.name_source.describe(),
        identity.raw_id,
        crate::spool::instance_fingerprint(spool.instance_id()),
        config.host,
        config.spool_dir.display(),
        spool.oldest_unacked()
    );

    let (trigger_asks, trigger_inbox) = crate::control::TriggerInbox::channel();
    serve_control(&config, &clock, trigger_asks.clone());

    let sources_stop = CancellationToken::new();
    let (tx, rx) = mpsc::channel::<SourceBatch>(SOURCE_CHANNEL);
    let budget = source::SourceBudget::new(source::SOURCE_QUEUE_BYTES);
    let sources = Sources {
        clock: &clock,
        spool: &spool,
        machine_name: identity.machine_name.as_str().into(),
        stop: &sources_stop,
        budget: &budget,
        triggers: (!config.control.trigger_on.is_empty()).then(|| {
            source::triggers::PacketTriggers {
                names: config.control.trigger_on.clone().into(),
                asks: trigger_asks.clone(),
            }
        }),
    };
    let source_stats = sources.spawn(&config.sources, &tx);
    if config.metrics.listen.is_some() {
        tokio::spawn(publish_source_metrics(source_stats.clone()));
    }
    crate::own_packets::spawn(clock.clone(), identity.clone(), tx, sources_stop.clone());

    let mut uplink_config = match uplink_config(&config, &identity) {
        Ok(uplink_config) => uplink_config,
        Err(code) => return code,
    };
    uplink_config.sources = config.sources.iter().cloned().zip(source_stats).collect();
    uplink_config.triggers = trigger_inbox;
    let wait_limit =
        uplink_config.intake_grace + uplink_config.drain_timeout + Duration::from_secs(2);
    let start_probe = probe_starter(clock.clone(), config.sync);
    let uplink_stop = CancellationToken::new();
    let uplink = tokio::spawn(uplink::run(
        uplink_config,
        clock,
        spool,
        rx,
        move |batch: SourceBatch| {
            budget.give_back(&batch);
            to_incoming(batch)
        },
        start_probe,
        uplink_stop.clone(),
    ));

    let Some(finished) =
        until_stopped(uplink, stop_signal, wait_limit, &sources_stop, &uplink_stop).await
    else {
        return exit::OK;
    };
    sources_stop.cancel();
    exit_code(finished)
}

/// Serves the control socket (`tracesync-relay trigger`); one that cannot
/// be bound is said and the relay runs on without it.
fn serve_control(
    config: &RelayConfig,
    clock: &SharedClock,
    asks: mpsc::Sender<crate::control::TriggerAsk>,
) {
    let path = &config.control.socket;
    match crate::control::bind(path, config.control.socket_configured) {
        Ok(listener) => {
            tracing::info!(
                "control socket {}: `tracesync-relay trigger NAME` fires a trigger here",
                path.display()
            );
            // Runs as long as the process (the socket file stays for the
            // next run to replace).
            let forever = CancellationToken::new();
            tokio::spawn(crate::control::serve(
                listener,
                asks,
                clock.clone(),
                forever,
            ));
        }
        // The default's directory missing: not under systemd, said quietly.
        Err(e) if !config.control.socket_configured && e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(
                "no control socket: {e}; `tracesync-relay trigger` cannot reach this relay"
            );
        }
        Err(e) => tracing::warn!(
            "control socket {}: {e}; `tracesync-relay trigger` cannot reach this relay \
             (set control-socket or --control-socket)",
            path.display()
        ),
    }
}

/// Serves `[metrics] listen`, if set; the exit code when it cannot.
fn serve_metrics(config: &RelayConfig) -> Result<(), u8> {
    let Some(addr) = config.metrics.listen else {
        return Ok(());
    };
    match crate::metrics::install(addr) {
        Ok(bound) => tracing::info!("metrics: Prometheus text on http://{bound}/metrics"),
        Err(e) => {
            tracing::error!("cannot serve metrics on {addr} ([metrics] listen): {e}");
            return Err(exit::UNAVAILABLE);
        }
    }
    Ok(())
}

/// The clock the relay reads: the system's, or a simulated one (with its
/// schedule of wander, steps and slews, if any).
fn relay_clock(config: &RelayConfig) -> SharedClock {
    match config.clock {
        ClockChoice::System => Arc::new(SystemClock::new()),
        ClockChoice::Simulated {
            offset_ns,
            drift_ppm,
        } if config.clock_schedule.is_empty() => {
            Arc::new(SimulatedClock::new(offset_ns, drift_ppm))
        }
        ClockChoice::Simulated {
            offset_ns,
            drift_ppm,
        } => Arc::new(ScheduledClock::new(
            offset_ns,
            drift_ppm,
            config.clock_schedule.clone(),
        )),
    }
}

/// Opens the spool, saying what it found amiss; the exit code when it
/// cannot.
fn open_spool(config: &RelayConfig) -> Result<Spool, u8> {
    let mut spool_config = SpoolConfig::new(
        config.spool_dir.clone(),
        config.spool_memory_bytes,
        config.spool_disk_bytes,
        config.when_full,
    );
    spool_config.linger = config.linger;
    if config.ring.mode == tracesync_protocol::trigger::RelayMode::Ring {
        // Segments sized to the ring keep the spool on disk near its bounds.
        spool_config.segment_bytes = crate::ring::segment_bytes(config.ring.bytes);
    }
    match Spool::open(spool_config) {
        Ok((spool, issues)) => {
            for issue in issues {
                tracing::warn!("spool: {issue}");
            }
            Ok(spool)
        }
        Err(error) => {
            tracing::error!("{error}; check --spool and its permissions");
            Err(exit::CANTCREAT)
        }
    }
}

/// What every source task shares.
struct Sources<'a> {
    clock: &'a SharedClock,
    spool: &'a Spool,
    machine_name: Arc<str>,
    stop: &'a CancellationToken,
    budget: &'a source::SourceBudget,
    /// `trigger-on` (None: no names configured).
    triggers: Option<source::triggers::PacketTriggers>,
}

impl Sources<'_> {
    /// Starts a task per source, each resuming after its last spooled
    /// packet; their counters, in order.
    fn spawn(&self, specs: &[String], tx: &mpsc::Sender<SourceBatch>) -> Vec<Arc<SourceStats>> {
        let mut source_stats = Vec::new();
        for (position, text) in specs.iter().enumerate() {
            let Ok(spec) = SourceSpec::parse(text) else {
                continue; // Checked in load_config.
            };
            let index = u16::try_from(position + 1).unwrap_or(u16::MAX);
            let resume = resume_cursor(self.spool, index);
            let ctx = SourceContext {
                clock: self.clock.clone(),
                sequences: Arc::new(SequenceAllocator::for_source(index)),
                machine_name: self.machine_name.clone(),
                shutdown: self.stop.clone(),
                stats: Arc::new(SourceStats::default()),
                budget: self.budget.clone(),
                triggers: self.triggers.clone(),
            };
            source_stats.push(ctx.stats.clone());
            source::spawn(spec, index, ctx, resume, tx.clone());
        }
        source_stats
    }
}

/// Publishes the sources' counters to the metrics, forever.
async fn publish_source_metrics(source_stats: Vec<Arc<SourceStats>>) {
    let mut every = tokio::time::interval(crate::metrics::PUBLISH_EVERY);
    loop {
        every.tick().await;
        crate::metrics::publish_sources(&source_stats);
    }
}

/// The uplink's settings; the exit code when the TLS files do not load.
fn uplink_config(config: &RelayConfig, identity: &MachineIdentity) -> Result<UplinkConfig, u8> {
    let hello = HelloInfo {
        token: config.token.clone(),
        boot_id: identity.boot_id.clone(),
        machine_name: identity.machine_name.clone(),
        machine_raw_id: identity.raw_id,
    };
    let mut uplink_config = UplinkConfig::new(config.host.clone(), hello);
    uplink_config.session.window_bytes = usize::try_from(config.window_bytes).unwrap_or(usize::MAX);
    uplink_config.give_up_after = config.give_up_after;
    if config.ring.mode == tracesync_protocol::trigger::RelayMode::Ring {
        uplink_config.ring = Some(crate::ring::RingConfig {
            seconds: config.ring.seconds,
            bytes: config.ring.bytes,
            source_lag: crate::config::RING_SOURCE_LAG,
        });
    }
    // Checked when the config was loaded; read again here (same files).
    uplink_config.tls = match config.tls.client(&config.host) {
        Ok(tls) => tls,
        Err(e) => {
            tracing::error!("tls.{}: {}", e.key.name(), e.message);
            return Err(exit::CONFIG);
        }
    };
    if uplink_config.tls.is_none() {
        tracing::warn!(
            "plaintext connection to the daemon (tls mode = \"off\"): traces and the token \
             cross the network unencrypted and the daemon is not verified"
        );
    }
    Ok(uplink_config)
}

/// Starts the probe responder of each session the uplink opens.
fn probe_starter(clock: SharedClock, sync_config: SyncConfig) -> uplink::ProbeStarter {
    Box::new(move |target, token| {
        tokio::spawn(crate::probe::run_probe_responder(
            clock.clone(),
            target,
            sync_config,
            token,
        ));
    })
}

/// How the uplink task ended.
type UplinkEnd = Result<(UplinkExit, Spool), tokio::task::JoinError>;

/// Waits for the uplink to end by itself, or for SIGTERM or SIGINT: then
/// stops the sources and the uplink and waits for it to drain, up to
/// `wait_limit` (None when it took longer).
async fn until_stopped(
    mut uplink: tokio::task::JoinHandle<(UplinkExit, Spool)>,
    stop_signal: StopSignal,
    wait_limit: Duration,
    sources_stop: &CancellationToken,
    uplink_stop: &CancellationToken,
) -> Option<UplinkEnd> {
    tokio::select! {
        () = stop_signal.received() => {}
        finished = &mut uplink => return Some(finished),
    }
    tracing::info!("stopping: writing the last batch and waiting for acks");
    sources_stop.cancel();
    uplink_stop.cancel();
    match tokio::time::timeout(wait_limit, uplink).await {
        Ok(finished) => Some(finished),
        Err(_) => {
            tracing::warn!("shutdown took too long; unacked batches stay spooled");
            None
        }
    }
}

/// The process's exit code for how the uplink ended, said in the log.
fn exit_code(finished: UplinkEnd) -> u8 {
    match finished {
        Ok((UplinkExit::Drained, spool)) => {
            tracing::info!(
                "stopped: everything acknowledged through batch {}",
                spool.last_seq()
            );
            exit::OK
        }
        Ok((UplinkExit::DrainTimedOut { unacked_batches }, _)) => {
            tracing::warn!(
                "stopped with {unacked_batches} batches unacknowledged; they stay spooled for the next run"
            );
            exit::OK
        }
        Ok((UplinkExit::Refused { reason }, _)) => {
            tracing::error!("giving up: {}", tracesync_protocol::text::Escaped(&reason));
            exit::NOPERM
        }
        Ok((
            UplinkExit::Misconfigured {
                fault,
                reason,
                attempts,
                seconds,
            },
            _,
        )) => {
            tracing::error!(
                "giving up after {seconds} s and {attempts} attempts: {reason} \
                 (--keep-retrying retries forever)"
            );
            fault.exit_code()
        }
        Err(error) => {
            tracing::error!("uplink task failed: {error}");
            exit::SOFTWARE
        }
    }
}

/// The cursor after the source's last spooled packet (None: start afresh).
fn resume_cursor(spool: &Spool, index: u16) -> Cursor {
    let Some(bytes) = spool.resume_cursor(index) else {
        return Cursor::None;
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|error| {
        tracing::warn!("spool: source {index}: unreadable cursor ({error}); starting afresh");
        Cursor::None
    })
}

fn to_incoming(batch: SourceBatch) -> Incoming {
    // A Cursor always serializes; an empty one reads back as Cursor::None.
    let cursor = serde_json::to_vec(&batch.cursor).unwrap_or_default();
    Incoming {
        source: batch.source,
        packets: batch.packets,
        cursor: cursor.into(),
    }
}

/// SIGHUP: re-reads the config with the same flags and applies `[log]
/// level`; every other relay setting needs a restart (the spool keeps what
/// is not acknowledged). Without this handler SIGHUP would end the relay.
async fn reload_on_sighup(flags: Flags) {
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hup.recv().await.is_some() {
        match load_config(&flags) {
            Ok(config) => {
                let level = config.log.level.as_str();
                match tracesync_common::logging::set_level(level) {
                    Ok(tracesync_common::logging::LevelChange::KeptEnv) => {
                        tracing::info!(
                            "SIGHUP: log.level {level} ignored: RUST_LOG is set and wins"
                        )
                    }
                    Ok(_) => tracing::info!(
                        "SIGHUP: log.level {level} applied; other relay settings need a restart"
                    ),
                    Err(e) => tracing::warn!("SIGHUP: {e}"),
                }
            }
            Err(line) => tracing::warn!("SIGHUP: keeping the running config: {line}"),
        }
    }
}

/// SIGTERM and SIGINT, caught from [`StopSignal::install`] on (a signal
/// received before anyone waits is kept, not lost).
struct StopSignal(Option<(Signal, Signal)>);

impl StopSignal {
    fn install() -> Self {
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Self(Some((term, int))),
            _ => Self(None),
        }
    }

    async fn received(self) {
        // Without signal handlers, run until the uplink ends.
        let Some((mut term, mut int)) = self.0 else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}
