//! A FIFO whose memory follows its length: entries in chunks of at most
//! [`CHUNK`], a chunk freed as soon as its last entry is popped.
//!
//! The ordering queue holds one per stream, with entries far larger than
//! small packets. A `VecDeque` doubles its room as it grows and can give
//! it back only by copying what is left (`shrink_to`), so in a queue held
//! near its bound its room runs up to twice its length; here the room past
//! the length is at most the unused part of the first and last chunks.

use std::collections::VecDeque;

/// Entries per chunk. With ordering-queue entries of ~100-200 bytes a full
/// chunk is 50-100 KiB: a busy stream allocates one per 512 packets, an
/// idle one keeps none.
pub const CHUNK: usize = 512;

#[derive(Debug)]
pub struct Fifo<T> {
    /// Oldest first; every chunk but the last holds [`CHUNK`] entries when
    /// filled, and none is empty.
    chunks: VecDeque<VecDeque<T>>,
    len: usize,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Self {
            chunks: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> Fifo<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    pub fn push_back(&mut self, item: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < CHUNK => {
                // A stream's first chunk grows from small (most streams
                // hold a few packets); the following ones are made whole.
                if last.len() == last.capacity() {
                    last.reserve_exact(last.len().max(4).min(CHUNK - last.len()));
                }
                last.push_back(item);
            }
            Some(_) => {
                let mut chunk = VecDeque::with_capacity(CHUNK);
                chunk.push_back(item);
                self.chunks.push_back(chunk);
            }
            None => self.chunks.push_back(VecDeque::from([item])),
        }
        self.len += 1;
    }

    pub fn front(&self) -> Option<&T> {
        self.chunks.front().and_then(VecDeque::front)
    }

    /// The item after the front one.
    #[inline(always)]
    pub fn second(&self) -> Option<&T> {
        let first = self.chunks.front()?;
        first.get(1).or_else(|| self.chunks.get(1)?.front())
    }

    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<T> {
        let first = self.chunks.front_mut()?;
        let item = first.pop_front()?;
        if first.is_empty() {
            // Freed at once: the room behind the queue shrinks with it.
            self.chunks.pop_front();
            if self.chunks.is_empty() {
                self.chunks = VecDeque::new();
            }
        }
        self.len -= 1;
        Some(item)
    }

    /// Entries the chunks have room for.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.chunks.iter().map(VecDeque::capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_its_room_follows_its_length() {
        let mut fifo = Fifo::default();
        let mut next_out = 0u64;
        let mut next_in = 0u64;
        // Bursts in, partial drains out: order kept, room within two
        // chunks of the length (the first and last partly used).
        for round in 0..20u64 {
            for _ in 0..(round * 997) % 5000 + 1 {
                fifo.push_back(next_in);
                next_in += 1;
                assert!(fifo.capacity() <= fifo.len() + 2 * CHUNK);
            }
            for _ in 0..(round * 1_513) % 6000 {
                match fifo.pop_front() {
                    Some(v) => {
                        assert_eq!(v, next_out);
                        next_out += 1;
                    }
                    None => break,
                }
                assert!(fifo.capacity() <= fifo.len() + 2 * CHUNK);
            }
            assert_eq!(fifo.len() as u64, next_in - next_out);
            assert_eq!(
                fifo.front().copied(),
                (next_in > next_out).then_some(next_out)
            );
        }
        while let Some(v) = fifo.pop_front() {
            assert_eq!(v, next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
        assert!(fifo.is_empty());
        assert_eq!(fifo.capacity(), 0, "an empty queue keeps no room");
    }

    #[test]
    fn the_second_item_is_found_across_chunks() {
        let mut fifo = Fifo::default();
        assert_eq!(fifo.second(), None);
        fifo.push_back(0usize);
        assert_eq!(fifo.second(), None, "one item");
        for i in 1..CHUNK + 3 {
            fifo.push_back(i);
        }
        // Front at CHUNK - 1: the second item is the next chunk's first.
        for expected in 0..CHUNK + 2 {
            assert_eq!(fifo.second(), Some(&(expected + 1)));
            assert_eq!(fifo.pop_front(), Some(expected));
        }
        assert_eq!(fifo.second(), None);
    }

    #[test]
    fn a_short_queue_takes_little_room() {
        let mut fifo = Fifo::default();
        for i in 0..3u32 {
            fifo.push_back(i);
        }
        assert!(fifo.capacity() < 16, "capacity {}", fifo.capacity());
    }
}
