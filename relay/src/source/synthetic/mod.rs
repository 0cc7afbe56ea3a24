//! `synthetic:RATE[,size=BYTES][,seqs=N]`: the built-in generator.
//!
//! Writes what Perfetto's SDK writes for a few threads: per sequence, a
//! packet that clears the incremental state and carries a slice track's
//! descriptor and interned event names, a counter track's descriptor, then
//! TrackEvent slices (begin/end, interned names) and counter values; the
//! state is cleared again about every 1000 packets of a sequence. TrackEvents
//! carry identity annotations for accuracy and loss checks (docs/format.md,
//! "Synthetic source"): `tracesync_src`, `tracesync_n` (contiguous from 0
//! per source over the packets that carry it, resumed from the cursor) and
//! `tracesync_truth_ns` (ground-truth host BOOTTIME of the timestamp).
//! Every TrackEvent carries them, except with a `size=` below an annotated
//! packet's size (about 115 bytes): then every k-th TrackEvent does, k
//! chosen so packets average about `size` bytes on the wire.
//! Timestamps are relay BOOTTIME with no clock id set (BOOTTIME is
//! Perfetto's default trace clock).
//!
//! [`Generator`] decides what is written and when (`generator`), writing
//! the TrackEvent packets by hand (`encode`); [`TokenBucket`] paces it
//! (`rate`); [`read_identity`] reads the annotations back (`identity`).

mod encode;
mod generator;
mod identity;
mod rate;

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::{Cursor, SourceBatch, SourceContext, SyntheticSpec, send_batch};

pub use generator::Generator;
pub use identity::{SyntheticIdentity, read_identity};
pub use rate::TokenBucket;

/// Annotation names (TrackEvent debug annotations; `debug.<name>` args in
/// the trace processor).
pub const ANNOTATION_SRC: &str = "tracesync_src";
pub const ANNOTATION_N: &str = "tracesync_n";
pub const ANNOTATION_TRUTH: &str = "tracesync_truth_ns";
pub const ANNOTATION_PAD: &str = "tracesync_pad";

/// A sequence's incremental state is cleared again after this many packets.
pub const CLEAR_EVERY: u64 = 1000;

/// How often the generator wakes up.
const TICK: Duration = Duration::from_millis(10);

/// Most packets per batch.
const BATCH_MAX_PACKETS: usize = 4096;
/// Most packet bytes per batch (about).
const BATCH_MAX_BYTES: usize = 512 << 10;

pub(crate) async fn run(
    spec: SyntheticSpec,
    index: u16,
    ctx: SourceContext,
    resume: Cursor,
    tx: mpsc::Sender<SourceBatch>,
) {
    let next_counter = match resume {
        Cursor::Synthetic { next_counter } => next_counter,
        _ => 0,
    };
    let relay_ids: Vec<u32> = (0..spec.seqs).map(|_| ctx.sequences.allocate()).collect();
    let src = format!("{}/{index}", ctx.machine_name);
    let mut generator = Generator::new(&src, &relay_ids, next_counter, spec.size);
    let approx_size = spec.size.unwrap_or(116).max(32);
    let batch_max = (BATCH_MAX_BYTES / approx_size).clamp(1, BATCH_MAX_PACKETS);
    let mut bucket = TokenBucket::new(spec.rate);
    let origin = Instant::now();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let clock = ctx.clock.clone();
    let truth = move |ts| clock.truth_host_boottime(ts);
    let mut last_ts = ctx.clock.boottime();
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let due = bucket.take(origin.elapsed().as_nanos() as u64) as usize;
        if due == 0 {
            continue;
        }
        let now_ts = ctx.clock.boottime().max(last_ts);
        let span = now_ts - last_ts;
        let mut done = 0;
        while done < due {
            let k = batch_max.min(due - done);
            let from = last_ts + (u128::from(span) * done as u128 / due as u128) as u64;
            let to = last_ts + (u128::from(span) * (done + k) as u128 / due as u128) as u64;
            let mut packets = Vec::with_capacity(k + 2 * relay_ids.len());
            generator.generate(k, from, to, &truth, &mut packets);
            done += k;
            let batch = SourceBatch {
                source: index,
                packets,
                cursor: Cursor::Synthetic {
                    next_counter: generator.next_counter(),
                },
            };
            if !send_batch(&tx, &ctx, batch).await {
                return;
            }
        }
        last_ts = now_ts;
    }
}

#[cfg(test)]
mod tests;
