//! A batch of one input's packets with their scans, and [`Scanner`], the
//! one code that reads, scans and fills batches: a scan thread calls it
//! ahead of the merging thread, an inline feed when the merging thread
//! needs the next packets.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::super::first_pass::later_fault;
use super::super::inputs::{Held, InputSource};
use super::super::packets::{InputReader, bundle_of, open_reader};
use super::packet_scan::{PacketScan, SequenceIndex};

/// A packet of the feed: its bytes and scan (None: malformed).
pub type FedPacket<'a> = (&'a [u8], Option<&'a PacketScan>);

/// How much one batch holds: packets are added while their bytes fit in
/// `bytes` and there are fewer than `packets`; a packet larger than
/// `bytes` goes in a batch alone (a "large" batch). `read`: bytes its
/// input's reader reads at a time (its buffer holds about twice that).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub bytes: usize,
    pub packets: usize,
    pub read: usize,
}

/// Packet room (byte capacity) of a feed's batches: what they hold now and
/// the most they held at once, for the tests of the bound.
#[derive(Debug, Default)]
pub struct Meter {
    held: AtomicUsize,
    peak: AtomicUsize,
}

impl Meter {
    fn resized(&self, old: usize, new: usize) {
        if new >= old {
            let held = self.held.fetch_add(new - old, Ordering::Relaxed) + (new - old);
            self.peak.fetch_max(held, Ordering::Relaxed);
        } else {
            self.held.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
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
#[derive(Debug)]
pub struct Batch {
    bytes: Vec<u8>,
    entries: Vec<Entry>,
    limits: Limits,
    meter: Arc<Meter>,
}

impl Batch {
    pub fn new(limits: Limits, meter: &Arc<Meter>) -> Self {
        meter.resized(0, limits.bytes);
        Self {
            bytes: Vec::with_capacity(limits.bytes),
            entries: Vec::with_capacity(limits.packets),
            limits,
            meter: Arc::clone(meter),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<FedPacket<'_>> {
        let e = self.entries.get(i)?;
        let bytes = &self.bytes[e.start as usize..e.end as usize];
        Some((bytes, e.scan.as_ref()))
    }

    /// Whether it holds a packet larger than its byte limit.
    pub fn is_large(&self) -> bool {
        self.bytes.capacity() > self.limits.bytes
    }

    /// Whether `len` more bytes go in another batch.
    #[inline]
    fn is_full_for(&self, len: usize) -> bool {
        !self.entries.is_empty()
            && (self.bytes.len() + len > self.limits.bytes
                || self.entries.len() == self.limits.packets)
    }

    #[inline]
    fn push(&mut self, packet: &[u8], scan: Option<PacketScan>) {
        if self.bytes.len() + packet.len() > self.bytes.capacity() {
            self.make_room(packet.len());
        }
        let start = self.bytes.len() as u32;
        self.bytes.extend_from_slice(packet);
        self.entries.push(Entry {
            start,
            end: self.bytes.len() as u32,
            scan,
        });
    }

    /// Pushes `packet`, which fits, with its scan written where the batch
    /// keeps it ([`PacketScan::scan_into`], its sequence numbered by
    /// `sequences`); returns the packet's `compressed_packets` bytes, or
    /// None if the scan rejects it (its scan is then None).
    #[inline]
    fn push_scanned<'p>(
        &mut self,
        packet: &'p [u8],
        sequences: &mut SequenceIndex,
    ) -> Option<Option<&'p [u8]>> {
        self.push(packet, Some(PacketScan::default()));
        let entry = self.entries.last_mut()?;
        let scan = entry.scan.as_mut()?;
        let scanned = scan.scan_into(packet);
        match scanned {
            Some(_) => scan.sequence = sequences.number(scan),
            None => entry.scan = None,
        }
        scanned
    }

    /// Takes back the last packet pushed (a bundle, expanded instead).
    fn pop(&mut self) {
        if let Some(e) = self.entries.pop() {
            self.bytes.truncate(e.start as usize);
        }
    }

    /// Room for a large packet, alone: for it, not twice the old room.
    #[cold]
    fn make_room(&mut self, len: usize) {
        let room = self.bytes.capacity();
        self.bytes.reserve_exact(len);
        self.meter.resized(room, self.bytes.capacity());
    }

    /// Empties a batch for reuse; a large one goes back to its usual size,
    /// so memory does not keep the largest packet.
    pub fn reset(&mut self) {
        self.bytes.clear();
        self.entries.clear();
        if self.is_large() {
            let old = self.bytes.capacity();
            self.bytes = Vec::with_capacity(self.limits.bytes);
            self.meter.resized(old, self.bytes.capacity());
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.meter.resized(self.bytes.capacity(), 0);
    }
}

/// Reads one input's packets (bundles expanded as the first pass did) and
/// scans each, into batches.
pub struct Scanner {
    /// None at the end of the input or its first fault (the first pass
    /// reported it).
    reader: Option<InputReader>,
    /// The scan of the reader's last packet, which did not fit in the last
    /// batch: it starts the next one.
    pending: Option<Option<PacketScan>>,
    sequences: SequenceIndex,
    /// A held input (converted once, on from its first packet): a fault
    /// here is new, kept for the merge to report.
    held: Option<(InputSource, Arc<Held>)>,
}

impl Scanner {
    /// Opens `source` again, its reader reading `read` bytes at a time.
    pub fn open(source: &InputSource, read: usize) -> io::Result<Self> {
        let mut reader = open_reader(source)?;
        reader.set_chunk_size(read);
        Ok(Self {
            reader: Some(reader),
            pending: None,
            sequences: SequenceIndex::default(),
            held: source.held.clone().map(|h| (source.clone(), h)),
        })
    }

    /// A scanner with no packets.
    pub fn empty() -> Self {
        Self {
            reader: None,
            pending: None,
            sequences: SequenceIndex::default(),
            held: None,
        }
    }

    /// Fills the empty `batch` with the next packets until one does not
    /// fit. `admit_large` is asked before a packet larger than the batch's
    /// byte limit goes in; it may wait, and false stops the fill. Returns
    /// whether more packets may follow: false at the end of the input (the
    /// batch holds its last packets, if any) or when `admit_large` refused.
    pub fn fill(&mut self, batch: &mut Batch, mut admit_large: impl FnMut() -> bool) -> bool {
        debug_assert!(batch.is_empty());
        let Some(reader) = self.reader.as_mut() else {
            return false;
        };
        if let Some(scan) = self.pending.take() {
            // The reader's last packet, still in its buffer.
            let Some(packet) = reader.last_packet() else {
                self.reader = None;
                return false;
            };
            if packet.bytes.len() > batch.limits.bytes && !admit_large() {
                return false;
            }
            batch.push(packet.bytes, scan);
        }
        // Until the end, or a fault (the first pass reported it, unless
        // the input is held).
        loop {
            let packet = match reader.next_packet() {
                Ok(Some(packet)) => packet,
                Ok(None) => break,
                Err(e) => {
                    if let Some((source, held)) = &self.held {
                        held.note_fault(later_fault(source, e));
                    }
                    break;
                }
            };
            let bytes = packet.bytes;
            if batch.is_full_for(bytes.len()) || bytes.len() > batch.limits.bytes {
                // The next batch's first packet, or a large one: its scan
                // kept aside (once per batch at most).
                let mut scan = PacketScan::default();
                let scanned = scan.scan_into(bytes);
                if let Some(range) = bundle_of(&packet, scanned) {
                    if reader.expand_last(range).is_err() {
                        break;
                    }
                    continue;
                }
                if scanned.is_some() {
                    scan.sequence = self.sequences.number(&scan);
                }
                let scan = scanned.is_some().then_some(scan);
                if batch.is_full_for(bytes.len()) {
                    self.pending = Some(scan);
                    return true;
                }
                if !admit_large() {
                    return false;
                }
                batch.push(bytes, scan);
                continue;
            }
            let scanned = batch.push_scanned(bytes, &mut self.sequences);
            if let Some(range) = bundle_of(&packet, scanned) {
                // Its inner packets come next, as the first pass read them.
                batch.pop();
                if reader.expand_last(range).is_err() {
                    break;
                }
            }
        }
        self.reader = None;
        false
    }
}
