//! (c) Two files, a machine each, placed by REALTIME rendezvous (TV-21),
//! and (d) drift: the remote offset moves between RemoteClockSync packets.

use super::*;

// (c) two files, a machine each, placed by REALTIME rendezvous (TV-21)

pub(super) fn rendezvous_files(d: &Path) -> (PathBuf, PathBuf) {
    let r = |i: u64| 1_700_000_000_000_000_000 + i * S;
    let mut a = vec![
        snap(1, &[(BT, S), (RT, r(1))]),
        system_info("6.1-a"),
        track(2, 1, "a"),
    ];
    a.extend(slice(2, 1, BT, 1_100_000_000, 1_150_000_000, "a_slice"));
    let mut b = vec![
        snap(1, &[(BT, S), (RT, r(2)), (MONO, 400_000_000)]),
        system_info("6.1-b"),
        track(2, 1, "b"),
    ];
    b.extend(slice(2, 1, BT, 1_100_000_000, 1_150_000_000, "b_slice"));
    b.extend(slice(2, 1, MONO, 600_000_000, 700_000_000, "b_mono"));
    b.push(build::instant(r(2) + 250_000_000, RT, 2, 1, "b_realtime"));
    (write(d, "a.pftrace", &a), write(d, "b.pftrace", &b))
}

#[test]
fn machine_per_file_realtime_rendezvous() {
    if !tp::require_or_skip("machine_per_file_realtime_rendezvous") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a, b) = rendezvous_files(d);
    let j = judge(d, "c", &[&a, &b], &["--machine-per-file"]);
    assert_eq!(j.machine_ids.len(), 2, "{:?}", j.machine_ids);
    // Named from their utsname (docs/format.md, Machines).
    let (ma, mb) = (
        j.machine_named("Linux-6.1-a-x86_64"),
        j.machine_named("Linux-6.1-b-x86_64"),
    );
    assert_eq!(ma, 0, "the first file's machine holds trace time");
    assert_ne!(mb, 0);
    let release = |m: u32| j.releases.iter().find(|r| r.0 == m).unwrap().1.clone();
    assert_eq!(release(ma).as_deref(), Some("6.1-a"));
    assert_eq!(release(mb).as_deref(), Some("6.1-b"));
    for (name, machine, ts, dur) in [
        ("a_slice", ma, 1_100_000_000, 50_000_000),
        ("b_slice", mb, 2_100_000_000, 50_000_000),
        ("b_mono", mb, 2_200_000_000, 100_000_000),
        ("b_realtime", mb, 2_250_000_000, 0),
    ] {
        let s = j.slice(name);
        assert_eq!((s.machine, s.ts, s.dur), (machine, ts, dur), "{name}");
    }
}

// (d) drift: the remote offset moves between RemoteClockSync packets

#[test]
fn drifting_remote_machines_get_sync_points() {
    if !tp::require_or_skip("drifting_remote_machines_get_sync_points") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Machine 7 starts 48 s ahead of the host and gains 1 ms per 10 s;
    // machine 9 starts 100 s ahead and loses 2 ms per 10 s.
    let offset7 = |k: u64| 48 * S + k * 1_000_000;
    let offset9 = |k: u64| 100 * S - k * 2_000_000;
    const HOP: u64 = 100_000;
    let mut p = vec![
        snap(1, &[(BT, S), (MONO, S / 2)]),
        track(2, 1, "host"),
        on(7, track(3, 7, "vm7")),
        on(9, track(4, 9, "vm9")),
    ];
    for k in 0..4u64 {
        let host = S + k * 10 * S;
        // Two rounds per sync packet (ping and update, 100 µs one way):
        // both of Perfetto's estimates give exactly `off`.
        for (m, off) in [(7, offset7(k)), (9, offset9(k))] {
            let c = host + off;
            let pairs = [(c, host + HOP), (c + 2 * HOP, host + 3 * HOP)];
            p.push(on(m, build::remote_clock_sync(1, &pairs)));
            p.push(on(m, snap(5, &[(BT, c), (MONO, c - 10 * S)])));
        }
        p.extend(slice(
            2,
            1,
            BT,
            host + 2 * S,
            host + 3 * S,
            &format!("host_{k}"),
        ));
        // Slices at +5 s: BOOTTIME on machine 7, MONOTONIC on machine 9.
        let c7 = host + offset7(k) + 5 * S;
        p.extend(slice(3, 7, BT, c7, c7 + S, &format!("vm7_{k}")).map(|x| on(7, x)));
        let m9 = host + offset9(k) + 5 * S - 10 * S;
        p.extend(slice(4, 9, MONO, m9, m9 + S, &format!("vm9_{k}")).map(|x| on(9, x)));
        // A slice on machine 7 across the next sync: begin and end take
        // different offsets.
        if k < 3 {
            let b = host + offset7(k) + 8 * S;
            p.push(on(
                7,
                build::slice_begin(b, BT, 3, 7, &format!("vm7_span_{k}")),
            ));
            p.push(on(7, build::slice_end(b + 4 * S, BT, 3, 7)));
        }
    }
    let input = write(d, "drift.pftrace", &p);
    let j = judge(d, "d", &[&input], &[]);
    assert_eq!(j.by_raw_id(), BTreeMap::from([(0, 0), (7, 7), (9, 9)]));
    for k in 0..4i64 {
        let host = S as i64 + k * 10 * S as i64;
        let want = host + 5 * S as i64;
        assert_eq!(j.slice(&format!("vm7_{k}")).ts, want, "vm7_{k}");
        assert_eq!(j.slice(&format!("vm9_{k}")).ts, want, "vm9_{k}");
        assert_eq!(j.slice(&format!("vm7_{k}")).machine, 7);
        assert_eq!(j.slice(&format!("vm9_{k}")).machine, 9);
        if k < 3 {
            // Begins (+8 s) and ends (+12 s, past the next sync's anchor at
            // +10 s) with offset k: the next sync comes later in the stream,
            // and Perfetto converts each packet with the syncs read so far.
            let s = j.slice(&format!("vm7_span_{k}"));
            assert_eq!(s.ts, host + 8 * S as i64, "vm7_span_{k}");
            assert_eq!(s.dur, 4 * S as i64, "vm7_span_{k}: stream order");
        }
    }
    let stats = stats_of(d, &[&input], &[]);
    let written = stats["sync_points_written"].as_u64().unwrap();
    assert!(
        written >= 8,
        "a sync point per offset and machine: {written} ({stats})"
    );
}
