//! Control clients that have connected but not yet sent their request line.
//! Invariant: at most [`MAX_WAITING`] of them at once; one more closes the
//! oldest of them (counted as `tracesync_control_idle_closed_total`). A
//! client sends its request right after connecting (the CLI does), so only
//! clients that hold a connection without asking anything are closed, and
//! `tracesync status` is answered however many of them there are.

use std::sync::Arc;

use crate::waiting_room::{self, WaitingRoom};

/// Control clients without a request yet, at once.
pub const MAX_WAITING: usize = 64;

/// A waiting client's place; dropped once its request is read.
pub type Place = waiting_room::Place<()>;

#[derive(Debug)]
pub struct Waiting {
    limit: usize,
    room: Arc<WaitingRoom<()>>,
}

impl Waiting {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: limit.max(1),
            room: WaitingRoom::new(),
        })
    }

    /// A new client's place; at the limit the oldest waiting client is
    /// closed first (its [`Place::closed`] completes).
    pub fn admit(&self) -> Place {
        let limit = self.limit;
        let (place, ()) = self.room.admit((), |room| {
            while room.len() >= limit {
                let Some(oldest) = room.oldest() else {
                    break;
                };
                room.close(oldest);
                crate::metrics::Event::ControlIdleClosed.record();
            }
        });
        place
    }

    pub fn len(&self) -> usize {
        self.room.len()
    }

    pub fn is_empty(&self) -> bool {
        self.room.is_empty()
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
        assert!(a.is_closed());
        assert!(!b.is_closed() && !c.is_closed());
        assert_eq!(waiting.len(), 2);
        drop(b); // its request arrived
        let _d = waiting.admit();
        assert!(!c.is_closed());
    }
}
