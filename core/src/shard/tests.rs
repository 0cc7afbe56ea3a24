use super::*;
use crate::live::{Recovered, RecoveredSequence, RecoveredStream};
use crate::sync_quality::{QUALITY_SEQ_BASE, QUALITY_SEQ_COUNT};

/// A test packet: its time, its shard and its place in the shard's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct P {
    ts: i64,
    shard: usize,
    n: u64,
}

impl Timed for P {
    fn ts(&self) -> i64 {
        self.ts
    }
    fn size(&self) -> u64 {
        100
    }
}

fn run(shard: usize, times: &[i64], watermark: i64, position: u64) -> Run<P> {
    let packets = times
        .iter()
        .enumerate()
        .map(|(i, &ts)| P {
            ts,
            shard,
            n: position * 1000 + i as u64,
        })
        .collect();
    Run {
        packets,
        watermark,
        complete: true,
        position,
    }
}

fn times(out: &[P]) -> Vec<i64> {
    out.iter().map(|p| p.ts).collect()
}

#[test]
fn a_machine_always_has_the_same_shard_and_machines_spread() {
    assert_eq!(shard_of(7, 1), 0);
    assert_eq!(shard_of(7, 0), 0);
    let mut counts = [0usize; 4];
    for raw_id in 1..=1000u32 {
        let k = shard_of(raw_id, 4);
        assert_eq!(k, shard_of(raw_id, 4));
        counts[k] += 1;
    }
    for c in counts {
        assert!(c > 150, "uneven spread: {counts:?}");
    }
}

#[test]
fn automatic_shards_leave_the_writer_a_core() {
    assert_eq!(resolve_shards(0, 2), 1);
    assert_eq!(resolve_shards(0, 1), 1);
    assert_eq!(resolve_shards(0, 0), 1);
    assert_eq!(resolve_shards(0, 8), 7);
    assert_eq!(resolve_shards(3, 2), 3);
    assert_eq!(resolve_shards(0, 1000), MAX_SHARDS);
    assert_eq!(resolve_shards(1000, 2), MAX_SHARDS);
}

#[test]
fn shards_allocate_disjoint_ids_past_the_reserved_ones() {
    let shards: Vec<ShardIds> = (0..3).map(|k| ShardIds::new(k, 3)).collect();
    let mut seen = std::collections::HashSet::new();
    for ids in &shards {
        let mut id = ids.first_from(1);
        for _ in 0..100 {
            assert!(id > crate::live::OWN_SEQUENCE_ID);
            assert!(ids.owns(id));
            assert!(seen.insert(id), "id {id} given twice");
            id = ids.next_after(id);
        }
    }
    // One shard owns every id but the reserved ones, in turn.
    let all = ShardIds::all();
    assert_eq!(all.first_from(0), 2);
    assert_eq!(all.next_after(2), 3);
    // The sync-quality range is skipped, and the end wraps to the start.
    let ids = ShardIds::new(0, 2);
    let past = ids.first_from(QUALITY_SEQ_BASE - 1);
    assert!(past >= QUALITY_SEQ_BASE + QUALITY_SEQ_COUNT && ids.owns(past));
    let wrapped = ids.next_after(u32::MAX);
    assert!(ids.owns(wrapped) && wrapped < 10, "{wrapped}");
}

#[test]
fn recovered_state_goes_to_the_shard_of_its_machine() {
    let stream = |out_seq, machine_raw_id| RecoveredStream {
        out_seq,
        relay_instance: u64::from(machine_raw_id) * 10,
        relay_sequence: 1,
        machine_raw_id,
        written_through: 5,
    };
    let recovered = Recovered {
        streams: (1..=20).map(|m| stream(m + 10, m)).collect(),
        next_out_seq: 40,
        sync_floors: vec![(3, 33)],
        sequences: (1..=20).map(|m| RecoveredSequence::new(m + 10)).collect(),
        names: vec![(3, "three".into())],
    };
    let parts = split_recovered(recovered, 3);
    assert_eq!(parts.len(), 3);
    let mut total = 0;
    for (k, part) in parts.iter().enumerate() {
        assert_eq!(part.next_out_seq, 40);
        for s in &part.streams {
            assert_eq!(shard_of(s.machine_raw_id, 3), k);
            assert!(part.sequences.iter().any(|q| q.out_seq == s.out_seq));
        }
        assert_eq!(part.sequences.len(), part.streams.len());
        total += part.streams.len();
    }
    assert_eq!(total, 20);
    let owner = &parts[shard_of(3, 3)];
    assert_eq!(owner.sync_floors, vec![(3, 33)]);
    assert_eq!(owner.names, vec![(3, "three".to_string())]);
}

#[test]
fn runs_merge_in_time_order_up_to_the_lowest_watermark() {
    let mut merge = ShardMerge::new(2, u64::MAX);
    merge.push(0, run(0, &[10, 30, 50], 50, 1));
    merge.push(1, run(1, &[20, 40], 40, 1));
    let mut out = Vec::new();
    merge.drain(&mut out);
    assert_eq!(times(&out), [10, 20, 30, 40]);
    // Shard 0's run is not out yet, shard 1's is.
    assert_eq!(merge.written_positions(), [None, Some(1)]);
    merge.push(1, run(1, &[45, 60], 60, 2));
    out.clear();
    merge.drain(&mut out);
    assert_eq!(times(&out), [45, 50]);
    assert_eq!(merge.written_positions(), [Some(1), Some(1)]);
    assert_eq!(merge.queued(), 1);
    out.clear();
    merge.flush_all(&mut out);
    assert_eq!(times(&out), [60]);
    assert_eq!(merge.written_positions(), [Some(1), Some(2)]);
    assert_eq!(merge.stats().late_packets, 0);
}

#[test]
fn a_silent_shard_holds_the_output_and_an_incomplete_run_holds_its_shard() {
    let mut merge = ShardMerge::new(2, u64::MAX);
    merge.push(0, run(0, &[100, 200], 200, 1));
    let mut out = Vec::new();
    merge.drain(&mut out);
    assert!(out.is_empty(), "shard 1 said nothing yet");
    // Shard 1 stopped at its size bound: its watermark stays.
    merge.push(
        1,
        Run {
            complete: false,
            ..run(1, &[50], 300, 1)
        },
    );
    merge.drain(&mut out);
    assert!(out.is_empty());
    // Then it drained through 150, with nothing more.
    merge.push(1, run(1, &[], 150, 2));
    merge.drain(&mut out);
    assert_eq!(times(&out), [50, 100]);
    assert_eq!(merge.written_positions(), [None, Some(2)]);
}

#[test]
fn forced_packets_go_at_once_and_late_ones_are_counted() {
    let mut merge = ShardMerge::new(2, u64::MAX);
    // Shard 0 forced out a packet dated far ahead (its watermark is 10).
    merge.push(0, run(0, &[5, 1_000_000, 8], 10, 1));
    merge.push(1, run(1, &[7, 9], 9, 1));
    let mut out = Vec::new();
    merge.drain(&mut out);
    assert_eq!(times(&out), [5, 1_000_000, 7, 8, 9]);
    assert_eq!(merge.stats().late_packets, 0);
    // A shard's late packet (older than what was written) goes at once.
    merge.push(1, run(1, &[3, 12], 12, 2));
    merge.push(0, run(0, &[11], 11, 2));
    out.clear();
    merge.drain(&mut out);
    assert_eq!(times(&out), [3, 11]);
    assert_eq!(merge.stats().late_packets, 1);
}

#[test]
fn past_the_queue_bound_the_lowest_head_is_forced_out() {
    // Two packets of 100 bytes fit.
    let mut merge = ShardMerge::new(2, 200);
    merge.push(0, run(0, &[10, 20, 30, 40], 40, 1));
    let mut out = Vec::new();
    merge.drain(&mut out);
    assert_eq!(times(&out), [10, 20]);
    assert_eq!(merge.stats().forced_by_queue_limit, 2);
    assert_eq!(merge.queued_bytes(), 200);
}

#[test]
fn every_packet_once_in_shard_order_and_in_time_order_across_shards() {
    // Random runs from 4 shards with rising watermarks: the output holds
    // every packet once, each shard's in its order, and is sorted (no
    // packet is late or forced here).
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let shards = 4;
    let mut merge = ShardMerge::new(shards, u64::MAX);
    let mut clock = vec![0i64; shards];
    let mut position = vec![0u64; shards];
    let mut pushed = 0;
    let mut out = Vec::new();
    for round in 0..400 {
        let k = rand(shards as u64) as usize;
        let mut t = clock[k];
        let mut ts = Vec::new();
        for _ in 0..rand(20) {
            t += rand(50) as i64 + 1;
            ts.push(t);
        }
        clock[k] = t;
        position[k] += 1;
        pushed += ts.len();
        merge.push(k, run(k, &ts, t, position[k]));
        if round % 7 == 0 {
            merge.drain(&mut out);
        }
    }
    merge.flush_all(&mut out);
    assert_eq!(out.len(), pushed);
    assert!(out.windows(2).all(|w| w[0].ts <= w[1].ts));
    for k in 0..shards {
        let mine: Vec<u64> = out.iter().filter(|p| p.shard == k).map(|p| p.n).collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "shard {k} reordered");
    }
    assert_eq!(merge.stats().late_packets, 0);
    assert_eq!(merge.queued(), 0);
    let positions: Vec<Option<u64>> = position.iter().map(|&p| Some(p)).collect();
    assert_eq!(merge.written_positions(), positions);
}

#[test]
fn positions_are_reported_once_their_commit_is_durable() {
    let mut durable = DurablePositions::new(2);
    durable.requested(1, vec![Some(3), None]);
    durable.requested(2, vec![Some(5), Some(1)]);
    durable.requested(3, vec![Some(5), Some(2)]);
    assert_eq!(durable.durable_through(0), []);
    assert_eq!(durable.durable_through(1), [(0, 3)]);
    assert_eq!(durable.in_flight(), 2);
    // Two commits at once: the newest positions; shard 0 did not move.
    assert_eq!(durable.durable_through(3), [(0, 5), (1, 2)]);
    assert_eq!(durable.durable_through(3), []);
    assert_eq!(durable.in_flight(), 0);
}

#[test]
fn sync_quality_sequences_are_disjoint_across_shards() {
    let a = ShardIds::new(0, 2);
    let b = ShardIds::new(1, 2);
    let of_a: std::collections::HashSet<u32> = (0..1000).map(|n| a.quality_seq(n)).collect();
    assert_eq!(of_a.len(), 1000);
    for n in 0..1000 {
        let id = b.quality_seq(n);
        assert!(crate::sync_quality::is_quality_seq(id) && !of_a.contains(&id));
    }
    // Unsharded: the ids in turn, as always.
    assert_eq!(ShardIds::all().quality_seq(3), QUALITY_SEQ_BASE + 3);
}

#[test]
fn a_renamed_relay_keeps_the_shard_that_holds_its_state() {
    let shards = 4;
    // Two raw ids on different shards.
    let a = 1u32;
    let b = (2..1000)
        .find(|&b| shard_of(b, shards) != shard_of(a, shards))
        .expect("some raw id lands elsewhere");
    let recovered = Recovered {
        streams: vec![RecoveredStream {
            out_seq: 100,
            relay_instance: 77,
            relay_sequence: 1,
            machine_raw_id: a,
            written_through: 9,
        }],
        ..Recovered::default()
    };
    let mut instances = InstanceShards::new(&recovered, shards);
    // Instance 77 comes back as machine b: it stays with its streams.
    assert_eq!(instances.shard_of_relay(b, 77), shard_of(a, shards));
    // Another instance as machine b goes by its machine.
    assert_eq!(instances.shard_of_relay(b, 78), shard_of(b, shards));
    let parts = split_recovered(recovered, shards);
    assert_eq!(parts[shard_of(a, shards)].streams.len(), 1);
}
