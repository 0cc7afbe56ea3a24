//! `tracesync tail DIR`: follows the daemon's rolling files as they grow and
//! rotate (docs/format.md, "Rolling output"; the directory's format is
//! `tracesync_capture`'s).
//!
//! It starts at the beginning of the newest file, or of the file it is
//! given (`tail -n`/`--since`, cli/src/tail_dir.rs; a preamble makes every
//! file self-contained), and reads what is appended. It moves to the next file
//! once the current one is done: a later file exists, and index.jsonl marks
//! the current one complete or it has stayed at end of file for two polls
//! (so the writer's last bytes are in). A new file opens with
//! a replay of the preamble (SystemInfo, ClockSnapshots, sync points,
//! incremental state): at the start of each file after the first, packets
//! byte-identical to a preamble-role packet already shown are skipped, up to
//! the first packet that is not such a replay. Every packet is thus shown
//! once. Files are ordered by the sequence number in their names
//! (`tracesync-<start>-<seq>.pftrace`), then by name.

pub mod resolve;
pub mod sources;
pub mod watch;

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracesync_capture::index::Index;
use tracesync_capture::names::{SnapshotName, writing_order};
use tracesync_protocol::reader::TraceReader;

use resolve::{FileResolver, SeenPackets};
use sources::SourceLabels;
use tracesync_core::live::{OutPacket, Role};

/// Bytes read per poll at most, so a large backlog is shown in steps.
const MAX_READ_PER_POLL: usize = 8 << 20;
const CHUNK: usize = 256 << 10;
/// Most packets held for their machine's first error-bound sample.
const MAX_HELD: usize = 65_536;

/// The rolling files of a directory, in writing order, and which the index
/// marks complete.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub files: Vec<String>,
    pub complete: HashSet<String>,
    /// Preamble packets of each file, as index.jsonl gives them.
    pub preamble_packets: HashMap<String, u64>,
}

/// Lists `dir`: `*.pftrace` files and the files index.jsonl names (an
/// index line that does not parse, or names a file outside `dir`, is
/// ignored).
pub fn list(dir: &Path) -> io::Result<Listing> {
    let mut files = HashSet::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        // A snapshot (`snapshot-<UTC>-<NAME>.pftrace`) is a file of its
        // own, written whole at once: not part of the rolling stream.
        if let Some(name) = name.to_str()
            && name.ends_with(".pftrace")
            && SnapshotName::parse(name).is_none()
        {
            files.insert(name.to_owned());
        }
    }
    let mut complete = HashSet::new();
    let mut preamble_packets = HashMap::new();
    for entry in Index::read(dir)?.entries {
        if !entry.is_plain_name() || SnapshotName::parse(&entry.name).is_some() {
            continue;
        }
        if let Some(n) = entry.preamble_packets {
            preamble_packets.insert(entry.name.clone(), n);
        }
        if entry.complete {
            complete.insert(entry.name.clone());
        } else {
            // An index line rewritten later may clear the mark.
            complete.remove(&entry.name);
        }
        if dir.join(&entry.name).exists() {
            files.insert(entry.name);
        }
    }
    let mut files: Vec<String> = files.into_iter().collect();
    files.sort_by(|a, b| writing_order(a).cmp(&writing_order(b)));
    Ok(Listing {
        files,
        complete,
        preamble_packets,
    })
}

#[derive(Debug)]
struct Current {
    name: String,
    src: Arc<str>,
    file: File,
    reader: TraceReader,
    /// Skipping the replayed preamble at the start of a later file: this
    /// many packets by index.jsonl's count, else by content (`in_replay`).
    skip_left: u64,
    in_replay: bool,
    /// File length at the last poll that found end of file.
    eof_at: Option<u64>,
    /// Framing broke: nothing more is read from this file.
    broken: bool,
}

/// What one poll did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes read this poll.
    pub bytes: u64,
    /// Packets shown.
    pub shown: u64,
    /// Replayed preamble packets skipped.
    pub skipped: u64,
}

/// Follows one directory; call [`DirFollower::poll`] when the directory
/// changed (cli/src/follow/watch.rs) and until it reads nothing.
#[derive(Debug)]
pub struct DirFollower {
    dir: PathBuf,
    current: Option<Current>,
    resolver: FileResolver,
    seen: SeenPackets,
    labels: SourceLabels,
    /// Remote packets read before any error bound of their machine was in
    /// force (a file's preamble replays the machine's state before its
    /// sync-quality samples): held until the first sample, which they then
    /// take, as `merge` gives them (docs/format.md, "Sync-quality tracks").
    held: VecDeque<OutPacket>,
    /// Problems worth telling the user (a torn file, a file gone before it
    /// was read); the caller prints and clears them.
    pub warnings: Vec<String>,
}

impl DirFollower {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            current: None,
            resolver: FileResolver::default(),
            seen: SeenPackets::default(),
            labels: SourceLabels::default(),
            held: VecDeque::new(),
            warnings: Vec::new(),
        }
    }

    /// Follows `dir` from the start of its file `name` (a rolled file
    /// starts with a preamble that makes it self-contained) instead of the
    /// newest one; its preamble is shown only if `show_preamble` (the
    /// records of `tail -n`/`--since` are those `merge DIR` lists).
    pub fn starting_at(dir: &Path, name: &str, show_preamble: bool) -> io::Result<Self> {
        let mut follower = Self::new(dir);
        // Unless shown, its preamble sets the reader's state only: what it
        // replays belongs to earlier files (as `merge DIR` lists them).
        let replay = if show_preamble {
            0
        } else {
            list(dir)?.preamble_packets.get(name).copied().unwrap_or(0)
        };
        follower.open(name.to_owned(), Some(replay))?;
        Ok(follower)
    }

    /// Names machines until their SystemInfo does (index.jsonl's names),
    /// as `merge DIR` names them.
    pub fn name_machines(&mut self, names: &[(u32, String)]) {
        for (raw_id, name) in names {
            self.resolver.name_machine(*raw_id, name);
        }
    }

    /// The file being read.
    pub fn current_file(&self) -> Option<&str> {
        self.current.as_ref().map(|c| c.name.as_str())
    }

    /// Reads what is new and hands each packet to `emit`, in file order.
    pub fn poll(
        &mut self,
        emit: &mut dyn FnMut(&OutPacket) -> io::Result<()>,
    ) -> io::Result<Progress> {
        let mut progress = Progress::default();
        if self.current.is_none() {
            let listing = list(&self.dir)?;
            let Some(newest) = listing.files.last() else {
                return Ok(progress);
            };
            self.open(newest.clone(), Some(0))?;
        }
        loop {
            let read = self.read_some(emit, &mut progress)?;
            if read > 0 {
                if progress.bytes as usize >= MAX_READ_PER_POLL {
                    return Ok(progress);
                }
                continue;
            }
            if !self.advance()? {
                return Ok(progress);
            }
        }
    }

    fn open(&mut self, name: String, replay: Option<u64>) -> io::Result<()> {
        let file = File::open(self.dir.join(&name))?;
        self.current = Some(Current {
            src: Arc::from(name.as_str()),
            name,
            file,
            reader: TraceReader::new(),
            // A replay whose length the index gives is skipped by count
            // (a replayed sample need not be byte-identical to the one
            // shown); else by content.
            skip_left: replay.unwrap_or(0),
            in_replay: replay.is_none(),
            eof_at: None,
            broken: false,
        });
        Ok(())
    }

    /// Reads one chunk and emits its packets; returns the bytes read.
    fn read_some(
        &mut self,
        emit: &mut dyn FnMut(&OutPacket) -> io::Result<()>,
        progress: &mut Progress,
    ) -> io::Result<usize> {
        let Some(cur) = self.current.as_mut().filter(|c| !c.broken) else {
            return Ok(0);
        };
        let n = cur.reader.fill_from(&mut cur.file, CHUNK)?;
        progress.bytes += n as u64;
        if n > 0 {
            cur.eof_at = None;
        }
        loop {
            let packet = match cur.reader.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    // Framing cannot resynchronise: the rest of this file
                    // is unreadable; go on with the next once there is one.
                    self.warnings
                        .push(format!("{}: {e}; skipping the rest of this file", cur.name));
                    cur.broken = true;
                    break;
                }
            };
            let bytes = packet.bytes;
            if cur.skip_left > 0 {
                cur.skip_left -= 1;
                progress.skipped += 1;
                // What it replays still sets the reader's state.
                let _ = self.resolver.resolve(bytes, &cur.src);
                continue;
            }
            if cur.in_replay {
                if self.seen.contains(bytes) {
                    progress.skipped += 1;
                    continue;
                }
                cur.in_replay = false;
            }
            let Some(mut out) = self.resolver.resolve(bytes, &cur.src) else {
                continue;
            };
            if out.role != Role::Data {
                self.seen.insert(bytes);
            }
            // Sources named as the live tail names them.
            self.labels.relabel(&self.dir, &mut out);
            let machine = out.machine_raw_id;
            if machine != 0 && self.resolver.bound(machine).is_none() {
                // A data packet with no bound in force: this capture has
                // no samples for the machine (written before the tracks
                // existed); nothing to wait for.
                if out.role != Role::Data && self.held.len() < MAX_HELD {
                    self.held.push_back(out);
                    continue;
                }
                release_held(
                    &mut self.held,
                    &self.resolver,
                    Some(machine),
                    emit,
                    progress,
                )?;
            } else if !self.held.is_empty() {
                release_held(&mut self.held, &self.resolver, None, emit, progress)?;
            }
            progress.shown += 1;
            emit(&out)?;
        }
        Ok(n)
    }

    /// At end of file: moves to the next file if the current one is done.
    /// Returns whether it moved.
    fn advance(&mut self) -> io::Result<bool> {
        let Some(cur) = self.current.as_mut() else {
            return Ok(false);
        };
        let len = cur.file.metadata()?.len();
        let listing = list(&self.dir)?;
        let later: Vec<&String> = match listing.files.iter().position(|f| *f == cur.name) {
            Some(i) => listing.files[i + 1..].iter().collect(),
            // Gone (retention): everything ordered after it.
            None => listing
                .files
                .iter()
                .filter(|f| writing_order(f) > writing_order(&cur.name))
                .collect(),
        };
        let settled = cur.broken || cur.eof_at == Some(len) || listing.complete.contains(&cur.name);
        cur.eof_at = Some(len);
        let Some(next) = later.first().map(|s| (*s).clone()) else {
            // Even if the index marks it complete, wait for the next file.
            return Ok(false);
        };
        if !settled {
            // Read once more at the next poll: the writer's last bytes may
            // land after the next file appears.
            return Ok(false);
        }
        if !cur.broken
            && let Err(e) = cur.reader.finish()
        {
            self.warnings
                .push(format!("{}: ends inside a packet ({e})", cur.name));
        }
        let replay = listing.preamble_packets.get(&next).copied();
        match self.open(next.clone(), replay) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.warnings
                    .push(format!("{next}: removed before it was read (retention?)"));
                // Try again from the listing on the next poll.
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;

/// Emits, in order, the held packets whose machine now has a bound in force
/// (with that bound), and those of `give_up` (no bound will come: as they
/// are); keeps the rest.
fn release_held(
    held: &mut VecDeque<OutPacket>,
    resolver: &FileResolver,
    give_up: Option<u32>,
    emit: &mut dyn FnMut(&OutPacket) -> io::Result<()>,
    progress: &mut Progress,
) -> io::Result<()> {
    let mut kept = VecDeque::new();
    while let Some(mut out) = held.pop_front() {
        let machine = out.machine_raw_id;
        if let Some(bound) = resolver.bound(machine) {
            out.err_ns = bound;
        } else if give_up != Some(machine) {
            kept.push_back(out);
            continue;
        }
        progress.shown += 1;
        emit(&out)?;
    }
    *held = kept;
    Ok(())
}
