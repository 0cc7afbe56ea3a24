//! Tools for `scripts/bench-relay.sh` (relay CPU per packet):
//!
//! `relay_sink serve STATS_FILE` — a minimal daemon on 127.0.0.1 (port
//! printed on stdout): answers Hello with Welcome (no probes), acks every
//! batch at once, and rewrites STATS_FILE with "<packets> <packet bytes>"
//! every 100 ms. Nothing is written anywhere, so the relay is the only real
//! work on its side of the link.
//!
//! `relay_sink raw BYTES WRITE_SIZE` — the baseline: writes BYTES bytes to a
//! loopback TCP socket in WRITE_SIZE-byte writes (a reader thread discards
//! them) and prints the writing thread's CPU time in seconds
//! (CLOCK_THREAD_CPUTIME_ID).

use std::io::{self, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};
use prost::Message;
use tracesync_protocol::relay::v1::{self, frame::Body};
use tracesync_protocol::relay::{MAX_FRAME_BYTES, PROTOCOL_VERSION};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", stats] => serve(stats),
        ["raw", bytes, write_size] => match (bytes.parse(), write_size.parse()) {
            (Ok(bytes), Ok(size)) if size > 0 => raw(bytes, size),
            _ => Err(io::Error::other("raw BYTES WRITE_SIZE: numbers expected")),
        },
        _ => Err(io::Error::other(
            "usage: relay_sink serve STATS_FILE | relay_sink raw BYTES WRITE_SIZE",
        )),
    };
    if let Err(e) = result {
        eprintln!("relay_sink: {e}");
        std::process::exit(1);
    }
}

#[derive(Default)]
struct Counters {
    packets: AtomicU64,
    bytes: AtomicU64,
}

fn serve(stats_path: &str) -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("{}", listener.local_addr()?);
    io::stdout().flush()?;
    let counters = Arc::new(Counters::default());
    let stats_path = stats_path.to_owned();
    let writer_counters = counters.clone();
    std::thread::spawn(move || {
        let tmp = format!("{stats_path}.tmp");
        loop {
            let line = format!(
                "{} {}\n",
                writer_counters.packets.load(Ordering::Relaxed),
                writer_counters.bytes.load(Ordering::Relaxed)
            );
            if std::fs::write(&tmp, line).is_ok() {
                let _ = std::fs::rename(&tmp, &stats_path);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    for stream in listener.incoming() {
        let stream = stream?;
        let counters = counters.clone();
        std::thread::spawn(move || {
            if let Err(e) = session(stream, &counters) {
                eprintln!("relay_sink: connection: {e}");
            }
        });
    }
    Ok(())
}

fn session(stream: TcpStream, counters: &Counters) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut buf = Vec::new();
    loop {
        let mut len = [0; 4];
        match reader.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(io::Error::other(format!("frame of {len} bytes")));
        }
        buf.resize(len, 0);
        reader.read_exact(&mut buf)?;
        let frame = v1::Frame::decode(&buf[..]).map_err(io::Error::other)?;
        let reply = match frame.body {
            Some(Body::Hello(hello)) => Body::Welcome(v1::Welcome {
                protocol_version: PROTOCOL_VERSION,
                acked_through_batch: hello.oldest_unacked_batch.saturating_sub(1),
                session_id: 1,
                sync_udp_port: 0,
                probe_key: Default::default(),
                takes_windows: false,
                takes_trigger_requests: false,
            }),
            Some(Body::Batch(batch)) => {
                counters
                    .packets
                    .fetch_add(batch.packets.len() as u64, Ordering::Relaxed);
                let bytes: usize = batch.packets.iter().map(|p| p.len()).sum();
                counters.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                Body::Ack(v1::Ack {
                    through_batch: batch.seq,
                })
            }
            _ => continue,
        };
        let reply = v1::Frame { body: Some(reply) }.encode_to_vec();
        let mut out = Vec::with_capacity(4 + reply.len());
        out.extend_from_slice(&(reply.len() as u32).to_be_bytes());
        out.extend_from_slice(&reply);
        writer.write_all(&out)?;
    }
}

fn raw(total: u64, write_size: usize) -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        let mut buf = vec![0; 1 << 20];
        while stream.read(&mut buf)? > 0 {}
        Ok(())
    });
    let mut stream = TcpStream::connect(addr)?;
    let chunk = vec![0x5a; write_size];
    let thread_cpu = || {
        clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
            .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
            .map_err(io::Error::from)
    };
    let start = thread_cpu()?;
    let mut left = total;
    while left > 0 {
        let n = (write_size as u64).min(left) as usize;
        stream.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    let cpu = thread_cpu()? - start;
    drop(stream);
    let _ = reader.join();
    println!("{cpu:.6}");
    Ok(())
}
