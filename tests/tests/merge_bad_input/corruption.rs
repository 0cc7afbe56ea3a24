//! Random corruption of a rich trace: never a panic.

use super::*;

/// A small deterministic xorshift64* generator (no extra dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A valid trace that exercises every field the merge reads: snapshots with
/// units and a primary clock, remote syncs, machine ids, sequence defaults,
/// SystemInfo and a compressed bundle.
fn rich_trace() -> Vec<u8> {
    use build::SnapshotClockSpec as C;
    use tracesync_protocol::perfetto::trace_packet;
    let mut p = vec![
        build::system_info("Linux", "6.1", "x86_64"),
        build::clock_snapshot_ext(
            1,
            &[
                C::ns(BT, 1_000_000_000),
                C::ns(REALTIME, 1_700_000_000_000_000_000),
                C::unit(MONOTONIC, 500_000, 1000),
                C::incremental(64, 10, 1000),
            ],
            Some(BT),
        ),
        build::instant(1_000_100_000, BT, 1, 1, "a"),
        build::instant(3, 64, 1, 1, "inc"),
        build::on_machine(
            build::remote_clock_sync(2, &[(50_000_000_000, 2_000_000_000); 2]),
            7,
        ),
        build::on_machine(build::instant(50_000_100_000, BT, 3, 1, "vm"), 7),
        build::on_machine(
            build::on_sequence(build::clock_snapshot(&[(BT, 50_000_000_000)]), 3),
            7,
        ),
        build::track_descriptor(1, "t", None),
    ];
    // A packet with sequence defaults, then one relying on them.
    let mut defaults = build::on_sequence(build::packet(), 4);
    defaults.trace_packet_defaults = Some(tracesync_protocol::perfetto::TracePacketDefaults {
        timestamp_clock_id: Some(MONOTONIC),
    });
    p.push(defaults);
    let mut uses = build::on_sequence(build::packet(), 4);
    uses.timestamp = Some(600_000);
    p.push(uses);
    // A compressed bundle of two packets.
    let inner = build::encode_trace(&[
        build::instant(1_000_200_000, BT, 5, 1, "z1"),
        build::instant(1_000_300_000, BT, 5, 1, "z2"),
    ]);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&inner).unwrap();
    p.push(Packet {
        data: Some(trace_packet::Data::CompressedPackets(
            z.finish().unwrap().into(),
        )),
        ..build::packet()
    });
    p.extend((0..20).map(|i| build::instant(1_000_400_000 + i * 7919, BT, 1, 1, "b")));
    let bytes = build::encode_trace(&p);
    // The builders must produce something the merge accepts cleanly.
    assert!(Trace::decode(&bytes[..]).is_ok());
    bytes
}

/// Random byte strings and random truncations and bit flips of a valid
/// trace (plain and gzip'd), through the real binary, three inputs per run:
/// the exit code is 0 or 65, never a panic, and every stderr line names one
/// of the inputs or is the dropped-packets warning.
#[test]
fn random_corruption_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let valid = rich_trace();
    // The valid trace itself merges cleanly.
    let v = write(d, "valid.pftrace", &valid);
    let o = tracesync(&["merge", "--format", "jsonl", v.to_str().unwrap()]);
    assert_eq!(exit_code(&o), 0, "{}", stderr(&o));
    let valid_gz = gzip(&valid);
    // TRACESYNC_FUZZ_RUNS / TRACESYNC_FUZZ_SEED widen a soak run; the
    // default keeps this test within a few seconds.
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let runs = env("TRACESYNC_FUZZ_RUNS").unwrap_or(100);
    let mut rng = Rng(env("TRACESYNC_FUZZ_SEED").unwrap_or(0x5EED_1234_ABCD_0001) | 1);
    let start = std::time::Instant::now();
    for run in 0..runs {
        let mut paths = Vec::new();
        for k in 0..3 {
            let case = run * 3 + k;
            let bytes: Vec<u8> = match rng.below(5) {
                0 => {
                    let n = rng.below(300) as usize;
                    (0..n).map(|_| rng.next() as u8).collect()
                }
                1 => valid[..rng.below(valid.len() as u64 + 1) as usize].to_vec(),
                2 | 3 => {
                    let mut b = valid.clone();
                    for _ in 0..=rng.below(4) {
                        let i = rng.below(b.len() as u64) as usize;
                        b[i] ^= 1 << rng.below(8);
                    }
                    if rng.below(4) == 0 {
                        b.truncate(rng.below(b.len() as u64 + 1) as usize);
                    }
                    b
                }
                _ => {
                    let mut b = valid_gz.clone();
                    let i = 10 + rng.below(b.len() as u64 - 10) as usize;
                    if rng.below(2) == 0 {
                        b[i] ^= 1 << rng.below(8);
                    } else {
                        b.truncate(i);
                    }
                    b
                }
            };
            paths.push(write(d, &format!("case{case}.pftrace"), &bytes));
        }
        let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        // Every other run writes the Perfetto format (sync points, machine
        // stamping) to a file instead of jsonl to stdout.
        let perfetto_out = d.join("fuzz-out.pftrace");
        let mut args = if run % 2 == 0 {
            vec!["merge", "--format", "jsonl"]
        } else {
            vec!["merge", "-o", perfetto_out.to_str().unwrap()]
        };
        let strs: Vec<String> = refs.iter().map(|p| p.display().to_string()).collect();
        args.extend(strs.iter().map(String::as_str));
        let o = tracesync(&args);
        let err = stderr(&o);
        assert_no_panic(&err);
        assert!(
            [0, 65].contains(&exit_code(&o)),
            "run {run}: exit {:?}\n{err}",
            o.status
        );
        for line in err.lines() {
            assert!(
                strs.iter().any(|s| line.contains(s.as_str()))
                    || line.contains("had no place on the timeline"),
                "run {run}: a line naming no input: {line}"
            );
        }
        // Every jsonl line parses.
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            serde_json::from_str::<Record>(l)
                .unwrap_or_else(|e| panic!("run {run}: bad jsonl {l:?}: {e}"));
        }
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    }
    assert!(
        env("TRACESYNC_FUZZ_RUNS").is_some()
            || start.elapsed() < std::time::Duration::from_secs(60),
        "{runs} runs took {:?}",
        start.elapsed()
    );
}
