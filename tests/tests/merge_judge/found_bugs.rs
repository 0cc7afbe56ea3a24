//! Shapes that found bugs.

use super::one_file::{RELAY_SLICES, relay_recorded};
use super::*;

// Shapes that found bugs

/// A relay-recorded file whose first snapshot is the remote machine's: the
/// relay host still holds trace time, as in Perfetto (this used to move the
/// whole timeline onto machine 7's BOOTTIME, 48 s later than Perfetto).
#[test]
fn remote_snapshot_first_keeps_host_trace_time() {
    if !tp::require_or_skip("remote_snapshot_first_keeps_host_trace_time") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut p = vec![
        on(7, build::on_sequence(system_info("5.15-vm"), 1)),
        on(7, snap(5, &[(BT, 50 * S), (MONO, 40 * S)])),
        on(
            7,
            build::remote_clock_sync(1, &[(50 * S, 2 * S), (50 * S, 2 * S)]),
        ),
        snap(1, &[(BT, S), (MONO, S / 2)]),
        build::on_sequence(system_info("6.1-host"), 1),
        track(2, 1, "host"),
        on(7, track(3, 7, "vm")),
    ];
    p.extend(slice(3, 7, BT, 50_100_000_000, 50_150_000_000, "vm_slice").map(|x| on(7, x)));
    p.extend(slice(2, 1, BT, 1_100_000_000, 1_200_000_000, "host_slice"));
    let input = write(d, "relay.pftrace", &p);
    let j = judge(d, "remote_first", &[&input], &[]);
    assert_eq!(j.by_raw_id(), BTreeMap::from([(0, 0), (7, 7)]));
    assert_eq!(j.releases[0], (0, Some("6.1-host".into())));
    assert_eq!(j.slice("host_slice").ts, 1_100_000_000);
    assert_eq!(j.slice("vm_slice").ts, 2_100_000_000);
    assert_same_as_input(&input, &j, &[]);
}

/// Two relay-recorded files that both embed machine 7: one machine (Perfetto
/// keeps one context per raw machine id across the files of a merge), with
/// each file's clocks and sync points of its own.
#[test]
fn two_relay_files_embedding_one_id() {
    if !tp::require_or_skip("two_relay_files_embedding_one_id") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let r1 = relay_recorded(d, "r1.pftrace", 0);
    let r2 = relay_recorded(d, "r2.pftrace", 30 * S);
    let j = judge(d, "two_relays", &[&r1, &r2], &[]);
    let machines: Vec<(u64, &str)> = j
        .machine_ids
        .keys()
        .map(|(raw, name)| (*raw, name.as_str()))
        .collect();
    assert_eq!(machines, [(0, "host"), (7, "machine-7")], "jsonl machines");
    let m7 = j.machine_ids[&(7, "machine-7".to_owned())];
    assert_eq!(m7, 7);
    for (name, remote, ts, dur) in RELAY_SLICES {
        let mut got: Vec<(u32, i64, i64)> = j
            .slices
            .iter()
            .filter(|s| s.name == name)
            .map(|s| (s.machine, s.ts, s.dur))
            .collect();
        got.sort_unstable();
        let machine = if remote { m7 } else { 0 };
        assert_eq!(vec![(machine, ts, dur), (machine, ts, dur)], got, "{name}");
    }
}

/// Drift seen out of time order: a second sequence of machine 7 is written
/// after all the syncs, so the offsets the sync points carry go back and
/// forth in stream order.
#[test]
fn drift_with_sequences_out_of_time_order() {
    if !tp::require_or_skip("drift_with_sequences_out_of_time_order") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let offset7 = |k: u64| 48 * S + k * 1_000_000;
    const HOP: u64 = 100_000;
    let mut p = vec![
        snap(1, &[(BT, S), (MONO, S / 2)]),
        track(2, 1, "host"),
        on(7, track(3, 7, "a")),
        on(7, track(6, 8, "b")),
    ];
    let mut late = vec![];
    for k in 0..4u64 {
        let host = S + k * 10 * S;
        let c = host + offset7(k);
        let pairs = [(c, host + HOP), (c + 2 * HOP, host + 3 * HOP)];
        p.push(on(7, build::remote_clock_sync(1, &pairs)));
        p.extend(slice(
            2,
            1,
            BT,
            host + 2 * S,
            host + 3 * S,
            &format!("host_{k}"),
        ));
        p.extend(slice(3, 7, BT, c + 5 * S, c + 6 * S, &format!("a_{k}")).map(|x| on(7, x)));
        late.extend(slice(6, 8, BT, c + 7 * S, c + 8 * S, &format!("b_{k}")).map(|x| on(7, x)));
    }
    p.extend(late);
    let input = write(d, "drift2.pftrace", &p);
    let j = judge(d, "drift2", &[&input], &[]);
    for k in 0..4i64 {
        let host = S as i64 + k * 10 * S as i64;
        assert_eq!(j.slice(&format!("a_{k}")).ts, host + 5 * S as i64, "a_{k}");
        assert_eq!(j.slice(&format!("b_{k}")).ts, host + 7 * S as i64, "b_{k}");
    }
}
