//! Streaming reader of Trace framing: a trace file is a concatenation of
//! `Trace.packet` (field 1, length-delimited) records.
//!
//! Input may arrive in chunks of any size; gzip'd files are detected by
//! magic; `compressed_packets` bundles (field 50, zlib deflate) are expanded
//! into their inner packets. Every error names the byte offset of the record
//! it concerns, counted in the (decompressed) Trace stream.
//!
//! (Implementation in progress: see the helper's branch.)
