//! Rule 4 of the identity rule ([`super::identity`]): raw machine ids and
//! relay instance ids bound to the certificate name that first used them,
//! kept across restarts.
//!
//! The table lives in memory and, under TLS, in `identity-bindings.jsonl` in the
//! daemon's state directory, which is the output directory: that is where
//! the daemon's other state already lives (the commit `journal`, which a
//! restart needs too), it is the one directory the systemd unit makes
//! writable and persistent (`StateDirectory=tracesync`), and the readers
//! of the output (`tracesync tail DIR`, recovery, retention) only look at
//! `*.pftrace` files, so they pass it by. Format (docs/format.md,
//! "Identity bindings"): JSON lines, one per machine name,
//! `{"name":"pixel-7","raw_ids":[2941245081],"instances":["8c2e5d1f00a1b2c3"]}`,
//! oldest first, names lower-cased and sorted.
//!
//! It is loaded at start. A new binding is written before the relay is
//! welcomed: the whole table to a temporary created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW`, fsync, rename, fsync of the directory
//! ([`tracesync_common::files::replace`]); a symbolic link at either name is
//! never followed. A failed write is logged and counted, the relay is
//! still welcomed (the binding holds in memory) and the next new binding
//! writes the whole table again.
//!
//! A file that cannot be read (permissions, a directory, a symbolic link)
//! stops the daemon at start with one line. A file with lines that are not
//! valid bindings is treated like journald treats a corrupt journal: the
//! daemon starts with the bindings of the valid lines, sets the file aside
//! as `<file>.corrupt` for the operator, writes a clean one, and logs one
//! error line naming the file, how many lines were ignored and what to do.
//! Refusing to start would take every relay down over lost bookkeeping;
//! starting empty would silently reopen every raw id to squatting.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::identity::IdentityError;

/// Raw ids and relay instances remembered per name.
pub const BINDINGS_PER_NAME: usize = 8;
/// Suffix of a file set aside because some of its lines were not valid.
pub const CORRUPT_SUFFIX: &str = ".corrupt";
/// The most of the file read (about 50,000 names); the rest is ignored
/// like a corrupt line.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// The longest machine name kept (DNS names are at most 253).
const MAX_NAME_BYTES: usize = 255;

/// The bindings file cannot be used: the daemon does not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot use the identity bindings {}: {source}; fix it or move it away (relays' raw ids are \
     then bound afresh)",
    path.display()
)]
pub struct BindingsFileError {
    pub path: PathBuf,
    pub source: io::Error,
}

impl BindingsFileError {
    /// The daemon's exit code: the file is there but cannot be read or
    /// replaced.
    pub fn exit_code(&self) -> u8 {
        tracesync_common::exit::IOERR
    }
}

/// Why a line of the bindings file is not a valid binding.
#[derive(Debug, thiserror::Error)]
enum BadLine {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("a name of {0} bytes")]
    NameLength(usize),
    #[error("machine {0:?} appears twice")]
    Twice(String),
    #[error("more than {BINDINGS_PER_NAME} raw ids or instances for {0:?}")]
    TooMany(String),
    #[error("instance {0:?} is not 16 hex digits")]
    Instance(String),
    #[error("raw id {raw_id} is bound to {holder:?} and {name:?}")]
    RawIdTwice {
        raw_id: u32,
        holder: String,
        name: String,
    },
    #[error("instance {instance:016x} is bound to {holder:?} and {name:?}")]
    InstanceTwice {
        instance: u64,
        holder: String,
        name: String,
    },
}

/// Raw ids and relay instances bound to the name that first used them
/// with a certificate.
#[derive(Debug, Default)]
pub struct Bindings {
    inner: Mutex<BindingTable>,
    /// None: in memory only (tests, or TLS off).
    store: Option<Store>,
}

#[derive(Debug)]
struct Store {
    path: PathBuf,
    /// The table generation last written (the lock serializes writers).
    saved: Mutex<u64>,
}

#[derive(Debug, Default)]
struct BindingTable {
    raw_ids: HashMap<u32, String>,
    instances: HashMap<u64, String>,
    /// Per lower-cased name: its recent raw ids and instances, oldest first.
    recent: BTreeMap<String, (VecDeque<u32>, VecDeque<u64>)>,
    /// Bumped by every change.
    generation: u64,
}

/// What a successful claim did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Claimed {
    /// The name already held the raw id and the instance.
    Held,
    /// A new binding: save it ([`Bindings::save`]) before welcoming.
    New,
}

/// One line of the bindings file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    name: String,
    raw_ids: Vec<u32>,
    /// Relay instance ids, 16 hex digits.
    instances: Vec<String>,
}

/// What [`Bindings::open`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    pub path: PathBuf,
    /// Names whose bindings were loaded.
    pub names: usize,
    /// Lines that were not valid bindings (a part past [`MAX_FILE_BYTES`]
    /// counts as one).
    pub ignored_lines: usize,
    /// The first of them: `line N: why`.
    pub first_bad: Option<String>,
    /// Where the file with ignored lines was set aside.
    pub set_aside: Option<PathBuf>,
}

impl Loaded {
    /// The one log line about the load.
    pub fn summary(&self) -> String {
        let file = self.path.display();
        if self.ignored_lines == 0 {
            return format!(
                "identity bindings: {} machine names from {file}",
                self.names
            );
        }
        let aside = self.set_aside.as_ref().map_or_else(String::new, |p| {
            format!(" (the file was kept as {})", p.display())
        });
        format!(
            "identity bindings: {file}: {} lines are not valid bindings and were ignored{aside}; \
             {} machine names were loaded from the other lines (first bad: {}); the raw ids of \
             the lost lines can be claimed again by any certificate until their machines \
             reconnect: check which machines are missing, or pin raw ids in certificates \
             (`tracesync pki issue --raw-id`)",
            self.ignored_lines,
            self.names,
            self.first_bad.as_deref().unwrap_or("?"),
        )
    }
}

impl Bindings {
    /// The bindings of `path` (none if the file does not exist), saved
    /// there from now on. Lines that are not valid bindings are ignored
    /// and counted; the file is then set aside and rewritten clean. Err:
    /// one line saying why the file cannot be used.
    pub fn open(path: &Path) -> Result<(Bindings, Loaded), BindingsFileError> {
        let unusable = |source| BindingsFileError {
            path: path.to_path_buf(),
            source,
        };
        let mut loaded = Loaded {
            path: path.to_path_buf(),
            ..Loaded::default()
        };
        let read = tracesync_common::files::read_regular(path, MAX_FILE_BYTES).map_err(unusable)?;
        let mut table = BindingTable::default();
        if let Some((bytes, cut)) = read {
            let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
            if cut {
                lines.pop(); // the line the limit cut
                loaded.ignored_lines += 1;
                loaded.first_bad = Some(format!(
                    "the file is longer than {MAX_FILE_BYTES} bytes; the rest was not read"
                ));
            }
            for (i, line) in lines.iter().enumerate() {
                if line.trim_ascii().is_empty() {
                    continue;
                }
                if let Err(why) = table.load_line(line) {
                    loaded.ignored_lines += 1;
                    if loaded.first_bad.is_none() {
                        loaded.first_bad = Some(format!("line {}: {why}", i + 1));
                    }
                }
            }
        }
        loaded.names = table.recent.len();
        let bindings = Bindings {
            inner: Mutex::new(table),
            store: Some(Store {
                path: path.to_path_buf(),
                saved: Mutex::new(0),
            }),
        };
        if loaded.ignored_lines > 0 {
            let mut aside = path.as_os_str().to_owned();
            aside.push(CORRUPT_SUFFIX);
            let aside = PathBuf::from(aside);
            std::fs::rename(path, &aside).map_err(unusable)?;
            loaded.set_aside = Some(aside);
            bindings.lock().generation += 1;
            bindings.save().map_err(unusable)?;
        }
        Ok((bindings, loaded))
    }

    /// Whether new bindings are written to a file.
    pub fn is_persistent(&self) -> bool {
        self.store.is_some()
    }

    /// The bindings file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.store.as_ref().map(|s| s.path.as_path())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BindingTable> {
        match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Binds `raw_id` and `instance` to `name`, or says who holds them.
    pub fn claim(&self, name: &str, raw_id: u32, instance: u64) -> Result<Claimed, IdentityError> {
        let mut table = self.lock();
        let key = name.to_ascii_lowercase();
        if let Some(holder) = table.raw_ids.get(&raw_id).filter(|h| **h != key) {
            return Err(IdentityError::RawIdHeld {
                raw_id,
                holder: holder.clone(),
                name: name.to_owned(),
            });
        }
        if let Some(holder) = table.instances.get(&instance).filter(|h| **h != key) {
            return Err(IdentityError::InstanceHeld {
                instance,
                holder: holder.clone(),
                name: name.to_owned(),
            });
        }
        let new = table.bind(&key, raw_id, instance);
        if new {
            table.generation += 1;
            Ok(Claimed::New)
        } else {
            Ok(Claimed::Held)
        }
    }

    /// Writes the table if it changed since the last write (blocking:
    /// fsync). Concurrent callers write one after the other; each writes
    /// the latest table, so the file never goes back.
    pub fn save(&self) -> io::Result<()> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let mut saved = match store.saved.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (generation, text) = {
            let table = self.lock();
            if table.generation <= *saved {
                return Ok(());
            }
            (table.generation, table.to_text()?)
        };
        tracesync_common::files::replace(&store.path, text.as_bytes(), 0o640)?;
        *saved = generation;
        Ok(())
    }
}

impl BindingTable {
    /// Adds `raw_id` and `instance` to `key`'s recent ones (the oldest
    /// beyond [`BINDINGS_PER_NAME`] released). Whether anything was new.
    fn bind(&mut self, key: &str, raw_id: u32, instance: u64) -> bool {
        let mut new = false;
        let (ids, insts) = self.recent.entry(key.to_owned()).or_default();
        if !ids.contains(&raw_id) {
            new = true;
            ids.push_back(raw_id);
            self.raw_ids.insert(raw_id, key.to_owned());
            if ids.len() > BINDINGS_PER_NAME
                && let Some(old) = ids.pop_front()
            {
                self.raw_ids.remove(&old);
            }
        }
        if !insts.contains(&instance) {
            new = true;
            insts.push_back(instance);
            self.instances.insert(instance, key.to_owned());
            if insts.len() > BINDINGS_PER_NAME
                && let Some(old) = insts.pop_front()
            {
                self.instances.remove(&old);
            }
        }
        new
    }

    /// Adds one line of the file, or says why it is not valid (then
    /// nothing of it is added).
    fn load_line(&mut self, line: &[u8]) -> Result<(), BadLine> {
        let text = std::str::from_utf8(line).map_err(|_| BadLine::NotUtf8)?;
        let line: Line = serde_json::from_str(text)?;
        let key = line.name.to_ascii_lowercase();
        if key.is_empty() || key.len() > MAX_NAME_BYTES {
            return Err(BadLine::NameLength(key.len()));
        }
        if self.recent.contains_key(&key) {
            return Err(BadLine::Twice(key));
        }
        if line.raw_ids.len() > BINDINGS_PER_NAME || line.instances.len() > BINDINGS_PER_NAME {
            return Err(BadLine::TooMany(key));
        }
        let instances = line
            .instances
            .iter()
            .map(|hex| {
                (hex.len() == 16)
                    .then(|| u64::from_str_radix(hex, 16).ok())
                    .flatten()
                    .ok_or_else(|| BadLine::Instance(hex.clone()))
            })
            .collect::<Result<Vec<u64>, BadLine>>()?;
        for id in &line.raw_ids {
            if let Some(holder) = self.raw_ids.get(id) {
                return Err(BadLine::RawIdTwice {
                    raw_id: *id,
                    holder: holder.clone(),
                    name: key,
                });
            }
        }
        for inst in &instances {
            if let Some(holder) = self.instances.get(inst) {
                return Err(BadLine::InstanceTwice {
                    instance: *inst,
                    holder: holder.clone(),
                    name: key,
                });
            }
        }
        let (ids, insts) = self.recent.entry(key.clone()).or_default();
        for &id in &line.raw_ids {
            if !ids.contains(&id) {
                ids.push_back(id);
                self.raw_ids.insert(id, key.clone());
            }
        }
        for inst in instances {
            if !insts.contains(&inst) {
                insts.push_back(inst);
                self.instances.insert(inst, key.clone());
            }
        }
        Ok(())
    }

    /// The file's text: one line per name, sorted.
    fn to_text(&self) -> io::Result<String> {
        let mut text = String::new();
        for (name, (ids, insts)) in &self.recent {
            let line = Line {
                name: name.clone(),
                raw_ids: ids.iter().copied().collect(),
                instances: insts.iter().map(|i| format!("{i:016x}")).collect(),
            };
            text.push_str(&serde_json::to_string(&line).map_err(io::Error::other)?);
            text.push('\n');
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests;
