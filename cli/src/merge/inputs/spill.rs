//! A converted input (Chrome JSON, systrace) converted once, when it is
//! not held ([`super::held`]): the first merge pass writes the protobuf it
//! reads to a spill file, and the second pass reads that file instead of
//! converting the input again.
//!
//! Invariants:
//! - The spill is an unnamed temporary file (in the temporary directory,
//!   `TMPDIR`): nothing is left behind however the merge ends.
//! - A spill is read only once it holds everything the first pass read,
//!   to the end of the converted stream (or to the error that ended it);
//!   otherwise (a write failed, the first pass stopped early) the second
//!   pass converts the input again, as it would without a spill. Either
//!   way the second pass sees the bytes the first pass saw.
//! - The writes happen on a thread of their own, so the conversion does
//!   not wait for them; memory is at most [`BUFFERS`] write buffers of
//!   [`WRITE_CHUNK`] while it is written.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

/// Bytes gathered before each write to the spill.
const WRITE_CHUNK: usize = 1 << 20;
/// Write buffers of one spill: one being filled, the others written.
const BUFFERS: usize = 3;

/// The converted bytes of one input, once the first pass has written them.
pub struct Spill {
    file: File,
    /// The length written, once the spill is complete.
    complete: OnceLock<u64>,
}

impl std::fmt::Debug for Spill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spill")
            .field("complete", &self.complete.get())
            .finish()
    }
}

impl Spill {
    /// An empty spill in the temporary directory.
    pub fn create() -> io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            file: tempfile::tempfile()?,
            complete: OnceLock::new(),
        }))
    }

    /// A reader of the complete spill; None until it is complete.
    pub fn reader(self: &Arc<Self>) -> Option<SpillReader> {
        let len = *self.complete.get()?;
        Some(SpillReader {
            spill: Arc::clone(self),
            pos: 0,
            len,
        })
    }

    /// `inner` read through, its bytes written to the spill as they are
    /// read. Only the first writer of a spill fills it.
    pub fn tee(self: &Arc<Self>, inner: Box<dyn Read + Send>) -> Tee {
        let filled = self.complete.get().is_some();
        let writer = (!filled).then(|| Writer::spawn(Arc::clone(self))).flatten();
        Tee {
            inner,
            spill: Arc::clone(self),
            buf: Vec::with_capacity(WRITE_CHUNK),
            failed: writer.is_none(),
            writer,
        }
    }
}

/// The thread writing one spill, and its buffers going back and forth.
struct Writer {
    full: Option<SyncSender<Vec<u8>>>,
    empty: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<io::Result<u64>>>,
}

impl Writer {
    /// None if the thread cannot be started (the spill is not used).
    fn spawn(spill: Arc<Spill>) -> Option<Self> {
        let (full_tx, full_rx) = sync_channel::<Vec<u8>>(BUFFERS);
        let (empty_tx, empty_rx) = sync_channel::<Vec<u8>>(BUFFERS);
        for _ in 1..BUFFERS {
            empty_tx.send(Vec::with_capacity(WRITE_CHUNK)).ok()?;
        }
        let thread = std::thread::Builder::new()
            .name("tracesync-spill".into())
            .spawn(move || {
                let mut written = 0u64;
                for mut buf in full_rx {
                    spill.file.write_all_at(&buf, written)?;
                    written += buf.len() as u64;
                    buf.clear();
                    // The reader may be gone at the end: nothing to return.
                    let _ = empty_tx.send(buf);
                }
                Ok(written)
            })
            .ok()?;
        Some(Self {
            full: Some(full_tx),
            empty: empty_rx,
            thread: Some(thread),
        })
    }

    /// Hands `buf` to the thread; an empty buffer back (None if the thread
    /// has stopped on an error).
    fn write(&mut self, buf: Vec<u8>) -> Option<Vec<u8>> {
        self.full.as_ref()?.send(buf).ok()?;
        self.empty.recv().ok()
    }

    /// Waits for every write: the bytes written, or None after an error.
    fn finish(&mut self) -> Option<u64> {
        self.full = None;
        self.thread.take()?.join().ok()?.ok()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.full = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads a complete spill from its start (each reader on its own offset).
pub struct SpillReader {
    spill: Arc<Spill>,
    pos: u64,
    len: u64,
}

impl Read for SpillReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = (self.len - self.pos).min(buf.len() as u64) as usize;
        if left == 0 {
            return Ok(0);
        }
        let n = self.spill.file.read_at(&mut buf[..left], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the merge's temporary file ended at byte {} of {}; check the temporary directory (TMPDIR)",
                    self.pos, self.len
                ),
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// A reader whose bytes are also written to a spill.
pub struct Tee {
    inner: Box<dyn Read + Send>,
    spill: Arc<Spill>,
    buf: Vec<u8>,
    writer: Option<Writer>,
    /// A write failed (or the spill was already filled): nothing more is
    /// written and the spill is not marked complete.
    failed: bool,
}

impl Tee {
    fn flush(&mut self) {
        if self.failed || self.buf.is_empty() {
            self.buf.clear();
            return;
        }
        let full = std::mem::take(&mut self.buf);
        match self.writer.as_mut().and_then(|w| w.write(full)) {
            Some(empty) => self.buf = empty,
            // The second pass converts the input again.
            None => self.failed = true,
        }
    }

    /// The stream has ended (or failed): the spill is complete.
    fn complete(&mut self) {
        self.flush();
        if self.failed {
            return;
        }
        self.failed = true;
        if let Some(written) = self.writer.as_mut().and_then(Writer::finish) {
            let _ = self.spill.complete.set(written);
        }
    }
}

impl Read for Tee {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(out) {
            Ok(0) if !out.is_empty() => {
                self.complete();
                Ok(0)
            }
            Ok(n) => {
                if !self.failed {
                    self.buf.extend_from_slice(&out[..n]);
                    if self.buf.len() >= WRITE_CHUNK {
                        self.flush();
                    }
                }
                Ok(n)
            }
            // An interrupted read is retried by the caller: not the end.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            // The converted stream ends at its error, as the first pass
            // reads it: the second pass reads the same bytes and stops.
            Err(e) => {
                self.complete();
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_spill_reads_back_what_was_read() {
        let spill = Spill::create().unwrap();
        assert!(spill.reader().is_none());
        let data: Vec<u8> = (0..3 * WRITE_CHUNK + 17).map(|i| i as u8).collect();
        let mut tee = spill.tee(Box::new(io::Cursor::new(data.clone())));
        let mut seen = Vec::new();
        tee.read_to_end(&mut seen).unwrap();
        assert_eq!(seen, data);
        let mut back = Vec::new();
        spill.reader().unwrap().read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        // Two readers, each on its own offset.
        let (mut a, mut b) = (spill.reader().unwrap(), spill.reader().unwrap());
        let (mut x, mut y) = ([0u8; 5], [0u8; 5]);
        a.read_exact(&mut x).unwrap();
        b.read_exact(&mut y).unwrap();
        assert_eq!(x, y);
    }

    #[test]
    fn a_spill_read_in_part_is_not_used() {
        let spill = Spill::create().unwrap();
        let mut tee = spill.tee(Box::new(io::Cursor::new(vec![1u8; 100])));
        let mut part = [0u8; 10];
        tee.read_exact(&mut part).unwrap();
        drop(tee);
        assert!(spill.reader().is_none());
    }

    #[test]
    fn a_stream_ending_in_an_error_is_complete_up_to_it() {
        struct Failing(u8);
        impl Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "bad"));
                }
                self.0 -= 1;
                buf[0] = 7;
                Ok(1)
            }
        }
        let spill = Spill::create().unwrap();
        let mut tee = spill.tee(Box::new(Failing(3)));
        let mut seen = Vec::new();
        assert!(tee.read_to_end(&mut seen).is_err());
        let mut back = Vec::new();
        spill.reader().unwrap().read_to_end(&mut back).unwrap();
        assert_eq!(back, vec![7, 7, 7]);
    }
}
