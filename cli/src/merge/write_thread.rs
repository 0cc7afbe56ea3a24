//! The merge's output written on a thread of its own: the merging thread
//! fills 1 MiB buffers and hands each full one over a bounded channel to a
//! write thread, which writes it to the sink (the kernel's copy into the
//! page cache, a fifth of a small-packet merge's time, runs on the second
//! core) and sends the buffer back to be filled again.
//!
//! Memory is bounded: [`BUFFERS`] buffers at most, allocated the first
//! time each is needed and then reused (at most [`IN_FLIGHT`] wait in the
//! channel, one is being written and one filled; when none is free the
//! merging thread waits for one). A write error ends the thread; the next
//! hand-over (or [`ThreadWriter::finish`]) returns it.

use std::io::{self, Write};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;

/// Bytes per hand-over.
pub const BUFFER_SIZE: usize = 1 << 20;

/// Full buffers waiting for the write thread.
pub const IN_FLIGHT: usize = 2;

/// Buffers of [`BUFFER_SIZE`] in all.
pub const BUFFERS: usize = IN_FLIGHT + 2;

pub struct ThreadWriter {
    buf: Vec<u8>,
    full: Option<SyncSender<Vec<u8>>>,
    empty: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<io::Result<()>>>,
    allocated: usize,
}

impl ThreadWriter {
    /// Starts the write thread for `sink`.
    pub fn spawn(sink: Box<dyn Write + Send>) -> io::Result<Self> {
        let (full_tx, full_rx) = sync_channel::<Vec<u8>>(IN_FLIGHT);
        let (empty_tx, empty_rx) = sync_channel::<Vec<u8>>(BUFFERS);
        let thread = std::thread::Builder::new()
            .name("tracesync-write".into())
            .spawn(move || {
                let mut sink = sink;
                for mut buf in full_rx {
                    sink.write_all(&buf)?;
                    buf.clear();
                    // A large write's own buffer is dropped; the channel
                    // has room for every pooled one.
                    if buf.capacity() <= BUFFER_SIZE {
                        let _ = empty_tx.try_send(buf);
                    }
                }
                sink.flush()
            })?;
        Ok(Self {
            buf: Vec::with_capacity(BUFFER_SIZE),
            full: Some(full_tx),
            empty: empty_rx,
            thread: Some(thread),
            allocated: 1,
        })
    }

    /// The buffer to append at most `n` bytes to (`n` at most
    /// [`BUFFER_SIZE`]): the caller writes straight into it, with no call
    /// per piece.
    #[inline]
    pub fn room(&mut self, n: usize) -> io::Result<&mut Vec<u8>> {
        if self.buf.len() + n > BUFFER_SIZE {
            self.hand_over()?;
        }
        Ok(&mut self.buf)
    }

    /// Hands the current buffer to the write thread.
    #[inline(never)]
    fn hand_over(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let next = match self.empty.try_recv() {
            Ok(b) => Some(b),
            Err(TryRecvError::Empty) if self.allocated < BUFFERS => {
                self.allocated += 1;
                Some(Vec::with_capacity(BUFFER_SIZE))
            }
            // Wait for the write thread to free one (None: it ended).
            Err(TryRecvError::Empty) => self.empty.recv().ok(),
            Err(TryRecvError::Disconnected) => None,
        };
        match next {
            Some(next) => {
                let full = std::mem::replace(&mut self.buf, next);
                self.send(full)
            }
            None => Err(self.thread_error()),
        }
    }

    /// Sends a full buffer to the write thread.
    fn send(&mut self, full: Vec<u8>) -> io::Result<()> {
        if self.full.as_ref().is_some_and(|tx| tx.send(full).is_ok()) {
            return Ok(());
        }
        Err(self.thread_error())
    }

    /// The thread ended early: it failed, and its error is the answer.
    fn thread_error(&mut self) -> io::Error {
        self.join()
            .err()
            .unwrap_or_else(|| io::Error::other("the output's write thread ended early"))
    }

    /// Ends the thread; its result.
    fn join(&mut self) -> io::Result<()> {
        self.full = None;
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the output's write thread panicked"))),
            None => Ok(()),
        }
    }

    /// Writes what is buffered, waits for the thread to write and flush
    /// everything, and returns the first error.
    pub fn finish(mut self) -> io::Result<()> {
        self.hand_over()?;
        self.join()
    }
}

impl Write for ThreadWriter {
    #[inline(always)]
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > BUFFER_SIZE {
            self.hand_over()?;
            if data.len() > BUFFER_SIZE {
                // A packet larger than a buffer goes as a buffer of its own
                // (dropped once written, not pooled).
                self.send(data.to_vec())?;
                return Ok(data.len());
            }
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    #[inline(always)]
    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.write(data).map(|_| ())
    }

    /// Hands what is buffered to the write thread (which writes it in
    /// order); [`ThreadWriter::finish`] waits until it is written.
    fn flush(&mut self) -> io::Result<()> {
        self.hand_over()
    }
}

impl Drop for ThreadWriter {
    fn drop(&mut self) {
        // After an error: the sink is closed before the caller removes it.
        let _ = self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A sink that keeps what it is given, failing after `fail_after` bytes.
    struct Sink {
        got: Arc<Mutex<Vec<u8>>>,
        fail_after: usize,
    }

    impl Write for Sink {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            let mut got = self.got.lock().unwrap();
            if got.len() + data.len() > self.fail_after {
                return Err(io::Error::other("disk full"));
            }
            got.extend_from_slice(data);
            Ok(data.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_every_byte_in_order() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink {
            got: got.clone(),
            fail_after: usize::MAX,
        };
        let mut w = ThreadWriter::spawn(Box::new(sink)).unwrap();
        let mut want = Vec::new();
        for i in 0..200_000u32 {
            // Pieces of 0 to ~3 MiB: some span several buffers.
            let len = if i % 50_000 == 7 {
                3 << 20
            } else {
                (i % 97) as usize
            };
            let piece: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
            w.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
        }
        w.finish().unwrap();
        assert_eq!(got.lock().unwrap().len(), want.len());
        assert!(*got.lock().unwrap() == want);
    }

    #[test]
    fn a_write_error_is_returned_by_a_later_write_or_finish() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink {
            got,
            fail_after: 3 * BUFFER_SIZE,
        };
        let mut w = ThreadWriter::spawn(Box::new(sink)).unwrap();
        let piece = vec![7u8; 4096];
        let mut failed = None;
        for _ in 0..(16 * BUFFER_SIZE / piece.len()) {
            if let Err(e) = w.write_all(&piece) {
                failed = Some(e);
                break;
            }
        }
        let e = match failed {
            Some(e) => e,
            None => w.finish().unwrap_err(),
        };
        assert_eq!(e.to_string(), "disk full");
    }
}
