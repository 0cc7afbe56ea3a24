//! `tracesync-relay trigger NAME`: asks the relay running on this machine
//! (its control socket) to carry a trigger to its daemon, and prints the
//! answer in one line. Exit codes: 0 fired; 75 refused by the daemon (its
//! limit per name) or no answer (retry later); 69 no relay listening, or
//! the relay offline or its daemon too old; 77 not allowed on the socket;
//! 64 a bad name or span.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use tracesync_common::exit;
use tracesync_protocol::trigger::format_span;

use super::{ANSWER_TIMEOUT, Answer, Fired, NotFired, Request};

/// Longest answer line read.
const MAX_ANSWER_BYTES: u64 = 64 << 10;

/// Fires `name` through the relay at `socket`; the exit code.
pub fn run(socket: &Path, name: &str, before: Duration, after: Duration) -> u8 {
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let (before_ns, after_ns) = (nanos(before), nanos(after));
    if let Err(reason) = super::serve::check(name, before_ns, after_ns) {
        eprintln!("tracesync-relay: {reason}");
        return exit::USAGE;
    }
    let request = Request::Trigger {
        name: name.to_owned(),
        before_ns,
        after_ns,
    };
    match ask(socket, &request) {
        Ok(answer) => report(name, &answer),
        Err((code, line)) => {
            eprintln!("tracesync-relay: {line}");
            code
        }
    }
}

/// Sends the request and reads the answer; an exit code and a line when
/// there is none.
fn ask(socket: &Path, request: &Request) -> Result<Answer, (u8, String)> {
    let place = socket.display();
    let mut conn = UnixStream::connect(socket).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => (
            exit::NOPERM,
            format!("{place}: {e}; run as the relay's user or a member of its group"),
        ),
        _ => (
            exit::UNAVAILABLE,
            format!(
                "no relay listens at {place} ({e}); is tracesync-relay running here? (its \
                 control-socket key or --control-socket; --connect names another)"
            ),
        ),
    })?;
    let mut line = serde_json::to_string(request).map_err(|e| (exit::SOFTWARE, e.to_string()))?;
    line.push('\n');
    let io_failed = |e: std::io::Error| (exit::UNAVAILABLE, format!("{place}: {e}"));
    conn.write_all(line.as_bytes()).map_err(io_failed)?;
    let _ = conn.set_read_timeout(Some(ANSWER_TIMEOUT * 2 + Duration::from_secs(5)));
    let mut answer = Vec::new();
    BufReader::new(conn)
        .take(MAX_ANSWER_BYTES)
        .read_until(b'\n', &mut answer)
        .map_err(|e| {
            (
                exit::TEMPFAIL,
                format!("{place}: no answer: {e}; the trigger may still fire"),
            )
        })?;
    serde_json::from_slice(&answer).map_err(|e| {
        (
            exit::DATAERR,
            format!(
                "the relay at {place} sent a bad answer: {e}; are the relay and this command \
                 the same version?"
            ),
        )
    })
}

/// Prints the answer (stdout when fired, stderr when not); the exit code.
fn report(name: &str, answer: &Answer) -> u8 {
    if let Some(fired) = &answer.fired {
        println!("{}", describe(fired));
        return exit::OK;
    }
    eprintln!(
        "tracesync-relay: trigger {name} not fired: {}",
        answer.error
    );
    match answer.not_fired {
        Some(NotFired::BadRequest) => exit::USAGE,
        Some(NotFired::Offline | NotFired::Unsupported) => exit::UNAVAILABLE,
        Some(NotFired::Refused | NotFired::NoAnswer | NotFired::Busy) | None => exit::TEMPFAIL,
    }
}

/// The line printed for a trigger that fired.
pub fn describe(fired: &Fired) -> String {
    let placed = match fired.mapped_by.as_str() {
        "estimate" => "placed by the daemon's estimate of this relay's clock",
        _ => "placed at the daemon's receipt: no estimate of this relay's clock yet",
    };
    format!(
        "trigger {} fired (id {:016x}) at host time {} ns ({placed}): window {} before, {} \
         after; {} ring relay(s) asked; snapshot {}",
        fired.name,
        fired.id,
        fired.host_time_ns,
        format_span(Duration::from_nanos(fired.before_ns)),
        format_span(Duration::from_nanos(fired.after_ns)),
        fired.ring_relays,
        fired.snapshot
    )
}
