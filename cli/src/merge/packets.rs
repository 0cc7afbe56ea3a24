//! Reading an input's packets with one walk over each: the reader does not
//! look for `compressed_packets` bundles itself (a second walk per packet);
//! the passes scan every packet anyway and hand the bundle the scan found
//! back to the reader to expand ([`bundle_of`]). What comes out is what the
//! expanding reader yields: the same packets, offsets and errors.

use std::io::{self, Read};

use tracesync_protocol::reader::{Packet, TraceFile, TraceReader, bundle_range};

use super::chrome_json::StatsSlot;
use super::inputs::InputSource;

pub type InputReader = TraceFile<Box<dyn Read + Send>>;

/// Opens `source` with bundle expansion left to the caller.
pub fn open_reader(source: &InputSource) -> io::Result<InputReader> {
    open_reader_counted(source, None)
}

/// [`open_reader`], a JSON input's conversion counts left in `slot`.
pub fn open_reader_counted(
    source: &InputSource,
    slot: Option<StatsSlot>,
) -> io::Result<InputReader> {
    reader_of(source.open_counted(slot)?)
}

/// The packets of `raw`, an input's bytes, with bundle expansion left to
/// the caller.
pub fn reader_of(raw: Box<dyn Read + Send>) -> io::Result<InputReader> {
    let mut reader = TraceReader::new();
    reader.set_expand_bundles(false);
    TraceFile::with_reader(raw, reader)
}

/// The bundle of `packet` that the expanding reader would expand, as a
/// byte range of the packet: the scan's `compressed_packets` if the scan
/// succeeded (`scanned` is Some of it), else the reader's own walk (which
/// accepts some packets the scan rejects). None for packets of a bundle
/// (bundles do not nest).
pub fn bundle_of(packet: &Packet<'_>, scanned: Option<Option<&[u8]>>) -> Option<(usize, usize)> {
    if packet.in_bundle {
        return None;
    }
    match scanned {
        Some(compressed) => compressed.map(|c| {
            let start = c.as_ptr() as usize - packet.bytes.as_ptr() as usize;
            (start, start + c.len())
        }),
        None => bundle_range(packet.bytes),
    }
}
