//! The writer's k-way merge of the shards' ordered runs.

use std::collections::VecDeque;

use crate::live::OutPacket;

/// What the merge needs of a packet.
pub trait Timed {
    /// Output time (host BOOTTIME, ns).
    fn ts(&self) -> i64;
    /// Memory it holds, for the queue bound: its bytes and its own size.
    fn size(&self) -> u64;
}

impl Timed for OutPacket {
    #[inline]
    fn ts(&self) -> i64 {
        self.ts
    }

    /// With small packets the entry is larger than the bytes: counting
    /// only the bytes let the merge hold several times its bound.
    #[inline]
    fn size(&self) -> u64 {
        (self.bytes.len() + std::mem::size_of::<OutPacket>()) as u64
    }
}

/// What a shard hands the writer after a drain.
#[derive(Debug)]
pub struct Run<P> {
    /// In the shard's output order.
    pub packets: Vec<P>,
    /// The shard's watermark at the drain that handed these out: packets
    /// dated after it were forced out (dated in the future, or its queue
    /// full) and go at once.
    pub watermark: i64,
    /// The shard drained everything through `watermark`: it hands out no
    /// more packets dated at or before it but late ones, so the merge may
    /// write up to it. False when a drain stopped at its size bound.
    pub complete: bool,
    /// The shard's own count of runs, rising: reported back once durable.
    pub position: u64,
}

/// The merge's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeStats {
    pub packets: u64,
    /// Older than a packet of another shard written before them.
    pub late_packets: u64,
    /// Written before the watermarks passed them because the queue was full.
    pub forced_by_queue_limit: u64,
}

#[derive(Debug)]
struct QueuedRun<P> {
    packets: std::vec::IntoIter<P>,
    watermark: i64,
    position: u64,
}

#[derive(Debug)]
struct ShardQueue<P> {
    runs: VecDeque<QueuedRun<P>>,
    /// Highest watermark of a complete run (watermarks never go back).
    watermark: i64,
    /// Position of the last run fully handed out.
    written: Option<u64>,
}

impl<P> ShardQueue<P> {
    /// Drops finished runs from the front, noting their positions.
    fn settle(&mut self) {
        while let Some(front) = self.runs.front() {
            if front.packets.as_slice().is_empty() {
                self.written = Some(front.position);
                self.runs.pop_front();
            } else {
                break;
            }
        }
    }

    fn head(&self) -> Option<(&P, i64)> {
        let run = self.runs.front()?;
        run.packets.as_slice().first().map(|p| (p, run.watermark))
    }
}

/// Merges the shards' runs into one output (see the module docs of
/// [`crate::shard`]).
#[derive(Debug)]
pub struct ShardMerge<P> {
    shards: Vec<ShardQueue<P>>,
    /// Latest time written in order.
    written_ts: i64,
    queued_bytes: u64,
    queue_max_bytes: u64,
    stats: MergeStats,
}

impl<P: Timed> ShardMerge<P> {
    /// `shards` >= 1; past `queue_max_bytes` queued the lowest packet is
    /// written whatever the watermarks.
    pub fn new(shards: usize, queue_max_bytes: u64) -> Self {
        Self {
            shards: (0..shards.max(1))
                .map(|_| ShardQueue {
                    runs: VecDeque::new(),
                    watermark: i64::MIN,
                    written: None,
                })
                .collect(),
            written_ts: i64::MIN,
            queued_bytes: 0,
            queue_max_bytes,
            stats: MergeStats::default(),
        }
    }

    /// Queues a shard's run. A shard out of range is ignored (false).
    pub fn push(&mut self, shard: usize, run: Run<P>) -> bool {
        let Some(queue) = self.shards.get_mut(shard) else {
            return false;
        };
        self.queued_bytes += run.packets.iter().map(Timed::size).sum::<u64>();
        if run.complete {
            queue.watermark = queue.watermark.max(run.watermark);
        }
        queue.runs.push_back(QueuedRun {
            packets: run.packets.into_iter(),
            watermark: run.watermark,
            position: run.position,
        });
        queue.settle();
        true
    }

    /// The lowest shard watermark: what may be written in order. A shard
    /// with no relays still sends (empty) runs as its watermark follows
    /// host now minus the merge window.
    pub fn watermark(&self) -> i64 {
        let watermarks = self.shards.iter().map(|q| q.watermark);
        watermarks.min().unwrap_or(i64::MIN)
    }

    /// Appends to `out` every packet that may be written now, in output
    /// order: each shard's packets in its own order; across shards by time
    /// up to the lowest watermark; a packet its shard forced out past its
    /// run's watermark at once (it does not move the time written).
    pub fn drain(&mut self, out: &mut Vec<P>) {
        let low = self.watermark();
        while let Some(shard) = self.next_shard(low) {
            self.take(shard, out);
        }
        while self.queued_bytes > self.queue_max_bytes {
            let Some(shard) = self.lowest_head() else {
                break;
            };
            self.stats.forced_by_queue_limit += 1;
            self.take(shard, out);
        }
    }

    /// Appends everything queued, by the same order (shutdown).
    pub fn flush_all(&mut self, out: &mut Vec<P>) {
        while let Some(shard) = self.next_shard(i64::MAX) {
            self.take(shard, out);
        }
    }

    /// The shard whose head goes next: the lowest head time among those
    /// that may go (at or below `low`, or forced past their watermark).
    fn next_shard(&self, low: i64) -> Option<usize> {
        let mut best: Option<(usize, i64)> = None;
        for (k, queue) in self.shards.iter().enumerate() {
            let Some((packet, run_watermark)) = queue.head() else {
                continue;
            };
            let ts = packet.ts();
            // A forced packet goes at once: it does not wait for the others.
            let key = if ts > run_watermark { i64::MIN } else { ts };
            if (ts <= low || ts > run_watermark) && best.is_none_or(|(_, b)| key < b) {
                best = Some((k, key));
            }
        }
        best.map(|(k, _)| k)
    }

    fn lowest_head(&self) -> Option<usize> {
        let heads = self.shards.iter().enumerate();
        heads
            .filter_map(|(k, q)| q.head().map(|(p, _)| (k, p.ts())))
            .min_by_key(|&(_, ts)| ts)
            .map(|(k, _)| k)
    }

    fn take(&mut self, shard: usize, out: &mut Vec<P>) {
        let Some(queue) = self.shards.get_mut(shard) else {
            return;
        };
        let Some(run) = queue.runs.front_mut() else {
            return;
        };
        let watermark = run.watermark;
        let Some(packet) = run.packets.next() else {
            return;
        };
        queue.settle();
        let ts = packet.ts();
        self.queued_bytes = self.queued_bytes.saturating_sub(packet.size());
        self.stats.packets += 1;
        if ts < self.written_ts {
            self.stats.late_packets += 1;
        } else if ts <= watermark {
            self.written_ts = ts;
        }
        out.push(packet);
    }

    /// Per shard, the position of the last run fully handed out (take it
    /// when requesting a commit of everything handed out so far).
    pub fn written_positions(&self) -> Vec<Option<u64>> {
        self.shards.iter().map(|q| q.written).collect()
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Packets queued, all shards.
    pub fn queued(&self) -> usize {
        let runs = self.shards.iter().flat_map(|q| q.runs.iter());
        runs.map(|r| r.packets.len()).sum()
    }

    pub fn stats(&self) -> MergeStats {
        self.stats
    }
}
