//! A full disk and failed writes or rotations: nothing committed is lost
//! or torn, and what failed is written again.

use super::*;

/// A writer that takes `room` bytes, then fails like a full disk.
struct FullDisk {
    written: Vec<u8>,
    room: usize,
}

impl io::Write for FullDisk {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.room == 0 {
            return Err(io::ErrorKind::StorageFull.into());
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        self.written.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_full_disk_loses_and_tears_nothing() {
    let data: Vec<u8> = (0..=255).collect();
    let mut done = 0;
    let mut disk = FullDisk {
        written: Vec::new(),
        room: 100,
    };
    let e = write_from(&mut disk, &data, &mut done).expect_err("disk is full");
    assert_eq!(e.kind(), io::ErrorKind::StorageFull);
    assert_eq!(done, 100);
    disk.room = usize::MAX;
    write_from(&mut disk, &data, &mut done).expect("space again");
    assert_eq!(done, data.len());
    assert_eq!(disk.written, data);
}

#[test]
fn after_a_failure_the_uncommitted_tail_is_written_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut w, _) = RollingWriter::open_at(config(dir.path()), at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.commit().expect("commit");
    let committed = w.index().last().expect("entry").bytes;
    w.write(&event(5, 2, 1, 2), at(0)).expect("write");
    w.flush().expect("flush");
    // What a failed fsync may leave: the tail on disk is not what was
    // written (pages dropped, or garbage past it).
    let path = w.current_path().to_path_buf();
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.truncate(committed as usize + 3);
    bytes.extend_from_slice(b"garbage past the tail");
    std::fs::write(&path, &bytes).expect("write");
    w.current.suspect = true;
    w.write(&event(5, 2, 2, 3), at(0)).expect("write");
    w.commit().expect("commit");
    assert_eq!(w.stats().rewrites, 1);
    let expected = w.index().last().expect("entry").bytes;
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), expected);
    w.close().expect("close");
    let ts: Vec<u64> = read_packets(&path)
        .iter()
        .filter(|p| p.data.is_some())
        .filter_map(|p| p.timestamp)
        .collect();
    assert_eq!(ts, [1000, 1001, 1002]);
}

#[test]
fn a_failed_rotation_takes_nothing_and_is_retried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(10),
        ..config(dir.path())
    };
    let (mut w, _) = RollingWriter::open_at(cfg, at(0)).expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    // A directory at the journal's temporary name: the rotation's journal
    // compaction cannot be written. (A name taken at the next file's
    // number is skipped, `links.rs`.)
    let blocker = dir.path().join("journal.tmp");
    std::fs::create_dir(&blocker).expect("mkdir");
    let e = w
        .write(&event(5, 2, 1, 2), at(20))
        .expect_err("rotation blocked");
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    assert!(e.to_string().contains("journal.tmp"), "{e}");
    w.commit().expect("commit");
    assert_eq!(w.index().len(), 1);
    assert_eq!(
        rolled_files(dir.path()).len(),
        1,
        "the new file is taken back"
    );
    std::fs::remove_dir(&blocker).expect("rm");
    w.write(&event(5, 2, 1, 2), at(20)).expect("write");
    w.close().expect("close");
    let files = rolled_files(dir.path());
    let indexes: Vec<Vec<u64>> = files
        .iter()
        .map(|f| {
            read_packets(&dir.path().join(f))
                .iter()
                .filter(|p| p.data.is_some())
                .filter_map(|p| p.timestamp)
                .collect()
        })
        .collect();
    assert_eq!(indexes, [vec![1000], vec![1001]]);
}
