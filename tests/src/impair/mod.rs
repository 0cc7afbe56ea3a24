//! `tracesync-impair`, the userspace impairment proxy for the real-socket
//! clock-sync runs (docs/clock-sync-accuracy.md; netem is not available
//! everywhere), and the harness that runs the daemon, the proxy and relays
//! in network and time namespaces.
//!
//! - [`model`]: seeded per-direction link models and the named profiles.
//! - [`sched`]: the release thread (absolute deadlines, measured lateness).
//! - [`proxy`]: UDP and TCP forwarding through the models.
//! - [`realsock`]: one run end to end and its accuracy figures.
//! - `netns`: the namespaces, the processes in them, the control socket.
//! - [`baselines`]: probe samples of the sidecars, naive and Perfetto-style offsets.
//! - [`refined`]: the run's capture refined afterwards, judged the same way.
//! - `table`: the markdown table of a run's figures.

pub mod baselines;
pub mod model;
mod netns;
pub mod proxy;
pub mod realsock;
pub mod refined;
pub mod sched;
mod wiring;
