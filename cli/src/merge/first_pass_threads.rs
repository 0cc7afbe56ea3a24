//! How the first pass spreads over the processors: inputs are scanned on
//! as many threads as there are processors, and a large plain file is cut
//! at record boundaries into pieces (about its share of all the inputs'
//! bytes times the processors) scanned on threads of their own (one input
//! was the longest serial part of a merge: about a third of its wall
//! time).
//!
//! Invariant: the result is what [`scan_input`] gives for each input alone
//! (same packets, offsets, faults and clock events in stream order): the
//! cuts are record starts found by walking the record headers from the
//! file's first byte with the reader's own framing, and a piece's scan
//! counts offsets from its start ([`FileScan::then`] joins them in order).

use std::io::Read;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracesync_protocol::reader::{
    DEFAULT_MAX_PACKET_SIZE, TraceFile, TraceReader, leading_records, record_boundaries,
};

use super::first_pass::{FileScan, scan_input, scan_packets};
use super::inputs::InputSource;

/// A file is cut only into pieces of at least this many bytes: below it,
/// the thread costs more than its share of the scan.
pub const MIN_PIECE_BYTES: u64 = 32 << 20;

/// Cut only files whose records average at most this many bytes (in the
/// first [`SAMPLE_BYTES`]): the walk to the cuts reads the bytes once
/// more, which pays for itself only where the scan's cost per packet
/// outweighs that read. A 300 MB file of 46-byte packets: wall time 0.84x
/// cut in two; one of 850 bytes on average (a fifth 4 KiB packets):
/// 1.04x wall, 1.13x CPU.
const MAX_MEAN_RECORD: u64 = 512;

/// Bytes sampled for [`MAX_MEAN_RECORD`].
const SAMPLE_BYTES: u64 = 1 << 20;

/// One unit of the first pass: a whole input, or bytes `from..to` (to its
/// end when `to` is None) of a plain file input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    Whole(usize),
    Piece {
        input: usize,
        from: u64,
        to: Option<u64>,
    },
}

impl Work {
    fn input(&self) -> usize {
        match *self {
            Work::Whole(i) | Work::Piece { input: i, .. } => i,
        }
    }
}

/// The first pass of every input, in input order, on `threads` threads
/// (each holding one reader at a time, so memory stays one reader per
/// thread).
pub fn scan_inputs(inputs: &[InputSource], threads: usize) -> Vec<FileScan> {
    scan_inputs_cut(inputs, threads, MIN_PIECE_BYTES)
}

/// [`scan_inputs`] with pieces of at least `min_piece` bytes.
fn scan_inputs_cut(inputs: &[InputSource], threads: usize, min_piece: u64) -> Vec<FileScan> {
    let threads = threads.max(1);
    let lens: Vec<u64> = inputs.iter().map(|s| s.file_len().unwrap_or(0)).collect();
    let work: Vec<Work> = inputs
        .iter()
        .zip(shares(&lens, threads))
        .enumerate()
        .flat_map(|(i, (source, share))| cuts(i, source, share, min_piece))
        .collect();
    let results = run(&work, threads.min(work.len()), |w| match *w {
        Work::Whole(i) => scan_input(&inputs[i]),
        Work::Piece { input, from, to } => scan_piece(&inputs[input], from, to),
    });
    let mut scans: Vec<Option<FileScan>> = inputs.iter().map(|_| None).collect();
    for (w, scan) in work.iter().zip(results) {
        let scan = scan.unwrap_or_default();
        let slot = &mut scans[w.input()];
        *slot = Some(match slot.take() {
            None => scan,
            Some(before) => before.then(scan),
        });
    }
    scans
        .into_iter()
        .zip(inputs)
        .map(|(scan, source)| {
            let mut scan = scan.unwrap_or_default();
            scan.note_if_empty(source);
            scan
        })
        .collect()
}

/// Pieces for inputs of `lens` bytes on `threads` threads: each input's
/// share of the bytes times the threads, rounded up, at least one. One
/// large input beside small ones gets the threads they leave idle.
fn shares(lens: &[u64], threads: usize) -> Vec<usize> {
    let total = lens.iter().map(|&l| u128::from(l)).sum::<u128>().max(1);
    lens.iter()
        .map(|&len| {
            let share = (threads as u128 * u128::from(len)).div_ceil(total);
            usize::try_from(share).unwrap_or(threads).max(1)
        })
        .collect()
}

/// The work of input `i`: `pieces` pieces of about equal bytes if it is a
/// plain file large enough and its framing reaches the cuts, else whole.
fn cuts(i: usize, source: &InputSource, pieces: usize, min_piece: u64) -> Vec<Work> {
    let whole = vec![Work::Whole(i)];
    let Some(len) = source.file_len() else {
        return whole;
    };
    let pieces = pieces.min((len / min_piece.max(1)) as usize);
    if pieces < 2 {
        return whole;
    }
    if !small_records(source) {
        return whole;
    }
    let targets: Vec<u64> = (1..pieces as u64)
        .map(|k| len / pieces as u64 * k)
        .collect();
    let bounds = match source.open_range(0, None) {
        Some(Ok(mut r)) => {
            record_boundaries(&mut r, &targets, DEFAULT_MAX_PACKET_SIZE).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    // A cut at 0 (a target inside the first record) would leave the first
    // piece empty.
    let bounds: Vec<u64> = bounds.into_iter().filter(|&b| b > 0).collect();
    if bounds.is_empty() {
        return whole;
    }
    let mut work = Vec::with_capacity(bounds.len() + 1);
    let mut from = 0;
    for &b in &bounds {
        work.push(Work::Piece {
            input: i,
            from,
            to: Some(b),
        });
        from = b;
    }
    work.push(Work::Piece {
        input: i,
        from,
        to: None,
    });
    work
}

/// Whether the file's first [`SAMPLE_BYTES`] hold records of at most
/// [`MAX_MEAN_RECORD`] bytes on average. A gzip'd file's first byte is no
/// record tag: none.
fn small_records(source: &InputSource) -> bool {
    let Some(Ok(mut r)) = source.open_range(0, Some(SAMPLE_BYTES)) else {
        return false;
    };
    let mut sample = Vec::new();
    if r.read_to_end(&mut sample).is_err() {
        return false;
    }
    let (records, bytes) = leading_records(&sample, DEFAULT_MAX_PACKET_SIZE);
    records > 0 && bytes / records <= MAX_MEAN_RECORD
}

/// The first pass over bytes `from..to` of a plain file input, offsets
/// counted from the file's start.
fn scan_piece(source: &InputSource, from: u64, to: Option<u64>) -> FileScan {
    let opened = match source.open_range(from, to.map(|t| t - from)) {
        Some(Ok(r)) => r,
        Some(Err(e)) => return FileScan::cannot_read(source, &e),
        None => return scan_input(source),
    };
    let mut reader = TraceReader::new();
    reader.set_expand_bundles(false);
    reader.set_position(from);
    scan_packets(source, TraceFile::plain(opened, reader))
}

/// `f` of every item of `work` on `threads` threads (each takes the next
/// item not yet taken), results in `work`'s order (None only for an item
/// whose thread panicked, which the scope then re-raises).
fn run<T: Sync, R: Send>(work: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<Option<R>> {
    if threads <= 1 {
        return work.iter().map(|w| Some(f(w))).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = work.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = work.get(i) else { break };
                    let r = f(item);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

#[cfg(test)]
#[path = "first_pass_threads_tests.rs"]
mod tests;
