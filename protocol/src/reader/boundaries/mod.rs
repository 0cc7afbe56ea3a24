//! Record starts in the middle of a plain (not gzip'd) Trace stream,
//! guessed from a window of its bytes, so pieces of one file can be read
//! on threads of their own without walking every record header before
//! the cut.
//!
//! A guess is only a guess: a packet's own bytes can frame as records
//! too. It is confirmed by the piece before it: a piece read from a true
//! record start (with [`TraceReader::set_position`] and
//! [`TraceFile::plain`]) that ends without an error at the guess ends on a
//! record boundary, so the piece after it yields the packets, offsets and
//! errors the whole file's reader yields for the same bytes. A piece that
//! ends in an error is read again to the end of the stream instead.
//!
//! [`TraceReader::set_position`]: super::TraceReader::set_position
//! [`TraceFile::plain`]: super::TraceFile::plain

use super::framing::{Header, record_header};

/// Records that must frame back to back from a guessed start (and reach
/// the window's end) before it is taken.
const MIN_CHAIN: u64 = 16;

/// A guess at a record start in `window`, bytes read from inside a
/// stream: a chain of records with the reader's framing and packet limit
/// `max_packet_size` that runs back to back to the window's end (the last
/// may run past it) is found from the first offset that has one, and the
/// guess is its first record start at or after a quarter of the window,
/// with at least `MIN_CHAIN` records after it. None if there is none.
///
/// Why not the chain's first start: a packet's own bytes often frame for
/// a record or two that lands on a true record start (a byte 0x0a, then a
/// length reaching the next packet), and from there the chains are one.
/// A quarter of the window later they have merged: only a framing of its
/// own all along the window (as no real trace holds) would still differ.
///
/// Linear in the window: an offset a failed chain passed through is not
/// tried again (its own chain would fail the same way).
pub fn likely_record_start(window: &[u8], max_packet_size: usize) -> Option<usize> {
    let settled = window.len() / 4;
    let mut failed = vec![false; window.len()];
    let mut chain = Vec::new();
    for start in 0..settled {
        if failed[start] {
            continue;
        }
        chain.clear();
        let mut pos = start;
        let reaches_end = loop {
            if pos >= window.len() {
                break true;
            }
            if failed[pos] {
                break false;
            }
            chain.push(pos);
            match record_header(&window[pos..], max_packet_size) {
                Ok(Header::Complete(h, len)) => pos = (pos + h).saturating_add(len as usize),
                Ok(Header::Incomplete) => break true,
                Err(_) => break false,
            }
        };
        if !reaches_end {
            for &p in &chain {
                failed[p] = true;
            }
            continue;
        }
        // The last start ends past the window (or is a cut header) unless
        // the chain ends exactly at the window's end.
        let whole = chain.len() - usize::from(pos != window.len());
        let first = chain.partition_point(|&p| p < settled);
        let enough = whole.saturating_sub(first) as u64 >= MIN_CHAIN;
        return enough.then(|| chain[first]);
    }
    None
}

#[cfg(test)]
mod tests;
