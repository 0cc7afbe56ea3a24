//! Which shard run positions each commit covers.

use std::collections::VecDeque;

/// Commits requested and not yet durable, each with the run position of
/// every shard it covers. Bounded by the commits in flight (the writer
/// requests one per commit tick and they finish in order).
#[derive(Debug, Default)]
pub struct DurablePositions {
    /// (commit ticket, per shard the last run written before it).
    waiting: VecDeque<(u64, Vec<Option<u64>>)>,
    /// Per shard, the last position reported durable.
    reported: Vec<Option<u64>>,
}

impl DurablePositions {
    pub fn new(shards: usize) -> Self {
        Self {
            waiting: VecDeque::new(),
            reported: vec![None; shards.max(1)],
        }
    }

    /// A commit `ticket` was requested covering `positions` (from
    /// [`super::ShardMerge::written_positions`]). Tickets rise.
    pub fn requested(&mut self, ticket: u64, positions: Vec<Option<u64>>) {
        self.waiting.push_back((ticket, positions));
    }

    /// Every commit through `ticket` is durable: per shard whose position
    /// moved, (shard, position): the shard may acknowledge everything of
    /// its runs through that position.
    #[must_use = "the positions to tell the shards"]
    pub fn durable_through(&mut self, ticket: u64) -> Vec<(usize, u64)> {
        let mut newest: Option<Vec<Option<u64>>> = None;
        while self.waiting.front().is_some_and(|(t, _)| *t <= ticket) {
            newest = self.waiting.pop_front().map(|(_, p)| p);
        }
        let Some(positions) = newest else {
            return Vec::new();
        };
        let mut moved = Vec::new();
        for (shard, position) in positions.into_iter().enumerate() {
            let Some(position) = position else { continue };
            let Some(reported) = self.reported.get_mut(shard) else {
                continue;
            };
            if reported.is_none_or(|r| r < position) {
                *reported = Some(position);
                moved.push((shard, position));
            }
        }
        moved
    }

    /// Commits requested and not durable yet.
    pub fn in_flight(&self) -> usize {
        self.waiting.len()
    }
}
