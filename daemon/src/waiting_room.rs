//! A waiting room: peers admitted before they are served (a control client
//! before its request line, a connection before its Hello), each holding a
//! [`Place`] that can close it to make room for a newer one.
//!
//! Invariants: an occupant is in the room from [`WaitingRoom::admit`] until
//! its place is dropped or it is closed to make room, whichever is first;
//! a closed occupant leaves the room at once and its place's
//! [`Place::closed`] completes. Admission and eviction are one step under
//! the room's lock: the caller's policy sees the room as it is and closes
//! whom it chooses before the newcomer is counted, so the room never holds
//! more than the policy allows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

/// See the module docs. `T` is what a policy knows of each occupant.
#[derive(Debug)]
pub struct WaitingRoom<T> {
    room: Mutex<Room<T>>,
}

/// The occupants, as a policy sees them under the lock.
#[derive(Debug)]
pub struct Room<T> {
    next_id: u64,
    /// By admission order (oldest first).
    occupants: BTreeMap<u64, Occupant<T>>,
}

#[derive(Debug)]
struct Occupant<T> {
    what: T,
    closed: CancellationToken,
}

impl<T> Room<T> {
    pub fn len(&self) -> usize {
        self.occupants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.occupants.is_empty()
    }

    /// Occupants, oldest first, with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.occupants.iter().map(|(id, o)| (*id, &o.what))
    }

    /// The oldest occupant's id.
    pub fn oldest(&self) -> Option<u64> {
        self.occupants.keys().next().copied()
    }

    /// Closes occupant `id` to make room: it leaves the room and its place's
    /// [`Place::closed`] completes. False when it had left already.
    pub fn close(&mut self, id: u64) -> bool {
        match self.occupants.remove(&id) {
            Some(o) => {
                o.closed.cancel();
                true
            }
            None => false,
        }
    }
}

impl<T> WaitingRoom<T> {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            room: Mutex::new(Room {
                next_id: 0,
                occupants: BTreeMap::new(),
            }),
        })
    }

    /// Admits `what` once `make_room` (the policy, run under the lock) has
    /// closed whom it chose; returns the newcomer's place and what the
    /// policy returned.
    pub fn admit<R>(
        self: &Arc<Self>,
        what: T,
        make_room: impl FnOnce(&mut Room<T>) -> R,
    ) -> (Place<T>, R) {
        let mut room = self.lock();
        let made = make_room(&mut room);
        let id = room.next_id;
        room.next_id += 1;
        let closed = CancellationToken::new();
        room.occupants.insert(
            id,
            Occupant {
                what,
                closed: closed.clone(),
            },
        );
        let place = Place {
            id,
            room: Arc::clone(self),
            closed,
        };
        (place, made)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Room<T>> {
        self.room.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One occupant's place; dropping it (once served, or gone) leaves the room.
#[derive(Debug)]
pub struct Place<T> {
    id: u64,
    room: Arc<WaitingRoom<T>>,
    closed: CancellationToken,
}

impl<T> Place<T> {
    /// Completes when the occupant was closed to make room for a newer one.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }
}

impl<T> Drop for Place<T> {
    fn drop(&mut self) {
        self.room.lock().occupants.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_leaves_when_dropped_or_closed_and_ids_follow_admission() {
        let room = WaitingRoom::new();
        let (a, ()) = room.admit('a', |_| ());
        let (b, oldest) = room.admit('b', |r| r.oldest());
        assert_eq!(oldest, Some(0));
        let (c, closed) = room.admit('c', |r| r.close(0));
        assert!(closed && a.is_closed() && !b.is_closed() && !c.is_closed());
        assert_eq!(room.len(), 2);
        let seen: Vec<char> = room.lock().iter().map(|(_, w)| *w).collect();
        assert_eq!(seen, ['b', 'c']);
        drop(a);
        assert_eq!(room.len(), 2, "a closed place had left already");
        drop(b);
        assert_eq!(room.len(), 1);
        assert!(!room.lock().close(1), "b left when dropped");
        drop(c);
        assert!(room.is_empty());
    }
}
