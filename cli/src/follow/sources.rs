//! `src` of packets read back from a rolling directory, named as the live
//! tail names them: `<machine>/<relay sequence>` for a relay's packets
//! (the output sequence's relay sequence from the directory's `journal`),
//! the machine's name for the daemon's own packets of a machine (sync
//! points, sync-quality tracks), the host's name for the host's. A packet
//! of a sequence the journal does not name keeps its file's name.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracesync_capture::journal::read_dir_journal;
use tracesync_core::live::{OWN_SEQUENCE_ID, OutPacket};
use tracesync_core::sync_quality::is_quality_seq;

/// An unknown sequence reads the journal again at most this often.
const RELOAD_EVERY: Duration = Duration::from_secs(1);
/// Labels cached at most (then the cache starts afresh).
const MAX_LABELS: usize = 1 << 16;

#[derive(Debug, Default)]
pub struct SourceLabels {
    /// Relay sequence by output sequence.
    relay_sequence: HashMap<u32, u32>,
    /// Label by output sequence, with the machine name it was made with.
    cache: HashMap<u32, (Option<Arc<str>>, Arc<str>)>,
    loaded_at: Option<Instant>,
}

impl SourceLabels {
    /// Reads `dir`'s journal (a missing or unreadable one names nothing).
    pub fn load(&mut self, dir: &Path) {
        self.loaded_at = Some(Instant::now());
        let Ok(Some(journal)) = read_dir_journal(dir) else {
            return;
        };
        for s in journal.streams.into_values() {
            self.relay_sequence.insert(s.out_seq, s.relay_sequence);
        }
    }

    /// Sets `p.src` as the live tail names it, reading `dir`'s journal
    /// again (rate-limited) for a sequence it does not know yet.
    pub fn relabel(&mut self, dir: &Path, p: &mut OutPacket) {
        let own = p.seq == OWN_SEQUENCE_ID || is_quality_seq(p.seq);
        if !own
            && !self.relay_sequence.contains_key(&p.seq)
            && self.loaded_at.is_none_or(|t| t.elapsed() >= RELOAD_EVERY)
        {
            self.load(dir);
        }
        if let Some(label) = self.label(p) {
            p.src = label;
        }
    }

    fn label(&mut self, p: &OutPacket) -> Option<Arc<str>> {
        if let Some((name, label)) = self.cache.get(&p.seq)
            && *name == p.machine_name
        {
            return Some(Arc::clone(label));
        }
        let name = p.machine_name.as_deref();
        let label: Arc<str> = if p.seq == OWN_SEQUENCE_ID || is_quality_seq(p.seq) {
            match (name, p.machine_raw_id) {
                (Some(n), _) => Arc::from(n),
                (None, 0) => Arc::from("host"),
                (None, _) => Arc::from("sync"),
            }
        } else {
            let relay_sequence = self.relay_sequence.get(&p.seq)?;
            match name {
                Some(n) => Arc::from(format!("{n}/{relay_sequence}")),
                None => Arc::from(format!("{}/{relay_sequence}", p.machine_raw_id)),
            }
        };
        if self.cache.len() >= MAX_LABELS {
            self.cache.clear();
        }
        self.cache
            .insert(p.seq, (p.machine_name.clone(), Arc::clone(&label)));
        Some(label)
    }
}
