//! [`TraceFile`]: a whole trace from any reader, gzip'd or not (detected by
//! magic), with gzip errors told apart from I/O errors.

use std::io::{self, Read};

use super::{FILE_CHUNK_SIZE, Packet, ReadError, ReadErrorKind, TraceReader};

/// Counts bytes from the underlying reader and remembers whether it failed,
/// so gzip errors can be told apart from I/O errors.
#[derive(Debug)]
struct Counting<R> {
    inner: R,
    read: u64,
    io_failed: bool,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.read += n as u64;
                Ok(n)
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.io_failed = true;
                }
                Err(e)
            }
        }
    }
}

type Peeked<R> = io::Chain<io::Cursor<Vec<u8>>, Counting<R>>;

#[derive(Debug)]
enum Source<R> {
    Plain(Peeked<R>),
    Gzip(flate2::read::MultiGzDecoder<Peeked<R>>),
}

/// Reads a whole trace from any reader, gzip'd or not.
#[derive(Debug)]
pub struct TraceFile<R> {
    source: Source<R>,
    reader: TraceReader,
    eof: bool,
    /// Bytes asked of the source per read.
    chunk: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum FileReadError {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Format(#[from] ReadError),
}

impl<R: Read> TraceFile<R> {
    pub fn new(reader: R) -> io::Result<Self> {
        Self::with_reader(reader, TraceReader::new())
    }

    /// Uses a configured [`TraceReader`] (limits, bundle expansion).
    pub fn with_reader(mut reader: R, trace_reader: TraceReader) -> io::Result<Self> {
        // Peek at the magic without losing it: the bytes are chained back.
        let mut magic = [0u8; 2];
        let mut got = 0;
        while got < magic.len() {
            match reader.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let gzip = magic[..got] == [0x1f, 0x8b];
        let counting = Counting {
            inner: reader,
            read: got as u64,
            io_failed: false,
        };
        let peeked = io::Cursor::new(magic[..got].to_vec()).chain(counting);
        let source = if gzip {
            Source::Gzip(flate2::read::MultiGzDecoder::new(peeked))
        } else {
            Source::Plain(peeked)
        };
        Ok(Self {
            source,
            reader: trace_reader,
            eof: false,
            chunk: FILE_CHUNK_SIZE,
        })
    }

    /// A stream known not to be gzip'd (no sniffing of its first bytes):
    /// for a piece of a file read from a record boundary on.
    pub fn plain(reader: R, trace_reader: TraceReader) -> Self {
        let counting = Counting {
            inner: reader,
            read: 0,
            io_failed: false,
        };
        Self {
            source: Source::Plain(io::Cursor::new(Vec::new()).chain(counting)),
            reader: trace_reader,
            eof: false,
            chunk: FILE_CHUNK_SIZE,
        }
    }

    /// Reads `n` bytes at a time (at least 1) instead of [`FILE_CHUNK_SIZE`]:
    /// the buffer holds about twice that (more only for a larger packet),
    /// which counts for a reader kept open beside many others.
    pub fn set_chunk_size(&mut self, n: usize) {
        self.chunk = n.max(1);
    }

    /// Whether the input was gzip'd.
    pub fn is_gzip(&self) -> bool {
        matches!(self.source, Source::Gzip(_))
    }

    /// The next packet; `Ok(None)` at a clean end of input.
    #[inline(always)]
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, FileReadError> {
        if let Some(loc) = self.reader.advance_plain() {
            return Ok(Some(self.reader.packet_at(loc)));
        }
        self.next_packet_read()
    }

    /// [`Self::next_packet`] past the common case: reading more input,
    /// longer headers, bundles, the end and errors.
    #[inline(never)]
    fn next_packet_read(&mut self) -> Result<Option<Packet<'_>>, FileReadError> {
        loop {
            if let Some(loc) = self.reader.advance().map_err(FileReadError::Format)? {
                return Ok(Some(self.reader.packet_at(loc)));
            }
            if self.eof {
                self.reader.finish().map_err(FileReadError::Format)?;
                return Ok(None);
            }
            let read = match &mut self.source {
                Source::Plain(r) => self.reader.fill_from(r, self.chunk),
                Source::Gzip(r) => self.reader.fill_from(r, self.chunk),
            };
            match read {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) => return Err(self.classify(e)),
            }
        }
    }

    /// The packet last returned, again (see [`TraceReader::last_packet`]).
    pub fn last_packet(&self) -> Option<Packet<'_>> {
        self.reader.last_packet()
    }

    /// Expands a bundle of the packet last returned (see
    /// [`TraceReader::expand_last`]).
    pub fn expand_last(&mut self, range: (usize, usize)) -> Result<(), FileReadError> {
        self.reader
            .expand_last(range)
            .map_err(FileReadError::Format)
    }

    fn classify(&mut self, e: io::Error) -> FileReadError {
        let Source::Gzip(dec) = &self.source else {
            return FileReadError::Io(e);
        };
        let counting = dec.get_ref().get_ref().1;
        if counting.io_failed {
            return FileReadError::Io(e);
        }
        // Offset: decompressed bytes delivered so far, the stream's own coordinate.
        let offset = self.reader.position() + self.reader.buffered() as u64;
        let kind = ReadErrorKind::BadGzip {
            compressed_read: counting.read,
            message: e.to_string(),
        };
        FileReadError::Format(self.reader.fail(offset, kind))
    }
}
