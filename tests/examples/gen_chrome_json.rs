//! Writes a synthetic Chrome JSON trace of a given size, for measuring
//! `tracesync merge` of JSON inputs (docs/performance-merge.md) and for
//! the demo.
//!
//! ```text
//! cargo run --release -p tracesync-tests --example gen_chrome_json -- \
//!     --out FILE --megabytes 1024 [--seed N] [--pid 4242]
//! ```
//!
//! The file is `{"traceEvents":[...],"displayTimeUnit":"ns"}`, a mix of
//! the two writers whose traces reach gigabytes:
//!
//! - Chrome-like: four threads of one process (`--pid`) with nested
//!   complete events (`X`, two to four deep, a few args), begin/end pairs,
//!   thread-scoped instants, and a counter every 16 events.
//! - PyTorch-profiler-like: two CPU threads of a second process running
//!   `aten::` operators (fractional microsecond timestamps, args with
//!   `Input Dims` arrays and type lists), each launching a kernel that
//!   runs on a GPU stream thread of a third process, the launch and the
//!   kernel linked by a flow (`bind_id` with `flow_out`/`flow_in`, and the
//!   profiler's own `s`/`f` pair, category `ac2g`); a memory counter and
//!   process-scoped instants.
//! - Metadata first: process and thread names, sort indexes and labels.
//!
//! Threads are written in turns of 1 ms each, so the file is out of
//! order across threads by up to ~2 ms, and a GPU kernel is written with
//! its launch though it starts up to ~0.5 ms later: the disorder of a
//! multi-threaded writer's buffers, within the merge's reordering window.
//! Deterministic for a seed.

use std::fs::File;
use std::io::{self, BufWriter, Write};

const CHROME_THREADS: u32 = 4;
const TORCH_THREADS: u32 = 2;
/// Each thread writes its events up to the end of a turn of this many
/// µs, then the next thread writes its own: the file's disorder.
const TURN_US: u64 = 1_000;

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

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

/// Where one thread's events are.
struct Thread {
    pid: u32,
    tid: u32,
    /// Its clock, µs.
    now: u64,
    count: u64,
    torch: bool,
}

const NAMES: [&str; 8] = [
    "MessageLoop::RunTask",
    "ThreadControllerImpl::RunTask",
    "v8.compile",
    "Layout",
    "Paint",
    "DataLoader.__next__",
    "ResourceDispatcher::OnReceivedData",
    "HTMLDocumentParser::PumpTokenizer",
];

const OPS: [&str; 8] = [
    "aten::linear",
    "aten::matmul",
    "aten::addmm",
    "aten::relu",
    "aten::layer_norm",
    "aten::softmax",
    "aten::conv2d",
    "aten::add_",
];

const KERNELS: [&str; 4] = [
    "ampere_sgemm_128x64_tn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>",
    "void at::native::(anonymous namespace)::layer_norm_kernel<float, float>",
];

/// Microseconds with three decimals, as the PyTorch profiler writes them.
struct Micros(u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// One turn of a Chrome-like thread, to `until` µs: nested complete
/// events, begin/end pairs, instants and counters.
fn chrome_turn(out: &mut impl Write, t: &mut Thread, until: u64, rng: &mut Rng) -> io::Result<()> {
    let (pid, tid) = (t.pid, t.tid);
    while t.now < until {
        let depth = 2 + rng.below(3);
        let total = 20 + rng.below(200);
        let name = rng.pick(&NAMES);
        // Nested X events: each child inside its parent.
        let (mut start, mut dur) = (t.now, total);
        for level in 0..depth {
            writeln!(
                out,
                "{{\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{}.{:03},\"dur\":{}.{:03},\"name\":\"{name}\",\"cat\":\"cat{level}\",\"args\":{{\"seq\":{},\"depth\":{level}}}}},",
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
            "{{\"ph\":\"B\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"name\":\"step\",\"cat\":\"train\"}},\n\
             {{\"ph\":\"i\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"name\":\"mark\",\"s\":\"t\"}},\n\
             {{\"ph\":\"E\",\"pid\":{pid},\"tid\":{tid},\"ts\":{}}},\n",
            t.now,
            t.now + 2,
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

/// One turn of a PyTorch-like CPU thread, to `until` µs: operators, each
/// launching a kernel on GPU stream `stream` (of process `gpu_pid`)
/// linked by flows.
fn torch_turn(
    out: &mut impl Write,
    t: &mut Thread,
    (gpu_pid, stream): (u32, u32),
    until: u64,
    rng: &mut Rng,
) -> io::Result<()> {
    let (pid, tid) = (t.pid, t.tid);
    // `now` is in µs; these times are in ns, written as µs with decimals.
    let mut ns = t.now * 1000 + rng.below(1000);
    while ns < until * 1000 {
        let op = rng.pick(&OPS);
        let id = t.count;
        let op_dur = 20_000 + rng.below(80_000);
        let (rows, cols) = (1 << (5 + rng.below(4)), 1 << (8 + rng.below(4)));
        writeln!(
            out,
            "{{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"{op}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":{},\"args\":{{\"External id\":{id},\"Record function id\":0,\"Ev Idx\":{id},\"Input Dims\":[[{rows},{cols}],[{cols},{cols}],[{cols}]],\"Input type\":[\"float\",\"float\",\"float\"],\"Input Strides\":[[{cols},1],[{cols},1],[1]],\"Concrete Inputs\":[\"\",\"\",\"\"],\"Fwd thread id\":0,\"Sequence number\":{}}}}},",
            Micros(ns),
            Micros(op_dur),
            id / 3
        )?;
        let launch = ns + op_dur / 2;
        let launch_dur = 3_000 + rng.below(5_000);
        let corr = id * 7 + u64::from(tid);
        writeln!(
            out,
            "{{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":{},\"args\":{{\"External id\":{id},\"cbid\":211,\"correlation\":{corr}}},\"bind_id\":{corr},\"flow_out\":true}},\n\
             {{\"ph\":\"s\",\"id\":{corr},\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"cat\":\"ac2g\",\"name\":\"ac2g\"}},",
            Micros(launch),
            Micros(launch_dur),
            Micros(launch),
        )?;
        // The kernel runs later, on the GPU stream; written now.
        let start = launch + 5_000 + rng.below(500_000);
        let kernel = rng.pick(&KERNELS);
        let grid = 1 + rng.below(256);
        writeln!(
            out,
            "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"{kernel}\",\"pid\":{gpu_pid},\"tid\":{stream},\"ts\":{},\"dur\":{},\"args\":{{\"External id\":{id},\"queued\":0,\"device\":0,\"context\":1,\"stream\":{stream},\"correlation\":{corr},\"registers per thread\":{},\"shared memory\":{},\"blocks per SM\":{}.{},\"warps per SM\":{}.0,\"grid\":[{grid},1,1],\"block\":[128,1,1],\"est. achieved occupancy %\":{}}},\"bind_id\":{corr},\"flow_in\":true}},\n\
             {{\"ph\":\"f\",\"id\":{corr},\"pid\":{gpu_pid},\"tid\":{stream},\"ts\":{},\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}},",
            Micros(start),
            Micros(2_000 + rng.below(200_000)),
            32 + 8 * rng.below(24),
            1024 * rng.below(48),
            rng.below(8),
            rng.below(10),
            4 * (1 + rng.below(16)),
            rng.below(100),
            Micros(start),
        )?;
        ns += op_dur + 1_000 + rng.below(10_000);
        t.count += 1;
        if t.count.is_multiple_of(8) {
            writeln!(
                out,
                "{{\"ph\":\"C\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"name\":\"[memory]\",\"args\":{{\"Total Allocated\":{},\"Total Reserved\":{}}}}},\n\
                 {{\"ph\":\"i\",\"s\":\"p\",\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"name\":\"ProfilerStep#{}\",\"cat\":\"user_annotation\"}},",
                Micros(ns),
                rng.below(1 << 34),
                1u64 << 34,
                Micros(ns),
                t.count / 8
            )?;
        }
    }
    t.now = ns / 1000 + 1;
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
    let (pid, torch_pid, gpu_pid) = (args.pid, args.pid + 100, args.pid + 200);
    let mut rng = Rng(args.seed.max(1));
    writeln!(out, "{{\"traceEvents\":[")?;
    for (p, name, sort) in [
        (pid, "browser", 1),
        (torch_pid, "python3 train.py", 2),
        (gpu_pid, "GPU 0", 3),
    ] {
        writeln!(
            out,
            "{{\"ph\":\"M\",\"pid\":{p},\"name\":\"process_name\",\"args\":{{\"name\":\"{name}\"}}}},\n\
             {{\"ph\":\"M\",\"pid\":{p},\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{sort}}}}},\n\
             {{\"ph\":\"M\",\"pid\":{p},\"name\":\"process_labels\",\"args\":{{\"labels\":\"synthetic\"}}}},"
        )?;
    }
    let mut threads: Vec<Thread> = (0..CHROME_THREADS + TORCH_THREADS)
        .map(|i| {
            let torch = i >= CHROME_THREADS;
            Thread {
                pid: if torch { torch_pid } else { pid },
                tid: if torch { torch_pid } else { pid } + 1 + i,
                now: 1_000_000 + u64::from(i) * 37,
                count: 0,
                torch,
            }
        })
        .collect();
    for (i, t) in threads.iter().enumerate() {
        writeln!(
            out,
            "{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":\"worker-{i}\"}}}},\n\
             {{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{i}}}}},",
            t.pid, t.tid, t.pid, t.tid
        )?;
    }
    let streams: Vec<u32> = (0..TORCH_THREADS).map(|i| 7 + i).collect();
    for s in &streams {
        writeln!(
            out,
            "{{\"ph\":\"M\",\"pid\":{gpu_pid},\"tid\":{s},\"name\":\"thread_name\",\"args\":{{\"name\":\"stream {s}\"}}}},"
        )?;
    }
    let budget = args.megabytes << 20;
    let mut until = 1_000_000;
    while out.written < budget {
        until += TURN_US;
        let mut torch = 0;
        for t in &mut threads {
            if t.torch {
                torch_turn(&mut out, t, (gpu_pid, streams[torch]), until, &mut rng)?;
                torch += 1;
            } else {
                chrome_turn(&mut out, t, until, &mut rng)?;
            }
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
