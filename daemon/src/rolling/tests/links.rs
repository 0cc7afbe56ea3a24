//! Symbolic links planted at the writer's names are never followed.

use super::*;

/// A file outside the output directory, and what it holds.
struct Target {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Target {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("target");
        std::fs::write(&path, PRECIOUS).expect("write");
        Self { _dir: dir, path }
    }

    /// Plants a symbolic link to the target at `at`.
    fn link_at(&self, at: &Path) {
        std::os::unix::fs::symlink(&self.path, at).expect("symlink");
    }

    fn assert_untouched(&self) {
        assert_eq!(std::fs::read(&self.path).expect("read"), PRECIOUS);
    }
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

#[test]
fn a_link_at_the_index_tmp_is_removed_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let tmp = dir.path().join("index.jsonl.tmp");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    target.link_at(&tmp);
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    target.assert_untouched();
    // The daemon's own directory: the link at its temporary name was
    // removed (not its target), the index written.
    assert!(!tmp.exists() && !is_link(&tmp));
    let (index, bad) = index::load(&dir.path().join(INDEX_NAME), &Links::default()).expect("load");
    assert_eq!((index.len(), bad), (1, 0));
    assert_eq!(index[0].packets, 1);
    assert_eq!(w.stats().symlinks_refused, 1);
    assert_eq!(w.stats().index_write_errors, 0);
}

#[test]
fn a_link_at_the_index_tmp_of_a_directory_not_ours_is_left_and_counted_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let tmp = dir.path().join("index.jsonl.tmp");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    // As if the directory belonged to another user.
    w.links.set_may_remove(false);
    target.link_at(&tmp);
    for i in 0..3 {
        w.write(&event(5, 2, i, if i == 0 { 1 } else { 2 }), at(0))
            .expect("write");
        // The index is a convenience: the commit itself succeeds.
        w.commit().expect("commit");
    }
    target.assert_untouched();
    assert!(is_link(&tmp));
    let stats = w.stats();
    assert_eq!(stats.symlinks_refused, 1);
    assert_eq!(stats.index_write_errors, 3);
    assert_eq!(stats.commits, 3);
}

#[test]
fn links_at_the_next_data_file_and_sidecar_names_are_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(10),
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    // The next rotation (at 20 s) would take number 2, else 3.
    let second = dir.path().join(RolledName::new(at(20), 2).to_string());
    let third = RolledName::new(at(20), 3).to_string();
    target.link_at(&second);
    target.link_at(&dir.path().join(sidecar_name(&third)));
    w.write(&event(5, 2, 1, 2), at(20)).expect("write rotates");
    assert!(
        w.current_path()
            .ends_with(RolledName::new(at(20), 4).to_string()),
        "{}",
        w.current_path().display()
    );
    w.write_sync_samples(&[sample(1)]).expect("samples");
    w.close().expect("close");
    target.assert_untouched();
    assert!(is_link(&second));
    let (index, _) = index::load(&dir.path().join(INDEX_NAME), &Links::default()).expect("load");
    let names: Vec<&str> = index.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            RolledName::new(at(0), 1).to_string(),
            RolledName::new(at(20), 4).to_string()
        ]
    );
    // Restarted: the links are not taken for files, numbering goes on.
    let (w, _) = RollingWriter::open_at(config(dir.path()), at(30)).expect("reopen");
    assert!(
        w.current_path()
            .ends_with(RolledName::new(at(30), 5).to_string())
    );
    assert_eq!(w.index().len(), 3);
    target.assert_untouched();
}

#[test]
fn a_link_at_the_sidecar_is_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    let sidecar = format!("{}{SIDECAR_SUFFIX}", w.current_path().display());
    target.link_at(Path::new(&sidecar));
    for _ in 0..2 {
        let e = w
            .write_sync_samples(&[sample(1)])
            .expect_err("the sidecar name is a link");
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }
    // The trace goes on.
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    target.assert_untouched();
    assert!(is_link(Path::new(&sidecar)));
    assert_eq!(w.stats().symlinks_refused, 1);
}

#[test]
fn links_at_the_journal_names_are_never_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(10),
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg.clone(), at(0)).expect("open");
    let journal = dir.path().join(JOURNAL_NAME);
    // The temporary name of a compaction (every rotation).
    target.link_at(&dir.path().join("journal.tmp"));
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.write(&event(5, 2, 1, 2), at(20)).expect("write rotates");
    target.assert_untouched();
    assert_eq!(w.stats().symlinks_refused, 1);
    // The journal itself replaced by a link while running: that commit
    // fails (the open journal is no longer the one at its path), the next
    // writes a new journal (the rename replaces the link, not its target).
    std::fs::remove_file(&journal).expect("rm");
    target.link_at(&journal);
    w.write(&event(5, 2, 2, 2), at(20)).expect("write");
    let e = w.commit().expect_err("the journal vanished");
    assert!(is_vanished(&e), "{e}");
    target.assert_untouched();
    w.write(&event(5, 2, 3, 2), at(20)).expect("write");
    w.commit().expect("commit in a new journal");
    assert!(!is_link(&journal) && journal.is_file());
    assert_eq!(w.stats().vanished, 1);
    assert_eq!(rolled_files(dir.path()).len(), 2, "the data file went on");
    drop(w);
    let (_, recovered) = RollingWriter::open_at(cfg.clone(), at(30)).expect("reopen");
    assert_eq!(recovered.streams.len(), 1);
    assert_eq!(recovered.streams[0].written_through, 3);
    target.assert_untouched();
    // A link at the journal's name at start: not read, the daemon does not
    // start.
    std::fs::remove_file(&journal).expect("rm");
    target.link_at(&journal);
    let e = RollingWriter::open_at(cfg, at(40)).expect_err("a linked journal");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    target.assert_untouched();
}

/// 1,750 links planted at the next file numbers (70 per second of start
/// time, for 25 s of rotations, more than the 64 tries of one new file):
/// every rotation finds a free number, nothing is lost, no target written.
#[test]
fn thousands_of_planted_links_never_stop_rotation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = Target::new();
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(1),
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg.clone(), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    let planted_per_second = 70;
    for second in 1..=25 {
        for seq in 1..=planted_per_second {
            let name = RolledName::new(at(second), seq).to_string();
            let data = dir.path().join(&name);
            // Every other number has its sidecar planted instead.
            if seq % 2 == 0 {
                target.link_at(&data);
            } else {
                target.link_at(&dir.path().join(sidecar_name(&name)));
            }
        }
    }
    for second in 1..=25 {
        w.write(&event(5, 2, second, 2), at(second))
            .unwrap_or_else(|e| panic!("rotation at {second} s: {e}"));
        w.commit().expect("commit");
    }
    w.close().expect("close");
    target.assert_untouched();
    let (index, _) = index::load(&dir.path().join(INDEX_NAME), &Links::default()).expect("load");
    assert_eq!(index.len(), 26, "one file per second");
    let written: u64 = index
        .iter()
        .map(|e| e.packets - e.preamble_packets.unwrap_or(0))
        .sum();
    assert_eq!(written, 26, "every event written once");
    let mut seqs: Vec<u64> = index.iter().map(|e| e.seq()).collect();
    assert!(seqs.windows(2).all(|p| p[0] < p[1]), "{seqs:?}");
    seqs.sort_unstable();
    // Restarted: numbering goes on after the highest number used.
    let last = seqs.last().copied().unwrap_or(0);
    let (w, _) = RollingWriter::open_at(cfg, at(40)).expect("reopen");
    assert!(
        w.current_path()
            .ends_with(RolledName::new(at(40), last + 1).to_string())
    );
}

#[test]
fn taken_numbers_are_stepped_over_then_jumped_unpredictably() {
    assert_eq!(super::super::next_candidate(7, 1), 8);
    assert_eq!(super::super::next_candidate(7, 3), 8);
    let jumps: std::collections::BTreeSet<u64> = (0..32)
        .map(|_| super::super::next_candidate(7, 10))
        .collect();
    assert!(jumps.iter().all(|&n| n > 7 && n <= 7 + (1 << 24)));
    assert!(jumps.len() > 16, "jumps repeat: {jumps:?}");
}
