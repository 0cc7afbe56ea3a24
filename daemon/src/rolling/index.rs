//! `index.jsonl` read and written by the daemon: the format is
//! `tracesync_capture::index`; here only the IO, through the link-refusing
//! file layer (`files.rs`).

use std::io::{self, Read};
use std::path::Path;

use tracesync_capture::index::{self, Index, IndexEntry};

use super::files::{self, Links};

/// Reads an index; unparsable lines are skipped and counted. A link at
/// `path` is not followed: it reads as no index (counted in `links`; the
/// next save replaces it).
pub fn load(path: &Path, links: &Links) -> io::Result<(Vec<IndexEntry>, u64)> {
    let read = files::open_existing(path, false).and_then(|mut f| {
        let mut text = String::new();
        f.read_to_string(&mut text).map(|_| text)
    });
    let text = match read {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => return Ok((Vec::new(), 1)),
        Err(e) if files::is_link_refused(&e) => {
            links.met(path, false, "the index is read as empty and written anew");
            return Ok((Vec::new(), 0));
        }
        Err(e) => return Err(e),
    };
    let index = Index::parse(&text);
    Ok((index.entries, index.bad_lines))
}

/// Writes the index whole, atomically (a reader sees the old or the new
/// one), through a temporary file created new, never through a link
/// (`files::replace`).
pub fn save(path: &Path, entries: &[IndexEntry], links: &Links) -> io::Result<()> {
    let text = index::encode(entries).map_err(io::Error::other)?;
    files::replace(path, &path.with_extension("jsonl.tmp"), &text, links)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};
    use tracesync_capture::index::IndexMachine;
    use tracesync_capture::names::{INDEX_NAME, RolledName};

    fn entry(seq: u64, start_secs: u64, bytes: u64, complete: bool) -> IndexEntry {
        let start = UNIX_EPOCH + Duration::from_secs(start_secs);
        IndexEntry {
            complete,
            ..IndexEntry::found(RolledName::new(start, seq).to_string(), bytes)
        }
    }

    #[test]
    fn save_and_load_round_trip_skipping_bad_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(INDEX_NAME);
        let mut a = entry(1, 1000, 10, true);
        a.machines = vec![IndexMachine {
            raw_id: 3,
            name: Some("phone".into()),
        }];
        a.first_ts = Some(-5);
        let entries = vec![a, entry(2, 2000, 20, false)];
        let links = Links::default();
        save(&path, &entries, &links).expect("save");
        assert_eq!(load(&path, &links).expect("load"), (entries.clone(), 0));
        let mut text = std::fs::read_to_string(&path).expect("read");
        text.push_str("{not json\n");
        std::fs::write(&path, text).expect("write");
        assert_eq!(load(&path, &links).expect("load"), (entries, 1));
        assert!(!dir.path().join("index.jsonl.tmp").exists());
    }
}
