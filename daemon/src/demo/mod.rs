//! `tracesync demo`: the main job end to end.
//!
//! - [`live`]: the real daemon and N relays with simulated clocks on
//!   loopback, live status, a rolling merged trace checked against truth.
//! - [`offline`]: recorded traces of simulated machines merged offline
//!   (`tracesync demo --offline`).

pub mod live;
pub mod offline;
