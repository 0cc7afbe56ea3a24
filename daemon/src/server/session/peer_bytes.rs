//! One budget for the bytes peers make the daemon hold in frames not yet
//! whole: before Hello (up to 64 KiB each) and after it (up to
//! `limits.max-frame-bytes` each). Whole frames go on to the ingest queue,
//! which has its own budget (`INGEST_QUEUE_BYTES`). Invariants:
//!
//! - Every session counts the bytes it reads from its socket as they are
//!   read ([`Account::add`], in [`crate::tls::Metered`]), and the bytes
//!   buffered for its next frame after every frame read ([`Account::set`]);
//!   the sum over all sessions is what the budget bounds. A session closed
//!   for the budget reads nothing more: its socket's reads fail. Bytes announced by a length prefix but not sent are not
//!   counted (nor resident: the buffer's pages are touched only as bytes
//!   arrive).
//! - When the sum passes [`PEER_BYTES`], holders are closed until it is
//!   back under: unauthenticated ones first, then the largest partial
//!   frame, the one begun longest ago among equals. Nothing acknowledged is
//!   lost: a relay closed here reconnects and resends from its last ack,
//!   and an honest relay's frame (at most about 1 MiB, whole within a
//!   round trip) is rarely the largest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

/// Bytes of partial frames all peers together may make the daemon hold:
/// 48 MiB, so that with what else a peer costs (tasks, sockets, TLS
/// buffers, the allocator's slack) nothing unauthenticated or idle costs
/// more than 64 MiB; it holds 48 honest relays' 1 MiB batches in flight at
/// once.
pub const PEER_BYTES: usize = 48 << 20;

#[derive(Debug)]
pub struct PeerBytes {
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    total: usize,
    holders: HashMap<u64, Holder>,
}

#[derive(Debug)]
struct Holder {
    held: usize,
    /// When its current partial frame began (None: holds nothing).
    since: Option<Instant>,
    unauthenticated: bool,
    closed: CancellationToken,
}

impl PeerBytes {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            inner: Mutex::default(),
        })
    }

    /// A new (unauthenticated) session's account.
    pub fn open(self: &Arc<Self>) -> Account {
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let closed = CancellationToken::new();
        let holder = Holder {
            held: 0,
            since: None,
            unauthenticated: true,
            closed: closed.clone(),
        };
        inner.holders.insert(id, holder);
        Account {
            id,
            registry: Arc::clone(self),
            closed,
        }
    }

    /// Bytes held now, all sessions together.
    pub fn total(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Inner {
    /// Closes holders until the total is within `limit` (see the module
    /// doc for the order).
    fn shed(&mut self, limit: usize) {
        while self.total > limit {
            let victim = self
                .holders
                .iter()
                .filter(|(_, h)| h.held > 0)
                .max_by_key(|(_, h)| (h.unauthenticated, h.held, std::cmp::Reverse(h.since)))
                .map(|(id, _)| *id);
            let Some(holder) = victim.and_then(|id| self.holders.remove(&id)) else {
                return;
            };
            // Gone from the count now: its task frees the bytes as it ends.
            self.total -= holder.held;
            holder.closed.cancel();
        }
    }
}

/// One session's share of the budget; dropping it gives the share back.
#[derive(Debug)]
pub struct Account {
    id: u64,
    registry: Arc<PeerBytes>,
    closed: CancellationToken,
}

impl Account {
    /// The session now buffers `held` bytes of a frame not yet whole. Over
    /// the budget, the heaviest holders are closed (maybe this one).
    pub fn set(&self, held: usize) {
        let limit = self.registry.limit;
        let mut inner = self.registry.lock();
        let Some(holder) = inner.holders.get_mut(&self.id) else {
            return; // closed for the budget already
        };
        let before = holder.held;
        holder.held = held;
        holder.since = match (held, holder.since) {
            (0, _) => None,
            (_, None) => Some(Instant::now()),
            (_, since) => since,
        };
        inner.total = inner.total - before + held;
        inner.shed(limit);
    }

    /// `bytes` more read from the socket (counted at once, before they
    /// reach a frame buffer: [`Account::set`] then gives the exact count).
    pub fn add(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let held = {
            let inner = self.registry.lock();
            match inner.holders.get(&self.id) {
                Some(holder) => holder.held.saturating_add(bytes),
                None => return,
            }
        };
        self.set(held);
    }

    /// Whether the session was closed for the budget.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// The Hello passed: no longer among the first to be closed.
    pub fn authenticated(&self) {
        if let Some(holder) = self.registry.lock().holders.get_mut(&self.id) {
            holder.unauthenticated = false;
        }
    }

    /// Completes when the session was closed for the budget.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        if let Some(holder) = inner.holders.remove(&self.id) {
            inner.total -= holder.held;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn past_the_budget_the_largest_partial_frames_go_and_the_total_stays_bounded() {
        let budget = PeerBytes::new(10 * MIB);
        let honest = budget.open();
        honest.authenticated();
        honest.set(MIB);
        let hostile: Vec<Account> = (0..10)
            .map(|_| {
                let a = budget.open();
                a.authenticated();
                a.set(4 * MIB - 1);
                a
            })
            .collect();
        assert!(budget.total() <= 10 * MIB, "{}", budget.total());
        let closed = hostile.iter().filter(|a| a.closed.is_cancelled()).count();
        assert_eq!(closed, 8, "two 4 MiB frames and the 1 MiB one fit");
        assert!(!honest.closed.is_cancelled());
        // A frame done gives its bytes back.
        honest.set(0);
        assert_eq!(budget.total(), 2 * (4 * MIB - 1));
        drop(hostile);
        assert_eq!(budget.total(), 0);
    }

    #[test]
    fn unauthenticated_holders_go_first() {
        let budget = PeerBytes::new(MIB);
        let relay = budget.open();
        relay.authenticated();
        relay.set(600 << 10);
        let stranger = budget.open();
        stranger.set(64 << 10);
        let late = budget.open();
        late.authenticated();
        late.set(400 << 10); // over by 64 KiB: the stranger goes, though smallest
        assert!(stranger.closed.is_cancelled());
        assert!(!relay.closed.is_cancelled() && !late.closed.is_cancelled());
        assert_eq!(budget.total(), 1000 << 10);
    }
}
