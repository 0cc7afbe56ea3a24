//! The control socket's listener and its clients (see the module doc of
//! `control/mod.rs`).

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracesync_protocol::trigger::{MAX_TRIGGER_SPAN, check_trigger_name};

use super::{
    ANSWER_TIMEOUT, Answer, MAX_CLIENTS, MAX_REQUEST_BYTES, NotFired, Origin, REQUEST_TIMEOUT,
    Request, TriggerAsk,
};
use crate::clocks::SharedClock;

/// Binds the socket at `path`, mode 0660. Its directory is made only when
/// the path was configured (`create_dir`): the default's directory is
/// systemd's to make. A stale socket nobody listens on is replaced; a live
/// one, or a file that is not a socket, is not.
pub fn bind(path: &Path, create_dir: bool) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if create_dir {
            std::fs::create_dir_all(dir)?;
        } else if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} does not exist (systemd's RuntimeDirectory= makes it; or set \
                     control-socket / --control-socket)",
                    dir.display()
                ),
            ));
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is there; remove it or choose another path",
            ));
        }
        Ok(_) if std::os::unix::net::UnixStream::connect(path).is_ok() => {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "another relay listens there; give each relay its own control-socket",
            ));
        }
        Ok(_) => std::fs::remove_file(path)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(listener)
}

/// Serves clients until `shutdown`; each trigger goes to `asks`.
pub async fn serve(
    listener: UnixListener,
    asks: mpsc::Sender<TriggerAsk>,
    clock: SharedClock,
    shutdown: CancellationToken,
) {
    let places = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("control socket: accept failed: {e}; retrying in 100 ms");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            tokio::spawn(answer_only(
                stream,
                local(NotFired::Busy, "the relay serves as many clients as it can"),
            ));
            continue;
        };
        let (asks, clock) = (asks.clone(), clock.clone());
        tokio::spawn(async move {
            let answer = client(stream, &asks, &clock).await;
            drop(place);
            if let Err(e) = answer {
                tracing::debug!("control client: {e}");
            }
        });
    }
}

async fn answer_only(mut stream: UnixStream, answer: Answer) {
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, stream.write_all(answer.line().as_bytes())).await;
}

async fn client(
    stream: UnixStream,
    asks: &mpsc::Sender<TriggerAsk>,
    clock: &SharedClock,
) -> io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut line = String::new();
    let mut limited = BufReader::new(rd).take(MAX_REQUEST_BYTES as u64 + 1);
    let read = tokio::time::timeout(REQUEST_TIMEOUT, limited.read_line(&mut line)).await;
    // The moment the trigger fires: as soon as its line is in.
    let relay_time_ns = clock.boottime();
    let answer = match read {
        Err(_) => local(NotFired::BadRequest, "no request line within 5 s"),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(_)) if !line.ends_with('\n') => local(
            NotFired::BadRequest,
            "the request must be one JSON line under 4 KiB",
        ),
        Ok(Ok(_)) => match serde_json::from_str::<Request>(&line) {
            Ok(request) => ask(request, relay_time_ns, asks).await,
            Err(e) => local(
                NotFired::BadRequest,
                format!(
                    "bad request: {e}; send {{\"cmd\":\"trigger\",\"name\":\"NAME\",\
                     \"before_ns\":N,\"after_ns\":N}}"
                ),
            ),
        },
    };
    tokio::time::timeout(REQUEST_TIMEOUT, wr.write_all(answer.line().as_bytes()))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "client stopped reading"))??;
    wr.shutdown().await
}

/// Checks the trigger and hands it to the uplink; its answer.
async fn ask(request: Request, relay_time_ns: u64, asks: &mpsc::Sender<TriggerAsk>) -> Answer {
    let Request::Trigger {
        name,
        before_ns,
        after_ns,
    } = request;
    if let Err(reason) = check(&name, before_ns, after_ns) {
        return local(NotFired::BadRequest, reason);
    }
    let (reply, answer) = oneshot::channel();
    let ask = TriggerAsk {
        name,
        before_ns,
        after_ns,
        relay_time_ns,
        origin: Origin::Command,
        reply: Some(reply),
    };
    match asks.try_send(ask) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(_)) => {
            return local(
                NotFired::Busy,
                "too many triggers wait for the daemon's answer; retry in a moment",
            );
        }
        Err(mpsc::error::TrySendError::Closed(_)) => {
            return local(NotFired::Offline, "the relay is stopping; no trigger fired");
        }
    }
    // The uplink answers within its own timeout; this one is a backstop.
    match tokio::time::timeout(ANSWER_TIMEOUT * 2, answer).await {
        Ok(Ok(answer)) => answer,
        _ => local(
            NotFired::NoAnswer,
            "the relay's uplink did not answer; the trigger may still fire",
        ),
    }
}

/// An answer of the socket's own (the uplink counts those it gives),
/// counted in the relay's metrics.
fn local(why: NotFired, error: impl Into<String>) -> Answer {
    let answer = Answer::not_fired(why, error);
    crate::metrics::trigger_asked(answer.outcome());
    answer
}

/// A trigger's name and spans, as the daemon checks them.
pub(super) fn check(name: &str, before_ns: u64, after_ns: u64) -> Result<(), String> {
    check_trigger_name(name)?;
    let max = u64::try_from(MAX_TRIGGER_SPAN.as_nanos()).unwrap_or(u64::MAX);
    for (what, ns) in [("before", before_ns), ("after", after_ns)] {
        if ns > max {
            return Err(format!(
                "--{what} of {ns} ns is over the {}-second limit",
                MAX_TRIGGER_SPAN.as_secs()
            ));
        }
    }
    Ok(())
}
