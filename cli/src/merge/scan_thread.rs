//! The second pass's read and scan of one input, on a thread of its own:
//! it reads the input's packets (bundles expanded as the first pass did),
//! scans each, and sends them in batches over a bounded channel to the
//! merging thread, which resolves and stamps them in merge order (the live
//! clock graph is shared by all inputs, so that part stays on one thread).
//!
//! Invariants:
//! - The packets, in order, are those the reader yields to the first pass
//!   (bundle records replaced by their inner packets), each with its bytes
//!   and [`PacketScan`] (None for a packet the scan rejects); a read or
//!   bundle error ends the input after the packets before it, silently: the
//!   first pass reported it, with its offset.
//! - Memory is bounded per input: at most [`BATCHES`] batches, each of
//!   about [`BATCH_BYTES`] bytes (more only to hold one larger packet, and
//!   shrunk back when returned) and at most [`BATCH_PACKETS`] packets:
//!   [`IN_FLIGHT`] wait in the channel, one is being filled and one read.
//!   Batches are reused: the merging thread sends each one back when it
//!   has written its last packet.
//! - Dropping the [`PacketFeed`] ends the thread (its next send fails) and
//!   waits for it.

use std::io;
use std::ops::Range;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;

use tracesync_protocol::scan::{
    Kind, PacketFields, StampLayout, defaults_timestamp_clock_id, scan_packet,
};

use super::inputs::InputSource;
use super::packets::{bundle_of, open_reader};

/// Packet bytes per batch (more only for one larger packet). A hand-over
/// usually blocks one side (one is always the faster), so batches are
/// large enough to make that rare: 32 KiB / 512 packets switched threads
/// about four times as often.
pub const BATCH_BYTES: usize = 128 << 10;

/// Packets per batch at most, which bounds the scan results' share (with
/// ~46-byte packets this limit, not the bytes, ends a batch).
pub const BATCH_PACKETS: usize = 2048;

/// Full batches waiting for the merging thread, per input: the channel's
/// bound, which keeps memory flat in input size.
pub const IN_FLIGHT: usize = 2;

/// Batches per input in all: those in flight, one filled, one read.
pub const BATCHES: usize = IN_FLIGHT + 2;

/// What the second pass uses of a packet's scan, owned: byte ranges are
/// relative to the packet's first byte.
#[derive(Clone, Debug)]
pub struct PacketScan {
    pub timestamp: Option<u64>,
    pub timestamp_clock_id: Option<u32>,
    pub trusted_packet_sequence_id: Option<u32>,
    pub machine_id: Option<u32>,
    pub data_field: Option<u32>,
    pub clears_incremental_state: bool,
    pub has_system_info: bool,
    /// None without `trace_packet_defaults`; else its nonzero
    /// `timestamp_clock_id` if it has one and decodes (read here, off the
    /// merging thread).
    pub defaults_clock: Option<Option<u32>>,
    pub clock_snapshot: Option<Range<u32>>,
    pub remote_clock_sync: Option<Range<u32>>,
    pub stamp_layout: StampLayout,
}

impl PacketScan {
    fn new(packet: &[u8], fields: &PacketFields<'_>) -> Self {
        let range = |b: &[u8]| {
            let start = (b.as_ptr() as usize - packet.as_ptr() as usize) as u32;
            start..start + b.len() as u32
        };
        Self {
            timestamp: fields.timestamp,
            timestamp_clock_id: fields.timestamp_clock_id,
            trusted_packet_sequence_id: fields.trusted_packet_sequence_id,
            machine_id: fields.machine_id,
            data_field: fields.data_field,
            clears_incremental_state: fields.clears_incremental_state(),
            has_system_info: fields.system_info.is_some(),
            defaults_clock: fields.trace_packet_defaults.map(|d| {
                defaults_timestamp_clock_id(d)
                    .ok()
                    .flatten()
                    .filter(|&c| c != 0)
            }),
            clock_snapshot: fields.clock_snapshot.map(range),
            remote_clock_sync: fields.remote_clock_sync.map(range),
            stamp_layout: fields.stamp_layout,
        }
    }

    pub fn kind(&self) -> Kind {
        Kind(self.data_field)
    }
}

/// One packet of a batch: its bytes are `bytes[start..end]` of the batch.
#[derive(Clone, Debug)]
struct Entry {
    start: u32,
    end: u32,
    scan: Option<PacketScan>,
}

/// Packets of one input, in order, with their scans.
#[derive(Debug, Default)]
struct Batch {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
}

impl Batch {
    fn new() -> Self {
        Self {
            bytes: Vec::with_capacity(BATCH_BYTES),
            entries: Vec::with_capacity(BATCH_PACKETS),
        }
    }

    /// Whether `len` more bytes go in another batch.
    fn is_full_for(&self, len: usize) -> bool {
        !self.entries.is_empty()
            && (self.bytes.len() + len > BATCH_BYTES || self.entries.len() == BATCH_PACKETS)
    }

    fn push(&mut self, packet: &[u8], scan: Option<PacketScan>) {
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(packet);
        self.entries.push(Entry {
            start,
            end: self.bytes.len() as u32,
            scan,
        });
    }

    /// Empties a batch for reuse; one grown for a large packet goes back
    /// to its usual size, so memory does not keep the largest packet.
    fn reset(&mut self) {
        self.bytes.clear();
        self.entries.clear();
        if self.bytes.capacity() > 2 * BATCH_BYTES {
            self.bytes = Vec::with_capacity(BATCH_BYTES);
        }
    }
}

/// The merging thread's end: the input's packets, one at a time.
pub struct PacketFeed {
    full: Option<Receiver<Batch>>,
    empty: Option<SyncSender<Batch>>,
    /// The batch being read and the index of its next packet.
    batch: Batch,
    next: usize,
    thread: Option<JoinHandle<()>>,
}

/// A packet of the feed: its bytes and scan (None: malformed).
pub type FedPacket<'a> = (&'a [u8], Option<&'a PacketScan>);

impl PacketFeed {
    /// Starts reading and scanning `source` on a thread of its own.
    pub fn spawn(source: &InputSource) -> io::Result<Self> {
        let (full_tx, full_rx) = sync_channel::<Batch>(IN_FLIGHT);
        // Room for every batch: returning one never waits.
        let (empty_tx, empty_rx) = sync_channel::<Batch>(BATCHES);
        let source = source.clone();
        let thread = std::thread::Builder::new()
            .name("tracesync-scan".into())
            .spawn(move || read_and_scan(&source, &full_tx, empty_rx))?;
        Ok(Self {
            full: Some(full_rx),
            empty: Some(empty_tx),
            batch: Batch::default(),
            next: 0,
            thread: Some(thread),
        })
    }

    /// Moves to the next packet; None at the end of the input. The packet
    /// stays readable with [`PacketFeed::current`] until the next call.
    pub fn advance(&mut self) -> Option<FedPacket<'_>> {
        if self.next == self.batch.entries.len() {
            let next = self.full.as_ref()?.recv().ok();
            let Some(next) = next else {
                self.full = None;
                return None;
            };
            let done = std::mem::replace(&mut self.batch, next);
            if let Some(empty) = self.empty.as_ref().filter(|_| done.bytes.capacity() > 0) {
                // Room for all batches: never full, never blocks.
                let _ = empty.try_send(done);
            }
            self.next = 0;
        }
        self.next += 1;
        self.current()
    }

    /// The packet [`PacketFeed::advance`] last returned.
    pub fn current(&self) -> Option<FedPacket<'_>> {
        let e = self.batch.entries.get(self.next.checked_sub(1)?)?;
        let bytes = &self.batch.bytes[e.start as usize..e.end as usize];
        Some((bytes, e.scan.as_ref()))
    }
}

impl Drop for PacketFeed {
    fn drop(&mut self) {
        // The thread's next send, or its wait for a batch, fails: it ends.
        self.full = None;
        self.empty = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The scan thread's work: the input's packets in batches, until its end or
/// its first fault, or until the merging thread stops listening.
fn read_and_scan(source: &InputSource, full: &SyncSender<Batch>, empty: Receiver<Batch>) {
    let Ok(mut reader) = open_reader(source) else {
        return;
    };
    let mut pool = Pool {
        empty,
        allocated: 0,
    };
    let Some(mut batch) = pool.take() else {
        return;
    };
    // The end, or a fault the first pass reported.
    while let Ok(Some(packet)) = reader.next_packet() {
        let scanned = scan_packet(packet.bytes);
        if let Some(range) = bundle_of(&packet, &scanned) {
            if reader.expand_last(range).is_err() {
                break;
            }
            continue;
        }
        let bytes = packet.bytes;
        if batch.is_full_for(bytes.len()) {
            if full.send(batch).is_err() {
                return;
            }
            let Some(next) = pool.take() else {
                return;
            };
            batch = next;
        }
        batch.push(bytes, scanned.ok().map(|f| PacketScan::new(bytes, &f)));
    }
    if !batch.entries.is_empty() {
        let _ = full.send(batch);
    }
}

/// The scan thread's batches: new ones until [`BATCHES`], then those the
/// merging thread returns.
struct Pool {
    empty: Receiver<Batch>,
    allocated: usize,
}

impl Pool {
    /// An empty batch; None once the merging thread is gone.
    fn take(&mut self) -> Option<Batch> {
        let mut batch = match self.empty.try_recv() {
            Ok(b) => b,
            Err(TryRecvError::Empty) if self.allocated < BATCHES => {
                self.allocated += 1;
                return Some(Batch::new());
            }
            Err(TryRecvError::Empty) => self.empty.recv().ok()?,
            Err(TryRecvError::Disconnected) => return None,
        };
        batch.reset();
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::inputs::expand_inputs;
    use flate2::Compression;
    use flate2::write::ZlibEncoder;
    use std::io::Write;
    use tracesync_protocol::scan::field;
    use tracesync_protocol::wire;

    fn record(out: &mut Vec<u8>, packet: &[u8]) {
        wire::put_len_field(out, 1, packet);
    }

    fn track_event(i: u64) -> Vec<u8> {
        let mut p = Vec::new();
        wire::put_varint_field(&mut p, field::TIMESTAMP, 1000 + i);
        wire::put_len_field(&mut p, 11, &[0x08, (i % 100) as u8]);
        wire::put_varint_field(&mut p, field::TRUSTED_PACKET_SEQUENCE_ID, 1 + i % 3);
        p
    }

    /// What the first pass's reader and scan yield: bytes, and whether
    /// the scan accepted each packet.
    fn read_directly(source: &InputSource) -> Vec<(Vec<u8>, bool)> {
        let mut reader = open_reader(source).unwrap();
        let mut got = Vec::new();
        while let Ok(Some(packet)) = reader.next_packet() {
            let scanned = scan_packet(packet.bytes);
            if let Some(range) = bundle_of(&packet, &scanned) {
                if reader.expand_last(range).is_err() {
                    break;
                }
                continue;
            }
            got.push((packet.bytes.to_vec(), scanned.is_ok()));
        }
        got
    }

    #[test]
    fn the_feed_yields_the_readers_packets_across_batches_up_to_a_fault() {
        let mut trace = Vec::new();
        // Several batches of small packets, some large ones, a malformed
        // one, a bundle, then a record cut short (the input's fault).
        for i in 0..(3 * BATCH_PACKETS as u64 + 17) {
            record(&mut trace, &track_event(i));
        }
        for i in 0..5u8 {
            let mut big = Vec::new();
            wire::put_len_field(&mut big, 11, &vec![i; BATCH_BYTES / 3 + usize::from(i)]);
            record(&mut trace, &big);
        }
        record(&mut trace, &vec![0u8; 40 * BATCH_BYTES]);
        record(&mut trace, &[0x42, 0x7f]);
        let mut inner = Vec::new();
        for i in 0..10 {
            record(&mut inner, &track_event(100_000 + i));
        }
        let mut z = ZlibEncoder::new(Vec::new(), Compression::fast());
        z.write_all(&inner).unwrap();
        let mut bundle = Vec::new();
        wire::put_len_field(&mut bundle, field::COMPRESSED_PACKETS, &z.finish().unwrap());
        record(&mut trace, &bundle);
        record(&mut trace, &track_event(7));
        trace.extend_from_slice(&[0x0a, 0x20, 0x40]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pftrace");
        std::fs::write(&path, &trace).unwrap();
        let source = expand_inputs(&[path], None).unwrap().traces.remove(0);

        let want = read_directly(&source);
        assert!(want.len() > 3 * BATCH_PACKETS + 30, "{}", want.len());
        assert!(want.iter().any(|(_, ok)| !ok), "a malformed packet");
        let mut feed = PacketFeed::spawn(&source).unwrap();
        let mut got = Vec::new();
        while let Some((bytes, scan)) = feed.advance() {
            if let Some(s) = scan {
                assert_eq!(s.stamp_layout, scan_packet(bytes).unwrap().stamp_layout);
            }
            got.push((bytes.to_vec(), scan.is_some()));
        }
        assert!(got == want, "{} packets, want {}", got.len(), want.len());
    }

    #[test]
    fn dropping_the_feed_early_ends_its_thread() {
        let mut trace = Vec::new();
        for i in 0..(20 * BATCH_PACKETS as u64) {
            record(&mut trace, &track_event(i));
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pftrace");
        std::fs::write(&path, &trace).unwrap();
        let source = expand_inputs(&[path], None).unwrap().traces.remove(0);
        let mut feed = PacketFeed::spawn(&source).unwrap();
        assert!(feed.advance().is_some());
        // The thread waits on a full channel (or for a batch): drop joins it.
        drop(feed);
    }
}
