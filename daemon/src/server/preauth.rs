//! Connections not authenticated yet: the TLS handshake or the Hello is in
//! progress. They cost the daemon little (a 64 KiB Hello frame limit, TLS
//! buffers) and hold no `max-relays` slot, but there are at most
//! [`MAX_UNAUTHENTICATED`] of them: one more closes the oldest (counted as
//! `unauthenticated_limit`). Closing the oldest rather than refusing the
//! newest means a flood of idle connections cannot keep a relay out: a
//! relay's connection is only closed if more than the limit of newer ones
//! arrive during its own handshake. Each must finish within the hello
//! timeout (handshake and Hello together).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Connections in TLS handshake or Hello at once.
pub const MAX_UNAUTHENTICATED: usize = 128;

/// At most one warning per this long about connections closed at the limit.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The connections waiting for authentication, oldest first.
#[derive(Debug)]
pub struct Unauthenticated {
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    waiting: BTreeMap<u64, CancellationToken>,
    /// Closed at the limit since the last warning.
    unreported: u64,
    last_warning: Option<Instant>,
}

impl Unauthenticated {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: limit.max(1),
            inner: Mutex::default(),
        })
    }

    /// Registers a new connection. At the limit the oldest waiting one is
    /// closed first (its [`Ticket::evicted`] completes); returns whether
    /// one was.
    pub fn admit(self: &Arc<Self>) -> (Ticket, bool) {
        let mut inner = self.lock();
        let mut evicted = false;
        while inner.waiting.len() >= self.limit {
            let Some((_, oldest)) = inner.waiting.pop_first() else {
                break;
            };
            oldest.cancel();
            evicted = true;
        }
        if evicted {
            inner.unreported += 1;
            let now = Instant::now();
            if inner.last_warning.is_none_or(|t| now >= t + WARN_EVERY) {
                warn!(
                    "{} connection(s) closed before authentication: more than {} connections \
                     were in TLS handshake or Hello at once (a flood of idle connections?); \
                     the oldest go first",
                    inner.unreported, self.limit
                );
                inner.unreported = 0;
                inner.last_warning = Some(now);
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let token = CancellationToken::new();
        inner.waiting.insert(id, token.clone());
        drop(inner);
        let ticket = Ticket {
            id,
            registry: Arc::clone(self),
            evicted: token,
        };
        (ticket, evicted)
    }

    /// Connections waiting now.
    pub fn len(&self) -> usize {
        self.lock().waiting.len()
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

/// One connection's place among the unauthenticated; dropping it (once
/// the Hello is accepted, or the connection ends) frees the place.
#[derive(Debug)]
pub struct Ticket {
    id: u64,
    registry: Arc<Unauthenticated>,
    evicted: CancellationToken,
}

impl Ticket {
    /// Completes when the connection was closed to make room for a newer one.
    pub async fn evicted(&self) {
        self.evicted.cancelled().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.registry.lock().waiting.remove(&self.id);
    }
}

/// What a connection brings to its Hello: its place among the
/// unauthenticated, the deadline of handshake and Hello together, and the
/// `max-relays` slots it takes one of once authenticated.
#[derive(Debug)]
pub struct PreAuth {
    pub ticket: Ticket,
    pub deadline: tokio::time::Instant,
    pub slots: Arc<Semaphore>,
}

impl PreAuth {
    /// A `max-relays` slot for an authenticated relay (None: all taken).
    /// Taking it ends the connection's time among the unauthenticated.
    pub fn authenticated(self) -> Option<OwnedSemaphorePermit> {
        self.slots.try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_is_closed_at_the_limit_and_a_dropped_ticket_frees_its_place() {
        let registry = Unauthenticated::new(3);
        let (a, evicted) = registry.admit();
        assert!(!evicted);
        let (b, _) = registry.admit();
        let (c, _) = registry.admit();
        assert_eq!(registry.len(), 3);
        let (d, evicted) = registry.admit();
        assert!(evicted, "one over the limit closes one");
        a.evicted().await;
        assert!(!b.evicted.is_cancelled() && !c.evicted.is_cancelled());
        assert_eq!(registry.len(), 3);
        // A connection that got authenticated (or ended) leaves room.
        drop(c);
        assert_eq!(registry.len(), 2);
        let (_e, evicted) = registry.admit();
        assert!(!evicted);
        assert!(!b.evicted.is_cancelled() && !d.evicted.is_cancelled());
        drop(a);
        assert_eq!(registry.len(), 3, "the evicted one was already gone");
        drop((b, d));
        assert_eq!(registry.len(), 1);
    }

    #[tokio::test]
    async fn a_slot_is_taken_only_when_authenticated() {
        let slots = Arc::new(Semaphore::new(1));
        let registry = Unauthenticated::new(8);
        let pre = |registry: &Arc<Unauthenticated>| PreAuth {
            ticket: registry.admit().0,
            deadline: tokio::time::Instant::now(),
            slots: slots.clone(),
        };
        let (first, second) = (pre(&registry), pre(&registry));
        assert_eq!(
            slots.available_permits(),
            1,
            "no slot before authentication"
        );
        let permit = first.authenticated().expect("a free slot");
        assert_eq!(registry.len(), 1, "authenticated: no longer waiting");
        assert!(second.authenticated().is_none(), "max-relays reached");
        assert!(registry.is_empty());
        drop(permit);
        assert!(pre(&registry).authenticated().is_some());
    }
}
