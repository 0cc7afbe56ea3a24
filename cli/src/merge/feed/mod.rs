//! The second pass's read and scan of its inputs: each input's packets
//! with their scans, in batches, to the merging thread, which resolves and
//! stamps them in merge order (the live clock graph is shared by all
//! inputs, so that part stays on one thread).
//!
//! One code fills every batch (`Scanner::fill`); an input is fed one of
//! two ways:
//! - threaded: a scan thread of its own fills batches ahead and sends them
//!   over a bounded channel (`thread`);
//! - inline: the merging thread fills the input's one batch when it has
//!   read the last one.
//!
//! At most [`MAX_SCAN_THREADS`] inputs are threaded, those with the most
//! packets ([`threaded_inputs`]): threads do not grow with the number of
//! inputs, and an inline input holds one small batch.
//!
//! Invariants:
//! - The packets, in order, are those the reader yields to the first pass
//!   (bundle records replaced by their inner packets), each with its bytes
//!   and [`PacketScan`] (None for a packet the scan rejects), whichever
//!   way the input is fed; a read or bundle error ends the input after the
//!   packets before it, silently: the first pass reported it, with its
//!   offset (a held input's, which the first pass read only to its first
//!   packet, is kept on its [`Held`](super::inputs::Held) for the merge to
//!   report). An input that cannot be opened again is an error
//!   ([`OpenError`]), unless the first pass found no packet in it.
//! - Batches per input: threaded at most [`BATCHES`] ([`IN_FLIGHT`] in
//!   the channel, one being filled, one read), reused: the merging thread
//!   sends each back before it waits for the next; inline one.
//! - Bytes per input (the batches' packet room, counted by [`Meter`]): a
//!   batch holds at most its [`Limits`]' bytes, except a large batch, which
//!   holds one larger packet alone and shrinks back when emptied. A scan
//!   thread fills a large batch only when no other of its input is out, so
//!   a threaded input's batches hold at most
//!   `(BATCHES - 1) * THREADED.bytes + max(THREADED.bytes, largest packet)`
//!   and an inline input's `max(INLINE.bytes, largest packet)`. (Its
//!   reader's buffer, not counted here, holds about twice its `read`,
//!   more only for a larger packet.)
//! - Dropping a [`PacketFeed`] ends its thread (its next send, or its wait
//!   for a batch, fails) and waits for it.

mod batch;
mod packet_scan;
mod thread;

use std::io;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use batch::{Batch, Scanner};
pub use batch::{FedPacket, Limits, Meter};
pub use packet_scan::PacketScan;

use tracesync_protocol::reader::FILE_CHUNK_SIZE;

use super::inputs::InputSource;

/// A threaded input's batches. A hand-over usually blocks one side (one is
/// always the faster), so batches are large enough to make that rare:
/// 32 KiB / 512 packets switched threads about four times as often. The
/// packet limit bounds the scan results' share (with ~46-byte packets it,
/// not the bytes, ends a batch).
pub const THREADED: Limits = Limits {
    bytes: 128 << 10,
    packets: 2048,
    read: FILE_CHUNK_SIZE,
};

/// An inline input's one batch: no hand-over to amortise, so small (its
/// scan results are ~120 bytes a packet; 128 KiB / 2048 cost the same
/// instructions). Its reader stays open for the whole merge beside all the
/// others, so it reads little at a time: with the default 256 KiB a merge
/// of 2000 inputs of 68 KB peaked at 1170 MiB, with 32 KiB at 330 MiB.
pub const INLINE: Limits = Limits {
    bytes: 32 << 10,
    packets: 512,
    read: 32 << 10,
};

/// Full batches waiting for the merging thread, per threaded input: the
/// channel's bound, which keeps memory flat in input size.
pub const IN_FLIGHT: usize = 2;

/// Batches per threaded input in all: those in flight, one filled, one read.
pub const BATCHES: usize = IN_FLIGHT + 2;

/// Scan threads of a merge at most, whatever the number of inputs. Not
/// tied to the cores: the scan threads together need less than the
/// merging thread, so each input moved to a thread helps where any core
/// is free (16 small-packet inputs, 2 cores: 16 threads took ~10% off the
/// wall time of 4), and each costs ~1.3 MiB of batches. Eight covers the
/// usual merge of a few machines' traces.
pub const MAX_SCAN_THREADS: usize = 8;

/// Which inputs get a scan thread, given each input's packet count from
/// the first pass (the scan's cost is mostly per packet): the `max` with
/// the most packets, ties to the earlier input.
pub fn threaded_inputs(packets: &[u64], max: usize) -> Vec<bool> {
    let mut order: Vec<usize> = (0..packets.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(packets[i]));
    let mut threaded = vec![false; packets.len()];
    for &i in order.iter().take(max) {
        threaded[i] = true;
    }
    threaded
}

/// The merging thread's end: the input's packets, one at a time.
pub struct PacketFeed {
    /// The batch being read (the next packet is at `next`); None before
    /// the first, between batches of a threaded input, and at the end.
    batch: Option<Batch>,
    next: usize,
    source: Source,
    meter: Arc<Meter>,
}

enum Source {
    Thread {
        full: Option<Receiver<Batch>>,
        empty: Option<SyncSender<Batch>>,
        thread: Option<JoinHandle<()>>,
    },
    /// `more`: false once the scanner has reached the end. Boxed: a
    /// reader is several times the size of the other variant.
    Inline { scanner: Box<Scanner>, more: bool },
}

/// Why an input cannot be fed.
#[derive(Debug)]
pub enum OpenError {
    /// It cannot be opened again (the first pass read it).
    Reopen(io::Error),
    /// Its scan thread cannot be started.
    Thread(io::Error),
}

impl PacketFeed {
    /// Feeds `source`: nothing if the first pass found no packet in it (it
    /// may not open: reported then), else on a thread of its own if
    /// `threaded`, else inline.
    pub fn open(source: &InputSource, packets: u64, threaded: bool) -> Result<Self, OpenError> {
        match (packets, threaded) {
            (0, _) => Ok(Self::empty()),
            (_, true) => Self::spawn(source),
            (_, false) => Self::inline(source),
        }
    }

    /// Opens `source` again and starts reading and scanning it on a thread
    /// of its own.
    pub fn spawn(source: &InputSource) -> Result<Self, OpenError> {
        // Opened here, so that a failure is the merge's error.
        let scanner = Scanner::open(source, THREADED.read).map_err(OpenError::Reopen)?;
        let (full_tx, full_rx) = sync_channel::<Batch>(IN_FLIGHT);
        // Room for every batch: returning one never waits.
        let (empty_tx, empty_rx) = sync_channel::<Batch>(BATCHES);
        let meter = Arc::new(Meter::default());
        let thread_meter = Arc::clone(&meter);
        let thread = std::thread::Builder::new()
            .name("tracesync-scan".into())
            .spawn(move || thread::read_and_scan(scanner, &full_tx, empty_rx, thread_meter))
            .map_err(OpenError::Thread)?;
        Ok(Self {
            batch: None,
            next: 0,
            source: Source::Thread {
                full: Some(full_rx),
                empty: Some(empty_tx),
                thread: Some(thread),
            },
            meter,
        })
    }

    /// Opens `source` again, to read and scan it on the merging thread, a
    /// batch at a time.
    pub fn inline(source: &InputSource) -> Result<Self, OpenError> {
        let scanner = Scanner::open(source, INLINE.read).map_err(OpenError::Reopen)?;
        Ok(Self::inline_from(scanner))
    }

    /// A feed with no packets, for an input the first pass found none in
    /// (perhaps because it could not open it: already reported).
    pub fn empty() -> Self {
        Self::inline_from(Scanner::empty())
    }

    fn inline_from(scanner: Scanner) -> Self {
        Self {
            batch: None,
            next: 0,
            source: Source::Inline {
                scanner: Box::new(scanner),
                more: true,
            },
            meter: Arc::new(Meter::default()),
        }
    }

    /// Moves to the next packet; None at the end of the input. The packet
    /// stays readable with [`PacketFeed::current`] until the next call.
    #[inline]
    pub fn advance(&mut self) -> Option<FedPacket<'_>> {
        if self.next == self.batch.as_ref().map_or(0, Batch::len) {
            if !self.refill() {
                return None;
            }
            self.next = 0;
        }
        self.next += 1;
        self.current()
    }

    /// The packet [`PacketFeed::advance`] last returned.
    #[inline]
    pub fn current(&self) -> Option<FedPacket<'_>> {
        self.batch.as_ref()?.get(self.next.checked_sub(1)?)
    }

    /// Replaces the batch read to its end with the next; false at the end.
    fn refill(&mut self) -> bool {
        match &mut self.source {
            Source::Thread { full, empty, .. } => {
                // Back before the wait: a scan thread may be waiting for
                // this batch (a large one) to fill the next.
                if let (Some(done), Some(empty)) = (self.batch.take(), empty.as_ref()) {
                    // Room for all batches: never full, never blocks.
                    let _ = empty.try_send(done);
                }
                self.batch = full.as_ref().and_then(|f| f.recv().ok());
                if self.batch.is_none() {
                    *full = None;
                }
            }
            Source::Inline { scanner, more } => {
                if !*more {
                    self.batch = None;
                    return false;
                }
                let batch = self
                    .batch
                    .get_or_insert_with(|| Batch::new(INLINE, &self.meter));
                batch.reset();
                *more = scanner.fill(batch, || true);
                if batch.is_empty() {
                    self.batch = None;
                }
            }
        }
        self.batch.is_some()
    }

    /// The packet room of this input's batches (for the tests of the bound).
    #[cfg(test)]
    pub fn meter(&self) -> Arc<Meter> {
        Arc::clone(&self.meter)
    }
}

impl Drop for PacketFeed {
    fn drop(&mut self) {
        if let Source::Thread {
            full,
            empty,
            thread,
        } = &mut self.source
        {
            // The thread's next send, or its wait for a batch, fails: it ends.
            *full = None;
            *empty = None;
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests;
