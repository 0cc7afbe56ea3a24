//! Deterministic, seeded clock-sync simulator in virtual time (no IO): a
//! relay clock model and a link model produce four-timestamp probe
//! exchanges; events drawn uniformly in time are mapped causally by the
//! [`Estimator`](tracesync_core::sync::Estimator) (the "live" mapping) and by two
//! baselines on the same samples: the naive last-sample offset and a
//! Perfetto-style constant (the mean of the last 5 offsets, applied to the
//! whole run). Truth is exact, so every error and every bound is checked.
//!
//! - [`rng`]: splitmix64 and distributions;
//! - [`clock`]: offset, ppm, wander, relay NTP slews, suspends;
//! - [`link`]: per-direction delays (exponential / pareto queueing,
//!   symmetric term, spikes, reordering), Gilbert-Elliott loss, partitions;
//! - `probing`: the daemon's real prober core driven in virtual time;
//! - [`scenarios`]: docs/clock-sync-accuracy.md's scenarios and their live targets;
//! - [`run`](mod@run): one scenario, one seed; [`metrics`]: statistics and table.

pub mod clock;
pub mod link;
pub mod metrics;
mod probing;
pub mod rng;
pub mod run;
pub mod scenarios;

pub use metrics::{ErrorStats, Report, table};
pub use run::{RunOptions, run};
pub use scenarios::{Scenario, Targets};
