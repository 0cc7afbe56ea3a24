//! Tests of [`record_boundaries`]: pieces read from its boundaries give
//! what the whole stream's reader gives.

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

/// The pieces between `boundaries`, read one by one and joined; a piece
/// that ends in an error ends the stream, as in the whole reader.
fn read_pieces(stream: &[u8], boundaries: &[u64], max: usize) -> Read {
    let mut cuts = vec![0usize];
    cuts.extend(boundaries.iter().map(|&b| b as usize));
    cuts.push(stream.len());
    let mut all = Vec::new();
    for w in cuts.windows(2) {
        let (got, err) = read_piece(stream, w[0], w[1], max);
        all.extend(got);
        if err.is_some() {
            return (all, err);
        }
    }
    (all, None)
}

/// One byte per read: every header straddles a refill.
struct Trickle<'a>(&'a [u8]);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.0.len()).min(1);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
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

#[test]
fn boundaries_are_the_first_record_starts_at_or_after_the_targets() {
    // A 3 MiB record (longer than a read) among small ones.
    let (stream, starts) = frame(&[5, 0, 200, 3 << 20, 1, 70_000, 9]);
    let max = 4 << 20;
    let targets = [0, 1, 7, 300, 400, starts[4], starts[6] + 1];
    let got = record_boundaries(&mut &stream[..], &targets, max).unwrap();
    // 0 gives 0, 1 the next start (7, the second record's); 300, 400 and
    // the fifth record's start give that start (the 3 MiB record's end,
    // kept once); past the last record, none.
    assert_eq!(got, [0, starts[1], starts[4]]);
    let trickled = record_boundaries(&mut Trickle(&stream), &targets, max).unwrap();
    assert_eq!(trickled, got);
    assert_eq!(read_pieces(&stream, &got, max), read_whole(&stream, max));
}

#[test]
fn the_walk_stops_before_a_record_it_cannot_frame() {
    let (mut stream, starts) = frame(&[10, 20, 30]);
    let bad = stream.len() as u64;
    stream.extend_from_slice(&[0x12, 0x01, 0x00]); // field 2: not a packet
    stream.extend(frame(&[40]).0);
    // A record starts at `bad`: its piece reports it; the walk ends there.
    let got = record_boundaries(&mut &stream[..], &[5, 40, bad + 1], 1 << 20).unwrap();
    assert_eq!(got, [starts[1], bad]);
    let whole = read_whole(&stream, 1 << 20);
    assert!(
        whole
            .1
            .as_deref()
            .unwrap()
            .contains(&format!("byte offset {bad}"))
    );
    assert_eq!(read_pieces(&stream, &got, 1 << 20), whole);
}

#[test]
fn a_truncated_tail_and_a_too_large_packet_end_the_walk() {
    let (stream, starts) = frame(&[10, 20, 30]);
    let cut = &stream[..stream.len() - 5];
    let got = record_boundaries(&mut &cut[..], &[1, starts[2] + 1], 1 << 20).unwrap();
    assert_eq!(got, [starts[1]]);
    assert_eq!(read_pieces(cut, &got, 1 << 20), read_whole(cut, 1 << 20));
    // A limit of 25 bytes: the third record is refused where it starts.
    let got = record_boundaries(&mut &stream[..], &[1, starts[2] + 1], 25).unwrap();
    assert_eq!(got, [starts[1]]);
    let whole = read_whole(&stream, 25);
    assert!(whole.1.is_some());
    assert_eq!(read_pieces(&stream, &got, 25), whole);
}

#[test]
fn leading_records_counts_whole_records_only() {
    let (stream, starts) = frame(&[5, 0, 200, 9]);
    assert_eq!(leading_records(&stream, 1 << 20), (4, stream.len() as u64));
    assert_eq!(
        leading_records(&stream[..starts[3] as usize + 3], 1 << 20),
        (3, starts[3])
    );
    assert_eq!(leading_records(&[0x12, 0], 1 << 20), (0, 0));
    assert_eq!(leading_records(&[], 1 << 20), (0, 0));
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
    fn pieces_read_alone_give_the_whole_stream(
        sizes in proptest::collection::vec(0usize..300, 0..60),
        targets in proptest::collection::vec(0u64..20_000, 0..6),
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
        let mut targets = targets;
        targets.sort_unstable();
        let got = record_boundaries(&mut Trickle(&stream), &targets, max).unwrap();
        prop_assert!(got.windows(2).all(|w| w[0] < w[1]));
        prop_assert!(got.iter().all(|&b| (b as usize) < stream.len()));
        prop_assert_eq!(&got, &record_boundaries(&mut &stream[..], &targets, max).unwrap());
        prop_assert_eq!(read_pieces(&stream, &got, max), read_whole(&stream, max));
    }
}
