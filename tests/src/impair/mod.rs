//! `tracesync-impair`, the userspace impairment proxy for the real-socket
//! clock-sync runs (clock-sync.md §8.2 Layer B; netem is not available
//! everywhere), and the harness that runs the daemon, the proxy and relays
//! in network and time namespaces.
//!
//! - [`model`]: seeded per-direction link models and the named profiles.
//! - [`sched`]: the release thread (absolute deadlines, measured lateness).
//! - [`proxy`]: UDP and TCP forwarding through the models.
//! - [`realsock`]: namespaces, processes and the accuracy figures.

pub mod model;
pub mod proxy;
pub mod realsock;
pub mod sched;
