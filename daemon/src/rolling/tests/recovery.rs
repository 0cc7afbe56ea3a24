//! Reopening after a crash: the journal, orphans, and what each stream
//! resumes with.

use super::*;

#[test]
fn crash_recovery_keeps_exactly_the_committed_packets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    write_mixed(&mut w, 30, |_| at(1));
    w.commit().expect("commit");
    let committed_len = w.index().last().expect("entry").bytes;
    let committed_streams: Vec<RecoveredStream> = w.streams.values().copied().collect();
    let name = w.current_path().to_path_buf();
    // More packets, flushed to the file but never committed; then a torn one.
    for i in 30..40 {
        w.write(&event(5, 2, i * 3, 2), at(1)).expect("write");
    }
    w.flush().expect("flush");
    drop(w);
    let mut bytes = std::fs::read(&name).expect("read");
    assert!(bytes.len() as u64 > committed_len);
    bytes.extend_from_slice(&[0x0a, 0x40, 1, 2, 3]);
    std::fs::write(&name, &bytes).expect("write");

    let (w, recovered) = RollingWriter::open_at(config(dir.path()), at(5)).expect("reopen");
    assert_eq!(std::fs::metadata(&name).expect("stat").len(), committed_len);
    assert_eq!(recovered.streams, committed_streams);
    assert_eq!(
        recovered
            .streams
            .iter()
            .find(|s| (s.relay_instance, s.relay_sequence) == (500, 2))
            .map(|s| s.written_through),
        Some(27)
    );
    assert_eq!(recovered.next_out_seq, 5);
    let stats = w.stats();
    assert_eq!(
        stats.recovered_truncated_bytes,
        bytes.len() as u64 - committed_len
    );
    let files = rolled_files(dir.path());
    assert_eq!(files.len(), 2);
    assert_eq!(w.current_path(), dir.path().join(&files[1]));
    // The new file starts with the rebuilt preamble.
    let preamble = read_packets(w.current_path());
    let roles: Vec<Role> = preamble.iter().map(role).collect();
    assert_eq!(roles[..2], [Role::SystemInfo, Role::SystemInfo]);
    assert!(roles.contains(&Role::SyncPoint));
    let cleared: Vec<u32> = preamble
        .iter()
        .filter(|p| role(p) == Role::IncrementalStateCleared)
        .map(seq_of)
        .collect();
    assert_eq!(cleared, [2, 3, 4]);
    let index = w.index();
    assert!(index[0].complete && !index[1].complete);
    assert_eq!(index[0].bytes, committed_len);
    assert_eq!(index[1].preamble_packets, Some(preamble.len() as u64));
}

#[test]
fn journal_corruption_stops_at_the_last_good_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    let first_len = w.index().last().expect("entry").bytes;
    w.write(&event(5, 2, 1, 2), at(0)).expect("write");
    w.write(&event(5, 3, 2, 1), at(0)).expect("write");
    w.commit().expect("commit");
    let name = w.current_path().to_path_buf();
    drop(w);
    let journal = dir.path().join(JOURNAL_NAME);
    let mut bytes = std::fs::read(&journal).expect("read");
    let last = bytes.len() - 2;
    bytes[last] ^= 0xff;
    std::fs::write(&journal, &bytes).expect("write");

    let (w, recovered) = RollingWriter::open_at(config(dir.path()), at(1)).expect("reopen");
    assert_eq!(std::fs::metadata(&name).expect("stat").len(), first_len);
    assert_eq!(
        recovered.streams,
        [RecoveredStream {
            out_seq: 2,
            relay_instance: 500,
            relay_sequence: 2,
            machine_raw_id: 5,
            written_through: 0,
        }]
    );
    assert!(w.stats().journal_ignored_bytes > 0);
}

#[test]
fn files_without_a_journal_are_kept_and_numbering_continues() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.close().expect("close");
    std::fs::remove_file(dir.path().join(JOURNAL_NAME)).expect("rm");
    std::fs::remove_file(dir.path().join(INDEX_NAME)).expect("rm");
    let (w, recovered) = RollingWriter::open_at(config(dir.path()), at(1)).expect("reopen");
    assert_eq!(
        recovered,
        Recovered {
            streams: vec![],
            next_out_seq: 1,
            sync_floors: vec![],
            sequences: vec![],
            names: vec![],
        }
    );
    let files = rolled_files(dir.path());
    assert_eq!(files.len(), 2);
    assert!(files[1].ends_with("-000002.pftrace"));
    let index = w.index();
    assert!(index[0].complete);
    assert_eq!(index[0].first_ts, None);
    assert_eq!(read_packets(w.current_path()), []);
}

#[test]
fn unfinished_rotation_leaves_no_orphan() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    drop(w);
    // A rotation that crashed after creating its file, before the journal.
    let orphan = RolledName::new(at(3), 2).to_string();
    std::fs::write(dir.path().join(&orphan), b"").expect("write");
    let (w, recovered) = RollingWriter::open_at(config(dir.path()), at(4)).expect("reopen");
    assert_eq!(recovered.streams.len(), 1);
    assert_eq!(w.stats().recovered_orphans_removed, 1);
    let files = rolled_files(dir.path());
    assert_eq!(files.len(), 2);
    assert!(!files.contains(&orphan));
}

#[test]
fn reopen_recovers_each_sequences_default_clock_and_sequence_clock() {
    use tracesync_protocol::perfetto::TracePacketDefaults;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    let origin = |index| {
        Some(Origin {
            relay_instance: 300,
            relay_sequence: 7,
            index,
        })
    };
    let clock = |id, t| clock_snapshot::Clock {
        clock_id: Some(id),
        timestamp: Some(t),
        ..Default::default()
    };
    // A producer's sequence clock, and the relay's builtin one (not kept:
    // the relay sends it again).
    let sequence_clock = ClockSnapshot {
        clocks: vec![clock(6, 10), clock(64, 110)],
        primary_trace_clock: None,
    };
    let snap = |s: &ClockSnapshot| data(Data::ClockSnapshot(s.clone()));
    w.write(&out(10, 3, 7, snap(&sequence_clock), origin(0)), at(0))
        .expect("write");
    w.write(&snapshot(3, 20), at(0)).expect("write");
    let clear = TracePacket {
        sequence_flags: Some(1),
        trace_packet_defaults: Some(TracePacketDefaults {
            timestamp_clock_id: Some(64),
        }),
        ..Default::default()
    };
    w.write(&out(11, 3, 7, clear, origin(1)), at(0))
        .expect("write");
    w.write(&event(3, 7, 2, 2), at(0)).expect("write");
    w.commit().expect("commit");
    drop(w); // a crash: no close
    let (_, recovered) = RollingWriter::open_at(config(dir.path()), at(1)).expect("reopen");
    assert_eq!(
        recovered.sequences,
        [tracesync_core::live::RecoveredSequence {
            out_seq: 7,
            default_clock: Some(64),
            clock_snapshots: vec![sequence_clock.encode_to_vec()],
        }]
    );
    assert_eq!(recovered.streams.len(), 1);
    assert_eq!(recovered.streams[0].out_seq, 7);
}
