//! The real `tracesync-relay` binary following a trace file, against an
//! in-test daemon: a dropped connection, SIGTERM, and a restart on the same
//! spool lose nothing and repeat nothing.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use tracesync_protocol::relay::PROTOCOL_VERSION;
use tracesync_protocol::relay::v1::{self, Frame, frame::Body};
use tracesync_protocol::scan::scan_packet;
use tracesync_protocol::wire;
use tracesync_relay::uplink::FrameCodec;

type Conn = Framed<TcpStream, FrameCodec>;

/// A marker field so the test counts only its own packets.
const MARK_FIELD: u32 = 11;

fn append_packets(path: &Path, range: std::ops::Range<u64>) {
    let mut out = Vec::new();
    for n in range {
        let mut body = Vec::new();
        wire::put_varint_field(&mut body, 8, 1_000_000 + n);
        wire::put_varint_field(&mut body, 10, 1 + n % 2);
        wire::put_len_field(&mut body, MARK_FIELD, b"tracesync-test");
        wire::put_trace_packet(&mut out, &body);
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(&out).unwrap();
}

/// The relay child, killed if the test fails half way (no orphan keeps
/// the test's stderr pipe open).
struct RelayProc(Child);

impl Drop for RelayProc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn start_relay(host: &str, dir: &Path) -> RelayProc {
    RelayProc(
        Command::new(env!("CARGO_BIN_EXE_tracesync-relay"))
            .args(["--host", host, "--name", "bin-test", "--linger-ms", "5"])
            .args(["--tls", "off"])
            .arg("--spool")
            .arg(dir.join("spool"))
            .arg("--source")
            .arg(format!("file:{}", dir.join("trace.pftrace").display()))
            .env("TRACESYNC_TOKEN", "secret")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn terminate(child: &RelayProc) {
    let pid = nix::unistd::Pid::from_raw(child.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
}

/// The in-test daemon's durable output: test packets of acked batches.
#[derive(Default)]
struct Daemon {
    acked_through: u64,
    pending: Vec<v1::Batch>,
    written: Vec<u64>,
}

impl Daemon {
    async fn accept(&mut self, listener: &TcpListener) -> Conn {
        let (stream, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("relay did not connect")
            .unwrap();
        let mut conn = Framed::new(stream, FrameCodec::default());
        let Some(Body::Hello(hello)) = next(&mut conn).await else {
            panic!("no Hello");
        };
        assert_eq!(hello.token, "secret");
        assert_eq!(hello.machine_name, "bin-test");
        assert_ne!(hello.machine_raw_id, 0);
        conn.send(Frame {
            body: Some(Body::Welcome(v1::Welcome {
                protocol_version: PROTOCOL_VERSION,
                acked_through_batch: self.acked_through,
                session_id: 1,
                sync_udp_port: 0,
                probe_key: Default::default(),
                takes_windows: false,
                takes_trigger_requests: false,
            })),
        })
        .await
        .unwrap();
        self.pending.clear();
        conn
    }

    /// Receives batches (acking each when `ack`) until `count` test packets
    /// are written or received, or the relay closes. False on close.
    async fn serve(&mut self, conn: &mut Conn, count: usize, ack: bool) -> bool {
        while self.written.len() + self.pending_test_packets() < count {
            match next(conn).await {
                None => return false,
                Some(Body::Batch(batch)) => {
                    let expected = self.pending.last().map_or(self.acked_through, |b| b.seq) + 1;
                    assert_eq!(batch.seq, expected);
                    self.pending.push(batch);
                    if ack {
                        self.ack(conn).await;
                    }
                }
                Some(_) => {}
            }
        }
        true
    }

    fn pending_test_packets(&self) -> usize {
        self.pending.iter().map(|b| test_counters(b).len()).sum()
    }

    async fn ack(&mut self, conn: &mut Conn) {
        for batch in std::mem::take(&mut self.pending) {
            self.written.extend(test_counters(&batch));
            self.acked_through = batch.seq;
        }
        let ack = Body::Ack(v1::Ack {
            through_batch: self.acked_through,
        });
        let _ = conn.send(Frame { body: Some(ack) }).await;
    }
}

fn test_counters(batch: &v1::Batch) -> Vec<u64> {
    batch
        .packets
        .iter()
        .filter_map(|p| {
            let fields = scan_packet(p).ok()?;
            let marked = p.windows(14).any(|w| w == b"tracesync-test");
            if marked {
                // Producer-written sequence ids are replaced by the relay's
                // (1 is the relay's own sequence: snapshots, SystemInfo).
                assert!(fields.trusted_packet_sequence_id.is_some_and(|id| id >= 2));
            }
            marked.then(|| fields.timestamp.unwrap_or(0) - 1_000_000)
        })
        .collect()
}

async fn next(conn: &mut Conn) -> Option<Body> {
    let frame = tokio::time::timeout(Duration::from_secs(10), conn.next())
        .await
        .expect("relay went quiet")?;
    frame.ok()?.body
}

/// Serves acks until the relay closes, then checks it exited 0.
async fn drain_and_wait(daemon: &mut Daemon, mut conn: Conn, mut child: RelayProc) {
    while daemon.serve(&mut conn, usize::MAX, true).await {}
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            assert_eq!(status.code(), Some(0));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "relay did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn follows_a_file_across_a_drop_a_sigterm_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.pftrace");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let mut daemon = Daemon::default();

    append_packets(&trace, 0..500);
    let relay = start_relay(&host, dir.path());
    let mut conn = daemon.accept(&listener).await;
    assert!(daemon.serve(&mut conn, 500, true).await);

    // Received but never acked, then the connection drops.
    append_packets(&trace, 500..1000);
    assert!(daemon.serve(&mut conn, 700, false).await);
    drop(conn);
    let mut conn = daemon.accept(&listener).await;
    assert!(daemon.serve(&mut conn, 1000, true).await);

    terminate(&relay);
    drain_and_wait(&mut daemon, conn, relay).await;

    // Written while the relay was down; the restarted relay resumes at its cursor.
    append_packets(&trace, 1000..1500);
    let relay = start_relay(&host, dir.path());
    let mut conn = daemon.accept(&listener).await;
    assert!(daemon.serve(&mut conn, 1500, true).await);
    terminate(&relay);
    drain_and_wait(&mut daemon, conn, relay).await;

    assert_eq!(daemon.written, (0..1500).collect::<Vec<u64>>());
}

/// SIGHUP re-reads `[log] level` (info lines appear after it) and does not
/// end the relay.
#[test]
fn sighup_applies_the_log_level_and_keeps_the_relay_running() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("relay.toml");
    let write = |level: &str| {
        // Nothing listens on port 9 of loopback: the relay keeps retrying.
        let text = format!(
            "host = \"127.0.0.1:9\"\nname = \"hup\"\nspool = {:?}\nsources = [\"synthetic:10\"]\n\
             [tls]\nmode = \"off\"\n[log]\nlevel = \"{level}\"\n",
            dir.path().join("spool").display().to_string()
        );
        std::fs::write(&config, text).unwrap();
    };
    write("error");
    let mut relay = RelayProc(
        Command::new(env!("CARGO_BIN_EXE_tracesync-relay"))
            .arg("--config")
            .arg(&config)
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = relay.0.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    write("info");
    let pid = nix::unistd::Pid::from_raw(relay.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut applied = false;
    while !applied && Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
            applied = line.contains("SIGHUP: log.level info applied");
        }
    }
    assert!(applied, "no SIGHUP line at info level");
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "SIGHUP ended the relay"
    );
    terminate(&relay);
}
