//! Writes a synthetic Chrome JSON trace of a given size, for measuring
//! `tracesync merge` of JSON inputs (docs/performance.md, "Merge of Chrome
//! JSON") and for the demo.
//!
//! ```text
//! cargo run --release -p tracesync-tests --example gen_chrome_json -- \
//!     --out FILE --megabytes 1024 [--seed N] [--pid 4242]
//! ```
//!
//! The file is `{"traceEvents":[...],"displayTimeUnit":"ns"}` with, on
//! eight threads of one process (`--pid`), the shapes profilers write:
//! process and thread names first, then per thread nested complete events
//! (`X`, two to four deep, with a few args), begin/end pairs, instants,
//! and a counter every 16 events. Threads are written in turns of 64
//! events, so the file is out of order across threads by up to ~2 ms, as
//! a multi-threaded writer's buffers leave it; within the merge's window.
//! Deterministic for a seed.

use std::fs::File;
use std::io::{self, BufWriter, Write};

const THREADS: u32 = 8;
const TURN: u32 = 64;

struct Args {
    out: String,
    megabytes: u64,
    seed: u64,
    pid: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        out: String::new(),
        megabytes: 64,
        seed: 1,
        pid: 4242,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => args.out = value()?,
            "--megabytes" => args.megabytes = value()?.parse().map_err(|e| format!("{e}"))?,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("{e}"))?,
            "--pid" => args.pid = value()?.parse().map_err(|e| format!("{e}"))?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.out.is_empty() {
        return Err("--out FILE is required".into());
    }
    Ok(args)
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Where one thread's events are.
struct Thread {
    tid: u32,
    /// Its clock, µs.
    now: u64,
    count: u64,
}

const NAMES: [&str; 8] = [
    "MessageLoop::RunTask",
    "ThreadControllerImpl::RunTask",
    "aten::matmul",
    "cudaLaunchKernel",
    "v8.compile",
    "Layout",
    "Paint",
    "DataLoader.__next__",
];

/// One turn of a thread: `TURN` events of nested complete events, a
/// begin/end pair, instants and counters.
fn turn(out: &mut impl Write, pid: u32, t: &mut Thread, rng: &mut Rng) -> io::Result<()> {
    for _ in 0..TURN / 8 {
        let depth = 2 + rng.below(3);
        let total = 20 + rng.below(200);
        let name = NAMES[rng.below(NAMES.len() as u64) as usize];
        // Nested X events: each child inside its parent.
        let (mut start, mut dur) = (t.now, total);
        for level in 0..depth {
            writeln!(
                out,
                "{{\"ph\":\"X\",\"pid\":{pid},\"tid\":{},\"ts\":{}.{:03},\"dur\":{}.{:03},\"name\":\"{name}\",\"cat\":\"cat{level}\",\"args\":{{\"seq\":{},\"depth\":{level}}}}},",
                t.tid,
                start,
                rng.below(1000),
                dur,
                rng.below(1000),
                t.count
            )?;
            start += 1;
            dur = dur.saturating_sub(3).max(1);
        }
        t.now += total + 1;
        write!(
            out,
            "{{\"ph\":\"B\",\"pid\":{pid},\"tid\":{},\"ts\":{},\"name\":\"step\",\"cat\":\"train\"}},\n\
             {{\"ph\":\"i\",\"pid\":{pid},\"tid\":{},\"ts\":{},\"name\":\"mark\",\"s\":\"t\"}},\n\
             {{\"ph\":\"E\",\"pid\":{pid},\"tid\":{},\"ts\":{}}},\n",
            t.tid,
            t.now,
            t.tid,
            t.now + 2,
            t.tid,
            t.now + 5
        )?;
        t.now += 6;
        t.count += depth + 3;
        if t.count % 16 < 8 {
            writeln!(
                out,
                "{{\"ph\":\"C\",\"pid\":{pid},\"ts\":{},\"name\":\"memory\",\"args\":{{\"allocated\":{},\"reserved\":{}}}}},",
                t.now,
                rng.below(1 << 30),
                1u64 << 30
            )?;
        }
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gen_chrome_json: {e}");
            std::process::exit(64);
        }
    };
    if let Err(e) = write_trace(&args) {
        eprintln!("gen_chrome_json: {}: {e}", args.out);
        std::process::exit(74);
    }
}

fn write_trace(args: &Args) -> io::Result<()> {
    let file = File::create(&args.out)?;
    let mut out = CountingWriter {
        inner: BufWriter::with_capacity(1 << 20, file),
        written: 0,
    };
    let pid = args.pid;
    let mut rng = Rng(args.seed.max(1));
    write!(
        out,
        "{{\"traceEvents\":[\n{{\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_name\",\"args\":{{\"name\":\"trainer\"}}}},\n"
    )?;
    let mut threads: Vec<Thread> = (0..THREADS)
        .map(|i| Thread {
            tid: pid + 1 + i,
            now: 1_000_000 + u64::from(i) * 37,
            count: 0,
        })
        .collect();
    for t in &threads {
        writeln!(
            out,
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":\"worker-{}\"}}}},",
            t.tid,
            t.tid - pid
        )?;
    }
    let budget = args.megabytes << 20;
    while out.written < budget {
        for t in &mut threads {
            turn(&mut out, pid, t, &mut rng)?;
        }
    }
    // A last empty object: the array needs no trailing comma handling.
    write!(out, "{{}}\n],\"displayTimeUnit\":\"ns\"}}\n")?;
    out.inner.flush()
}

/// Counts the bytes written, to stop at the requested size.
struct CountingWriter<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
