//! The output directory or a data file replaced under the running writer.

use super::*;

/// A clearing event on sequence 2 of machine 5 that interns `name`.
fn clear_named(index: u64, name: &str) -> OutPacket {
    let mut p = event(5, 2, index, 1);
    let mut packet = TracePacket::decode(&p.bytes.to_bytes()[..]).expect("decodes");
    packet.interned_data = Some(InternedData {
        event_names: vec![EventName {
            iid: Some(1),
            name: Some(name.to_owned()),
        }],
    });
    p.bytes = Bytes::from(packet.encode_to_vec()).into();
    p
}

fn event_indexes(path: &Path) -> Vec<u64> {
    read_packets(path)
        .iter()
        .filter(|p| matches!(p.data, Some(Data::TrackEvent(_))))
        .filter_map(|p| p.timestamp)
        .map(|ts| ts - 1000)
        .collect()
}

#[test]
fn an_output_directory_renamed_away_fails_the_commit_and_goes_on_in_a_new_one() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("out");
    let (mut w, _) = RollingWriter::open_at(config(&dir), at(0)).expect("open");
    for p in [
        system_info(0),
        system_info(5),
        snapshot(5, 20),
        sync_point(5),
    ] {
        w.write(&p, at(0)).expect("write");
    }
    w.write(&clear_named(0, "committed"), at(0)).expect("write");
    for i in 1..5 {
        w.write(&event(5, 2, i, 2), at(0)).expect("write");
    }
    w.commit().expect("commit");
    let committed = w.durable_commit();
    // Not yet durable: events 5..10, a new clear among them.
    for i in 5..7 {
        w.write(&event(5, 2, i, 2), at(0)).expect("write");
    }
    w.write(&clear_named(7, "pending"), at(0)).expect("write");
    for i in 8..10 {
        w.write(&event(5, 2, i, 2), at(0)).expect("write");
    }
    let moved = root.path().join("moved");
    std::fs::rename(&dir, &moved).expect("rename the directory away");
    let n = w.request_commit().expect("request").expect("in flight");
    let e = w.wait_commits().expect_err("the output vanished");
    assert!(is_vanished(&e), "{e}");
    assert!(
        e.to_string().contains("no longer in the output directory"),
        "{e}"
    );
    // Nothing it covered is acknowledged.
    assert_eq!(w.durable_commit(), committed);
    assert!(n > committed);
    assert_eq!(w.stats().vanished, 1);
    // The next commit: the directory again, a new file with a preamble and
    // what was not durable.
    let m = w.request_commit().expect("request").expect("in flight");
    assert_eq!(w.wait_commits().expect("durable"), Some(m));
    assert!(m >= n && w.durable_commit() >= n);
    let files = rolled_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].ends_with("-000002.pftrace"), "{files:?}");
    let path = dir.join(&files[0]);
    assert_eq!(w.current_path(), path);
    assert_eq!(event_indexes(&path), (5..10).collect::<Vec<_>>());
    assert_self_contained(&path, false);
    // The preamble is the state as of the last commit (the clear that was
    // committed), not of the last packet written.
    let packets = read_packets(&path);
    let preamble = w.index()[0].preamble_packets.expect("counted") as usize;
    let replayed_names: Vec<String> = packets[..preamble]
        .iter()
        .filter_map(|p| p.interned_data.as_ref())
        .flat_map(|d| d.event_names.iter().filter_map(|n| n.name.clone()))
        .collect();
    assert_eq!(replayed_names, ["committed"]);
    // The index holds the new file only, its data as written.
    let index = w.index();
    assert_eq!(index.len(), 1);
    assert_eq!(index[0].packets, packets.len() as u64);
    assert_eq!(
        index[0].bytes,
        std::fs::metadata(&path).expect("stat").len()
    );
    assert_eq!(
        (index[0].first_ts, index[0].last_ts),
        (Some(1005), Some(1009))
    );
    assert_eq!(index[0].machines.len(), 1);
    // The old directory keeps what was committed there.
    assert_eq!(
        event_indexes(&moved.join(RolledName::new(at(0), 1).to_string()))[..5],
        [0, 1, 2, 3, 4]
    );
    // Restarted on the new directory: it resumes after event 9.
    w.write(&event(5, 2, 10, 2), at(0)).expect("write");
    w.commit().expect("commit");
    drop(w);
    let (w, recovered) = RollingWriter::open_at(config(&dir), at(5)).expect("reopen");
    assert_eq!(recovered.streams.len(), 1);
    assert_eq!(recovered.streams[0].written_through, 10);
    assert_eq!(event_indexes(&path), (5..11).collect::<Vec<_>>());
    assert_eq!(w.index().len(), 2);
}

#[test]
fn a_removed_output_directory_is_made_again_with_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let outer = tempfile::tempdir().expect("tempdir");
    let root = outer.path().join("root");
    let dir = root.join("out");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o751)).expect("chmod");
    // Without fsync: commits run in place, checked all the same.
    let cfg = RollingConfig {
        fsync: false,
        max_file_age: Duration::from_secs(10),
        ..config(&dir)
    };
    let (mut w, _) = RollingWriter::open_at(cfg.clone(), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    w.write(&event(5, 2, 1, 2), at(1)).expect("write");
    std::fs::remove_dir_all(&dir).expect("rm -r");
    let e = w.commit().expect_err("the output vanished");
    assert!(is_vanished(&e), "{e}");
    // Retried while the directory cannot be made (its parent gone too).
    let away = outer.path().join("away");
    std::fs::rename(&root, &away).expect("rename");
    let parentless = w.commit().expect_err("no parent");
    assert!(!is_vanished(&parentless), "{parentless}");
    assert!(!root.exists());
    std::fs::rename(&away, &root).expect("rename");
    w.commit().expect("commit in the directory made again");
    let mode = std::fs::metadata(&dir).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o751);
    let files = rolled_files(&dir);
    assert_eq!(files.len(), 1);
    assert_eq!(event_indexes(&dir.join(&files[0])), [1]);
    // Found by a rotation (no commit in between): the write fails, takes
    // nothing, and the next one goes on in a new file. (The file made
    // again started now, not at the test's times: rotate by size.)
    w.write(&event(5, 2, 2, 2), at(5)).expect("write");
    w.set_limits(1, Duration::MAX, u64::MAX, Duration::ZERO);
    std::fs::remove_dir_all(&dir).expect("rm -r");
    let e = w
        .write(&event(5, 2, 3, 2), at(30))
        .expect_err("the rotation finds it");
    assert!(is_vanished(&e), "{e}");
    w.write(&event(5, 2, 3, 2), at(30)).expect("write");
    w.close().expect("close");
    // Event 2 in the file made again, 3 in the one it rotated to.
    let mut files = rolled_files(&dir);
    files.sort_by_key(|f| RolledName::parse(f).map(|n| n.seq));
    let events: Vec<Vec<u64>> = files.iter().map(|f| event_indexes(&dir.join(f))).collect();
    assert_eq!(events, [vec![2], vec![3]], "{files:?}");
    for f in &files {
        assert_self_contained(&dir.join(f), true);
    }
    assert_eq!(
        std::fs::metadata(&dir).expect("stat").permissions().mode() & 0o7777,
        0o751
    );
    let (w, recovered) = RollingWriter::open_at(cfg, at(40)).expect("reopen");
    assert_eq!(recovered.streams[0].written_through, 3);
    assert_eq!(w.index().len(), 3);
}

#[test]
fn a_replaced_data_file_fails_the_commit_and_is_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    w.write(&event(5, 2, 1, 2), at(0)).expect("write");
    let path = w.current_path().to_path_buf();
    let other = dir.path().join("other");
    std::fs::write(&other, PRECIOUS).expect("write");
    std::fs::rename(&other, &path).expect("replace the file");
    let e = w.commit().expect_err("the file was replaced");
    assert!(is_vanished(&e), "{e}");
    w.commit().expect("commit in a new file");
    assert_eq!(std::fs::read(&path).expect("read"), PRECIOUS);
    assert_ne!(w.current_path(), path);
    assert_eq!(event_indexes(w.current_path()), [1]);
    // Not indexed as the daemon's.
    let index = w.index();
    assert_eq!(index.len(), 1);
    assert_eq!(dir.path().join(&index[0].name), w.current_path());
    assert_eq!(w.stats().vanished, 1);
}
