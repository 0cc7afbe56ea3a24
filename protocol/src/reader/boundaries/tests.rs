//! Tests of [`likely_record_start`], and of the rule that makes any cut
//! safe: pieces read from cuts, each confirmed by the piece before it
//! ending cleanly there (else read again to the end), give what the whole
//! stream's reader gives.

use super::super::{FileReadError, TraceFile, TraceReader};
use super::*;
use crate::wire;
use proptest::prelude::*;

/// (bytes, offset) of every packet, then the error that ended the stream.
type Read = (Vec<(Vec<u8>, u64)>, Option<String>);

fn read_whole(stream: &[u8], max: usize) -> Read {
    read_piece(stream, 0, stream.len(), max)
}

/// Reads `stream[from..to]` as a piece starting at stream offset `from`.
fn read_piece(stream: &[u8], from: usize, to: usize, max: usize) -> Read {
    let mut reader = TraceReader::with_max_packet_size(max);
    reader.set_position(from as u64);
    let mut f = TraceFile::plain(&stream[from..to], reader);
    let mut got = Vec::new();
    loop {
        match f.next_packet() {
            Ok(Some(p)) => got.push((p.bytes.to_vec(), p.offset)),
            Ok(None) => return (got, None),
            Err(FileReadError::Format(e)) => return (got, Some(e.to_string())),
            Err(e) => return (got, Some(e.to_string())),
        }
    }
}

/// The pieces between `cuts` (any offsets, ascending), read one by one
/// and joined; a piece that ends in an error is read again from its start
/// to the end of the stream, and that ends the stream: a cut is confirmed
/// only by the piece before it ending there without an error.
fn read_pieces(stream: &[u8], cuts: &[u64], max: usize) -> Read {
    let mut bounds = vec![0usize];
    bounds.extend(cuts.iter().map(|&b| b as usize));
    bounds.push(stream.len());
    let mut all = Vec::new();
    for w in bounds.windows(2) {
        let (got, err) = read_piece(stream, w[0], w[1], max);
        if err.is_some() && w[1] < stream.len() {
            let (got, err) = read_piece(stream, w[0], stream.len(), max);
            all.extend(got);
            return (all, err);
        }
        all.extend(got);
        if err.is_some() {
            return (all, err);
        }
    }
    (all, None)
}

fn frame(sizes: &[usize]) -> (Vec<u8>, Vec<u64>) {
    let mut out = Vec::new();
    let mut starts = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        starts.push(out.len() as u64);
        wire::put_trace_packet(&mut out, &vec![i as u8; n]);
    }
    (out, starts)
}

/// A stream of TracePacket-like records: timestamp, sequence id and a
/// small payload, as a trace of track events is.
fn packets(n: u64) -> (Vec<u8>, Vec<u64>) {
    let mut out = Vec::new();
    let mut starts = Vec::new();
    for i in 0..n {
        let mut p = Vec::new();
        wire::put_varint_field(&mut p, 8, 1_000_000_000 + i * 997);
        wire::put_varint_field(&mut p, 10, 1 + i % 8);
        let payload: Vec<u8> = (0..(i % 40) as u8).collect();
        wire::put_len_field(&mut p, 11, &payload);
        starts.push(out.len() as u64);
        wire::put_trace_packet(&mut out, &p);
    }
    (out, starts)
}

#[test]
fn a_guess_among_small_packets_is_a_record_start_a_quarter_in() {
    let (stream, starts) = packets(5_000);
    for from in (0..stream.len() - 4096).step_by(1013) {
        let window = &stream[from..from + 4096];
        let guess = likely_record_start(window, 1 << 20).map(|g| (from + g) as u64);
        let next = starts.iter().copied().find(|&s| s >= (from + 1024) as u64);
        assert_eq!(guess, next, "window at {from}");
    }
}

#[test]
fn no_guess_without_enough_records_or_in_bytes_that_do_not_frame() {
    let (stream, starts) = frame(&[5; 24]);
    // 24 records of 7 bytes: 18 start at or after a quarter of them, 16 of
    // them fewer bytes later.
    assert_eq!(
        likely_record_start(&stream, 1 << 20),
        Some(starts[6] as usize)
    );
    assert_eq!(likely_record_start(&stream[7 * 6..], 1 << 20), None);
    assert_eq!(likely_record_start(&[0u8; 4096], 1 << 20), None);
    assert_eq!(likely_record_start(&[], 1 << 20), None);
    // Records over the packet limit do not frame.
    let (big, _) = frame(&[300; 40]);
    assert_eq!(likely_record_start(&big, 100), None);
}

#[test]
fn a_false_guess_is_caught_by_the_piece_before_it() {
    // A packet whose bytes frame as 40 records of their own: a window
    // starting inside it guesses a start that is not one.
    let mut inner = Vec::new();
    for _ in 0..40 {
        wire::put_trace_packet(&mut inner, &[0x08, 0x01]);
    }
    let mut stream = Vec::new();
    wire::put_trace_packet(&mut stream, &[0x08, 0x05]);
    wire::put_trace_packet(&mut stream, &inner);
    let after = stream.len();
    let inside = after - inner.len();
    stream.extend(packets(30).0);
    // The window is short, so a quarter of it still lies inside.
    let window = &stream[inside..after + 60];
    let guess = inside + likely_record_start(window, 1 << 20).unwrap();
    assert!(guess < after, "the guess lies inside the outer packet");
    let whole = read_whole(&stream, 1 << 20);
    assert_eq!(whole.0.len(), 32);
    assert_eq!(read_pieces(&stream, &[guess as u64], 1 << 20), whole);
}

#[test]
fn a_position_is_only_set_before_input() {
    let (stream, _) = frame(&[3, 4]);
    let mut r = TraceReader::new();
    r.push(&stream);
    r.set_position(1000);
    assert_eq!(r.next_packet().unwrap().unwrap().offset, 0);
}

proptest! {
    #[test]
    fn pieces_read_from_any_cuts_give_the_whole_stream(
        sizes in proptest::collection::vec(0usize..300, 0..60),
        cuts in proptest::collection::vec(0u64..20_000, 0..6),
        guessed in proptest::collection::vec(0u64..20_000, 0..3),
        damage in proptest::option::of((0usize..20_000, any::<u8>())),
        cut in 0usize..200,
        max in prop_oneof![Just(1usize << 20), 100usize..400],
    ) {
        let (mut stream, _) = frame(&sizes);
        if let Some((at, byte)) = damage
            && !stream.is_empty()
        {
            let at = at % stream.len();
            stream[at] = byte;
        }
        stream.truncate(stream.len().saturating_sub(cut % 3 * cut));
        let len = stream.len() as u64;
        // Any offsets, and guesses from windows: either may be no record
        // start (the packets' own bytes are 0..60 repeated, some 0x0a).
        let mut cuts: Vec<u64> = cuts.into_iter().filter(|&c| c > 0 && c < len).collect();
        for g in guessed.into_iter().filter(|&g| g < len) {
            let window = &stream[g as usize..(g as usize + 2048).min(stream.len())];
            if let Some(p) = likely_record_start(window, max) {
                cuts.push(g + p as u64);
            }
        }
        cuts.retain(|&c| c > 0 && c < len);
        cuts.sort_unstable();
        cuts.dedup();
        prop_assert_eq!(read_pieces(&stream, &cuts, max), read_whole(&stream, max));
    }
}
