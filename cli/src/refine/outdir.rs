//! The refined capture's directory: built whole in a temporary directory
//! beside OUTDIR (so a failed or interrupted refine leaves no half
//! capture), then renamed into place. Besides the rewritten files it holds
//! their sidecars (copied: the samples are the same), DIR's snapshots
//! (rewritten like the rolled files), index.jsonl with each rolled file's
//! and snapshot's new lengths, preamble and trace times, and a journal of one full
//! record naming the last file, so `tail` and `merge` name sources as in
//! DIR and a daemon started on it would recover it as it is.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use tracesync_capture::index::{self, Index, IndexEntry};
use tracesync_capture::journal::{self, read_dir_journal};
use tracesync_capture::modes;
use tracesync_capture::names::{INDEX_NAME, JOURNAL_NAME, SnapshotName};
use tracesync_capture::sidecar::sidecar_name;
use tracesync_common::exit;

use super::rewrite::FileOut;
use crate::merge::capture::{Capture, CaptureError};

pub struct Staging {
    temp: PathBuf,
    out: PathBuf,
    dir: PathBuf,
}

fn cant_create(path: &Path, what: &str) -> CaptureError {
    CaptureError {
        line: format!("{}: {what}", path.display()),
        code: exit::CANTCREAT,
    }
}

impl Staging {
    /// Checks OUTDIR and makes the temporary directory beside it.
    pub fn begin(dir: &Path, out: &Path) -> Result<Self, CaptureError> {
        let same = match (dir.canonicalize(), out.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if same {
            return Err(CaptureError {
                line: format!(
                    "{}: the output is the capture itself; give another directory with -o",
                    out.display()
                ),
                code: exit::USAGE,
            });
        }
        if let Ok(meta) = std::fs::symlink_metadata(out) {
            let empty = meta.is_dir()
                && std::fs::read_dir(out).is_ok_and(|mut entries| entries.next().is_none());
            if !empty {
                return Err(cant_create(
                    out,
                    "already exists; remove it or give another directory with -o",
                ));
            }
        }
        let name = out
            .file_name()
            .ok_or_else(|| cant_create(out, "not a directory name; give one with -o"))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".refine-{}", std::process::id()));
        let temp = out.with_file_name(temp_name);
        modes::create_dir(&temp).map_err(|e| {
            cant_create(
                &temp,
                &format!("cannot create: {e}; check that OUTDIR's parent exists and is writable"),
            )
        })?;
        Ok(Self {
            temp,
            out: out.to_path_buf(),
            dir: dir.to_path_buf(),
        })
    }

    /// Where the refined `name` is written.
    pub fn path(&self, name: &str) -> PathBuf {
        self.temp.join(name)
    }

    /// Removes the temporary directory (after an error).
    pub fn abandon(&self) {
        let _ = std::fs::remove_dir_all(&self.temp);
    }

    /// Writes the sidecars, index and journal, and renames the whole into
    /// OUTDIR.
    pub fn finish(
        &self,
        capture: &Capture,
        written: &[FileOut],
        snapshots: &[(String, FileOut)],
    ) -> Result<(), CaptureError> {
        let io_err = |path: &Path, e: std::io::Error| CaptureError {
            line: format!("{}: {e}", path.display()),
            code: exit::IOERR,
        };
        for f in &capture.files {
            let sidecar = sidecar_name(&f.name);
            let from = self.dir.join(&sidecar);
            // Not a link nor anything but a regular file (said when read).
            if let Ok(Some(mut source)) = tracesync_common::files::open_regular(&from) {
                let to = self.temp.join(&sidecar);
                let mut copy = modes::open_new_file(
                    std::fs::OpenOptions::new().write(true).create_new(true),
                    &to,
                )
                .map_err(|e| io_err(&to, e))?;
                std::io::copy(&mut source, &mut copy).map_err(|e| io_err(&from, e))?;
            }
        }
        let index = index::encode(&self.index(capture, written, snapshots))
            .map_err(|e| io_err(&self.temp.join(INDEX_NAME), std::io::Error::other(e)))?;
        write_synced(&self.temp.join(INDEX_NAME), &index)
            .map_err(|e| io_err(&self.temp.join(INDEX_NAME), e))?;
        if let (Some(last), Some(out)) = (capture.files.last(), written.last())
            && let Ok(Some(state)) = read_dir_journal(&self.dir)
            && state.records > 0
        {
            let journal = journal::compacted(&state, &last.name, out.bytes)
                .map_err(|e| io_err(&self.dir.join(JOURNAL_NAME), e))?;
            write_synced(&self.temp.join(JOURNAL_NAME), &journal)
                .map_err(|e| io_err(&self.temp.join(JOURNAL_NAME), e))?;
        }
        sync_dir(&self.temp).map_err(|e| io_err(&self.temp, e))?;
        if self.out.is_dir() {
            // An empty OUTDIR given: rename replaces it.
            let _ = std::fs::remove_dir(&self.out);
        }
        std::fs::rename(&self.temp, &self.out).map_err(|e| io_err(&self.out, e))?;
        if let Some(parent) = self.out.parent() {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            sync_dir(parent).map_err(|e| io_err(parent, e))?;
        }
        Ok(())
    }

    /// index.jsonl of the refined files and snapshots: DIR's lines with the
    /// new lengths, preamble and trace times; a line made for a rolled file
    /// DIR's index lacked (a snapshot without a line keeps none, as in DIR).
    fn index(
        &self,
        capture: &Capture,
        written: &[FileOut],
        snapshots: &[(String, FileOut)],
    ) -> Vec<IndexEntry> {
        let mut old: HashMap<String, IndexEntry> = Index::read(&self.dir)
            .unwrap_or_default()
            .entries
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect();
        let mut out = Vec::new();
        for (f, w) in capture.files.iter().zip(written) {
            let mut e = old
                .remove(&f.name)
                .unwrap_or_else(|| IndexEntry::found(f.name.clone(), 0));
            update(&mut e, w);
            e.complete = true;
            out.push(e);
        }
        for (name, w) in snapshots {
            if let Some(mut e) = old.remove(name) {
                update(&mut e, w);
                out.push(e);
            }
        }
        out
    }

    /// The snapshots in DIR (`snapshot-<UTC>-<NAME>.pftrace`), by name:
    /// regular files only (a link or anything else is left behind).
    pub fn snapshots(&self) -> std::collections::BTreeSet<String> {
        std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| SnapshotName::parse(n).is_some())
                    .filter(|n| {
                        std::fs::symlink_metadata(self.dir.join(n)).is_ok_and(|m| m.is_file())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A refined file's figures on its index.jsonl line.
fn update(e: &mut IndexEntry, w: &FileOut) {
    e.bytes = w.bytes;
    e.packets = w.packets;
    e.preamble_bytes = w.preamble_bytes;
    e.preamble_packets = Some(w.preamble_packets);
    e.first_ts = w.first_ts;
    e.last_ts = w.last_ts;
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = modes::open_new_file(
        std::fs::OpenOptions::new().write(true).create_new(true),
        path,
    )?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
