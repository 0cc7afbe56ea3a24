//! A scan thread: fills one input's batches ahead of the merging thread
//! and sends them over a bounded channel; the merging thread sends each
//! back when it has read it.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};

use super::batch::{Batch, Limits, Meter, Scanner};
use super::{BATCHES, THREADED};

/// The thread's work: the input's packets in batches, until its end or its
/// first fault, or until the merging thread stops listening.
pub(super) fn read_and_scan(
    mut scanner: Scanner,
    full: &SyncSender<Batch>,
    empty: Receiver<Batch>,
    meter: Arc<Meter>,
) {
    let mut pool = Pool {
        empty,
        free: Vec::new(),
        allocated: 0,
        large_out: false,
        limits: THREADED,
        meter,
    };
    loop {
        let Some(mut batch) = pool.take() else {
            return;
        };
        let more = scanner.fill(&mut batch, || pool.admit_large());
        if !batch.is_empty() && full.send(batch).is_err() {
            return;
        }
        if !more {
            return;
        }
    }
}

/// The thread's batches: new ones until [`BATCHES`], then those the
/// merging thread returns.
struct Pool {
    empty: Receiver<Batch>,
    /// Returned batches, emptied, taken before waiting for another.
    free: Vec<Batch>,
    allocated: usize,
    /// A large batch (one packet over the byte limit) is out: filled, in
    /// the channel or being read. At most one at a time.
    large_out: bool,
    limits: Limits,
    meter: Arc<Meter>,
}

impl Pool {
    /// An empty batch; None once the merging thread is gone.
    fn take(&mut self) -> Option<Batch> {
        if let Some(batch) = self.free.pop() {
            return Some(batch);
        }
        let batch = match self.empty.try_recv() {
            Ok(b) => b,
            Err(TryRecvError::Empty) if self.allocated < BATCHES => {
                self.allocated += 1;
                return Some(Batch::new(self.limits, &self.meter));
            }
            Err(TryRecvError::Empty) => self.empty.recv().ok()?,
            Err(TryRecvError::Disconnected) => return None,
        };
        Some(self.emptied(batch))
    }

    fn emptied(&mut self, mut batch: Batch) -> Batch {
        if batch.is_large() {
            self.large_out = false;
        }
        batch.reset();
        batch
    }

    /// Waits until no large batch is out, then counts the one about to be
    /// filled: so an input holds one large packet in batches, not
    /// [`BATCHES`]. False once the merging thread is gone.
    fn admit_large(&mut self) -> bool {
        while self.large_out {
            let Ok(batch) = self.empty.recv() else {
                return false;
            };
            let batch = self.emptied(batch);
            self.free.push(batch);
        }
        self.large_out = true;
        true
    }
}
