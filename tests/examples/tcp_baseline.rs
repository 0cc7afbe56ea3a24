//! Raw loopback TCP throughput, the baseline of scripts/bench-live.sh: one
//! thread writes `--chunk` byte writes for `--seconds`, another reads and
//! discards them. Prints `tcp_baseline bytes=N seconds=S mb_per_s=X`
//! (MB = 10^6 bytes).
//!
//! ```text
//! cargo run --release -p tracesync-tests --example tcp_baseline -- --seconds 5 --chunk 4096
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> std::io::Result<()> {
    let seconds = arg("--seconds", 5);
    let chunk = arg("--chunk", 4096).max(1) as usize;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        loop {
            match s.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let data = vec![0x5au8; chunk];
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    while Instant::now() < end {
        for _ in 0..64 {
            s.write_all(&data)?;
        }
    }
    drop(s);
    let total = reader
        .join()
        .map_err(|_| std::io::Error::other("reader thread panicked"))??;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "tcp_baseline bytes={total} seconds={secs:.3} mb_per_s={:.1}",
        total as f64 / secs / 1e6
    );
    Ok(())
}
