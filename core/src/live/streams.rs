//! The streams: one per (relay instance, relay sequence), with its output
//! sequence id, de-duplication point, sequence state for resolution, and
//! `src` label; allocated on first use or recovered from the output.

use std::collections::BTreeMap;
use std::collections::hash_map::{Entry, VacantEntry};
use std::sync::Arc;

use tracesync_protocol::clock_ids::BOOTTIME;
use tracesync_protocol::scan::{PacketFields, Stamp, StampSuffix, defaults_timestamp_clock_id};

use super::recovered::{RecoveredClocks, RecoveredSequence, RecoveredStream};
use super::shard_ids::ShardIds;
use super::stamp::OWN_SEQUENCE_ID;
use super::types::StreamId;
use crate::hash::IdMap;

/// (relay instance, relay sequence).
pub(super) type StreamKey = (u64, u32);

/// What a stream says of every packet of it (read when one is written).
#[derive(Debug)]
pub(super) struct Labels {
    /// (relay instance, relay sequence).
    pub key: StreamKey,
    /// `src` of jsonl and the tail.
    pub src: Arc<str>,
}

/// One stream: a relay sequence of one relay instance.
#[derive(Debug)]
pub(super) struct Stream {
    id: StreamId,
    out_seq: u32,
    raw_id: u32,
    /// Highest packet index accepted or recovered as written.
    written: Option<u64>,
    /// trace_packet_defaults.timestamp_clock_id of the sequence.
    default_clock: Option<u32>,
    /// Last resolved (host ts, relay BOOTTIME): for packets with no timestamp.
    last: Option<(i64, Option<i64>)>,
    /// Packets of this stream in its relay's pending queue.
    pending: u32,
    /// The fields a stamp appends, for packets without and with a clock id
    /// of their own, and the stamp they were made for: built once, not per
    /// packet (packets of both kinds alternate within a sequence).
    suffixes: [Option<(Stamp, StampSuffix)>; 2],
}

impl Stream {
    pub fn id(&self) -> StreamId {
        self.id
    }

    pub fn out_seq(&self) -> u32 {
        self.out_seq
    }

    /// The machine its packets are stamped with.
    pub fn raw_id(&self) -> u32 {
        self.raw_id
    }

    /// Takes packet `index` unless it is at or below one accepted or
    /// recovered as written (a duplicate): whether it was new.
    #[must_use]
    pub fn accept_index(&mut self, index: u64) -> bool {
        if self.written.is_some_and(|w| index <= w) {
            return false;
        }
        self.written = Some(index);
        true
    }

    /// Applies the sequence state a packet changes (in stream order,
    /// before its own clock is chosen: a defaults packet applies to itself
    /// too) and returns its clock and whether to stamp it: the packet's
    /// own clock id, else the sequence's default, else BOOTTIME (stamped
    /// when it names none).
    pub fn clock_of(&mut self, fields: &PacketFields<'_>) -> (u32, bool) {
        if fields.clears_incremental_state() {
            self.default_clock = None;
        }
        if let Some(defaults) = fields.trace_packet_defaults {
            self.default_clock = defaults_timestamp_clock_id(defaults)
                .ok()
                .flatten()
                .filter(|&c| c != 0);
        }
        let explicit = fields.timestamp_clock_id.filter(|&c| c != 0);
        let clock = explicit.or(self.default_clock).unwrap_or(BOOTTIME);
        (clock, explicit.is_none() && self.default_clock.is_none())
    }

    /// The fields `stamp` appends to a packet of this stream that has (or
    /// has not) a `timestamp_clock_id` of its own.
    pub fn suffix(&mut self, stamp: &Stamp, has_clock_id: bool) -> &StampSuffix {
        let slot = &mut self.suffixes[usize::from(has_clock_id)];
        if slot.as_ref().is_some_and(|(made_for, _)| made_for != stamp) {
            *slot = None;
        }
        &slot
            .get_or_insert_with(|| (*stamp, StampSuffix::new(stamp, has_clock_id)))
            .1
    }

    /// Last resolved (host ts, relay BOOTTIME).
    pub fn last(&self) -> Option<(i64, Option<i64>)> {
        self.last
    }

    pub fn set_last(&mut self, ts: i64, boottime: Option<i64>) {
        self.last = Some((ts, boottime));
    }

    /// Some of its packets are pending: later ones wait behind them.
    pub fn is_blocked(&self) -> bool {
        self.pending > 0
    }

    /// One more of its packets went pending.
    pub fn pending_added(&mut self) {
        self.pending += 1;
    }

    /// One of its pending packets left the queue (resolved or dropped).
    pub fn pending_removed(&mut self) {
        self.pending = self.pending.saturating_sub(1);
    }
}

/// Opens the stream of `vacant`'s key (out of line: see
/// [`Streams::get_or_open`]).
#[cold]
#[inline(never)]
fn open_stream<'s>(
    vacant: VacantEntry<'s, StreamKey, Stream>,
    labels: &mut IdMap<StreamId, Labels>,
    next_id: &mut StreamId,
    out_seq: u32,
    raw_id: u32,
    src: Arc<str>,
) -> &'s mut Stream {
    let id = allocate_id(next_id);
    let key = *vacant.key();
    labels.insert(id, Labels { key, src });
    vacant.insert(Stream {
        id,
        out_seq,
        raw_id,
        written: None,
        default_clock: None,
        last: None,
        pending: 0,
        suffixes: [None, None],
    })
}

fn allocate_id(next: &mut StreamId) -> StreamId {
    let id = *next;
    // The host's stream is StreamId::MAX.
    *next = next.wrapping_add(1) % StreamId::MAX;
    id
}

/// Output sequence ids after the daemon's own, past the sync-quality
/// range, in this core's class ([`ShardIds`]).
fn allocate_out_seq(ids: ShardIds, next: &mut u32) -> u32 {
    let out_seq = ids.first_from(*next);
    *next = ids.next_after(out_seq);
    out_seq
}

/// Every stream by (relay instance, relay sequence).
#[derive(Debug)]
pub(super) struct Streams {
    by_key: IdMap<StreamKey, Stream>,
    /// What each stream in `by_key` says of its packets, by its id (queued
    /// packets name their stream by id): its key and `src` label.
    labels: IdMap<StreamId, Labels>,
    next_id: StreamId,
    next_out_seq: u32,
    ids: ShardIds,
}

impl Streams {
    /// The streams recovered from the output, with the state of their
    /// output sequences; new output sequence ids from `next_out_seq`, of
    /// the class `ids`.
    /// Also returns the recovered ClockSnapshot payloads per relay
    /// instance, (relay sequence, payload), for its clock graph.
    pub fn recover(
        streams: Vec<RecoveredStream>,
        sequences: Vec<RecoveredSequence>,
        next_out_seq: u32,
        ids: ShardIds,
    ) -> (Self, RecoveredClocks) {
        let mut this = Self {
            by_key: IdMap::default(),
            labels: IdMap::default(),
            next_id: 0,
            next_out_seq: next_out_seq.max(OWN_SEQUENCE_ID + 1),
            ids,
        };
        let mut clocks = RecoveredClocks::default();
        let mut sequences: BTreeMap<u32, RecoveredSequence> =
            sequences.into_iter().map(|q| (q.out_seq, q)).collect();
        for s in streams {
            // The stream resolves and stamps as before the restart: its
            // sequence's default clock, its sequence-scoped clocks.
            let state = sequences.remove(&s.out_seq).unwrap_or_default();
            if !state.clock_snapshots.is_empty() {
                clocks.entry(s.relay_instance).or_default().extend(
                    state
                        .clock_snapshots
                        .into_iter()
                        .map(|p| (s.relay_sequence, p)),
                );
            }
            let id = allocate_id(&mut this.next_id);
            this.labels.insert(
                id,
                Labels {
                    key: (s.relay_instance, s.relay_sequence),
                    src: Arc::from(format!("{}/{}", s.machine_raw_id, s.relay_sequence)),
                },
            );
            this.by_key.insert(
                (s.relay_instance, s.relay_sequence),
                Stream {
                    id,
                    out_seq: s.out_seq,
                    raw_id: s.machine_raw_id,
                    written: Some(s.written_through),
                    default_clock: state.default_clock,
                    last: None,
                    pending: 0,
                    suffixes: [None, None],
                },
            );
        }
        (this, clocks)
    }

    /// The stream of `key`. A missing one is opened for machine `raw_id`
    /// if `open` allows it and gives its `src` label (else None). Looked
    /// up once per packet taken: inlined, the opening kept out of line.
    #[inline]
    pub fn get_or_open(
        &mut self,
        key: StreamKey,
        raw_id: u32,
        open: impl FnOnce() -> Option<Arc<str>>,
    ) -> Option<&mut Stream> {
        let Self {
            by_key,
            labels,
            next_id,
            next_out_seq,
            ids,
        } = self;
        match by_key.entry(key) {
            Entry::Occupied(stream) => Some(stream.into_mut()),
            Entry::Vacant(vacant) => {
                let src = open()?;
                let out_seq = allocate_out_seq(*ids, next_out_seq);
                Some(open_stream(vacant, labels, next_id, out_seq, raw_id, src))
            }
        }
    }

    /// What the stream of id `id` says of its packets.
    pub fn labels(&self, id: StreamId) -> Option<&Labels> {
        self.labels.get(&id)
    }

    pub fn get(&self, key: &StreamKey) -> Option<&Stream> {
        self.by_key.get(key)
    }

    pub fn get_mut(&mut self, key: &StreamKey) -> Option<&mut Stream> {
        self.by_key.get_mut(key)
    }

    /// Streams of relay instance `instance`.
    pub fn count_of(&self, instance: u64) -> usize {
        self.by_key.keys().filter(|k| k.0 == instance).count()
    }

    /// The streams of `instance` are stamped with machine `raw_id` now.
    pub fn move_to_machine(&mut self, instance: u64, raw_id: u32) {
        for (_, stream) in self.by_key.iter_mut().filter(|(k, _)| k.0 == instance) {
            stream.raw_id = raw_id;
        }
    }

    /// The streams of `instance` are labelled with machine name `name`.
    pub fn name_machine(&mut self, instance: u64, name: &str) {
        for labels in self.labels.values_mut() {
            let (i, seq) = labels.key;
            if i == instance {
                labels.src = Arc::from(format!("{name}/{seq}"));
            }
        }
    }

    /// Forgets the streams of `instance` that `forget` agrees to (given
    /// their ids: those with nothing queued).
    pub fn forget(&mut self, instance: u64, mut forget: impl FnMut(StreamId) -> bool) {
        let labels = &mut self.labels;
        self.by_key.retain(|k, s| {
            let gone = k.0 == instance && forget(s.id);
            if gone {
                labels.remove(&s.id);
            }
            !gone
        });
    }

    /// Whether any stream is stamped with machine `raw_id`.
    pub fn refer_to_machine(&self, raw_id: u32) -> bool {
        self.by_key.values().any(|s| s.raw_id == raw_id)
    }
}
