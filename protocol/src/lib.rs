//! Wire formats of tracesync, with no runtime and no IO.
//!
//! - [`perfetto`]: prost types for tracesync's subset of Perfetto's trace
//!   format (Perfetto's names and field numbers).
//! - [`scan`]: a zero-copy scanner of a TracePacket's top-level fields, and
//!   stamping/replacing of top-level fields in a packet's bytes.
//! - [`relay`]: the relay <-> daemon protocol (frames, probes, limits).
//! - [`trigger`]: the flight recorder's relay modes, trigger names and
//!   spans.
//! - [`probe`]: signing, checking and replay windows of probe datagrams.
//! - [`incremental`]: incremental clocks of a sequence, for replaying its
//!   state (preambles, resumes).
//! - [`reader`]: a streaming reader of Trace framing (field-1 records) that
//!   takes input in arbitrary chunks and expands compressed packet bundles.
//! - [`text`]: printing peer-chosen text (names, reasons) with its control
//!   characters escaped.

pub mod perfetto {
    //! Generated from `proto/perfetto_subset.proto`.
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));
}

pub mod probe;
pub mod relay;
pub mod trigger;

pub mod clock_ids;
pub mod incremental;
pub mod reader;
pub mod scan;
pub mod text;
pub mod wire;
