//! Tests of [`TraceFile`]: plain and gzip'd files, chunk sizes, I/O and
//! format errors, and packets taken one by one against the whole stream.

use super::tests::{Got, bodies, expected, frame, gzip, offsets};
use super::*;
use crate::wire;
use std::io::{self, Read};

/// A reader that yields one byte per call, then optionally fails.
struct Trickle<'a>(&'a [u8], bool);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.split_first() {
            Some((&b, rest)) if !buf.is_empty() => {
                buf[0] = b;
                self.0 = rest;
                Ok(1)
            }
            None if self.1 => Err(io::Error::other("disk on fire")),
            _ => Ok(0),
        }
    }
}

fn read_file<R: Read>(r: R) -> Result<Got, FileReadError> {
    let mut f = TraceFile::new(r)?;
    let mut got = Vec::new();
    while let Some(p) = f.next_packet()? {
        got.push((p.bytes.to_vec(), p.offset, p.in_bundle));
    }
    // Stays at EOF.
    assert!(f.next_packet()?.is_none());
    Ok(got)
}

#[test]
fn file_plain_and_gzip() {
    let b = bodies();
    let stream = frame(&b);
    let want = expected(&b);
    assert_eq!(read_file(&stream[..]).unwrap(), want);
    assert_eq!(read_file(Trickle(&stream, false)).unwrap(), want);
    let gz = gzip(&stream);
    assert!(TraceFile::new(&gz[..]).unwrap().is_gzip());
    assert_eq!(read_file(&gz[..]).unwrap(), want);
    assert_eq!(read_file(Trickle(&gz, false)).unwrap(), want);
    // Multi-member gzip: concatenated files.
    let (first, second) = stream.split_at(offsets(&b)[3] as usize);
    let two = [gzip(first), gzip(second)].concat();
    assert_eq!(read_file(&two[..]).unwrap(), want);
    assert_eq!(read_file(&[][..]).unwrap(), []);
}

#[test]
fn file_read_in_chunks_of_any_size() {
    let b = bodies();
    let stream = frame(&b);
    let want = expected(&b);
    for chunk in [1, 3, 64, 32 << 10] {
        for input in [stream.clone(), gzip(&stream)] {
            let mut f = TraceFile::new(&input[..]).unwrap();
            f.set_chunk_size(chunk);
            let mut got = Vec::new();
            while let Some(p) = f.next_packet().unwrap() {
                got.push((p.bytes.to_vec(), p.offset, p.in_bundle));
            }
            assert_eq!(got, want, "chunk {chunk}");
        }
    }
}

#[test]
fn file_errors() {
    let b = bodies();
    let stream = frame(&b);

    // Bad gzip: magic then junk.
    let bad = [&[0x1f, 0x8b][..], &[0x55; 64]].concat();
    let Err(FileReadError::Format(e)) = read_file(&bad[..]) else {
        panic!("bad gzip must be a format error");
    };
    assert!(matches!(e.kind, ReadErrorKind::BadGzip { .. }), "{e}");
    assert_eq!(e.offset, 0);

    // Truncated gzip: the packets before the cut are read, then an error.
    let gz = gzip(&frame(&vec![vec![1u8; 200]; 2000]));
    let mut f = TraceFile::new(&gz[..gz.len() - 20]).unwrap();
    let err = loop {
        match f.next_packet() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("truncated gzip read as complete"),
            Err(e) => break e,
        }
    };
    let FileReadError::Format(e) = err else {
        panic!("{err}")
    };
    assert!(matches!(e.kind, ReadErrorKind::BadGzip { .. }), "{e}");
    assert!(e.offset > 0);

    // Truncated plain file.
    let Err(FileReadError::Format(e)) = read_file(&stream[..stream.len() - 1]) else {
        panic!("truncated file must be a format error");
    };
    assert!(matches!(e.kind, ReadErrorKind::LengthPastEnd { .. }));

    // I/O errors stay I/O errors, gzip'd or not.
    let gz = gzip(&stream);
    for input in [&stream, &gz] {
        let Err(FileReadError::Io(e)) = read_file(Trickle(input, true)) else {
            panic!("I/O error lost");
        };
        assert_eq!(e.to_string(), "disk on fire");
    }
}

proptest::proptest! {
    /// A file read with expansion off (as merge reads, packets taken one
    /// by one through [`TraceReader::advance_plain`] where they can) gives
    /// the packets, offsets and error of the whole stream pushed at once
    /// and read by the general path, whatever its chunk size: records of
    /// one-byte and longer lengths, over the size limit, non-minimal tags,
    /// junk and a cut anywhere.
    #[test]
    fn a_file_read_packet_by_packet_is_the_stream_read_whole(
        parts in proptest::collection::vec((0u8..6, 0usize..200), 0..24),
        cut in proptest::option::of(0usize..4000),
        chunk in 1usize..300,
        max in proptest::sample::select(vec![16usize, 127, 128, 1000]),
    ) {
        let mut stream = Vec::new();
        for (kind, len) in parts {
            let body: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            match kind {
                0..=2 => wire::put_trace_packet(&mut stream, &body[..len.min(127)]),
                3 => wire::put_trace_packet(&mut stream, &body),
                // The tag of field 1 as two bytes, then a one-byte length.
                4 => stream.extend([0x8a, 0x00, (len % 128) as u8].iter().chain(&body[..len % 128])),
                _ => stream.extend(&body[..len % 5]),
            }
        }
        if let Some(cut) = cut {
            stream.truncate(cut);
        }
        let mut whole = TraceReader::with_max_packet_size(max);
        whole.set_expand_bundles(false);
        whole.push(&stream);
        let mut want = Vec::new();
        let want_err = loop {
            match whole.next_packet() {
                Ok(Some(p)) => want.push((p.bytes.to_vec(), p.offset)),
                Ok(None) => break whole.finish().err(),
                Err(e) => break Some(e),
            }
        };
        let mut reader = TraceReader::with_max_packet_size(max);
        reader.set_expand_bundles(false);
        let mut file = TraceFile::plain(&stream[..], reader);
        file.set_chunk_size(chunk);
        let mut got = Vec::new();
        let got_err = loop {
            match file.next_packet() {
                Ok(Some(p)) => got.push((p.bytes.to_vec(), p.offset)),
                Ok(None) => break None,
                Err(FileReadError::Format(e)) => break Some(e),
                Err(FileReadError::Io(e)) => panic!("no I/O here: {e}"),
            }
        };
        proptest::prop_assert_eq!(got, want);
        proptest::prop_assert_eq!(got_err, want_err);
    }
}
