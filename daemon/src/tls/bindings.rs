//! Rule 4 of the identity rule ([`super::identity`]): raw machine ids and
//! relay instance ids bound to the certificate name that first used them,
//! kept across restarts.
//!
//! The table lives in memory and, under TLS, in [`BINDINGS_FILE`] in the
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

use super::identity::MISMATCH;

/// Raw ids and relay instances remembered per name.
pub const BINDINGS_PER_NAME: usize = 8;
/// The bindings file's name in the state (output) directory.
pub const BINDINGS_FILE: &str = "identity-bindings.jsonl";
/// Suffix of a file set aside because some of its lines were not valid.
pub const CORRUPT_SUFFIX: &str = ".corrupt";
/// The most of the file read (about 50,000 names); the rest is ignored
/// like a corrupt line.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// The longest machine name kept (DNS names are at most 253).
const MAX_NAME_BYTES: usize = 255;

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
    pub fn open(path: &Path) -> Result<(Bindings, Loaded), String> {
        let unusable = |e: io::Error| {
            format!(
                "cannot use the identity bindings {}: {e}; fix it or move it away (relays' raw \
                 ids are then bound afresh)",
                path.display()
            )
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
    pub fn claim(&self, name: &str, raw_id: u32, instance: u64) -> Result<Claimed, String> {
        let mut table = self.lock();
        let key = name.to_ascii_lowercase();
        if let Some(holder) = table.raw_ids.get(&raw_id).filter(|h| **h != key) {
            return Err(format!(
                "{MISMATCH}: raw machine id {raw_id} belongs to machine {holder:?} on this \
                 daemon; a certificate for {name:?} cannot send as it"
            ));
        }
        if let Some(holder) = table.instances.get(&instance).filter(|h| **h != key) {
            return Err(format!(
                "{MISMATCH}: relay instance {instance:016x} belongs to machine {holder:?} on \
                 this daemon; a certificate for {name:?} cannot resume it"
            ));
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
    fn load_line(&mut self, line: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_owned())?;
        let line: Line = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let key = line.name.to_ascii_lowercase();
        if key.is_empty() || key.len() > MAX_NAME_BYTES {
            return Err(format!("a name of {} bytes", key.len()));
        }
        if self.recent.contains_key(&key) {
            return Err(format!("machine {key:?} appears twice"));
        }
        if line.raw_ids.len() > BINDINGS_PER_NAME || line.instances.len() > BINDINGS_PER_NAME {
            return Err(format!(
                "more than {BINDINGS_PER_NAME} raw ids or instances for {key:?}"
            ));
        }
        let instances = line
            .instances
            .iter()
            .map(|hex| {
                (hex.len() == 16)
                    .then(|| u64::from_str_radix(hex, 16).ok())
                    .flatten()
                    .ok_or_else(|| format!("instance {hex:?} is not 16 hex digits"))
            })
            .collect::<Result<Vec<u64>, String>>()?;
        for id in &line.raw_ids {
            if let Some(holder) = self.raw_ids.get(id) {
                return Err(format!("raw id {id} is bound to {holder:?} and {key:?}"));
            }
        }
        for inst in &instances {
            if let Some(holder) = self.instances.get(inst) {
                return Err(format!(
                    "instance {inst:016x} is bound to {holder:?} and {key:?}"
                ));
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
mod tests {
    use super::*;

    #[test]
    fn raw_ids_and_instances_stay_with_their_first_name() {
        let b = Bindings::default();
        let _ = b.claim("a", 1, 100).unwrap();
        let _ = b.claim("A", 1, 100).unwrap(); // same name, other case
        let _ = b.claim("b", 2, 200).unwrap();
        let err = b.claim("b", 1, 200).unwrap_err();
        assert!(err.starts_with(MISMATCH) && err.contains("\"a\""), "{err}");
        let err = b.claim("b", 3, 100).unwrap_err();
        assert!(err.contains("relay instance"), "{err}");
        // A refused claim binds nothing.
        let _ = b.claim("c", 3, 300).unwrap();
    }

    #[test]
    fn each_name_keeps_its_recent_bindings_only() {
        let b = Bindings::default();
        for i in 0..(BINDINGS_PER_NAME as u32 + 2) {
            let _ = b.claim("a", i, u64::from(i)).unwrap();
        }
        // The two oldest were released; the newest are still held.
        let _ = b.claim("b", 0, 0).unwrap();
        let _ = b.claim("b", 1, 1).unwrap();
        assert!(b.claim("b", BINDINGS_PER_NAME as u32, 50).is_err());
    }

    #[test]
    fn bindings_are_saved_and_reloaded_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(BINDINGS_FILE);
        let (b, loaded) = Bindings::open(&path).unwrap();
        assert_eq!(loaded.names, 0);
        assert!(b.is_persistent());
        assert!(!path.exists(), "nothing written before a binding");
        assert_eq!(b.claim("Relay-A", 11, 0xa1).unwrap(), Claimed::New);
        assert_eq!(b.claim("relay-a", 11, 0xa1).unwrap(), Claimed::Held);
        assert_eq!(b.claim("relay-b", 22, 0xb1).unwrap(), Claimed::New);
        b.save().unwrap();
        b.save().unwrap(); // unchanged: nothing to do
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "{\"name\":\"relay-a\",\"raw_ids\":[11],\"instances\":[\"00000000000000a1\"]}\n\
             {\"name\":\"relay-b\",\"raw_ids\":[22],\"instances\":[\"00000000000000b1\"]}\n"
        );
        drop(b);

        // The restarted daemon: relay-b cannot take relay-a's raw id or
        // instance first; relay-a keeps both.
        let (b, loaded) = Bindings::open(&path).unwrap();
        assert_eq!((loaded.names, loaded.ignored_lines), (2, 0));
        assert!(
            loaded.summary().contains("2 machine names"),
            "{}",
            loaded.summary()
        );
        let err = b.claim("relay-b", 11, 0xb2).unwrap_err();
        assert!(
            err.starts_with(MISMATCH) && err.contains("belongs to machine \"relay-a\""),
            "{err}"
        );
        let err = b.claim("relay-b", 23, 0xa1).unwrap_err();
        assert!(err.contains("relay instance 00000000000000a1"), "{err}");
        assert_eq!(b.claim("relay-a", 11, 0xa1).unwrap(), Claimed::Held);
        assert_eq!(b.claim("relay-a", 12, 0xa2).unwrap(), Claimed::New);
        b.save().unwrap();
        let (_, loaded) = Bindings::open(&path).unwrap();
        assert_eq!(loaded.names, 2);
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("\"raw_ids\":[11,12]")
        );
    }

    #[test]
    fn the_file_stays_bounded_per_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(BINDINGS_FILE);
        let (b, _) = Bindings::open(&path).unwrap();
        for i in 0..(BINDINGS_PER_NAME as u32 * 3) {
            let _ = b.claim("a", i, u64::from(i)).unwrap();
            b.save().unwrap();
        }
        let (b, loaded) = Bindings::open(&path).unwrap();
        assert_eq!((loaded.names, loaded.ignored_lines), (1, 0));
        let n = BINDINGS_PER_NAME as u32;
        // Released ids may go to another name; the most recent may not.
        let _ = b.claim("b", 0, 1000).unwrap();
        assert!(b.claim("b", 3 * n - 1, 1001).is_err());
        assert!(b.claim("b", 2 * n, 1002).is_err());
        let _ = b.claim("b", 2 * n - 1, 1003).unwrap();
    }

    #[test]
    fn a_corrupt_file_keeps_its_valid_lines_and_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(BINDINGS_FILE);
        let good = "{\"name\":\"a\",\"raw_ids\":[1],\"instances\":[\"0000000000000001\"]}";
        let text = [
            good,
            "{\"name\":\"b\",\"raw_ids\":[2],\"instan", // torn
            "\u{0}\u{0}garbage",
            "{\"name\":\"c\",\"raw_ids\":[1],\"instances\":[]}", // a's raw id again
            "{\"name\":\"a\",\"raw_ids\":[5],\"instances\":[]}", // a twice
            "{\"name\":\"d\",\"raw_ids\":[4],\"instances\":[\"xyz\"]}",
            "{\"name\":\"e\",\"raw_ids\":[6],\"instances\":[],\"extra\":1}",
            "",
            "{\"name\":\"f\",\"raw_ids\":[7],\"instances\":[\"00000000000000ff\"]}",
        ]
        .join("\n");
        std::fs::write(&path, &text).unwrap();
        let (b, loaded) = Bindings::open(&path).unwrap();
        assert_eq!(loaded.names, 2, "a and f");
        assert_eq!(loaded.ignored_lines, 6);
        assert!(
            loaded.first_bad.as_deref().unwrap().starts_with("line 2: "),
            "{loaded:?}"
        );
        let line = loaded.summary();
        assert!(!line.contains('\n'));
        assert!(line.contains(&path.display().to_string()), "{line}");
        assert!(line.contains("6 lines are not valid bindings"), "{line}");
        assert!(line.contains(".corrupt"), "{line}");
        assert!(line.contains("--raw-id"), "{line}");
        // The damaged file is kept for the operator; a clean one replaces it.
        let aside = dir.path().join(format!("{BINDINGS_FILE}{CORRUPT_SUFFIX}"));
        assert_eq!(loaded.set_aside.as_deref(), Some(aside.as_path()));
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), text);
        let (_, again) = Bindings::open(&path).unwrap();
        assert_eq!((again.names, again.ignored_lines), (2, 0));
        // The valid lines hold.
        assert!(b.claim("x", 1, 99).is_err());
        assert!(b.claim("x", 7, 98).is_err());
        assert!(b.claim("x", 9, 0xff).is_err());
        let _ = b.claim("x", 2, 97).unwrap();
    }

    #[test]
    fn an_unusable_file_is_one_line_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(BINDINGS_FILE);
        std::fs::create_dir(&path).unwrap();
        let err = Bindings::open(&path).unwrap_err();
        assert!(
            err.contains("is a directory") && !err.contains('\n'),
            "{err}"
        );
        std::fs::remove_dir(&path).unwrap();

        let target = dir.path().join("elsewhere");
        std::fs::write(
            &target,
            "{\"name\":\"a\",\"raw_ids\":[1],\"instances\":[]}\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = Bindings::open(&path).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
}
