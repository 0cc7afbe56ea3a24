//! One trace to merge, a file or an archive member, and how it is reopened
//! for each merge pass: a member is read straight from its offset in the
//! archive, its length (and zip CRC) checked as it is read.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

use flate2::read::{DeflateDecoder, MultiGzDecoder};

use crate::merge::chrome_json::{ChromeJsonReader, StatsSlot};
use crate::merge::systrace::SystraceReader;

use super::held::Held;
use super::spill::Spill;

/// One trace to merge: a file, or a member of an archive.
#[derive(Debug, Clone)]
pub struct InputSource {
    /// `a.pftrace` or `bundle.zip:phone.pb`, for errors and the jsonl `src` field.
    pub display: String,
    /// Names a manifest `path` can match: for a file the path as given and
    /// its base name; for a member the member name and its base name.
    pub names: Vec<String>,
    pub(super) origin: Origin,
    pub content: Content,
    /// Where the first pass leaves a converted input's protobuf for the
    /// second to read (`spill`); None to convert it in each pass.
    pub spill: Option<Arc<Spill>>,
    /// A converted input's conversion, paused by the first pass after its
    /// first packet for the second to go on with (`held`); None to
    /// convert it in each pass (or through its spill).
    pub held: Option<Arc<Held>>,
}

/// What an input's bytes are, found by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// A Perfetto protobuf trace (gzip is detected by the trace reader).
    Proto,
    /// A Chrome JSON trace, converted to protobuf as it is read.
    ChromeJson { gzip: bool },
    /// A systrace (ftrace text) trace, converted to protobuf as it is read.
    Systrace { gzip: bool },
}

impl Content {
    /// Whether the input is converted to protobuf as it is read.
    pub fn is_converted(self) -> bool {
        !matches!(self, Self::Proto)
    }
}

#[derive(Debug, Clone)]
pub(super) enum Origin {
    File(PathBuf),
    /// A tar member is contiguous in the archive: reopen and seek.
    Tar {
        archive: PathBuf,
        data_offset: u64,
        len: u64,
    },
    /// A zip member is located once at indexing time. `zip`'s entry reader
    /// borrows the archive, so it cannot be returned as an owned reader;
    /// instead the member's data is read directly from its offset and the
    /// CRC and size from the central directory are checked at the end.
    Zip {
        archive: PathBuf,
        data_offset: u64,
        compressed_len: u64,
        deflated: bool,
        len: u64,
        crc32: u32,
    },
}

impl InputSource {
    /// A fresh reader of the input as a Perfetto trace: the raw bytes of a
    /// protobuf trace (gzip is left for the trace reader to detect), a JSON
    /// trace converted as it is read. Reopens the underlying file each
    /// time, so every merge pass reads the same bytes with constant memory.
    pub fn open(&self) -> io::Result<Box<dyn Read + Send>> {
        self.open_counted(None)
    }

    /// [`InputSource::open`], a JSON conversion's counts left in `slot`
    /// when the reader is dropped.
    pub fn open_counted(&self, slot: Option<StatsSlot>) -> io::Result<Box<dyn Read + Send>> {
        // Converted once already: its counts were taken then.
        if let Some(reader) = self.spill.as_ref().and_then(|s| s.reader()) {
            return Ok(Box::new(reader));
        }
        // The conversion the first pass began: its counts go to the held slot.
        if let Some(conversion) = self.held.as_ref().and_then(|h| h.resume()) {
            return Ok(conversion);
        }
        let raw = self.open_raw()?;
        Ok(match self.content {
            Content::Proto => raw,
            Content::ChromeJson { gzip } => {
                let text: Box<dyn Read + Send> = if gzip {
                    Box::new(MultiGzDecoder::new(raw))
                } else {
                    raw
                };
                Box::new(ChromeJsonReader::new(text, &self.display, slot))
            }
            Content::Systrace { gzip } => {
                let text: Box<dyn Read + Send> = if gzip {
                    Box::new(MultiGzDecoder::new(raw))
                } else {
                    raw
                };
                Box::new(SystraceReader::new(text, slot))
            }
        })
    }

    fn open_raw(&self) -> io::Result<Box<dyn Read + Send>> {
        match &self.origin {
            Origin::File(path) => Ok(Box::new(File::open(path)?)),
            Origin::Tar {
                archive,
                data_offset,
                len,
            } => {
                let mut f = File::open(archive)?;
                f.seek(SeekFrom::Start(*data_offset))?;
                Ok(Box::new(Checked::new(
                    f.take(*len),
                    *len,
                    None,
                    self.display.clone(),
                )))
            }
            Origin::Zip {
                archive,
                data_offset,
                compressed_len,
                deflated,
                len,
                crc32,
            } => {
                let mut f = File::open(archive)?;
                f.seek(SeekFrom::Start(*data_offset))?;
                let raw = f.take(*compressed_len);
                let inner: Box<dyn Read + Send> = if *deflated {
                    Box::new(DeflateDecoder::new(raw))
                } else {
                    Box::new(raw)
                };
                Ok(Box::new(Checked::new(
                    inner,
                    *len,
                    Some(*crc32),
                    self.display.clone(),
                )))
            }
        }
    }
}

impl InputSource {
    /// Bytes the input takes where it is stored (compressed, for a
    /// compressed one): which converted inputs are the largest.
    pub fn stored_len(&self) -> u64 {
        match &self.origin {
            Origin::File(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
            Origin::Tar { len, .. } => *len,
            Origin::Zip { compressed_len, .. } => *compressed_len,
        }
    }

    /// Length in bytes of a plain protobuf file input; None for an archive
    /// member or a JSON trace (neither is read in pieces).
    pub fn file_len(&self) -> Option<u64> {
        if self.content != Content::Proto {
            return None;
        }
        match &self.origin {
            Origin::File(path) => std::fs::metadata(path).ok().map(|m| m.len()),
            _ => None,
        }
    }

    /// The raw bytes of a plain file input from byte `from` on, `len` of
    /// them or to its end; None for an archive member (read whole only:
    /// its length and CRC are checked over all of it).
    pub fn open_range(
        &self,
        from: u64,
        len: Option<u64>,
    ) -> Option<io::Result<Box<dyn Read + Send>>> {
        let (Origin::File(path), Content::Proto) = (&self.origin, self.content) else {
            return None;
        };
        let open = || -> io::Result<Box<dyn Read + Send>> {
            let mut f = File::open(path)?;
            f.seek(SeekFrom::Start(from))?;
            Ok(match len {
                Some(n) => Box::new(f.take(n)),
                None => Box::new(f),
            })
        };
        Some(open())
    }
}

/// Checks an archive member's length (and CRC for zip) as it is read, so a
/// truncated or altered archive fails loudly instead of yielding a short trace.
struct Checked<R> {
    inner: R,
    expected_len: u64,
    seen: u64,
    crc: Option<(flate2::Crc, u32)>,
    display: String,
}

impl<R: Read> Checked<R> {
    fn new(inner: R, expected_len: u64, crc32: Option<u32>, display: String) -> Self {
        Checked {
            inner,
            expected_len,
            seen: 0,
            crc: crc32.map(|c| (flate2::Crc::new(), c)),
            display,
        }
    }
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seen += n as u64;
        if let Some((crc, _)) = &mut self.crc {
            crc.update(&buf[..n]);
        }
        let broken = |what: String| {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {what}; re-create the archive", self.display),
            ))
        };
        if self.seen > self.expected_len {
            return broken(format!(
                "member is longer than the {} bytes its header declares",
                self.expected_len
            ));
        }
        if n == 0 && !buf.is_empty() {
            if self.seen < self.expected_len {
                return broken(format!(
                    "member truncated at byte {} of {}",
                    self.seen, self.expected_len
                ));
            }
            if let Some((crc, want)) = &self.crc
                && crc.sum() != *want
            {
                return broken(format!(
                    "CRC mismatch (got {:08x}, header says {want:08x})",
                    crc.sum()
                ));
            }
        }
        Ok(n)
    }
}
