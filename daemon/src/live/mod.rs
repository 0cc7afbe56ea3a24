//! Live capture core (sans-IO): turns relay batches into the ordered,
//! resolved, stamped packets of the merged output.
//!
//! The tokio side (`crate::server`) feeds it [`crate::live::IngestEvent`]s and
//! executes what it returns; it never looks inside packets itself.

pub mod packet;

pub use packet::{Origin, OutPacket, Role};
