//! Control clients that have connected but not yet sent their request line.
//! Invariant: at most [`MAX_WAITING`] of them at once; one more closes the
//! oldest of them (counted as `tracesync_control_idle_closed_total`). A
//! client sends its request right after connecting (the CLI does), so only
//! clients that hold a connection without asking anything are closed, and
//! `tracesync status` is answered however many of them there are.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// Control clients without a request yet, at once.
pub const MAX_WAITING: usize = 64;

#[derive(Debug)]
pub struct Waiting {
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// Oldest first.
    clients: BTreeMap<u64, CancellationToken>,
}

impl Waiting {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: limit.max(1),
            inner: Mutex::default(),
        })
    }

    /// A new client's place; at the limit the oldest waiting client is
    /// closed first (its [`Place::closed`] completes).
    pub fn admit(self: &Arc<Self>) -> Place {
        let mut inner = self.lock();
        while inner.clients.len() >= self.limit {
            let Some((_, oldest)) = inner.clients.pop_first() else {
                break;
            };
            oldest.cancel();
            crate::metrics::Event::ControlIdleClosed.record();
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let closed = CancellationToken::new();
        inner.clients.insert(id, closed.clone());
        Place {
            id,
            waiting: Arc::clone(self),
            closed,
        }
    }

    pub fn len(&self) -> usize {
        self.lock().clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One client's place among the waiting; dropped once its request is read.
#[derive(Debug)]
pub struct Place {
    id: u64,
    waiting: Arc<Waiting>,
    closed: CancellationToken,
}

impl Place {
    /// Completes when the client was closed to make room for a newer one.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.waiting.lock().clients.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_waiting_client_is_closed_for_a_new_one() {
        let waiting = Waiting::new(2);
        let a = waiting.admit();
        let b = waiting.admit();
        let c = waiting.admit();
        assert!(a.closed.is_cancelled());
        assert!(!b.closed.is_cancelled() && !c.closed.is_cancelled());
        assert_eq!(waiting.len(), 2);
        drop(b); // its request arrived
        let _d = waiting.admit();
        assert!(!c.closed.is_cancelled());
    }
}
