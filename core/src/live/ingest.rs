//! Batches in: de-duplication, scan, clock resolution, the pending queue.
//!
//! A resolved data packet is stamped without a copy where it can be: a
//! slice of its relay's frame up to the sequence id the daemon replaces,
//! with the few bytes after that and the stamped fields inline after it
//! ([`Stamped`]); the writer's framing is its only copy. The other packets
//! (fields to cut inside the packet, SystemInfo, the roles kept for file
//! preambles) are stamped into one buffer per batch (one allocation for the
//! whole batch instead of one per packet). All are queued for the
//! watermark when the batch is done (`staging.rs`).
//!
//! Memory: a queued slice keeps its whole frame alive, while the ordering
//! queue counts only the packet's stamped length. So a frame's packets are
//! queued as slices only if they use nearly all of it (`SLACK_DIVISOR` in
//! `staging.rs`); otherwise they are copied into the staging buffer after
//! all, and the frame is freed with the batch.

use std::collections::{HashSet, VecDeque};
use std::ops::Range;

use bytes::Bytes;
use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::relay::v1::RelayClocks as WireClocks;
use tracesync_protocol::scan::{PacketFields, StampSuffix, scan_packet, scan_packet_into};
use tracesync_protocol::wire;

use super::acks::BatchSeq;
use super::hold::{CLOCK_AHEAD_SLACK_NS, Verdict};
use super::machines::Machines;
use super::machines::reason;
use super::output::Output;
use super::packet::{Role, Stamped};
use super::pending::{Meta, PendingPacket};
use super::queued::{Parts, Queued, Relayed};
use super::relay::{Relay, Resolution, Resolved};
use super::relays::Relays;
use super::staging::IngestScratch;
use super::staging::Staged;
use super::stamp::{relayed_split, relayed_stamp, stamp_relayed};
use super::streams::Stream;
use super::streams::Streams;
use super::types::LiveConfig;
use super::types::{RelaySlot, SessionError};

/// Most bytes stamping adds to a packet (the fields it appends).
const STAMP_GROWTH: usize = 20;

/// Where a staged packet's stamped bytes are: a slice of its frame (the
/// kept prefix's length and the bytes moved after it; its stream's suffix
/// follows), or a range of the staging buffer.
enum Placed<'p> {
    Slice(usize, [&'p [u8]; 2]),
    Buffer(Range<usize>),
}

/// A relay's Batch frame as the core takes it.
#[derive(Debug)]
pub(super) struct BatchIn {
    pub seq: u64,
    /// Index of the first packet on its relay's stream of packets.
    pub first_index: u64,
    pub packets: Vec<Bytes>,
    pub clocks: Option<WireClocks>,
}

/// What ingest works on: the core's sub-states, borrowed for one call of
/// [`LiveCore::batch`] or a retry of pending packets.
pub(super) struct Ingest<'c> {
    pub config: &'c LiveConfig,
    pub machines: &'c mut Machines,
    pub relays: &'c mut Relays,
    pub streams: &'c mut Streams,
    pub output: &'c mut Output,
    pub scratch: &'c mut IngestScratch,
    /// The latest host BOOTTIME the core was given: how old a pending
    /// packet is.
    pub latest_now: u64,
}

impl Ingest<'_> {
    /// Relay `instance`'s Batch on `slot` (see [`LiveCore::batch`](super::LiveCore::batch));
    /// `reading` is the stall grace's clock at `now`.
    pub(super) fn batch(
        &mut self,
        (slot, instance): (RelaySlot, u64),
        batch: BatchIn,
        now: u64,
        reading: u64,
    ) -> Result<(), SessionError> {
        let BatchIn {
            seq,
            first_index,
            packets,
            clocks,
        } = batch;
        let limit = self.config.max_unacked_batches;
        let Some(relay) = self.relays.get_mut(instance) else {
            return Err(SessionError::UnknownSlot(slot));
        };
        if relay.unacked() >= limit {
            return Err(SessionError::TooManyUnackedBatches {
                slot,
                unacked: relay.unacked(),
                limit,
            });
        }
        let raw_id = relay.raw_id();
        if relay.saw_clocks(clocks, now, reading, self.config.stall_after_ns()) == Verdict::Refused
        {
            self.machines.count(raw_id, reason::CLOCKS_REFUSED, 1);
        }
        let fallback_boottime = relay.latest_boottime();
        if let BatchSeq::New { lost } = relay.accept_batch(seq)
            && lost > 0
        {
            self.machines.count(raw_id, reason::BATCHES_LOST, lost);
        }
        // Every packet of the batch is taken, once; packet() gives back
        // those it does not take.
        relay.packets_taken(seq, packets.len());
        self.machines.seen(raw_id, now);
        let mut staged = self.scratch.take_staged();
        // The frame's length, but for the batch's few other fields.
        let frame_len: usize = packets
            .iter()
            .map(|p| 1 + wire::varint_len(p.len() as u64) + p.len())
            .sum();
        let mut clocks_changed = false;
        staged.expect(packets.iter().map(|p| p.len() + STAMP_GROWTH).sum());
        self.output.packets_in(packets.len() as u64);
        // The relay is looked up once for the batch, not per packet.
        let mut taking = Taking {
            config: self.config,
            machines: self.machines,
            streams: self.streams,
            scratch: self.scratch,
            relay,
        };
        for (k, bytes) in (0u64..).zip(packets) {
            // Indices past u64::MAX come only from a broken relay: wrap, no panic.
            let index = first_index.wrapping_add(k);
            let meta = Meta {
                key: (instance, 0),
                index,
                batch: seq,
                clock: BOOTTIME,
                stamp_clock: false,
                fallback_boottime,
                arrival: now,
            };
            let len = bytes.len();
            clocks_changed |= taking.packet(meta, bytes, raw_id, &mut staged);
            staged.took(len + STAMP_GROWTH);
        }
        staged.expect(0);
        self.queue_staged(&mut staged, Some(frame_len));
        self.scratch.put_staged(staged);
        if clocks_changed {
            self.retry_pending(instance);
        }
        if self.scratch.take_sequence_limit_hit() {
            return Err(SessionError::TooManySequences {
                slot,
                limit: self.config.max_sequences_per_relay,
            });
        }
        Ok(())
    }

    /// Counts a dropped packet and lets its batch be acknowledged.
    fn dropped(&mut self, m: &Meta, why: &'static str) {
        if let Some(relay) = self.relays.get_mut(m.key.0) {
            relay.packet_done(m.batch);
            self.machines.count(relay.raw_id(), why, 1);
        }
    }

    /// Stamps a resolved packet of `stream`: a data packet as a slice of
    /// `bytes` where it can be, any other into the staging buffer. Err: it
    /// could not be stamped (count it dropped).
    fn stage(
        stream: &mut Stream,
        machines: &Machines,
        m: &Meta,
        bytes: &Bytes,
        fields: &PacketFields<'_>,
        resolved: Resolved,
        staged: &mut Staged,
    ) -> Result<(), ()> {
        let Resolved {
            ts,
            boottime,
            bound_ns,
        } = resolved;
        let raw_id = stream.raw_id();
        let out_seq = stream.out_seq();
        let has_ts = fields.timestamp.is_some();
        let stamp_clock = (has_ts && m.stamp_clock).then_some(m.clock);
        let role = Role::of(fields);
        // Only data packets: the others are kept for preambles long after
        // their frame is written and must not pin it.
        let stamp = relayed_stamp(raw_id, out_seq, stamp_clock);
        let has_clock_id = fields.stamp_layout.has_clock_id;
        // The suffix is the stream's, read where it is (a copy read back at
        // once stalled): here for its length, below to set the packet.
        let split = (role == Role::Data)
            .then(|| relayed_split(bytes, fields, &stamp))
            .flatten()
            .filter(|(_, moved)| Stamped::tail_fits(*moved, stream.suffix(&stamp, has_clock_id)));
        let placed = match split {
            Some((kept, moved)) => Placed::Slice(kept, moved),
            None => {
                // A data packet that is no slice: the rest of its batch,
                // written alike, likely is none either.
                let data_room = (role == Role::Data).then_some(bytes.len() + STAMP_GROWTH);
                let name = machines.name(raw_id);
                let stamped = staged.stamp(data_room, |buf| {
                    stamp_relayed(
                        bytes,
                        fields,
                        raw_id,
                        out_seq,
                        stamp_clock,
                        name.as_deref(),
                        buf,
                    )
                });
                Placed::Buffer(stamped.map_err(|_| ())?)
            }
        };
        stream.set_last(ts, boottime);
        let queued = Queued::pack(Parts {
            stream: stream.id(),
            ts,
            // The bound of the estimate the packet was mapped with (its
            // epoch's), from its resolution.
            err_ns: bound_ns,
            clock: if has_ts { m.clock } else { 0 },
            clock_ts: fields.timestamp.unwrap_or(0),
            machine_raw_id: raw_id,
            seq: out_seq,
            data_field: fields.data_field,
            role,
            // Set where it is staged (below).
            bytes: Stamped::default(),
            relayed: Some(Relayed {
                index: m.index,
                batch: m.batch,
            }),
            relay_boottime: boottime,
        });
        match placed {
            Placed::Slice(kept, moved) => staged.push_slice(queued, |stamped| {
                let suffix = stream.suffix(&stamp, has_clock_id);
                debug_assert_eq!(*suffix, StampSuffix::new(&stamp, has_clock_id));
                let set = stamped.set_split(bytes.slice(..kept), moved, suffix);
                debug_assert!(set, "the same suffix fitted above");
            }),
            Placed::Buffer(range) => staged.push_stamped(queued, range),
        }
        Ok(())
    }

    /// Queues the staged packets for the watermark (see
    /// [`Staged::queue`]).
    fn queue_staged(&mut self, staged: &mut Staged, frame_len: Option<usize>) {
        let output = &mut *self.output;
        // Host now plus the slack a relay clock gets, once per batch.
        let horizon = self.latest_now.saturating_add(CLOCK_AHEAD_SLACK_NS);
        staged.queue(frame_len, |mut queued| {
            // Past host now by more than its mapping's bound and the slack
            // a relay clock gets: no relay can have sent it yet, by its own
            // sync. Held apart (written at once, counted), it cannot stall
            // the others nor fill the queue for as long as it claims.
            if beyond_horizon(queued.ts, queued.err_ns, horizon) {
                queued.set_ahead();
            }
            output.push(queued);
        });
    }

    /// Resolves what can be resolved of a relay's pending packets, in
    /// order; a stream whose packet still waits keeps its later ones too.
    pub(super) fn retry_pending(&mut self, instance: u64) {
        let Some(waiting) = self
            .relays
            .get_mut(instance)
            .and_then(|relay| relay.take_pending_to_retry())
        else {
            return;
        };
        let max_age = self.config.pending_max_age_ns;
        let now = self.latest_now;
        let mut kept = VecDeque::new();
        let mut kept_bytes = 0;
        let mut blocked: HashSet<u32> = HashSet::new();
        let mut staged = self.scratch.take_staged();
        for p in waiting {
            let m = p.meta;
            if blocked.contains(&m.key.1) {
                kept_bytes += p.held();
                kept.push_back(p);
                continue;
            }
            // Scanned once already: cannot fail again.
            let Ok(fields) = scan_packet(&p.bytes) else {
                continue;
            };
            let last = self.streams.get(&m.key).and_then(Stream::last);
            let Some(relay) = self.relays.get_mut(instance) else {
                break;
            };
            let mut resolution = relay.resolve(last, fields.timestamp, &m);
            if resolution == Resolution::NoPath && now.saturating_sub(m.arrival) > max_age {
                // Synced, and still no snapshot relates its clock: give up.
                resolution = Resolution::Drop(reason::NO_PATH);
            }
            if let Resolution::NoPath | Resolution::NoSync = resolution {
                blocked.insert(m.key.1);
                kept_bytes += p.held();
                kept.push_back(p);
                continue;
            }
            let stream = self.streams.get_mut(&m.key);
            let staged_ok = match (stream, resolution) {
                (Some(stream), Resolution::Ready(resolved)) => {
                    stream.pending_removed();
                    Self::stage(
                        stream,
                        self.machines,
                        &m,
                        &p.bytes,
                        &fields,
                        resolved,
                        &mut staged,
                    )
                }
                (Some(stream), _) => {
                    stream.pending_removed();
                    Ok(())
                }
                (None, _) => Ok(()),
            };
            match resolution {
                Resolution::Ready(_) if staged_ok.is_err() => self.dropped(&m, reason::MALFORMED),
                Resolution::Ready(_) => {
                    // Queued in slices: a long pending queue is not staged
                    // (and its staging room kept) all at once.
                    if staged.is_full() {
                        self.queue_staged(&mut staged, None);
                    }
                }
                Resolution::Drop(why) => self.dropped(&m, why),
                Resolution::NoPath | Resolution::NoSync => {}
            }
        }
        self.queue_staged(&mut staged, None);
        self.scratch.put_staged(staged);
        if let Some(relay) = self.relays.get_mut(instance) {
            relay.restore_pending(kept, kept_bytes);
        }
    }
}

/// Taking the packets of one relay's batch: the relay looked up once for
/// the batch, beside the sub-states each packet needs.
struct Taking<'t> {
    config: &'t LiveConfig,
    machines: &'t mut Machines,
    streams: &'t mut Streams,
    scratch: &'t mut IngestScratch,
    relay: &'t mut Relay,
}

impl Taking<'_> {
    /// Takes one packet of a batch (counted taken with its batch: one not
    /// taken is done here); returns whether the relay's clock graph
    /// changed.
    #[inline]
    fn packet(&mut self, mut m: Meta, bytes: Bytes, raw_id: u32, staged: &mut Staged) -> bool {
        // Scanned in place: a returned value is copied once more.
        let mut fields = PacketFields::default();
        if scan_packet_into(&bytes, &mut fields).is_err() {
            self.machines.count(raw_id, reason::MALFORMED, 1);
            self.not_taken(&m);
            return false;
        }
        m.key.1 = fields.trusted_packet_sequence_id.unwrap_or(0);
        let (relay, machines) = (&mut *self.relay, &*self.machines);
        let limit = self.config.max_sequences_per_relay;
        let relay_sequence = m.key.1;
        let stream = self.streams.get_or_open(m.key, raw_id, || {
            relay
                .open_sequence(limit)
                .then(|| machines.src_label(raw_id, relay_sequence))
        });
        let Some(stream) = stream else {
            // A sequence flood must not grow the stream table: drop, and
            // the batch's caller closes the connection.
            self.machines.count(raw_id, reason::SEQUENCES_OVER_LIMIT, 1);
            self.scratch.hit_sequence_limit();
            self.not_taken(&m);
            return false;
        };
        if !stream.accept_index(m.index) {
            self.machines.count(raw_id, reason::DUPLICATE, 1);
            self.not_taken(&m);
            return false;
        }
        (m.clock, m.stamp_clock) = stream.clock_of(&fields);
        let blocked = stream.is_blocked();
        let last = stream.last();
        if fields.remote_clock_sync.is_some() {
            // Replaced by the core's own sync points, which carry the
            // estimator's mapping; the producer's would override it.
            self.machines.count(raw_id, reason::REMOTE_SYNC_REPLACED, 1);
            self.not_taken(&m);
            return false;
        }
        let relay = &mut *self.relay;
        let mut changed = false;
        if let Some(snapshot) = fields.clock_snapshot {
            let invalid;
            (changed, invalid) = relay.add_snapshot(snapshot, m.key.1);
            if invalid > 0 {
                self.machines
                    .count(raw_id, reason::INVALID_SNAPSHOT, invalid);
            }
        }
        let resolution = if blocked {
            Resolution::NoPath
        } else {
            relay.resolve(last, fields.timestamp, &m)
        };
        match resolution {
            Resolution::Ready(resolved) => {
                if Ingest::stage(stream, self.machines, &m, &bytes, &fields, resolved, staged)
                    .is_err()
                {
                    self.dropped(&m, reason::MALFORMED);
                }
            }
            Resolution::NoPath | Resolution::NoSync => {
                // A copy: the packet is a slice of its relay's whole frame,
                // which must not stay pinned by one pending packet.
                let bytes = Bytes::copy_from_slice(&bytes);
                self.push_pending(PendingPacket { meta: m, bytes });
            }
            Resolution::Drop(why) => self.dropped(&m, why),
        }
        changed
    }

    /// A packet of its batch is not taken after all (counted taken with
    /// its batch): the batch does not wait for it.
    fn not_taken(&mut self, m: &Meta) {
        self.relay.packet_done(m.batch);
    }

    /// Counts a dropped packet and lets its batch be acknowledged.
    fn dropped(&mut self, m: &Meta, why: &'static str) {
        self.relay.packet_done(m.batch);
        self.machines.count(self.relay.raw_id(), why, 1);
    }

    /// Queues a packet behind its relay's unresolvable ones. When the queue
    /// is full the oldest is dropped (see the module docs), except for a
    /// relay still waiting for its first sync estimate: its connection is
    /// held back instead ([`LiveCore::held_back`](super::LiveCore::held_back)), and only frames already
    /// on their way can overfill it, up to twice the bound.
    fn push_pending(&mut self, p: PendingPacket) {
        if let Some(stream) = self.streams.get_mut(&p.meta.key) {
            stream.pending_added();
        }
        for old in self.relay.push_pending(p, self.config) {
            if let Some(stream) = self.streams.get_mut(&old.meta.key) {
                stream.pending_removed();
            }
            self.dropped(&old.meta, reason::NO_PATH);
        }
    }
}

/// Whether `ts` is past `horizon` (host now plus the slack, saturated)
/// by more than the bound `err_ns`: `ts > now + slack + err_ns` exactly,
/// in `u64` (a time at or before 0 never is; `ts - err_ns` saturates at 0
/// where the sum would be larger than `ts` anyway).
#[inline(always)]
fn beyond_horizon(ts: i64, err_ns: u64, horizon: u64) -> bool {
    u64::try_from(ts).is_ok_and(|ts| ts.saturating_sub(err_ns) > horizon)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_horizon_is_the_exact_sum() {
        let slack = CLOCK_AHEAD_SLACK_NS;
        let edges = [
            0,
            1,
            slack - 1,
            slack,
            slack + 1,
            1 << 62,
            u64::MAX - slack,
            u64::MAX,
        ];
        let times = [i64::MIN, -1, 0, 1, 1 << 40, i64::MAX - 1, i64::MAX];
        for now in edges {
            for err in edges {
                for base in times {
                    for d in [-2i64, -1, 0, 1, 2] {
                        let ts = base.saturating_add(d);
                        let exact =
                            i128::from(ts) > i128::from(now) + i128::from(err) + i128::from(slack);
                        let horizon = now.saturating_add(slack);
                        assert_eq!(beyond_horizon(ts, err, horizon), exact, "{ts} {err} {now}");
                    }
                }
            }
        }
        // At the horizon exactly, and either side of it.
        for (now, err) in [(0, 0), (5, 3), (1 << 40, 1 << 30), (7, 1 << 62)] {
            let at = i64::try_from(now + err + slack).unwrap();
            for (ts, beyond) in [(at - 1, false), (at, false), (at + 1, true)] {
                let horizon = now.saturating_add(slack);
                assert_eq!(beyond_horizon(ts, err, horizon), beyond, "{ts} {err} {now}");
            }
        }
    }
}
