use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::clocks::{SharedClock, SimulatedClock};

async fn exchange(path: &std::path::Path, line: &str) -> Answer {
    let stream = tokio::net::UnixStream::connect(path)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (rd, mut wr) = stream.into_split();
    wr.write_all(line.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut answer = String::new();
    BufReader::new(rd)
        .read_line(&mut answer)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{answer:?}: {e}"))
}

#[tokio::test]
async fn a_trigger_on_the_socket_is_stamped_on_the_relay_clock_and_answered() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("sub").join("control.sock");
    let listener = bind(&path, true).unwrap_or_else(|e| panic!("{e}"));
    let mode = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("{e}"))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o660);
    // A second relay on the same path is refused; the first keeps it.
    assert_eq!(
        bind(&path, true).map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::AddrInUse)
    );
    let (tx, inbox) = TriggerInbox::channel();
    let mut rx = inbox.take().unwrap_or_else(|| panic!("taken"));
    assert!(inbox.take().is_none(), "handed over once");
    // A relay 1000 s ahead.
    let clock: SharedClock = Arc::new(SimulatedClock::new(1_000_000_000_000, 0.0));
    let stop = CancellationToken::new();
    tokio::spawn(serve(listener, tx, clock, stop.clone()));
    // The uplink's side: fire the first, refuse the second.
    tokio::spawn(async move {
        let mut n = 0;
        while let Some(ask) = rx.recv().await {
            n += 1;
            assert_eq!(ask.origin, Origin::Command);
            let answer = if n == 1 {
                Answer::fired(Fired {
                    id: 7,
                    name: ask.name.clone(),
                    host_time_ns: ask.relay_time_ns,
                    before_ns: ask.before_ns,
                    after_ns: ask.after_ns,
                    mapped_by: "estimate".into(),
                    ring_relays: 2,
                    snapshot: "snapshot-x-crash.pftrace".into(),
                })
            } else {
                Answer::not_fired(NotFired::Refused, "over the limit")
            };
            if let Some(reply) = ask.reply {
                let _ = reply.send(answer);
            }
        }
    });
    let line = "{\"cmd\":\"trigger\",\"name\":\"crash\",\"before_ns\":2000000000,\"after_ns\":0}\n";
    let first = exchange(&path, line).await;
    let fired = first.fired.unwrap_or_else(|| panic!("not fired"));
    assert!(
        fired.host_time_ns > 1_000_000_000_000,
        "relay clock: {fired:?}"
    );
    assert_eq!((fired.before_ns, fired.after_ns), (2_000_000_000, 0));
    let second = exchange(&path, line).await;
    assert_eq!(second.not_fired, Some(NotFired::Refused));
    // Bad names and lines are refused before the uplink sees them.
    let bad = exchange(
        &path,
        "{\"cmd\":\"trigger\",\"name\":\"a/b\",\"before_ns\":0,\"after_ns\":0}\n",
    )
    .await;
    assert_eq!(bad.not_fired, Some(NotFired::BadRequest));
    let junk = exchange(&path, "status\n").await;
    assert_eq!(junk.not_fired, Some(NotFired::BadRequest));
    assert!(junk.error.contains("bad request"), "{}", junk.error);
    // The command line's client against the same socket.
    let path2 = path.clone();
    let code = tokio::task::spawn_blocking(move || {
        client::run(&path2, "crash", Duration::from_secs(1), Duration::ZERO)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        code,
        tracesync_common::exit::TEMPFAIL,
        "refused: retry later"
    );
    stop.cancel();
}

#[test]
fn the_client_says_when_no_relay_listens_and_a_fired_trigger_is_one_line() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let code = client::run(
        &dir.path().join("none.sock"),
        "crash",
        Duration::from_secs(1),
        Duration::ZERO,
    );
    assert_eq!(code, tracesync_common::exit::UNAVAILABLE);
    assert_eq!(
        client::run(&dir.path().join("x"), "a b", Duration::ZERO, Duration::ZERO),
        tracesync_common::exit::USAGE
    );
    let line = client::describe(&Fired {
        id: 0xab,
        name: "crash".into(),
        host_time_ns: 12,
        before_ns: 30_000_000_000,
        after_ns: 500_000_000,
        mapped_by: "receipt".into(),
        ring_relays: 4,
        snapshot: "snapshot-20260101T000000Z-crash.pftrace".into(),
    });
    assert_eq!(
        line,
        "trigger crash fired (id 00000000000000ab) at host time 12 ns (placed at the \
         daemon's receipt: no estimate of this relay's clock yet): window 30s before, 500ms \
         after; 4 ring relay(s) asked; snapshot snapshot-20260101T000000Z-crash.pftrace"
    );
}

#[test]
fn a_file_that_is_not_a_socket_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("control.sock");
    std::fs::write(&path, b"keep").unwrap_or_else(|e| panic!("{e}"));
    assert!(bind(&path, false).is_err());
    assert_eq!(std::fs::read(&path).unwrap_or_default(), b"keep");
    // The default's directory is not made.
    assert!(bind(&dir.path().join("no").join("c.sock"), false).is_err());
}
