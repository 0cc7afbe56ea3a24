//! Releases queued actions at absolute deadlines (CLOCK_MONOTONIC ns).
//!
//! One thread: it waits on a condition variable until shortly before the
//! earliest deadline (woken early when an earlier one is queued), then
//! spins to the deadline itself, so release is not at the mercy of timer
//! granularity. The thread's timer slack is set to 1 ns. Every release
//! records how late it was: the proxy's own scheduling error, which is
//! one-sided and adds to the modelled delay (never to ground truth).

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};

/// Wake this long before a deadline and spin the rest.
const SPIN_NS: u64 = 60_000;
/// Late-release samples kept for percentiles (the rest are counted only).
const MAX_SAMPLES: usize = 2_000_000;

/// CLOCK_MONOTONIC (ns).
pub fn now_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

type Action = Box<dyn FnOnce() + Send>;

struct Item {
    deadline: u64,
    seq: u64,
    action: Action,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    // Reversed: BinaryHeap is a max-heap, the earliest deadline must pop.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Item>,
    seq: u64,
}

/// How late releases were (ns after their deadline).
#[derive(Clone, Debug, Default)]
pub struct Lateness {
    pub samples: Vec<u64>,
    pub count: u64,
    pub max_ns: u64,
}

impl Lateness {
    fn record(&mut self, late: u64) {
        self.count += 1;
        self.max_ns = self.max_ns.max(late);
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(late);
        }
    }

    /// (p50, p99, p99.9, max) in ns.
    pub fn summary(&self) -> (u64, u64, u64, u64) {
        let mut v = self.samples.clone();
        v.sort_unstable();
        (
            quantile(&v, 0.5),
            quantile(&v, 0.99),
            quantile(&v, 0.999),
            self.max_ns,
        )
    }
}

/// The `q` quantile of sorted `v` (nearest rank; 0 if empty).
pub fn quantile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    stop: AtomicBool,
    lateness: Mutex<Lateness>,
}

/// Handle to the release thread (clone freely).
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
}

impl Scheduler {
    pub fn start() -> (Scheduler, JoinHandle<()>) {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            lateness: Mutex::new(Lateness::default()),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("impair-release".into())
            .spawn(move || release_loop(&s))
            .expect("spawn the release thread");
        (Scheduler { shared }, thread)
    }

    /// Runs `action` at CLOCK_MONOTONIC `deadline` (ns); at once if past.
    /// Actions with equal deadlines run in the order they were queued.
    pub fn at(&self, deadline: u64, action: impl FnOnce() + Send + 'static) {
        let Ok(mut q) = self.shared.queue.lock() else {
            return;
        };
        q.seq += 1;
        let seq = q.seq;
        let earliest = q.heap.peek().is_none_or(|i| deadline < i.deadline);
        q.heap.push(Item {
            deadline,
            seq,
            action: Box::new(action),
        });
        drop(q);
        if earliest {
            self.shared.wake.notify_one();
        }
    }

    pub fn lateness(&self) -> Lateness {
        self.shared
            .lateness
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // The release thread checks the flag and starts waiting while it
        // holds the queue's lock: taking the lock once here means it has
        // either not checked yet (and sees the flag) or already waits (and
        // gets the notify). Without it a notify between the two was lost
        // and the proxy's drop waited forever (seen once in CI).
        drop(self.shared.queue.lock());
        self.shared.wake.notify_one();
    }
}

fn release_loop(shared: &Shared) {
    let _ = nix::sys::prctl::set_timerslack(1);
    loop {
        let item = {
            let Ok(mut q) = shared.queue.lock() else {
                return;
            };
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Some(first) = q.heap.peek() else {
                    q = match shared.wake.wait(q) {
                        Ok(q) => q,
                        Err(_) => return,
                    };
                    continue;
                };
                let now = now_ns();
                if first.deadline > now + SPIN_NS {
                    let wait = Duration::from_nanos(first.deadline - now - SPIN_NS);
                    q = match shared.wake.wait_timeout(q, wait) {
                        Ok((q, _)) => q,
                        Err(_) => return,
                    };
                    continue;
                }
                break q.heap.pop();
            }
        };
        let Some(item) = item else { continue };
        while now_ns() < item.deadline {
            std::hint::spin_loop();
        }
        let late = now_ns().saturating_sub(item.deadline);
        if let Ok(mut l) = shared.lateness.lock() {
            l.record(late);
        }
        (item.action)();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn releases_in_deadline_order_not_before_the_deadline() {
        let (sched, thread) = Scheduler::start();
        let (tx, rx) = mpsc::channel();
        let start = now_ns();
        // Queued out of order; equal deadlines keep queue order.
        for (i, offset_us) in [(0u32, 3000u64), (1, 1000), (2, 2000), (3, 2000), (4, 0)] {
            let deadline = start + offset_us * 1000;
            let tx = tx.clone();
            sched.at(deadline, move || {
                let _ = tx.send((i, deadline, now_ns()));
            });
        }
        let got: Vec<(u32, u64, u64)> = (0..5)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        let order: Vec<u32> = got.iter().map(|g| g.0).collect();
        assert_eq!(order, vec![4, 1, 2, 3, 0]);
        assert!(got.iter().all(|(_, deadline, at)| at >= deadline));
        assert_eq!(sched.lateness().count, 5);
        sched.stop();
        thread.join().unwrap();
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 50);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&v, 1.0), 100);
        assert_eq!(quantile(&[], 0.5), 0);
    }
}
