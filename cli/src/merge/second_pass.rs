//! Second pass: streams every input again, resolves each packet's timestamp
//! on the merged timeline and stamps its machine and output sequence.
//!
//! Inputs are read and scanned in batches ([`feed`](super::feed)), the
//! largest few ahead on scan threads, the others here when their batch is
//! read; resolving and stamping happen here, on the merging thread, in
//! merge order. Memory does not grow with input size: per input, the head
//! packet and a bounded number of batches.

use prost::Message;
use std::collections::HashMap;
use tracesync_protocol::clock_ids::{BOOTTIME, TRACE_FILE};
use tracesync_protocol::perfetto::{ClockSnapshot, RemoteClockSync};
use tracesync_protocol::scan::{
    Kind, Stamp, StampSuffix, StampTail, field, stamp_by_layout, stamp_split_with_suffix_into,
};
use tracesync_protocol::wire::put_varint_field;

use super::chrome_json::written::{ftrace_event_time, written_time};
use super::feed::{OpenError, PacketFeed, PacketScan};
use super::inputs::InputSource;
use super::machines::{MachineIdx, MachineTable, Placement};
use super::plan::{FilePlan, node};
use super::remote::{
    MachineDefaults, SERVICE_EVENT_FIELD, default_from_snapshot, rounds_of, sync_edges,
};
use super::stats::MergeStats;
use super::systrace::encode::{is_ftrace_packet, is_ftrace_parts, set_event_ts};
use tracesync_core::clock::timeline::{Timeline, Unplaced};
use tracesync_core::clock::{ClockGraph, ClockNode, ConvertError, EdgeOrigin, SnapshotClock};

/// Sequence id of the packets tracesync writes itself (SystemInfo, sync
/// points); input sequences are renumbered from 2.
pub const OWN_SEQUENCE_ID: u32 = 1;

/// What the writer needs to know about the head packet of a stream.
#[derive(Clone, Copy, Debug)]
pub struct Head {
    pub ts: i64,
    pub machine: MachineIdx,
    pub out_seq: u32,
    /// Resolved clock id and raw value; None for packets without timestamp.
    pub clock: Option<(u32, u64)>,
    pub kind: Kind,
    /// Input packet size in bytes.
    pub size: usize,
    /// The packet's time on its machine's BOOTTIME, for sync points of
    /// machines other than trace time's.
    pub boottime: Option<i64>,
    /// With a trace-time clock other than BOOTTIME: the packet's time on its
    /// machine's clock of that domain (the sync point relates it too).
    pub domain: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct SequenceState {
    out_seq: u32,
    default_clock: Option<u32>,
    /// The fields last appended to this sequence's stamped packets:
    /// encoded once, not per packet; one for packets without a clock id of
    /// their own and one for those with (sequences mix both).
    suffixes: [Option<CachedSuffix>; 2],
}

/// The fields a stamp appends, with what they depend on besides the
/// sequence (its output id is fixed).
#[derive(Clone, Copy, Debug)]
struct CachedSuffix {
    machine_id: u32,
    appended_clock: Option<u32>,
    suffix: StampSuffix,
}

impl SequenceState {
    /// The fields `stamp` appends to a packet of this sequence: the last
    /// ones unless its machine id or appended clock changed.
    fn suffix(&mut self, stamp: &Stamp, has_clock_id: bool) -> &StampSuffix {
        let appended_clock = stamp.default_timestamp_clock_id.filter(|_| !has_clock_id);
        let machine_id = stamp.machine_id.unwrap_or(0);
        let cached = &mut self.suffixes[usize::from(has_clock_id)];
        if cached
            .as_ref()
            .is_some_and(|c| c.machine_id != machine_id || c.appended_clock != appended_clock)
        {
            *cached = None;
        }
        &cached
            .get_or_insert_with(|| CachedSuffix {
                machine_id,
                appended_clock,
                suffix: StampSuffix::new(stamp, has_clock_id),
            })
            .suffix
    }
}

/// Each of an input's sequences by its number in the input
/// ([`PacketScan::sequence`]; numbers a packet never reached the lookup
/// with stay None).
type SequenceMap = Vec<Option<SequenceState>>;

/// Allocates output sequence ids across all inputs.
#[derive(Debug)]
pub struct SequenceIds {
    next: u32,
}

impl SequenceIds {
    pub fn new() -> Self {
        Self {
            next: OWN_SEQUENCE_ID + 1,
        }
    }

    fn allocate(&mut self) -> u32 {
        let id = self.next;
        self.next = self.next.wrapping_add(1).max(OWN_SEQUENCE_ID + 1);
        id
    }
}

impl Default for SequenceIds {
    fn default() -> Self {
        Self::new()
    }
}

/// Shared state of the second pass.
pub struct Context<'a> {
    /// The complete graph of the first pass, with trace time and placements.
    pub timeline: &'a mut Timeline,
    /// Snapshots replayed in stream order: Perfetto converts each packet
    /// with the snapshots seen until then, so this graph decides first; the
    /// complete one only serves packets Perfetto defers to the end of the
    /// file (no usable snapshot yet) and the relations across machines.
    pub live: &'a mut ClockGraph,
    pub machines: &'a MachineTable,
    pub stats: &'a mut MergeStats,
    pub sequences: &'a mut SequenceIds,
    /// Remote machines (by file placement) whose RemoteClockSync edges are
    /// in the live graph: the host placement and the clock to convert to.
    pub synced: HashMap<Placement, (Placement, u32)>,
}

/// One input being streamed.
pub struct InputStream<'a> {
    pub source: &'a InputSource,
    plan: &'a FilePlan,
    /// None at the end of the input.
    feed: Option<PacketFeed>,
    sequences: SequenceMap,
    defaults: MachineDefaults,
    last_ts: i64,
    /// The current head packet: its stamped bytes are the feed's current
    /// packet up to `split`'s length and then its tail, else `body`.
    pub head: Option<Head>,
    split: Option<usize>,
    /// The tail of a split head packet (written in place, not returned).
    tail: StampTail,
    body: Vec<u8>,
}

/// The stamped bytes of a head packet: a copy, or a prefix of the input
/// packet (not copied) and a short tail.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    Whole(&'a [u8]),
    Split(&'a [u8], &'a [u8]),
}

impl<'a> InputStream<'a> {
    /// Opens the input again (see [`PacketFeed::open`]); faults were
    /// reported by the first pass, which found `packets` in it.
    pub fn open(
        source: &'a InputSource,
        plan: &'a FilePlan,
        packets: u64,
        threaded: bool,
    ) -> Result<Self, OpenError> {
        Ok(Self {
            source,
            plan,
            feed: Some(PacketFeed::open(source, packets, threaded)?),
            sequences: SequenceMap::new(),
            defaults: MachineDefaults::default(),
            last_ts: i64::MIN,
            head: None,
            split: None,
            tail: StampTail::default(),
            body: Vec::new(),
        })
    }

    /// The stamped bytes of the head packet.
    pub fn body(&self) -> Body<'_> {
        let current = self.feed.as_ref().and_then(|f| f.current());
        match (self.split, current) {
            (Some(n), Some((bytes, _))) => Body::Split(&bytes[..n], self.tail.as_slice()),
            _ => Body::Whole(&self.body),
        }
    }

    /// Moves to the next packet that goes to the output; `head` is None at
    /// the end of the input (or at its first fault, already reported).
    pub fn advance(&mut self, ctx: &mut Context<'_>) {
        self.head = None;
        while let Some(feed) = self.feed.as_mut() {
            let Some((bytes, scan)) = feed.advance() else {
                // The end, or a fault the first pass reported.
                self.feed = None;
                return;
            };
            ctx.stats.packets_read += 1;
            ctx.stats.bytes_read += bytes.len() as u64;
            let Some(fields) = scan else {
                ctx.stats.packets_malformed += 1;
                continue;
            };
            if let Some((mut head, sequence)) = resolve(
                self.plan,
                &mut self.sequences,
                &mut self.defaults,
                &mut self.last_ts,
                fields,
                bytes,
                ctx,
            ) {
                let stamp = Stamp {
                    machine_id: Some(ctx.machines.get(head.machine).output_id),
                    trusted_packet_sequence_id: Some(head.out_seq),
                    // A remote packet with no clock id and no sequence default
                    // is taken by Perfetto as already in trace time; name the
                    // clock it was resolved with so the sync points apply.
                    default_timestamp_clock_id: head.clock.map(|(c, _)| c),
                    strip_trusted: false,
                };
                let trace = ctx.timeline.trace_clock();
                if self.plan.converted
                    && head.clock.is_some()
                    && let Some((clock, ts)) = written_time(&mut head, trace.machine, trace.clock)
                {
                    let stamp = Stamp {
                        default_timestamp_clock_id: Some(clock),
                        ..stamp
                    };
                    let layout = &fields.stamp_layout;
                    // As other packets: a prefix and a tail, the time last.
                    // An ftrace event's own time is rewritten: copied.
                    let suffix = sequence.suffix(&stamp, layout.has_clock_id);
                    let tail = &mut self.tail;
                    self.split = stamp_split_with_suffix_into(bytes, layout, &stamp, suffix, tail)
                        .filter(|_| tail.push_varint_field(field::TIMESTAMP, ts))
                        .filter(|&n| !is_ftrace_parts(&bytes[..n], tail.as_slice()));
                    if self.split.is_none() {
                        self.body.clear();
                        if stamp_by_layout(bytes, layout, &stamp, &mut self.body).is_err() {
                            ctx.stats.packets_malformed += 1;
                            continue;
                        }
                        put_varint_field(&mut self.body, field::TIMESTAMP, ts);
                        if is_ftrace_packet(&self.body) {
                            let at = ftrace_event_time(ctx.timeline, clock, ts);
                            set_event_ts(&mut self.body, at);
                        }
                    }
                    self.head = Some(head);
                    return;
                }
                // Most packets keep a prefix of their bytes: written from
                // the feed's batch, not copied here.
                let layout = &fields.stamp_layout;
                let suffix = sequence.suffix(&stamp, layout.has_clock_id);
                self.split =
                    stamp_split_with_suffix_into(bytes, layout, &stamp, suffix, &mut self.tail);
                if self.split.is_none() {
                    self.body.clear();
                    if stamp_by_layout(bytes, layout, &stamp, &mut self.body).is_err() {
                        ctx.stats.packets_malformed += 1;
                        continue;
                    }
                }
                self.head = Some(head);
                return;
            }
        }
    }
}

/// Decides the fate of one packet (`bytes`, scanned into `fields`): None
/// if it does not go to the output; else its head, and the state of its
/// sequence (which keeps its stamp's fields).
fn resolve<'s>(
    plan: &FilePlan,
    sequences: &'s mut SequenceMap,
    defaults: &mut MachineDefaults,
    last_ts: &mut i64,
    fields: &PacketScan,
    bytes: &[u8],
    ctx: &mut Context<'_>,
) -> Option<(Head, &'s mut SequenceState)> {
    let size = bytes.len();
    let field_bytes = |r: &std::ops::Range<u32>| &bytes[r.start as usize..r.end as usize];
    let embedded = fields.machine_id.unwrap_or(0);
    let placement = plan.machines.get(embedded)?;
    let in_seq = fields.trusted_packet_sequence_id.unwrap_or(0);
    let state_ref = sequence_state(sequences, fields, ctx);
    let state = *state_ref;
    let is_base = plan.machines.base == Some(placement);
    if let Some(bytes) = fields.remote_clock_sync.as_ref().map(field_bytes) {
        if let Some(host) = plan
            .machines
            .base
            .filter(|b| b.machine != placement.machine)
        {
            replay_remote_sync(bytes, placement, host, ctx);
        }
        // Replaced by tracesync's own sync points, which carry the engine's
        // mapping; passing the input's through would override it.
        ctx.stats.remote_clock_sync_replaced += 1;
        return None;
    }
    if fields.has_system_info {
        // Merged into the one SystemInfo per machine at the output's start.
        ctx.stats.system_info_merged += 1;
        return None;
    }
    // Registers a machine at its first packet: it takes the file's default
    // clock as it is at this point of the stream.
    let machine_default = defaults.get(embedded, is_base);
    if let Some(bytes) = fields.clock_snapshot.as_ref().map(field_bytes)
        && let Some(set) = replay_snapshot(bytes, placement, in_seq, ctx)
    {
        defaults.set(embedded, is_base, set);
    }
    // A packet placed by its input's order: it takes the previous packet's time.
    let in_place = Head {
        ts: *last_ts,
        machine: placement.machine,
        out_seq: state.out_seq,
        clock: None,
        kind: fields.kind(),
        size,
        boottime: None,
        domain: None,
    };
    let Some(raw) = fields.timestamp else {
        return Some((in_place, state_ref));
    };
    let explicit = fields
        .timestamp_clock_id
        .filter(|&c| c != 0)
        .or(state.default_clock);
    let service_event = fields.data_field == Some(SERVICE_EVENT_FIELD);
    let clock = match explicit {
        Some(c) => c,
        // The tracing service stamps its events on BOOTTIME.
        None if service_event && plan.default_clock != TRACE_FILE => BOOTTIME,
        None if is_base => plan.default_clock,
        None => match machine_default {
            Some(c) if plan.default_clock != TRACE_FILE => c,
            Some(_) => plan.default_clock,
            None => {
                // No clock anywhere: Perfetto takes the value as trace time.
                let ts = match ctx.timeline.check_start(raw as i64) {
                    Ok(ts) => ts,
                    Err(_) => {
                        ctx.stats.packets_dropped += 1;
                        return None;
                    }
                };
                *last_ts = ts;
                ctx.stats.remote_packets_as_trace_time += 1;
                return Some((Head { ts, ..in_place }, state_ref));
            }
        },
    };
    let clock_node = node(placement, in_seq, clock);
    let (resolved, boottime, domain) = to_trace_time(ctx, placement, clock_node, raw);
    let ts = match resolved {
        Ok(ts) => ts,
        Err(_) if fields.clock_snapshot.is_some() => {
            // Snapshots carry clock data Perfetto needs; keep them in place.
            return Some((in_place, state_ref));
        }
        Err(_) => {
            ctx.stats.packets_dropped += 1;
            return None;
        }
    };
    *last_ts = ts;
    let head = Head {
        ts,
        clock: Some((clock, raw)),
        boottime,
        domain,
        ..in_place
    };
    Some((head, state_ref))
}

/// The output state of a packet's input sequence, allocated at its first
/// packet; its default clock follows the packet's defaults.
#[inline]
fn sequence_state<'s>(
    sequences: &'s mut SequenceMap,
    fields: &PacketScan,
    ctx: &mut Context<'_>,
) -> &'s mut SequenceState {
    let number = fields.sequence as usize;
    if number >= sequences.len() {
        sequences.resize(number + 1, None);
    }
    let state = sequences[number].get_or_insert_with(|| SequenceState {
        out_seq: ctx.sequences.allocate(),
        default_clock: None,
        suffixes: [None; 2],
    });
    if fields.clears_incremental_state {
        state.default_clock = None;
    }
    if let Some(clock) = fields.defaults_clock {
        state.default_clock = clock;
    }
    state
}

/// A timestamp on `clock_node` in trace time; for a remote machine also its
/// BOOTTIME, and that BOOTTIME in the trace clock's domain when trace time
/// is not a BOOTTIME (what the sync points are written from).
#[inline]
fn to_trace_time(
    ctx: &mut Context<'_>,
    placement: Placement,
    clock_node: ClockNode,
    raw: u64,
) -> (Result<i64, Unplaced>, Option<i64>, Option<i64>) {
    let trace_machine = ctx.timeline.trace_clock().machine;
    let (resolved, boottime) = if placement.machine == trace_machine {
        let target = ctx.timeline.trace_clock();
        match ctx.live.convert_within_machine(clock_node, raw, target) {
            Ok(ts) => (ctx.timeline.check_start(ts), None),
            Err(_) => (ctx.timeline.to_trace_time(clock_node, raw), None),
        }
    } else {
        // Perfetto converts a remote packet within its machine to that
        // machine's BOOTTIME, then applies the sync offset: resolve the same
        // way, so that sync points reproduce this result exactly.
        let boot = boot_of(placement);
        match within_machine(ctx, clock_node, raw, boot) {
            Ok(c) if c >= 0 => (remote_to_trace_time(ctx, placement, boot, c), Some(c)),
            _ => {
                ctx.stats.remote_packets_without_boottime += 1;
                (ctx.timeline.to_trace_time(clock_node, raw), None)
            }
        }
    };
    let trace_domain = ctx.timeline.trace_clock().clock;
    let domain = match boottime {
        Some(c) if trace_domain != BOOTTIME && c >= 0 => within_machine(
            ctx,
            boot_of(placement),
            c as u64,
            node(placement, 0, trace_domain),
        )
        .ok(),
        _ => None,
    };
    (resolved, boottime, domain)
}

fn boot_of(placement: Placement) -> ClockNode {
    node(placement, 0, BOOTTIME)
}

/// Converts within a machine with the snapshots seen so far, else (as
/// Perfetto's end-of-file deferral would) with all of them.
fn within_machine(
    ctx: &mut Context<'_>,
    src: ClockNode,
    raw: u64,
    dst: ClockNode,
) -> Result<i64, ConvertError> {
    ctx.live.convert_within_machine(src, raw, dst).or_else(|_| {
        ctx.timeline
            .graph_mut()
            .convert_within_machine(src, raw, dst)
    })
}

/// A remote machine's BOOTTIME value `c` on trace time. With its
/// RemoteClockSync edges in the live graph, the ones seen so far in the
/// stream decide, as Perfetto converts each packet when it reads it; before
/// the first (or with no sync at all), the complete graph decides.
fn remote_to_trace_time(
    ctx: &mut Context<'_>,
    placement: Placement,
    boot: ClockNode,
    c: i64,
) -> Result<i64, Unplaced> {
    if let Some(&(host, clock)) = ctx.synced.get(&placement) {
        // Within the machine to the synced clock, then across on its edge
        // (the direct hop, as Perfetto's path search takes it).
        let client_node = node(placement, 0, clock);
        let host_node = node(host, 0, clock);
        let on_client = if clock == BOOTTIME {
            Ok(c)
        } else {
            within_machine(ctx, boot, c as u64, client_node)
        };
        if let Ok(v) = on_client {
            let Ok(v) = u64::try_from(v) else {
                return ctx.timeline.check_start(v);
            };
            if let Ok(h) = ctx.live.convert(client_node, v, host_node) {
                return match u64::try_from(h) {
                    Ok(h) => ctx.timeline.to_trace_time(host_node, h),
                    Err(_) => ctx.timeline.check_start(h),
                };
            }
        }
    }
    ctx.timeline.to_trace_time(boot, c as u64)
}

/// Feeds a snapshot to the live graph, and restarts the complete graph's
/// accumulators of the incremental clocks it holds (the live graph's
/// restart as part of adding the snapshot). Returns the clock it makes its
/// machine's default, if any.
fn replay_snapshot(
    bytes: &[u8],
    placement: Placement,
    seq: u32,
    ctx: &mut Context<'_>,
) -> Option<u32> {
    let snapshot = ClockSnapshot::decode(bytes).ok()?;
    let clocks: Vec<SnapshotClock> = snapshot
        .clocks
        .iter()
        .map(|c| SnapshotClock {
            node: node(placement, seq, c.clock_id.unwrap_or(0)),
            value: c.timestamp.unwrap_or(0),
            unit_multiplier_ns: c.unit_multiplier_ns.filter(|&u| u != 0).unwrap_or(1),
            is_incremental: c.is_incremental.unwrap_or(false),
        })
        .collect();
    // Rejections were counted in the first pass.
    let _ = ctx.live.add_snapshot(&clocks, EdgeOrigin::Snapshot);
    for c in clocks.iter().filter(|c| c.is_incremental) {
        ctx.timeline.graph_mut().reset_incremental(c.node, c.value);
    }
    let primary = snapshot
        .primary_trace_clock
        .filter(|&c| c > 0)
        .map(|c| c as u32);
    default_from_snapshot(primary, clocks.iter().map(|c| c.node.clock))
}

/// Feeds a RemoteClockSync to the live graph, as the plan did for the
/// complete one: the client clocks as a snapshot of the client machine, and
/// one cross-machine edge per clock related.
fn replay_remote_sync(bytes: &[u8], client: Placement, host: Placement, ctx: &mut Context<'_>) {
    let Ok(sync) = RemoteClockSync::decode(bytes) else {
        return;
    };
    let rounds = rounds_of(&sync);
    for round in &rounds {
        let clocks: Vec<SnapshotClock> = round
            .client
            .iter()
            .map(|&(c, v)| SnapshotClock::ns(node(client, 0, c), v))
            .collect();
        if clocks.len() > 1 {
            let _ = ctx.live.add_snapshot(&clocks, EdgeOrigin::Snapshot);
        }
    }
    let mut related = Vec::new();
    for e in sync_edges(&rounds) {
        let edge = [
            SnapshotClock::ns(node(client, 0, e.clock), e.client),
            SnapshotClock::ns(node(host, 0, e.clock), e.host),
        ];
        if ctx.live.add_snapshot(&edge, EdgeOrigin::Sync).is_ok() {
            related.push(e.clock);
        }
    }
    // The edge a packet crosses on: that of trace time's clock (Perfetto's
    // shortest path reaches it directly), else BOOTTIME, else any.
    let trace_clock = ctx.timeline.trace_clock().clock;
    let pick = [trace_clock, BOOTTIME]
        .into_iter()
        .find(|c| related.contains(c))
        .or(related.first().copied());
    if let Some(clock) = pick {
        ctx.synced.insert(client, (host, clock));
    }
}
