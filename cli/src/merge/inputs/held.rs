//! A converted input (Chrome JSON, systrace) converted once, with no
//! second copy: the first pass reads its conversion only to the first
//! packet and holds it there, and the second pass goes on from that point.
//!
//! Why the first pass may stop there: a converted input brings no clock
//! facts (no snapshot, no remote sync, no SystemInfo; its clock is
//! private, or its machine's MONOTONIC), so what the plan needs of it is
//! whether it converts to anything at all, and where its first event
//! breaks if it does not. Everything after that is read once, by the
//! second pass, which interleaves it as it converts.
//!
//! Invariants:
//! - The second pass reads exactly the bytes the first pass's reader was
//!   given (kept as they were read) followed by the rest of the same
//!   conversion: the bytes a second conversion would give.
//! - The conversion is handed over at most once; a second open converts
//!   the input again, uncounted.
//! - A fault the second pass meets is kept here for the merge to report
//!   (the first pass never saw it); the conversion's counts are in
//!   [`Held::counts`] once the second pass has dropped its reader.
//! - Memory: what the first pass's reader read (one chunk) and the
//!   paused conversion's own bounded state.

use std::io::{self, Cursor, Read};
use std::sync::{Arc, Mutex, PoisonError};

use crate::merge::chrome_json::{JsonStats, StatsSlot};
use crate::merge::first_pass::InputFault;

/// Converted inputs held from the first pass to the second, at most: one,
/// and only when it is the merge's only converted input. Several are
/// better spilled: the first pass converts them side by side, one per
/// processor, which keeps the processors busier than conversions held to
/// the second pass, where the merge interleaves them (two 256 MiB JSON
/// inputs held took 1.3 times as long as both spilled).
pub const MAX_HELD: usize = 1;

/// One converted input's conversion, paused between the passes.
#[derive(Default)]
pub struct Held {
    state: Mutex<State>,
    slot: StatsSlot,
}

#[derive(Default)]
struct State {
    /// The conversion, after the bytes in `read`; None once handed over
    /// (or never started).
    rest: Option<Box<dyn Read + Send>>,
    /// What the first pass read of it.
    read: Vec<u8>,
    /// False once abandoned: the first pass reads on without keeping.
    recording: bool,
    /// Handed over to the second pass.
    resumed: bool,
    fault: Option<InputFault>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").finish_non_exhaustive()
    }
}

impl Held {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Where the conversion leaves its counts.
    pub fn slot(&self) -> StatsSlot {
        self.slot.clone()
    }

    /// `conversion` read through, every byte kept, for the first pass.
    pub fn record(self: &Arc<Self>, conversion: Box<dyn Read + Send>) -> Recorder {
        let mut state = self.lock();
        state.rest = Some(conversion);
        state.read.clear();
        state.recording = true;
        Recorder {
            held: Arc::clone(self),
        }
    }

    /// The conversion from its start, for the second pass; None if it was
    /// handed over already or never recorded.
    pub fn resume(&self) -> Option<Box<dyn Read + Send>> {
        let mut state = self.lock();
        if !state.recording {
            return None;
        }
        let rest = state.rest.take()?;
        let read = std::mem::take(&mut state.read);
        state.resumed = true;
        Some(Box::new(Cursor::new(read).chain(rest)))
    }

    /// Whether the second pass took the conversion over (its counts are
    /// then not the first pass's).
    pub fn was_resumed(&self) -> bool {
        self.lock().resumed
    }

    /// Not held after all: the first pass reads the conversion to its end
    /// (or found nothing to go on with), keeping nothing of it; it is
    /// dropped with the first pass's reader.
    pub fn abandon(&self) {
        let mut state = self.lock();
        state.recording = false;
        state.read = Vec::new();
    }

    /// Keeps the first fault the second pass met.
    pub fn note_fault(&self, fault: InputFault) {
        self.lock().fault.get_or_insert(fault);
    }

    /// The fault the second pass met, if any (once).
    pub fn take_fault(&self) -> Option<InputFault> {
        self.lock().fault.take()
    }

    /// What the conversion counted (complete once its reader is dropped).
    pub fn counts(&self) -> JsonStats {
        self.slot
            .lock()
            .map_or_else(|p| *p.into_inner(), |counted| *counted)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The first pass's reader of a held conversion: what it reads is kept
/// for the second pass.
pub struct Recorder {
    held: Arc<Held>,
}

impl Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut state = self.held.lock();
        let State {
            rest,
            read,
            recording,
            ..
        } = &mut *state;
        let Some(conversion) = rest.as_mut() else {
            return Ok(0);
        };
        let n = conversion.read(buf)?;
        if *recording {
            read.extend_from_slice(&buf[..n]);
        }
        Ok(n)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let mut state = self.held.lock();
        if !state.recording {
            // Its counts reach the slot as it is dropped.
            state.rest = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_pass_reads_what_the_first_read_then_the_rest() {
        let held = Held::new();
        let mut first = held.record(Box::new(Cursor::new(b"abcdefgh".to_vec())));
        let mut buf = [0u8; 3];
        assert_eq!(first.read(&mut buf).unwrap(), 3);
        drop(first);
        let mut all = Vec::new();
        held.resume().unwrap().read_to_end(&mut all).unwrap();
        assert_eq!(all, b"abcdefgh");
        assert!(held.resume().is_none(), "handed over once");
    }

    #[test]
    fn an_abandoned_conversion_is_not_resumed() {
        let held = Held::new();
        let mut first = held.record(Box::new(Cursor::new(b"xyz".to_vec())));
        held.abandon();
        let mut all = Vec::new();
        first.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"xyz", "the first pass reads on");
        drop(first);
        assert!(held.resume().is_none());
        assert!(!held.was_resumed());
    }
}
