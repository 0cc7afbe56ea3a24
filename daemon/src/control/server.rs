//! The control socket's accept loop and per-client tasks.
//!
//! Each client has its own task; a client that does not read blocks only
//! that task, on its own socket. Ingest is never waited for: the task reads
//! the broadcast channel, and a task that falls more than the channel's
//! capacity behind is told how many packets it lost (text/jsonl: a notice
//! line, then the stream goes on; perfetto: a notice record, then the
//! stream ends). At most [`MAX_CLIENTS`] tail clients at once; each formats
//! at most [`MAX_PENDING_BYTES`] before writing them out. Clients that have
//! not sent their request yet are bounded apart ([`super::waiting`]: the
//! oldest idle one goes for a new one), and a status request holds no tail
//! place: idle or tailing clients never keep `tracesync status` out.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, broadcast};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ControlHub;
use super::waiting::{MAX_WAITING, Place, Waiting};
use tracesync_common::clock::{boottime_ns, realtime_ns};
use tracesync_core::control::{
    MAX_REQUEST_BYTES, MachineFilter, PacketFormatter, Request, Since, TailFormat, error_line,
};
use tracesync_core::live::OutPacket;
use tracesync_core::status::StatusReport;

/// Tail clients served at once; more are refused with an error line.
pub const MAX_CLIENTS: usize = 64;
/// Formatted bytes a client task collects before writing them out.
pub const MAX_PENDING_BYTES: usize = 64 << 10;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refusal may take to write.
const REFUSAL_TIMEOUT: Duration = Duration::from_millis(100);
/// How long a status answer may take to write (a client that does not
/// read must not hold its task forever).
const STATUS_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the control socket at `path`: creates its directory, replaces a
/// stale socket file nobody listens on, refuses to replace a live one.
pub fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{}: another daemon is listening there", path.display()),
        ));
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    UnixListener::bind(path)
}

/// Serves control clients on a unix socket until `shutdown`, then waits for
/// the client tasks (which end at once on `shutdown`).
pub async fn serve(listener: UnixListener, hub: ControlHub, shutdown: CancellationToken) {
    let clients = Clients::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _)) => clients.start(stream, &hub, &shutdown).await,
            Err(e) => accept_failed(e, &shutdown).await,
        }
    }
    clients.finish().await;
}

/// [`serve`] on TCP (`tracesync --connect ADDR`): the same protocol. Bind it
/// only where configured: the socket has no authentication of its own.
pub async fn serve_tcp(listener: TcpListener, hub: ControlHub, shutdown: CancellationToken) {
    let clients = Clients::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                clients.start(stream, &hub, &shutdown).await
            }
            Err(e) => accept_failed(e, &shutdown).await,
        }
    }
    clients.finish().await;
}

/// Out of file descriptors and the like: say so, back off, go on.
async fn accept_failed(e: io::Error, shutdown: &CancellationToken) {
    crate::metrics::Event::ControlAcceptError.record();
    tracing::warn!("control socket: accept failed: {e}; retrying in 100 ms");
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
    }
}

struct Clients {
    /// Tail places.
    slots: Arc<Semaphore>,
    waiting: Arc<Waiting>,
    tasks: TaskTracker,
}

impl Clients {
    fn new() -> Self {
        Self {
            slots: Arc::new(Semaphore::new(MAX_CLIENTS)),
            waiting: Waiting::new(MAX_WAITING),
            tasks: TaskTracker::new(),
        }
    }

    async fn start<S>(&self, stream: S, hub: &ControlHub, shutdown: &CancellationToken)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let place = self.waiting.admit();
        let hub = hub.clone();
        let shutdown = shutdown.clone();
        let slots = Arc::clone(&self.slots);
        self.tasks.spawn(async move {
            if let Err(e) = client(stream, hub, shutdown, place, slots).await {
                // A client going away mid-stream is normal.
                tracing::debug!("control client: {e}");
            }
        });
    }

    async fn finish(self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}

async fn client<S>(
    stream: S,
    hub: ControlHub,
    shutdown: CancellationToken,
    place: Place,
    slots: Arc<Semaphore>,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (rd, mut wr) = tokio::io::split(stream);
    let mut rd = BufReader::with_capacity(4096, rd);
    let mut line = String::new();
    let mut limited = (&mut rd).take(MAX_REQUEST_BYTES as u64 + 1);
    let read = limited.read_line(&mut line);
    let read = tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        () = place.closed() => return Ok(()),
        r = tokio::time::timeout(REQUEST_TIMEOUT, read) => r,
    };
    drop(place);
    let request = match read {
        Err(_) => return refuse(&mut wr, "no request within 10 s").await,
        Ok(Err(e)) => return Err(e),
        Ok(Ok(_)) if !line.ends_with('\n') => {
            return refuse(&mut wr, "the request must be one JSON line under 64 KiB").await;
        }
        Ok(Ok(_)) => match serde_json::from_str::<Request>(&line) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!(
                    "bad request: {e}; send {{\"cmd\":\"status\"}}, {{\"cmd\":\"tail\",\"format\":\"text\"}} \
                     or {{\"cmd\":\"trigger\",\"name\":\"NAME\",\"before_ns\":N,\"after_ns\":N}}"
                );
                return refuse(&mut wr, &msg).await;
            }
        },
    };
    match request {
        Request::Status => {
            let report = Arc::clone(&hub.status.borrow());
            let mut out = serde_json::to_vec(&*report).map_err(io::Error::other)?;
            out.push(b'\n');
            let answer = async {
                wr.write_all(&out).await?;
                wr.shutdown().await
            };
            tokio::time::timeout(STATUS_WRITE_TIMEOUT, answer)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "status not read"))?
        }
        Request::Tail {
            format,
            machines,
            time,
            lines,
            since,
        } => {
            let Ok(_permit) = slots.try_acquire_owned() else {
                crate::metrics::Event::ControlRefused.record();
                let line = error_line(&format!(
                    "too many control clients ({MAX_CLIENTS} tails); close one and retry"
                ));
                let _ = tokio::time::timeout(REFUSAL_TIMEOUT, wr.write_all(line.as_bytes())).await;
                return Ok(());
            };
            if format == TailFormat::Perfetto && (lines.is_some() || since.is_some()) {
                return refuse(
                    &mut wr,
                    "a perfetto tail starts at a preamble, not in the history: drop -n/--since, \
                     or use tracesync merge DIR --since TIME",
                )
                .await;
            }
            let (boot, wall) = (boottime_ns(), realtime_ns());
            let wall_minus_boot = i64::try_from(i128::from(wall) - i128::from(boot)).ok();
            let formatter = PacketFormatter::new(format, MachineFilter::new(&machines))
                .with_time(time, wall_minus_boot);
            let start = Start {
                lines,
                since: since.map(|s| since_trace_ns(s, boot, wall_minus_boot.unwrap_or(0))),
            };
            tail(rd, wr, &hub, formatter, start, &shutdown).await
        }
        Request::Trigger {
            name,
            before_ns,
            after_ns,
        } => {
            let line = super::trigger::answer_line(&hub, &name, before_ns, after_ns).await;
            let answer = async {
                wr.write_all(line.as_bytes()).await?;
                wr.shutdown().await
            };
            tokio::time::timeout(STATUS_WRITE_TIMEOUT, answer)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "answer not read"))?
        }
    }
}

/// Where a text or jsonl tail starts: the held packets at or after `since`,
/// the last `lines` of them; neither: the next packet written.
#[derive(Clone, Copy, Debug, Default)]
struct Start {
    lines: Option<u64>,
    since: Option<i64>,
}

/// `since` in trace time (host BOOTTIME), with the daemon's clocks now.
fn since_trace_ns(since: Since, boot_now: u64, wall_minus_boot: i64) -> i64 {
    match since {
        Since::TraceNs(ns) => ns,
        Since::WallNs(ns) => ns.saturating_sub(wall_minus_boot),
        Since::AgoNs(ago) => i64::try_from(boot_now.saturating_sub(ago)).unwrap_or(i64::MAX),
    }
}

/// Formats the held packets `start` asks for into `out`.
fn write_history(
    held: &[Arc<OutPacket>],
    start: Start,
    formatter: &mut PacketFormatter,
    out: &mut Vec<u8>,
) {
    let since = start.since.unwrap_or(i64::MIN);
    let wanted: Vec<&Arc<OutPacket>> = held
        .iter()
        .filter(|p| p.ts >= since && formatter.accepts(p))
        .collect();
    let lines = start
        .lines
        .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let skip = wanted.len().saturating_sub(lines);
    for packet in &wanted[skip..] {
        formatter.write(packet, out);
    }
}

async fn refuse<W: AsyncWrite + Unpin>(wr: &mut W, message: &str) -> io::Result<()> {
    crate::metrics::Event::ControlBadRequest.record();
    wr.write_all(error_line(message).as_bytes()).await?;
    wr.shutdown().await
}

/// Streams the merged output to one client until it goes away, the daemon
/// shuts down, or (perfetto) it lags.
async fn tail<R, W>(
    mut rd: R,
    mut wr: W,
    hub: &ControlHub,
    mut formatter: PacketFormatter,
    start: Start,
    shutdown: &CancellationToken,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let perfetto = formatter.format() == TailFormat::Perfetto;
    let mut out = Vec::with_capacity(MAX_PENDING_BYTES);
    let (preamble, mut rx) = if perfetto {
        match hub.subscribe_with_preamble().await {
            Some(subscription) => subscription,
            None => return Err(io::Error::other("the daemon is stopping")),
        }
    } else if start.lines.is_some() || start.since.is_some() {
        let (held, rx) = hub.subscribe_with_history();
        // At most the history's bound of formatted records (a few MiB).
        write_history(&held, start, &mut formatter, &mut out);
        (Vec::new(), rx)
    } else {
        (Vec::new(), hub.packets.subscribe())
    };
    let names = machine_names(&hub.status.borrow());
    for (machine, bytes) in &preamble {
        let name = names.get(machine).and_then(|n| n.as_deref());
        formatter.write_raw(*machine, name, bytes, &mut out);
        if out.len() >= MAX_PENDING_BYTES {
            write_out(&mut wr, &mut out, shutdown).await?;
        }
    }
    drop(preamble);
    write_out(&mut wr, &mut out, shutdown).await?;
    let mut scratch = [0u8; 256];
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            // Anything the client sends after its request is ignored; EOF
            // or an error means it is gone.
            r = rd.read(&mut scratch) => match r {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => continue,
            },
            r = rx.recv() => r,
        };
        let mut ended = match first {
            Ok(packet) => {
                formatter.write(&packet, &mut out);
                false
            }
            Err(broadcast::error::RecvError::Lagged(n)) => lagged(&formatter, n, &mut out),
            Err(broadcast::error::RecvError::Closed) => true,
        };
        // Take what else is ready, up to the buffer limit, in one write.
        while !ended && out.len() < MAX_PENDING_BYTES {
            match rx.try_recv() {
                Ok(packet) => {
                    formatter.write(&packet, &mut out);
                }
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    ended = lagged(&formatter, n, &mut out);
                }
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(broadcast::error::TryRecvError::Closed) => {
                    ended = true;
                }
            }
        }
        write_out(&mut wr, &mut out, shutdown).await?;
        if ended {
            return wr.shutdown().await;
        }
    }
}

/// Writes the lag notice; returns whether the stream must end.
fn lagged(formatter: &PacketFormatter, skipped: u64, out: &mut Vec<u8>) -> bool {
    crate::metrics::Event::TailLaggedPackets.add(skipped);
    crate::metrics::Event::TailLagNotice.record();
    formatter.lag_notice(skipped, out);
    formatter.format() == TailFormat::Perfetto
}

/// Writes and clears `out`; gives up at shutdown (the client may not read).
async fn write_out<W: AsyncWrite + Unpin>(
    wr: &mut W,
    out: &mut Vec<u8>,
    shutdown: &CancellationToken,
) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    tokio::select! {
        _ = shutdown.cancelled() => Err(io::Error::other("daemon shutting down")),
        r = wr.write_all(out) => { out.clear(); r }
    }
}

/// Machine names by raw id, from the latest status report (preamble
/// packets carry only the raw id).
fn machine_names(report: &StatusReport) -> std::collections::HashMap<u32, Option<String>> {
    report
        .machines
        .iter()
        .map(|m| (m.raw_id, m.name.clone()))
        .collect()
}

#[cfg(test)]
mod history_tests {
    use super::*;
    use tracesync_core::control::TimeMode;
    use tracesync_core::live::{Role, Stamped};

    fn packet(ts: i64, machine: u32) -> Arc<OutPacket> {
        Arc::new(OutPacket {
            ts,
            machine_raw_id: machine,
            machine_name: None,
            seq: 1,
            clock: 6,
            clock_ts: ts as u64,
            err_ns: 0,
            data_field: None,
            src: Arc::from("s"),
            role: Role::Data,
            origin: None,
            bytes: Stamped::default(),
        })
    }

    fn shown(held: &[Arc<OutPacket>], start: Start, machines: &[String]) -> Vec<String> {
        let mut f = PacketFormatter::new(TailFormat::Text, MachineFilter::new(machines))
            .with_time(TimeMode::Trace, None);
        let mut out = Vec::new();
        write_history(held, start, &mut f, &mut out);
        String::from_utf8(out)
            .expect("utf-8")
            .lines()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_owned())
            .collect()
    }

    #[test]
    fn history_gives_the_last_n_at_or_after_since_of_the_machines_asked() {
        let held: Vec<_> = (1..=10).map(|t| packet(t * 100, (t % 2) as u32)).collect();
        let last3 = Start {
            lines: Some(3),
            since: None,
        };
        assert_eq!(shown(&held, last3, &[]), ["800", "900", "1000"]);
        let since = Start {
            lines: None,
            since: Some(750),
        };
        assert_eq!(shown(&held, since, &[]), ["800", "900", "1000"]);
        let both = Start {
            lines: Some(2),
            since: Some(150),
        };
        assert_eq!(shown(&held, both, &["host".to_owned()]), ["800", "1000"]);
        let none = Start {
            lines: Some(0),
            since: None,
        };
        assert!(shown(&held, none, &[]).is_empty());
    }

    #[test]
    fn since_is_placed_on_the_daemon_clocks() {
        assert_eq!(since_trace_ns(Since::TraceNs(5), 100, 0), 5);
        assert_eq!(since_trace_ns(Since::AgoNs(30), 100, 0), 70);
        assert_eq!(since_trace_ns(Since::WallNs(1_000_100), 0, 1_000_000), 100);
    }
}
