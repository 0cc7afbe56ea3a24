//! What both tracesync binaries need at their edges, in one place.
//!
//! - [`clock`]: clocks behind a trait, and the kernel's clocks.
//! - [`config`]: the config file's search order, reading, and one-line
//!   errors (`file:line:column`).
//! - [`exit`]: sysexits(3) codes.
//! - [`files`]: small files replaced atomically, read without following links.
//! - [`logging`]: journald-friendly, text or JSON logs on stderr.
//! - [`metrics`]: the Prometheus endpoint.
//! - [`rx_stamp`]: kernel receive timestamps of probe datagrams.
//! - [`thread`]: a task on a thread of its own with its own runtime.
//! - [`tls`]: mutual TLS files and rustls configurations.

pub mod access;
pub mod clock;
pub mod config;
pub mod exit;
pub mod files;
pub mod logging;
pub mod metrics;
pub mod rx_stamp;
pub mod thread;
pub mod tls;
