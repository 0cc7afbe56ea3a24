//! Building blocks of the merge's unit tests: trace records, compressed
//! bundles and inputs written to a directory.

use std::io::Write;
use std::path::Path;

use flate2::Compression;
use flate2::write::ZlibEncoder;
use tracesync_protocol::scan::field;
use tracesync_protocol::wire;

use super::inputs::{InputSource, expand_inputs};

/// Appends `packet` as one record of a trace (field 1 of `Trace`).
pub fn record(out: &mut Vec<u8>, packet: &[u8]) {
    wire::put_len_field(out, 1, packet);
}

/// A packet whose `compressed_packets` holds `packets` as zlib'd records.
pub fn compressed_bundle<'a>(packets: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut inner = Vec::new();
    for p in packets {
        record(&mut inner, p);
    }
    let mut z = ZlibEncoder::new(Vec::new(), Compression::fast());
    z.write_all(&inner).expect("writes to a Vec");
    let mut bundle = Vec::new();
    wire::put_len_field(
        &mut bundle,
        field::COMPRESSED_PACKETS,
        &z.finish().expect("writes to a Vec"),
    );
    bundle
}

/// `bytes` written to `dir/name`, as the merge's input.
pub fn source_of(dir: &Path, name: &str, bytes: &[u8]) -> InputSource {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("writes the input");
    expand_inputs(&[path], None)
        .expect("one input")
        .traces
        .remove(0)
}
