//! The spool: every batch the uplink may send is first appended to a
//! checksummed disk segment, so a relay that restarts resends what the
//! daemon has not acknowledged and resumes each source where its spooled
//! data ends.
//!
//! Packets wait in memory until a batch is cut (at the batch size or after
//! the linger). Cutting assigns the batch seq (contiguous from 1) and its
//! first packet index (contiguous from 0) and appends the record. Recently
//! cut batches stay cached in memory for sending; older ones are read back
//! from disk. A segment is deleted once none of its batches is unacked.
//!
//! Limits: memory (packets not yet written plus the cache) and disk (all
//! segments). When the disk limit is reached, `block` keeps cut batches in
//! memory and stops accepting from sources ([`Spool::accepts`]) until acks
//! free a segment; `drop-oldest` deletes the oldest segment, counts its
//! unacked batches as dropped, and marks the next sent packet of every
//! sequence that lost packets with previous_packet_dropped.
//!
//! Sources' cursors are opaque bytes here: each batch record carries the
//! cursors of the sources whose last packets it holds, and every segment
//! opens with a checkpoint of all of them.

mod instance;
mod record;
pub mod ring_times;
mod room;
mod segments;
mod sent;
mod types;
pub mod windows;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use nix::fcntl::{Flock, FlockArg};
use tracesync_protocol::relay::MAX_FRAME_BYTES;
use tracesync_protocol::{scan, wire};

pub use instance::instance_fingerprint;
use instance::{create_instance_id, load_or_create_instance_id};
use record::RecordKind;
pub use segments::SpoolIssue;
use segments::{BatchLocation, SegmentFile};
use sent::SentMark;
use types::io_error;
pub use types::{Incoming, OutBatch, SpoolConfig, SpoolError, SpoolStats, WhenFull};

/// Largest packet the spool takes: it must fit one frame with room to spare.
pub const MAX_PACKET_BYTES: usize = MAX_FRAME_BYTES - (64 << 10);
const LOCK_FILE: &str = "lock";
/// Buffers of acked batches kept for reuse (each up to a batch in size).
const MAX_SPARE_BUFFERS: usize = 4;

/// Packets cut (or being collected) but not on disk yet.
#[derive(Debug, Default)]
struct Unwritten {
    packets: Vec<Bytes>,
    bytes: usize,
    cursors: BTreeMap<u16, Bytes>,
}

#[derive(Debug)]
struct Spooled {
    at: BatchLocation,
    /// The packets in wire form, while they are cached in memory.
    cached: Option<Bytes>,
    /// Packets (by position) that carry previous_packet_dropped when sent.
    marks: Vec<u32>,
}

#[derive(Debug)]
pub struct Spool {
    config: SpoolConfig,
    instance_id: u64,
    segments: VecDeque<SegmentFile>,
    active: File,
    active_has_batches: bool,
    /// The segment closed last (number, file), not synced yet: it is
    /// synced when the next one closes (or at [`Spool::sync`]) if it still
    /// holds unacked batches, and never if acks free it first.
    rolled: Option<(u64, File)>,
    disk_bytes: u64,
    batches: VecDeque<Spooled>,
    cached_bytes: usize,
    /// Latest cursor of each source that is on disk.
    cursors: BTreeMap<u16, Bytes>,
    next_seq: u64,
    next_packet_index: u64,
    pending: Unwritten,
    pending_since: Option<Instant>,
    sealed: VecDeque<Unwritten>,
    unwritten_bytes: usize,
    /// Sequences that lost packets; their next sent packet gets marked.
    needs_mark: BTreeSet<u32>,
    /// Buffers of acked batches, reused for the next records (memory that
    /// is already mapped: no page faults per batch).
    spare: Vec<BytesMut>,
    stats: SpoolStats,
    /// The highest batch ever sent, across runs ([`sent`]).
    sent: SentMark,
    _lock: Flock<File>,
}

impl Spool {
    /// Opens (creating if needed) the spool directory and rebuilds its
    /// state. Returns what was repaired or skipped, for the log.
    pub fn open(config: SpoolConfig) -> Result<(Self, Vec<SpoolIssue>), SpoolError> {
        let dir = config.dir.clone();
        // Owner-only whatever the caller's umask: the spool holds the
        // traces, and the instance id a plaintext daemon knows it by.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_error(&dir, "create the directory"))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock_file = OpenOptions::new()
            .mode(0o600)
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_error(&lock_path, "create"))?;
        let lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock)
            .map_err(|_| SpoolError::Locked { path: dir.clone() })?;
        let instance_id = load_or_create_instance_id(&dir)?;
        let scan = segments::scan_dir(&dir)?;
        let sent = SentMark::open(&dir, scan.next_seq <= 1)?;
        let disk_bytes = scan.segments.iter().map(|s| s.bytes).sum();
        let last = scan.segments.last().cloned();
        let batches: VecDeque<Spooled> = scan
            .batches
            .into_iter()
            .map(|at| Spooled {
                at,
                cached: None,
                marks: Vec::new(),
            })
            .collect();
        let reuse_last = last
            .as_ref()
            .filter(|s| scan.last_appendable && s.bytes < config.segment_bytes());
        let active = match reuse_last {
            Some(segment) => OpenOptions::new()
                .append(true)
                .open(&segment.path)
                .map_err(io_error(&segment.path, "open"))?,
            // Placeholder replaced by the roll below (a fresh segment).
            None => lock.try_clone().map_err(io_error(&lock_path, "open"))?,
        };
        let active_has_batches = match (reuse_last, batches.back()) {
            (Some(segment), Some(batch)) => batch.at.segment == segment.number,
            _ => false,
        };
        let mut spool = Self {
            config,
            instance_id,
            segments: scan.segments.into(),
            active,
            active_has_batches,
            rolled: None,
            disk_bytes,
            batches,
            cached_bytes: 0,
            cursors: scan.cursors,
            next_seq: scan.next_seq,
            next_packet_index: scan.next_packet_index,
            pending: Unwritten::default(),
            pending_since: None,
            sealed: VecDeque::new(),
            unwritten_bytes: 0,
            needs_mark: BTreeSet::new(),
            spare: Vec::new(),
            stats: SpoolStats::default(),
            sent,
            _lock: lock,
        };
        if reuse_last.is_none() {
            spool.roll()?;
        }
        Ok((spool, scan.issues))
    }

    /// The spool's directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.config.dir
    }

    /// Random, created with the spool directory, kept for its lifetime.
    pub fn instance_id(&self) -> u64 {
        self.instance_id
    }

    /// Becomes a new relay instance (a new random id, kept from now on),
    /// with every batch and batch number as they are: what a daemon had
    /// recorded of the old instance no longer applies to this spool.
    pub fn renew_instance(&mut self) -> Result<u64, SpoolError> {
        self.instance_id = create_instance_id(&self.config.dir)?;
        Ok(self.instance_id)
    }

    /// The highest batch this relay instance ever sent, in any run (None:
    /// a spool of an older relay, which did not keep it).
    pub fn sent_through(&self) -> Option<u64> {
        self.sent.value()
    }

    /// Batch `seq` is about to be sent: kept before it goes on the wire.
    pub fn note_sent(&mut self, seq: u64) -> Result<(), SpoolError> {
        self.sent.note(seq)
    }

    /// Where source `source` resumes: the cursor after its last spooled packet.
    pub fn resume_cursor(&self, source: u16) -> Option<Bytes> {
        self.cursors.get(&source).cloned()
    }

    /// False while unwritten packets fill their share of memory (block
    /// policy with a full disk): callers stop reading sources.
    pub fn accepts(&self) -> bool {
        let budget = usize::try_from(self.config.memory_bytes / 2).unwrap_or(usize::MAX);
        self.unwritten_bytes < budget.max(self.config.batch_bytes())
    }

    /// Takes a source's packets; cuts and writes batches as they fill.
    pub fn push(&mut self, incoming: Incoming, now: Instant) -> Result<(), SpoolError> {
        let batch_bytes = self.config.batch_bytes();
        for packet in incoming.packets {
            if packet.len() > MAX_PACKET_BYTES {
                self.stats.oversize_packets_dropped += 1;
                continue;
            }
            if !self.pending.packets.is_empty()
                && (self.pending.bytes + packet.len() > batch_bytes
                    || self.pending.packets.len() >= tracesync_protocol::relay::MAX_BATCH_PACKETS)
            {
                self.seal();
            }
            if self.pending.packets.is_empty() {
                self.pending_since = Some(now);
            }
            self.pending.bytes += packet.len();
            self.unwritten_bytes += packet.len();
            self.pending.packets.push(packet);
        }
        self.pending
            .cursors
            .insert(incoming.source, incoming.cursor);
        self.write_sealed(false)
    }

    /// When the collecting batch must be cut (linger), if it has packets.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending_since.map(|since| since + self.config.linger)
    }

    /// Cuts the collecting batch if its linger is over; retries writes
    /// that were waiting for room.
    pub fn tick(&mut self, now: Instant) -> Result<(), SpoolError> {
        if self.deadline().is_some_and(|deadline| now >= deadline) {
            self.seal();
        }
        self.write_sealed(false)
    }

    /// Shutdown: cuts and writes everything, limits notwithstanding (the
    /// memory is already spent), persists cursors, and syncs to disk.
    pub fn flush_all(&mut self) -> Result<(), SpoolError> {
        self.seal();
        self.write_sealed(true)?;
        if !self.pending.cursors.is_empty() {
            // Cursor moves without packets: keep them in a checkpoint.
            let cursors = std::mem::take(&mut self.pending.cursors);
            self.cursors.extend(cursors);
            self.append(RecordKind::Checkpoint, &[], &BTreeMap::new())?;
        }
        self.sync()
    }

    /// Every batch with seq <= `through` is durable at the daemon.
    pub fn ack(&mut self, through: u64) -> Result<(), SpoolError> {
        while self.batches.front().is_some_and(|b| b.at.seq <= through) {
            if let Some(batch) = self.batches.pop_front()
                && let Some(cached) = batch.cached
            {
                self.cached_bytes -= batch.at.payload_bytes;
                self.recycle(cached);
            }
        }
        self.reclaim()?;
        self.write_sealed(false)
    }

    /// Every batch spooled and not freed, oldest first: seq, packet bytes,
    /// packets (the ring's view of what it holds).
    pub fn held_batches(&self) -> Vec<(u64, u64, u64)> {
        self.batches
            .iter()
            .map(|b| {
                (
                    b.at.seq,
                    b.at.payload_bytes as u64,
                    u64::from(b.at.packet_count),
                )
            })
            .collect()
    }

    /// Seq of the oldest batch still spooled (the next seq if none).
    pub fn oldest_unacked(&self) -> u64 {
        self.batches.front().map_or(self.next_seq, |b| b.at.seq)
    }

    /// Seq of the newest batch written (0: none yet), in this run or an
    /// earlier one (the checkpoint opening every segment keeps it when
    /// every batch has been acknowledged and deleted).
    pub fn last_seq(&self) -> u64 {
        self.next_seq.saturating_sub(1)
    }

    pub fn stats(&self) -> &SpoolStats {
        &self.stats
    }

    /// Bytes of all segment files.
    pub fn disk_bytes(&self) -> u64 {
        self.disk_bytes
    }

    /// Bytes of packets held in memory (collecting, cut, cached).
    pub fn memory_bytes(&self) -> usize {
        self.unwritten_bytes + self.cached_bytes
    }

    /// Makes everything written so far and not acked durable.
    pub fn sync(&mut self) -> Result<(), SpoolError> {
        self.sync_rolled()?;
        self.sent.sync()?;
        let path = self.active_path();
        self.active.sync_data().map_err(io_error(&path, "sync"))
    }

    /// Batch `seq` for sending (None: acked, dropped, or not cut yet). A
    /// batch that cannot be read back is logged, counted and sent empty,
    /// so the stream goes on. The packets come as the spool holds them, in
    /// wire form; only a batch with marks (drop-oldest) is re-encoded.
    pub fn batch(&mut self, seq: u64) -> Option<OutBatch> {
        let position = self.batches.binary_search_by_key(&seq, |b| b.at.seq).ok()?;
        let wire = self.load_wire(position);
        let spooled = self.batches.get_mut(position)?;
        let Some(mut wire) = wire else {
            return Some(OutBatch {
                seq,
                first_packet_index: spooled.at.first_packet_index,
                packet_count: 0,
                wire: Bytes::new(),
                bytes: 0,
            });
        };
        let mut bytes = spooled.at.payload_bytes;
        if !self.needs_mark.is_empty() || !spooled.marks.is_empty() {
            let mut packets = record::wire_packets(&wire).unwrap_or_default();
            if !self.needs_mark.is_empty() {
                for (position, packet) in packets.iter().enumerate() {
                    if let Some(sequence) = sequence_of(packet)
                        && self.needs_mark.remove(&sequence)
                    {
                        spooled.marks.push(position as u32);
                        self.stats.sequences_marked += 1;
                    }
                }
            }
            if !spooled.marks.is_empty() {
                for &position in &spooled.marks {
                    if let Some(packet) = packets.get_mut(position as usize) {
                        *packet = with_previous_packet_dropped(packet);
                    }
                }
                wire = record::encode_wire(&packets);
                bytes = payload_bytes(&packets);
            }
        }
        Some(OutBatch {
            seq,
            first_packet_index: spooled.at.first_packet_index,
            packet_count: spooled.at.packet_count,
            wire,
            bytes,
        })
    }

    /// The packets of the batch at `position` in wire form, as spooled
    /// (no marks); None if they cannot be read back (logged, counted).
    fn load_wire(&mut self, position: usize) -> Option<Bytes> {
        let spooled = self.batches.get(position)?;
        match &spooled.cached {
            Some(cached) => Some(cached.clone()),
            None => match segments::read_batch(&self.config.dir, &spooled.at) {
                Ok(wire) => Some(wire),
                Err(error) => {
                    tracing::error!(
                        "{error}; batch {} is lost, sending it empty",
                        spooled.at.seq
                    );
                    self.stats.batches_unreadable += 1;
                    None
                }
            },
        }
    }

    fn seal(&mut self) {
        if !self.pending.packets.is_empty() {
            self.sealed.push_back(std::mem::take(&mut self.pending));
            self.pending_since = None;
        }
    }

    fn write_sealed(&mut self, force: bool) -> Result<(), SpoolError> {
        while let Some(front) = self.sealed.front() {
            let len =
                record::encoded_len(self.cursor_lens(&front.cursors), front.packets.iter()) as u64;
            if !self.make_room(len, force)? {
                return Ok(());
            }
            let Some(batch) = self.sealed.pop_front() else {
                break;
            };
            if let Err(error) = self.append(RecordKind::Batch, &batch.packets, &batch.cursors) {
                // Kept for the next try (e.g. after the disk got space back).
                self.sealed.push_front(batch);
                return Err(error);
            }
            self.unwritten_bytes -= batch.bytes;
        }
        Ok(())
    }

    fn cursor_lens<'a>(
        &self,
        cursors: &'a BTreeMap<u16, Bytes>,
    ) -> impl Iterator<Item = usize> + 'a {
        cursors.values().map(Bytes::len)
    }

    /// Appends a record to the active segment. A batch takes the next seq
    /// and packet indices; a checkpoint records them and every cursor.
    fn append(
        &mut self,
        kind: RecordKind,
        packets: &[Bytes],
        batch_cursors: &BTreeMap<u16, Bytes>,
    ) -> Result<(), SpoolError> {
        // The numbers of the batch after this one: checked before anything
        // is written (u64, so only a damaged or forged spool gets there).
        let next = match kind {
            RecordKind::Checkpoint => Some((self.next_seq, self.next_packet_index)),
            RecordKind::Batch | RecordKind::LegacyBatch => {
                let count = u32::try_from(packets.len()).ok().map(u64::from);
                self.next_seq
                    .checked_add(1)
                    .zip(count.and_then(|count| self.next_packet_index.checked_add(count)))
            }
        };
        let Some((next_seq, next_packet_index)) = next else {
            return Err(SpoolError::Exhausted {
                path: self.config.dir.clone(),
            });
        };
        let cursors: Vec<(u16, &[u8])> = match kind {
            RecordKind::Batch | RecordKind::LegacyBatch => {
                batch_cursors.iter().map(|(s, c)| (*s, &c[..])).collect()
            }
            RecordKind::Checkpoint => self.cursors.iter().map(|(s, c)| (*s, &c[..])).collect(),
        };
        let encoded = record::encode_into(
            kind,
            self.next_seq,
            self.next_packet_index,
            &cursors,
            packets,
            self.spare.pop().unwrap_or_default(),
        );
        let bytes = &encoded.bytes;
        let path = self.active_path();
        let Some(segment) = self.segments.back_mut() else {
            // Invariant: open() always leaves an active segment.
            return Err(SpoolError::Corrupt {
                path,
                offset: 0,
                reason: "no active segment".into(),
            });
        };
        // One write per record, straight to the page cache: durability
        // comes from the daemon's acks plus the sync at roll and shutdown,
        // not from an fsync per batch (see the module docs).
        if let Err(source) = self.active.write_all(bytes) {
            // Cut back to the record boundary so later appends stay readable.
            let _ = self.active.set_len(segment.bytes);
            return Err(SpoolError::Io {
                path,
                action: "append",
                source,
            });
        }
        let offset = segment.bytes;
        segment.bytes += bytes.len() as u64;
        self.disk_bytes += bytes.len() as u64;
        if kind == RecordKind::Checkpoint {
            return Ok(());
        }
        let at = BatchLocation {
            seq: self.next_seq,
            first_packet_index: self.next_packet_index,
            packet_count: packets.len() as u32,
            segment: segment.number,
            offset,
            record_len: bytes.len() as u32,
            payload_bytes: payload_bytes(packets),
        };
        self.stats.batches_written += 1;
        self.stats.packets_written += packets.len() as u64;
        self.stats.bytes_written += at.payload_bytes as u64;
        self.cached_bytes += at.payload_bytes;
        self.next_seq = next_seq;
        self.next_packet_index = next_packet_index;
        self.active_has_batches = true;
        self.cursors
            .extend(batch_cursors.iter().map(|(s, c)| (*s, c.clone())));
        self.batches.push_back(Spooled {
            at,
            cached: Some(encoded.wire()),
            marks: Vec::new(),
        });
        self.evict();
        Ok(())
    }

    /// Drops cached payloads, oldest first, down to the memory budget.
    fn evict(&mut self) {
        let budget = usize::try_from(self.config.memory_bytes)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.unwritten_bytes);
        let mut freed = Vec::new();
        for batch in self.batches.iter_mut() {
            if self.cached_bytes <= budget {
                break;
            }
            if let Some(cached) = batch.cached.take() {
                self.cached_bytes -= batch.at.payload_bytes;
                freed.push(cached);
            }
        }
        for cached in freed {
            self.recycle(cached);
        }
    }

    /// Keeps the buffer of a batch no longer cached for the next record,
    /// if nothing else holds it (a frame being written may).
    fn recycle(&mut self, cached: Bytes) {
        if self.spare.len() < MAX_SPARE_BUFFERS
            && let Ok(buffer) = cached.try_into_mut()
        {
            self.spare.push(buffer);
        }
    }

    fn active_path(&self) -> PathBuf {
        self.segments
            .back()
            .map_or_else(|| self.config.dir.clone(), |s| s.path.clone())
    }
}

fn payload_bytes(packets: &[Bytes]) -> usize {
    packets.iter().map(Bytes::len).sum()
}

fn sequence_of(packet: &[u8]) -> Option<u32> {
    scan::scan_packet(packet).ok()?.trusted_packet_sequence_id
}

/// The packet with previous_packet_dropped = 1 appended (a later
/// occurrence of a field wins, so this also overrides a 0).
fn with_previous_packet_dropped(packet: &Bytes) -> Bytes {
    let mut out = Vec::with_capacity(packet.len() + 2);
    out.extend_from_slice(packet);
    wire::put_varint_field(&mut out, scan::field::PREVIOUS_PACKET_DROPPED, 1);
    out.into()
}

#[cfg(test)]
mod tests;
