//! How the first pass spreads over the processors: inputs are scanned on
//! as many threads as there are processors, and a large plain file is cut
//! at record boundaries into pieces (about its share of all the inputs'
//! bytes times the processors) scanned on threads of their own (one input
//! was the longest serial part of a merge: about a third of its wall
//! time).
//!
//! Invariant: the result is what [`scan_input`] gives for each input alone
//! (same packets, offsets, faults and clock events in stream order). The
//! cuts are guessed record starts (`likely_record_start`, from a window of
//! bytes at each target): no walk over the record headers before them
//! runs ahead of the threads. Each cut is confirmed by the piece before
//! it: that piece, read from a confirmed start (the first from the file's
//! first byte), ends without a fatal fault only if its records end exactly
//! at the cut. A piece that ends in one (a guess inside a packet, or a
//! file broken there) is scanned again from its start to the file's end
//! and the pieces after it are dropped. A piece's scan counts offsets from
//! its start ([`FileScan::then`] joins them in order).

use std::io::Read;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracesync_protocol::reader::{
    DEFAULT_MAX_PACKET_SIZE, TraceFile, TraceReader, likely_record_start,
};

use super::first_pass::{FileScan, scan_input, scan_packets};
use super::inputs::InputSource;

/// A file is cut only into pieces of at least this many bytes: below it,
/// the thread costs more than its share of the scan.
pub const MIN_PIECE_BYTES: u64 = 32 << 20;

/// Bytes read at each cut's target to guess a record start there.
const GUESS_WINDOW: u64 = 256 << 10;

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
    scan_work(inputs, &work, threads)
}

/// The first pass of `work` (each input's pieces in order, cut anywhere)
/// on `threads` threads, each input's pieces joined.
fn scan_work(inputs: &[InputSource], work: &[Work], threads: usize) -> Vec<FileScan> {
    let results = run(work, threads.min(work.len()), |w| match *w {
        Work::Whole(i) => scan_input(&inputs[i]),
        Work::Piece { input, from, to } => scan_piece(&inputs[input], from, to),
    });
    let mut scans: Vec<Option<FileScan>> = inputs.iter().map(|_| None).collect();
    // Inputs whose rest was scanned again after a piece that failed.
    let mut finished = vec![false; inputs.len()];
    for (w, scan) in work.iter().zip(results) {
        let i = w.input();
        if finished[i] {
            continue;
        }
        let mut scan = scan.unwrap_or_default();
        if let Work::Piece {
            from, to: Some(_), ..
        } = *w
            && scan.faults.iter().any(|f| f.fatal)
        {
            // The cut after it is not confirmed: read on to the end.
            scan = scan_piece(&inputs[i], from, None);
            finished[i] = true;
        }
        let slot = &mut scans[i];
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
/// plain file large enough, cut at record starts guessed near the targets
/// (unconfirmed: see the module's invariant), else whole. Records too
/// large for a guess (a few per window) or gzip'd bytes give no guess.
fn cuts(i: usize, source: &InputSource, pieces: usize, min_piece: u64) -> Vec<Work> {
    let whole = vec![Work::Whole(i)];
    let Some(len) = source.file_len() else {
        return whole;
    };
    let pieces = pieces.min((len / min_piece.max(1)) as usize);
    if pieces < 2 || !starts_with_a_record(source) {
        return whole;
    }
    let mut bounds: Vec<u64> = (1..pieces as u64)
        .filter_map(|k| guess_record_start(source, len / pieces as u64 * k))
        .filter(|&b| b > 0 && b < len)
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
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

/// Whether the file's first byte is a record's tag (0x0a): not gzip'd
/// (0x1f 0x8b), whose pieces cannot be read alone.
fn starts_with_a_record(source: &InputSource) -> bool {
    let Some(Ok(mut r)) = source.open_range(0, Some(1)) else {
        return false;
    };
    let mut first = [0u8; 1];
    matches!(r.read(&mut first), Ok(1)) && first[0] == 0x0a
}

/// A likely record start shortly after byte `target` of a plain file.
fn guess_record_start(source: &InputSource, target: u64) -> Option<u64> {
    let Some(Ok(r)) = source.open_range(target, Some(GUESS_WINDOW)) else {
        return None;
    };
    let mut window = Vec::new();
    r.take(GUESS_WINDOW).read_to_end(&mut window).ok()?;
    let at = likely_record_start(&window, DEFAULT_MAX_PACKET_SIZE)?;
    Some(target + at as u64)
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
mod tests;
