//! Connections not authenticated yet: the TLS handshake or the Hello is in
//! progress. They hold no `max-relays` slot and each must finish within
//! the hello timeout (handshake and Hello together), but a flood of them
//! must not starve the handshakes of relays. Invariants:
//!
//! - At most [`MAX_UNAUTHENTICATED`] wait at once, and at most
//!   [`MAX_UNAUTHENTICATED_PER_SOURCE`] from one source (an IPv4 address, an
//!   IPv6 /64: what one host can hold without effort).
//! - A new connection is always admitted. When its source is at its limit,
//!   one of that source's own connections is closed
//!   (`unauthenticated_per_source`); when the whole table is full, one of
//!   the heaviest source's (`unauthenticated_limit`). A flood from one
//!   source therefore never closes another source's handshakes.
//! - The one closed is the one that has made the least progress (bytes
//!   read from its socket), the oldest among equals: a connection that has
//!   sent nothing since it was accepted goes before any handshake under way,
//!   and a relay's new connection lives as long as the limit divided by the
//!   flood's rate (128 ms at 1,000 connections/s from its own address)
//!   before its first bytes protect it.
//!
//! Closing rather than refusing the newest: a table of idle connections
//! held open would otherwise keep every relay out until they time out.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::warn;

use crate::waiting_room::{Place, Room, WaitingRoom};

/// Connections in TLS handshake or Hello at once.
pub const MAX_UNAUTHENTICATED: usize = 256;

/// Connections in TLS handshake or Hello at once from one source.
pub const MAX_UNAUTHENTICATED_PER_SOURCE: usize = 128;

/// At most one warning per this long about connections closed at a limit.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Where connections come from, for the per-source limit: an IPv4 address
/// (an IPv4-mapped IPv6 address counts as its IPv4 address), or an IPv6
/// /64 (one host can pick any address within its /64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source(IpAddr);

impl Source {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Source(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Source(IpAddr::V6(Ipv6Addr::from(prefix)))
                }
            },
        }
    }
}

/// Which limit closed a connection to admit a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// The table was full: one of the heaviest source's was closed.
    Limit,
    /// The new connection's source was at its own limit: one of its own.
    PerSource,
}

impl Eviction {
    fn as_str(self) -> &'static str {
        match self {
            Eviction::Limit => "all sources",
            Eviction::PerSource => "one source",
        }
    }
}

/// The connections waiting for authentication.
#[derive(Debug)]
pub struct Unauthenticated {
    limit: usize,
    per_source: usize,
    room: Arc<WaitingRoom<Pending>>,
    warnings: Mutex<Warnings>,
}

/// What the policy knows of a waiting connection.
#[derive(Debug)]
pub struct Pending {
    source: Source,
    /// Bytes read from the connection's socket so far.
    progress: Arc<AtomicU64>,
}

/// Connections closed at a limit, said at most once per [`WARN_EVERY`].
#[derive(Debug, Default)]
struct Warnings {
    /// Closed at a limit since the last warning.
    unreported: u64,
    last: Option<Instant>,
}

/// The connection of `source` to close: least progress, then oldest.
fn victim(room: &Room<Pending>, source: Source) -> Option<u64> {
    room.iter()
        .filter(|(_, p)| p.source == source)
        .min_by_key(|(id, p)| (p.progress.load(Ordering::Relaxed), *id))
        .map(|(id, _)| id)
}

/// Waiting connections per source (at most the room's limit of them).
fn per_source(room: &Room<Pending>) -> HashMap<Source, usize> {
    let mut counts = HashMap::new();
    for (_, p) in room.iter() {
        *counts.entry(p.source).or_default() += 1;
    }
    counts
}

impl Unauthenticated {
    pub fn new(limit: usize, per_source: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: limit.max(1),
            per_source: per_source.clamp(1, limit.max(1)),
            room: WaitingRoom::new(),
            warnings: Mutex::default(),
        })
    }

    /// Registers a new connection from `peer`, closing one waiting
    /// connection first if a limit is reached (see the module doc); returns
    /// which limit closed one, if any.
    pub fn admit(&self, peer: IpAddr) -> (Ticket, Option<Eviction>) {
        let source = Source::of(peer);
        let progress = Arc::new(AtomicU64::new(0));
        let pending = Pending {
            source,
            progress: progress.clone(),
        };
        let (place, evicted) = self.room.admit(pending, |room| {
            let counts = per_source(room);
            let (victim_source, why) =
                if counts.get(&source).copied().unwrap_or(0) >= self.per_source {
                    (Some(source), Eviction::PerSource)
                } else if room.len() >= self.limit {
                    let heaviest = counts.iter().max_by_key(|(_, n)| **n).map(|(s, _)| *s);
                    (heaviest, Eviction::Limit)
                } else {
                    (None, Eviction::Limit)
                };
            let id = victim_source.and_then(|s| victim(room, s))?;
            room.close(id).then_some(why)
        });
        if let Some(why) = evicted {
            self.warn(why);
        }
        (Ticket { place, progress }, evicted)
    }

    fn warn(&self, why: Eviction) {
        let mut w = self
            .warnings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        w.unreported += 1;
        let now = Instant::now();
        if w.last.is_none_or(|t| now >= t + WARN_EVERY) {
            warn!(
                "{} connection(s) closed before authentication: more than {} (all sources) or \
                 {} (one source) connections were in TLS handshake or Hello at once, last at \
                 the limit of {} (a flood of idle connections?); those that sent the least go \
                 first",
                w.unreported,
                self.limit,
                self.per_source,
                why.as_str()
            );
            w.unreported = 0;
            w.last = Some(now);
        }
    }

    /// Connections waiting now.
    pub fn len(&self) -> usize {
        self.room.len()
    }

    pub fn is_empty(&self) -> bool {
        self.room.is_empty()
    }
}

/// One connection's place among the unauthenticated; dropping it (once
/// the Hello is accepted, or the connection ends) frees the place.
#[derive(Debug)]
pub struct Ticket {
    place: Place<Pending>,
    progress: Arc<AtomicU64>,
}

impl Ticket {
    /// Completes when the connection was closed to make room for a newer one.
    pub async fn evicted(&self) {
        self.place.closed().await;
    }

    /// Where the connection's socket reports the bytes read from it
    /// ([`crate::tls::Metered::reporting`]): its progress.
    pub fn progress(&self) -> Arc<AtomicU64> {
        self.progress.clone()
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

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn closed(t: &Ticket) -> bool {
        t.place.is_closed()
    }

    #[tokio::test]
    async fn the_oldest_idle_is_closed_at_the_limit_and_a_dropped_ticket_frees_its_place() {
        let registry = Unauthenticated::new(3, 3);
        let (a, evicted) = registry.admit(A);
        assert!(evicted.is_none());
        let (b, _) = registry.admit(A);
        let (c, _) = registry.admit(A);
        assert_eq!(registry.len(), 3);
        let (d, evicted) = registry.admit(A);
        assert_eq!(
            evicted,
            Some(Eviction::PerSource),
            "one over the limit closes one"
        );
        a.evicted().await;
        assert!(!closed(&b) && !closed(&c));
        assert_eq!(registry.len(), 3);
        // A connection that got authenticated (or ended) leaves room.
        drop(c);
        assert_eq!(registry.len(), 2);
        let (_e, evicted) = registry.admit(A);
        assert!(evicted.is_none());
        assert!(!closed(&b) && !closed(&d));
        drop(a);
        assert_eq!(registry.len(), 3, "the evicted one was already gone");
        drop((b, d));
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn a_handshake_under_way_outlives_idle_connections_however_old() {
        let registry = Unauthenticated::new(4, 4);
        let (relay, _) = registry.admit(A);
        relay.progress().store(517, Ordering::Relaxed); // its ClientHello
        let idle: Vec<_> = (0..100).map(|_| registry.admit(A).0).collect();
        assert!(!closed(&relay), "bytes read protect it");
        assert_eq!(idle.iter().filter(|t| !closed(t)).count(), 3);
        // Among connections that sent something, the one that sent least goes.
        let (more, _) = registry.admit(A);
        more.progress().store(2_000, Ordering::Relaxed);
        for t in &idle {
            t.progress().store(1, Ordering::Relaxed);
        }
        let (_newest, _) = registry.admit(A);
        let (_newest2, _) = registry.admit(A);
        assert!(!closed(&relay) && !closed(&more));
    }

    #[test]
    fn a_flood_from_one_source_never_closes_another_sources_connections() {
        let registry = Unauthenticated::new(8, 6);
        let (relay, _) = registry.admit(B);
        let mut evictions = Vec::new();
        let flood: Vec<_> = (0..1_000)
            .map(|_| {
                let (t, why) = registry.admit(A);
                evictions.extend(why);
                t
            })
            .collect();
        assert!(!closed(&relay), "B's connection stays");
        assert_eq!(flood.iter().filter(|t| !closed(t)).count(), 6);
        assert!(evictions.iter().all(|&e| e == Eviction::PerSource));
        // A full table closes one of the heaviest source's, not B's.
        let others: Vec<_> = (0..1).map(|_| registry.admit(B).0).collect();
        assert_eq!(registry.len(), 8);
        let (_c, why) = registry.admit(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 3)));
        assert_eq!(why, Some(Eviction::Limit));
        assert!(!closed(&relay) && others.iter().all(|t| !closed(t)));
        assert_eq!(flood.iter().filter(|t| !closed(t)).count(), 5);
    }

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_64s() {
        let v6 = |s: &str| Source::of(s.parse().expect("address"));
        assert_eq!(v6("2001:db8:1:2::1"), v6("2001:db8:1:2:ffff::9"));
        assert_ne!(v6("2001:db8:1:2::1"), v6("2001:db8:1:3::1"));
        assert_eq!(v6("::ffff:10.0.0.1"), Source::of(A));
        assert_ne!(Source::of(A), Source::of(B));
    }

    #[tokio::test]
    async fn a_slot_is_taken_only_when_authenticated() {
        let slots = Arc::new(Semaphore::new(1));
        let registry = Unauthenticated::new(8, 8);
        let pre = |registry: &Arc<Unauthenticated>| PreAuth {
            ticket: registry.admit(A).0,
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
