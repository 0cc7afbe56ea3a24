//! The byte bound of the runs on their way from the shards to the writer
//! thread: a shard takes a run's bytes before it sends it, the writer gives
//! them back once the run is in its merge (which has its own bound). A run
//! count alone let 64 runs of a few MiB each queue up (hundreds of MiB of
//! peak RSS with small packets).
//!
//! Invariant: the bytes taken and not given back stay at or under the
//! bound, but one run always passes when nothing is in flight (a run larger
//! than the bound goes alone). Once closed (the writer ended), nobody waits.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tracesync_core::live::OutPacket;
use tracesync_core::shard::Timed;

/// Bytes of runs in flight at most: about a drain round of every shard at
/// full rate (taken out of `merge.queue-bytes`, `super::split_queue_bytes`).
pub(super) const RUNS_QUEUE_BYTES: u64 = 4 << 20;

#[derive(Debug)]
pub(super) struct RunBudget {
    state: Mutex<State>,
    freed: Condvar,
    max: u64,
}

#[derive(Debug, Default)]
struct State {
    in_flight: u64,
    closed: bool,
}

/// How long a waiting shard sleeps between looks at a budget that nobody
/// freed (a lost wake-up costs this much, never a hang).
const RECHECK: Duration = Duration::from_millis(50);

impl RunBudget {
    pub fn new(max: u64) -> Self {
        Self {
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
            max: max.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until `bytes` fit (or nothing is in flight) and takes them.
    /// False once closed.
    pub fn take(&self, bytes: u64) -> bool {
        let mut state = self.lock();
        while !state.closed && state.in_flight > 0 && state.in_flight + bytes > self.max {
            state = match self.freed.wait_timeout(state, RECHECK) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        if state.closed {
            return false;
        }
        state.in_flight += bytes;
        true
    }

    /// The writer took a run of `bytes` off the channel.
    pub fn give(&self, bytes: u64) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(bytes);
        drop(state);
        self.freed.notify_all();
    }

    /// The writer is gone: wakes every waiting shard.
    pub fn close(&self) {
        self.lock().closed = true;
        self.freed.notify_all();
    }

    #[cfg(test)]
    pub fn in_flight(&self) -> u64 {
        self.lock().in_flight
    }
}

/// A run's bytes as the budget counts them (as the merge counts them).
pub(super) fn run_bytes(packets: &[OutPacket]) -> u64 {
    packets.iter().map(Timed::size).sum()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_full_budget_waits_until_the_writer_gives_back() {
        let budget = Arc::new(RunBudget::new(1_000));
        assert!(budget.take(600));
        assert!(budget.take(400));
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let took = budget.take(500);
                (took, start.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(budget.in_flight(), 1_000, "the third run must wait");
        budget.give(600);
        let (took, waited) = waiter.join().expect("joins");
        assert!(took);
        assert!(waited >= Duration::from_millis(90), "waited {waited:?}");
        assert_eq!(budget.in_flight(), 900);
    }

    #[test]
    fn a_run_larger_than_the_budget_passes_alone_and_close_frees_waiters() {
        let budget = Arc::new(RunBudget::new(100));
        assert!(budget.take(5_000), "alone, a large run passes");
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || budget.take(1))
        };
        std::thread::sleep(Duration::from_millis(50));
        budget.close();
        assert!(!waiter.join().expect("joins"), "closed: the take fails");
        assert!(!budget.take(1));
    }
}
