//! What the writer creates has the capture's modes (0640 files, 0750
//! directories) whatever the umask: run by hand under umask 022 it wrote
//! every trace, sidecar, the index and the journal world-readable.

use std::os::unix::fs::MetadataExt;

use super::*;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).map_or(0, |m| m.mode() & 0o7777)
}

#[test]
fn files_and_directories_are_not_world_readable_under_umask_022() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("captures/today");
    let cfg = RollingConfig {
        max_file_age: Duration::from_secs(10),
        ..config(&dir)
    };
    // The umask is the process's: other tests' files made meanwhile are
    // masked alike, which changes none of their checks.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let opened = RollingWriter::open_at(cfg, at(0));
    nix::sys::stat::umask(old);
    let (mut w, _) = opened.expect("open");
    w.write(&event(5, 2, 0, 1), at(0)).expect("write");
    w.write_sync_samples(&[sample(1)]).expect("samples");
    w.write(&event(5, 2, 1, 2), at(20)).expect("write rotates");
    w.close().expect("close");
    for d in [tmp.path().join("captures"), dir.clone()] {
        assert_eq!(mode(&d), 0o750, "{}", d.display());
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("read_dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with(SIDECAR_SUFFIX)),
        "{files:?}"
    );
    assert!(files.iter().any(|f| f == INDEX_NAME), "{files:?}");
    assert!(files.iter().any(|f| f == JOURNAL_NAME), "{files:?}");
    for f in &files {
        assert_eq!(mode(&dir.join(f)), 0o640, "{f} of {files:?}");
    }
}
