//! The fuzz harness of `tests/tests/fuzz_*.rs`: proptest runners with a
//! printed seed, a case budget from the environment, and structure-aware
//! generators of protobuf wire bytes.
//!
//! cargo-fuzz needs a nightly toolchain (sanitizer flags) and this project
//! builds on stable only, so every parse surface is fuzzed by a proptest
//! harness instead: generators that build valid-ish inputs and then break
//! them (truncations, flipped bytes, huge length prefixes, oversized
//! varints, deep nesting), run as ordinary tests.
//!
//! Environment:
//! - `FUZZ_CASES`: cases per target (default: the target's own, sized for
//!   about 20 s per target in a debug build on a 2-core CI box).
//! - `FUZZ_SEED`: the seed (u64, default a fixed one so CI runs are
//!   reproducible); every run prints it with the command that repeats it.
//! - `FUZZ_SECONDS`: long mode (`scripts/fuzz.sh`): repeat rounds of
//!   `FUZZ_CASES` cases with seeds `FUZZ_SEED`, `+1`, ... until this many
//!   seconds have passed.
//!
//! Each target prints one line `fuzz-figures: target=NAME cases=N
//! rounds=R seed=S seconds=T` (read by `scripts/fuzz.sh`).

use std::cell::Cell;
use std::fmt::Debug;
use std::io::Write as _;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

/// Default seed of CI runs.
pub const DEFAULT_SEED: u64 = 0x7ace_5eed_f022_2026;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}

/// What one target did.
#[derive(Clone, Copy, Debug)]
pub struct Figures {
    pub cases: u64,
    pub rounds: u64,
    pub seed: u64,
    pub elapsed: Duration,
}

/// Runs `check` on values of `strategy`: `FUZZ_CASES` (else
/// `default_cases`) cases per round, one round unless `FUZZ_SECONDS` is
/// set. `test_binary` and `target` name the test for the reproduction line.
/// A failing case (an `Err` or a panic) is shrunk and reported with its
/// seed.
pub fn run<S>(
    test_binary: &str,
    target: &str,
    default_cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Figures
where
    S: Strategy,
    S::Value: Debug,
{
    let cases = env_u64("FUZZ_CASES").map_or(default_cases, |c| {
        u32::try_from(c.max(1)).unwrap_or(u32::MAX)
    });
    let seed = env_u64("FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let seconds = env_u64("FUZZ_SECONDS").map(Duration::from_secs);
    let count = Cell::new(0u64);
    let start = Instant::now();
    let mut rounds = 0u64;
    loop {
        let round_seed = seed.wrapping_add(rounds);
        let config = Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 4096,
            ..Config::default()
        };
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&round_seed.to_le_bytes());
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
        let mut runner = TestRunner::new_with_rng(config, rng);
        let result = runner.run(&strategy, |value| {
            count.set(count.get() + 1);
            check(value)
        });
        if let Err(e) = result {
            panic!(
                "fuzz target {target} failed (seed {round_seed}): {e}\n\
                 reproduce: FUZZ_SEED={round_seed} FUZZ_CASES={cases} \
                 cargo test -p tracesync-tests --test {test_binary} {target}"
            );
        }
        rounds += 1;
        if seconds.is_none_or(|s| start.elapsed() >= s) {
            break;
        }
    }
    let figures = Figures {
        cases: count.get(),
        rounds,
        seed,
        elapsed: start.elapsed(),
    };
    // One line, written at once, so parallel tests do not interleave it.
    let line = format!(
        "fuzz-figures: target={target} cases={} rounds={rounds} seed={seed} seconds={:.1} \
         (reproduce: FUZZ_SEED={seed} cargo test -p tracesync-tests --test {test_binary} {target})\n",
        figures.cases,
        figures.elapsed.as_secs_f64()
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    figures
}

/// Runs `f` on a thread with a 256 MiB stack and waits for it: proptest's
/// generators of nested strategies take deep, wide stack frames in debug
/// builds (the default 2 MiB test thread overflows), and deep-nesting
/// inputs must not be mistaken for a stack problem of the harness.
pub fn with_big_stack(f: impl FnOnce() + Send) {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("fuzz".into())
            .stack_size(256 << 20)
            .spawn_scoped(scope, f)
            .expect("spawn the fuzz thread");
        if let Err(panic) = handle.join() {
            std::panic::resume_unwind(panic);
        }
    });
}

// ---- protobuf wire bytes ----

/// Appends a base-128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One protobuf field, possibly broken on purpose.
#[derive(Clone, Debug)]
pub enum Node {
    Varint(u32, u64),
    Fixed64(u32, u64),
    Fixed32(u32, u32),
    Bytes(u32, Vec<u8>),
    Message(u32, Vec<Node>),
    /// A varint value of 11 bytes (more than the 10 a u64 takes).
    OversizedVarint(u32),
    /// A length prefix far past the bytes that follow.
    HugeLength(u32, u64, Vec<u8>),
    /// Wire types 3, 4 (groups), 6, 7 (invalid).
    OddWireType(u32, u8),
    /// `depth` messages nested in each other under one field number.
    DeepNest(u32, usize),
}

impl Node {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let tag = |out: &mut Vec<u8>, field: u32, wt: u8| {
            put_varint(out, (u64::from(field) << 3) | u64::from(wt));
        };
        match self {
            Node::Varint(f, v) => {
                tag(out, *f, 0);
                put_varint(out, *v);
            }
            Node::Fixed64(f, v) => {
                tag(out, *f, 1);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Node::Fixed32(f, v) => {
                tag(out, *f, 5);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Node::Bytes(f, b) => {
                tag(out, *f, 2);
                put_varint(out, b.len() as u64);
                out.extend_from_slice(b);
            }
            Node::Message(f, children) => {
                let mut body = Vec::new();
                for c in children {
                    c.encode(&mut body);
                }
                tag(out, *f, 2);
                put_varint(out, body.len() as u64);
                out.extend_from_slice(&body);
            }
            Node::OversizedVarint(f) => {
                tag(out, *f, 0);
                out.extend_from_slice(&[0xff; 10]);
                out.push(0x01);
            }
            Node::HugeLength(f, len, b) => {
                tag(out, *f, 2);
                put_varint(out, *len);
                out.extend_from_slice(b);
            }
            Node::OddWireType(f, wt) => tag(out, *f, *wt),
            Node::DeepNest(f, depth) => {
                // Built inside out: no recursion, any depth.
                let mut body: Vec<u8> = Vec::new();
                for _ in 0..*depth {
                    let mut outer = Vec::with_capacity(body.len() + 6);
                    tag(&mut outer, *f, 2);
                    put_varint(&mut outer, body.len() as u64);
                    outer.extend_from_slice(&body);
                    body = outer;
                }
                out.extend_from_slice(&body);
            }
        }
    }
}

/// Encodes a list of fields.
pub fn encode(nodes: &[Node]) -> Vec<u8> {
    let mut out = Vec::new();
    for n in nodes {
        n.encode(&mut out);
    }
    out
}

/// Field numbers a TracePacket parser looks at, plus any others.
pub fn packet_field_number() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![
        4 => prop::sample::select(vec![
            1u32, 6, 8, 10, 11, 12, 13, 36, 41, 42, 45, 50, 58, 59, 60, 79, 98, 107,
        ]),
        1 => 0u32..=20,
        1 => any::<u32>().prop_map(|f| f & 0x1fff_ffff),
    ]
}

/// Varint values that sit on the edges.
pub fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0u64..300,
        1 => Just(u64::from(u32::MAX)),
        1 => Just(u64::from(u32::MAX) + 1),
        1 => Just(i64::MAX as u64),
        1 => Just(u64::MAX),
        2 => any::<u64>(),
    ]
}

fn leaf(field: impl Strategy<Value = u32> + Clone) -> impl Strategy<Value = Node> {
    prop_oneof![
        6 => (field.clone(), edge_u64()).prop_map(|(f, v)| Node::Varint(f, v)),
        1 => (field.clone(), any::<u64>()).prop_map(|(f, v)| Node::Fixed64(f, v)),
        1 => (field.clone(), any::<u32>()).prop_map(|(f, v)| Node::Fixed32(f, v)),
        3 => (field.clone(), prop::collection::vec(any::<u8>(), 0..24))
            .prop_map(|(f, b)| Node::Bytes(f, b)),
        1 => field.clone().prop_map(Node::OversizedVarint),
        1 => (field.clone(), edge_u64(), prop::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(f, l, b)| Node::HugeLength(f, l.max(9), b)),
        1 => (field.clone(), prop::sample::select(vec![3u8, 4, 6, 7]))
            .prop_map(|(f, w)| Node::OddWireType(f, w)),
        1 => (field, prop_oneof![1usize..64, Just(2_000usize)])
            .prop_map(|(f, d)| Node::DeepNest(f, d)),
    ]
}

/// A message: fields among `field`, nested messages a few levels deep.
pub fn message(field: impl Strategy<Value = u32> + Clone + 'static) -> BoxedStrategy<Vec<Node>> {
    let node = leaf(field.clone()).prop_recursive(4, 48, 6, move |inner| {
        (field.clone(), prop::collection::vec(inner, 0..6)).prop_map(|(f, c)| Node::Message(f, c))
    });
    prop::collection::vec(node, 0..10).boxed()
}

/// A well-formed TracePacket body with realistic top-level fields
/// (timestamp, clock id, sequence id and flags, defaults, snapshot,
/// interned data, a payload).
pub fn plausible_packet() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::option::of(edge_u64()),
        prop::option::of(prop_oneof![
            Just(6u32),
            Just(1),
            Just(3),
            64u32..130,
            any::<u32>()
        ]),
        prop::option::of(prop_oneof![1u32..8, any::<u32>()]),
        prop::option::of(0u64..4),
        prop::option::of(prop_oneof![Just(6u32), 64u32..130]),
        prop::option::of(prop::collection::vec((0u32..140, edge_u64()), 0..4)),
        prop::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(
            |(ts, clock, seq, flags, default_clock, snapshot, payload)| {
                let mut n = Vec::new();
                if let Some(ts) = ts {
                    n.push(Node::Varint(8, ts));
                }
                if let Some(c) = clock {
                    n.push(Node::Varint(58, u64::from(c)));
                }
                if let Some(s) = seq {
                    n.push(Node::Varint(10, u64::from(s)));
                }
                if let Some(f) = flags {
                    n.push(Node::Varint(13, f));
                }
                if let Some(c) = default_clock {
                    n.push(Node::Message(59, vec![Node::Varint(58, u64::from(c))]));
                }
                if let Some(clocks) = snapshot {
                    let clocks = clocks
                        .into_iter()
                        .map(|(id, ts)| {
                            Node::Message(
                                1,
                                vec![Node::Varint(1, u64::from(id)), Node::Varint(2, ts)],
                            )
                        })
                        .collect();
                    n.push(Node::Message(6, clocks));
                }
                n.push(Node::Bytes(11, payload));
                encode(&n)
            },
        )
}

/// Breaks bytes the way a bad peer or a torn file would.
#[derive(Clone, Debug)]
pub enum Mutation {
    None,
    Truncate(prop::sample::Index),
    FlipByte(prop::sample::Index, u8),
    InsertByte(prop::sample::Index, u8),
    DeleteRange(prop::sample::Index, usize),
    AppendGarbage(Vec<u8>),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => Just(Mutation::None),
        2 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        2 => (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, x)| Mutation::FlipByte(i, x)),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::InsertByte(i, b)),
        1 => (any::<prop::sample::Index>(), 1usize..16).prop_map(|(i, n)| Mutation::DeleteRange(i, n)),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::AppendGarbage),
    ]
}

impl Mutation {
    pub fn apply(&self, bytes: &mut Vec<u8>) {
        match self {
            Mutation::None => {}
            Mutation::Truncate(i) => {
                if !bytes.is_empty() {
                    let at = i.index(bytes.len());
                    bytes.truncate(at);
                }
            }
            Mutation::FlipByte(i, x) => {
                if !bytes.is_empty() {
                    let at = i.index(bytes.len());
                    bytes[at] ^= x;
                }
            }
            Mutation::InsertByte(i, b) => {
                let at = i.index(bytes.len() + 1);
                bytes.insert(at, *b);
            }
            Mutation::DeleteRange(i, n) => {
                if !bytes.is_empty() {
                    let at = i.index(bytes.len());
                    let end = (at + n).min(bytes.len());
                    bytes.drain(at..end);
                }
            }
            Mutation::AppendGarbage(g) => bytes.extend_from_slice(g),
        }
    }
}

/// Applies up to three mutations.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 0..3)
}

pub fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        m.apply(&mut bytes);
    }
    bytes
}
