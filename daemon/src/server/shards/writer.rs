//! The writer thread of sharded ingest: merges the shards' runs
//! ([`ShardMerge`]), writes them to the rolling output and the tails,
//! commits, and tells each shard which of its runs are durable. It also
//! answers perfetto tails' preamble requests, applies reloaded limits and
//! publishes the status merged over the shards.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, watch};
use tracesync_core::live::OutPacket;
use tracesync_core::shard::{DurablePositions, ShardMerge};
use tracesync_core::status::{OutputStatus, StatusReport};
use tracesync_core::sync::SyncUpdate;
use tracing::{info, warn};

use super::ToWriter;
use super::budget::{RunBudget, run_bytes};
use super::link::Port;
use crate::control::PreambleRequest;
use crate::reload::OutputLimits;
use crate::server::engine::{Fanout, Writer};
use crate::server::ingest::IngestSummary;

/// What the writer thread works with.
pub(super) struct WriterParts<W, F> {
    pub writer: W,
    pub runs: Receiver<(usize, ToWriter)>,
    pub ports: Vec<Arc<Port>>,
    pub packets: F,
    pub status: watch::Sender<Arc<StatusReport>>,
    pub shard_status: Vec<watch::Receiver<Arc<StatusReport>>>,
    pub preamble_requests: Option<mpsc::Receiver<PreambleRequest>>,
    pub limits: Option<watch::Receiver<OutputLimits>>,
    pub queue_max_bytes: u64,
    /// The runs' byte bound: given back as each run joins the merge.
    pub budget: Arc<RunBudget>,
    /// The sessions' refusal counters, read fresh for each status (a
    /// shard's report may be a turn older than another's).
    pub counters: Arc<crate::server::Counters>,
    pub commit_every: Duration,
    /// The output's current file, for the flight shard.
    pub output_path: super::link::OutputPath,
}

/// Closes the runs' budget when the writer thread ends, however it ends:
/// no shard waits on a writer that is gone.
struct CloseOnDrop(Arc<RunBudget>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

const TURN: Duration = Duration::from_millis(5);
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// How long shutdown retries a failing final commit.
const FINAL_COMMIT_PATIENCE: Duration = Duration::from_secs(5);

/// The writer thread's state between turns.
struct Turns {
    merge: ShardMerge<OutPacket>,
    durable: DurablePositions,
    summary: IngestSummary,
    /// Handed out by the merge; written through `written`.
    out: Vec<OutPacket>,
    written: usize,
    /// Written since the last commit request (or a commit failed).
    dirty: bool,
    /// Shards finished (shutdown).
    done: usize,
    failing: bool,
    /// The output's health for the status report, as the one-loop daemon
    /// reports it (the shards' loops never see the output fail).
    output: OutputStatus,
    next_commit: Instant,
    next_status: Instant,
    finished_at: Option<Instant>,
}

pub(super) fn run<W, F>(mut p: WriterParts<W, F>) -> std::io::Result<IngestSummary>
where
    W: Writer<SyncUpdate>,
    F: Fanout,
{
    let shards = p.ports.len();
    let _close = CloseOnDrop(p.budget.clone());
    let mut t = Turns {
        merge: ShardMerge::new(shards, p.queue_max_bytes),
        durable: DurablePositions::new(shards),
        summary: IngestSummary::default(),
        out: Vec::new(),
        written: 0,
        dirty: false,
        done: 0,
        failing: false,
        output: OutputStatus::default(),
        next_commit: Instant::now() + p.commit_every,
        next_status: Instant::now() + STATUS_EVERY,
        finished_at: None,
    };
    loop {
        t.receive(&mut p);
        t.write(&mut p);
        let finishing = t.done >= shards && t.written == t.out.len() && t.merge.queued() == 0;
        t.commit(&mut p, finishing);
        t.poll(&mut p, finishing);
        if let Some(requests) = p.preamble_requests.as_mut() {
            while let Ok(request) = requests.try_recv() {
                request.answer(p.writer.preamble());
            }
        }
        if let Some(limits) = p.limits.as_mut()
            && limits.has_changed().unwrap_or(false)
        {
            let new = *limits.borrow_and_update();
            p.writer.set_limits(&new);
        }
        if Instant::now() >= t.next_status || finishing {
            t.next_status = Instant::now() + STATUS_EVERY;
            publish_status(&p, &t.output);
        }
        if finishing && t.durable.in_flight() == 0 {
            break;
        }
        if t.done >= shards {
            let since = *t.finished_at.get_or_insert_with(Instant::now);
            if since.elapsed() > FINAL_COMMIT_PATIENCE {
                return Err(std::io::Error::other(
                    "the output could not be committed at shutdown; unacknowledged data stays \
                     in the relays' spools",
                ));
            }
        }
    }
    p.writer.close()?;
    info!(
        packets = t.summary.packets_written,
        commits = t.summary.commits,
        late_across_shards = t.merge.stats().late_packets,
        "output closed"
    );
    Ok(t.summary)
}

impl Turns {
    /// Takes what the shards sent (waiting a turn at most for the first).
    fn receive<W: Writer<SyncUpdate>, F>(&mut self, p: &mut WriterParts<W, F>) {
        let mut next = match p.runs.recv_timeout(TURN) {
            Ok(message) => Some(message),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.done = p.ports.len();
                None
            }
        };
        while let Some((shard, message)) = next {
            match message {
                ToWriter::Run(run) => {
                    p.budget.give(run_bytes(&run.packets));
                    self.merge.push(shard, run);
                }
                ToWriter::SyncSamples(samples) => write_samples(&mut p.writer, samples),
                ToWriter::Index(entry) => p.writer.add_index_entry(*entry),
                ToWriter::Done => self.done += 1,
            }
            next = p.runs.try_recv().ok();
        }
    }

    /// Writes what the merge hands out; on a failure the rest waits.
    fn write<W: Writer<SyncUpdate>, F: Fanout>(&mut self, p: &mut WriterParts<W, F>) {
        // A failing output is retried at each commit tick, not each turn.
        if self.failing && Instant::now() < self.next_commit {
            return;
        }
        if self.out.len() == self.written {
            self.out.clear();
            self.written = 0;
            if self.done >= p.ports.len() {
                self.merge.flush_all(&mut self.out);
            } else {
                self.merge.drain(&mut self.out);
            }
        }
        let now = SystemTime::now();
        let first = self.written;
        while let Some(packet) = self.out.get(self.written) {
            if let Err(e) = p.writer.write(packet, now) {
                self.failed("write", &e, p.writer.current_path());
                break;
            }
            self.written += 1;
            self.summary.packets_written += 1;
            self.dirty = true;
        }
        if self.written < self.out.len() {
            // Failed: the next try at the next tick.
            self.next_commit = Instant::now() + p.commit_every;
        }
        p.packets.publish_all(&self.out[first..self.written]);
    }

    /// At each commit tick, with everything handed out written: requests a
    /// commit covering the shards' runs written so far.
    fn commit<W: Writer<SyncUpdate>, F>(&mut self, p: &mut WriterParts<W, F>, finishing: bool) {
        let all_written = self.written == self.out.len();
        if !all_written || (Instant::now() < self.next_commit && !finishing) {
            return;
        }
        self.next_commit = Instant::now() + p.commit_every;
        let positions = self.merge.written_positions();
        if self.dirty || finishing {
            match p.writer.request_commit() {
                Ok(Some(ticket)) => {
                    self.dirty = false;
                    self.summary.commits += 1;
                    self.durable.requested(ticket, positions);
                }
                Ok(None) => {
                    // Everything written is durable already.
                    self.dirty = false;
                    self.durable.requested(0, positions);
                    report(&mut self.durable, u64::MAX, &p.ports);
                }
                Err(e) => self.failed("commit", &e, p.writer.current_path()),
            }
        } else if self.durable.in_flight() == 0 {
            // Nothing written since the last durable commit: what the
            // shards shipped since (empty runs) is durable too.
            self.durable.requested(0, positions);
            report(&mut self.durable, u64::MAX, &p.ports);
        }
    }

    /// Tells the shards what the finished commits made durable.
    fn poll<W: Writer<SyncUpdate>, F>(&mut self, p: &mut WriterParts<W, F>, finishing: bool) {
        let polled = if finishing {
            p.writer.wait_commits()
        } else {
            p.writer.poll_commits()
        };
        match polled {
            Ok(Some(through)) => {
                if self.failing && self.written == self.out.len() {
                    self.recovered();
                }
                report(&mut self.durable, through, &p.ports);
            }
            Ok(None) => {}
            Err(e) => {
                self.dirty = true;
                self.failed("commit", &e, p.writer.current_path());
            }
        }
    }
}

impl Turns {
    /// A write or commit failed: counted; the first of an episode logged.
    fn failed(&mut self, what: &str, e: &std::io::Error, file: Option<std::path::PathBuf>) {
        self.summary.write_errors += 1;
        self.output.errors += 1;
        crate::metrics::Event::OutputError.record();
        if !self.failing {
            self.failing = true;
            self.output.failing = true;
            self.output.episodes += 1;
            self.output.failing_since_unix_ms = Some(unix_ms());
            self.output.last_error = Some(format!("cannot {what}: {e}"));
            let file = file.map(|f| f.display().to_string()).unwrap_or_default();
            warn!(
                "cannot {what} the output {file}: {e}; relays are not acknowledged and wait \
                 until it succeeds (free space in the output directory)"
            );
        }
    }

    /// A commit covering everything written succeeded after a failure.
    fn recovered(&mut self) {
        self.failing = false;
        self.output.failing = false;
        let since = self.output.failing_since_unix_ms.take().unwrap_or(0);
        info!(
            "the output is writable again after {} ms ({} failed attempts in all); \
             acknowledging relays",
            unix_ms().saturating_sub(since),
            self.output.errors
        );
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn write_samples<W: Writer<SyncUpdate>>(
    writer: &mut W,
    samples: Vec<tracesync_core::sync::ProbeSample>,
) {
    let update = SyncUpdate {
        slot: 0,
        session_id: 0,
        estimate: Default::default(),
        samples,
    };
    // Losing sidecar samples loses no trace data.
    if let Err(e) = writer.write_sync_samples(&update) {
        tracing::debug!("cannot write clock-sync samples: {e}");
    }
}

fn report(durable: &mut DurablePositions, through: u64, ports: &[Arc<Port>]) {
    for (shard, position) in durable.durable_through(through) {
        if let Some(port) = ports.get(shard) {
            port.durable_through(position);
        }
    }
}

/// The shards' reports as one: the host row once (shard 0's), every
/// machine of every shard, the writer's file and output counters.
fn publish_status<W: Writer<SyncUpdate>, F>(p: &WriterParts<W, F>, output: &OutputStatus) {
    let mut merged: Option<StatusReport> = None;
    for (k, rx) in p.shard_status.iter().enumerate() {
        let report = rx.borrow().clone();
        match merged.as_mut() {
            None => merged = Some((*report).clone()),
            Some(m) => {
                let remote = report
                    .machines
                    .iter()
                    .filter(|row| row.raw_id != 0 || k == 0);
                m.machines.extend(remote.cloned());
            }
        }
    }
    let Some(mut merged) = merged else { return };
    let path = p.writer.current_path();
    merged.current_file = path.as_ref().map(|path| path.display().to_string());
    p.output_path.set(path);
    merged.output = p.writer.output_status(output.clone());
    merged.relays_refused = p.counters.refusals();
    merged.handshake_failures = p.counters.handshake_failures();
    p.writer.record_metrics();
    record_live(&p.ports);
    p.status.send_replace(Arc::new(merged));
}

/// The shards' core counters summed, as one core's (the metrics have no
/// shard label: a fleet's dashboards read the daemon's totals).
fn record_live(ports: &[Arc<Port>]) {
    let mut sum = tracesync_core::live::LiveStats::default();
    let mut queued = 0;
    for port in ports {
        let (stats, q) = match port.live.lock() {
            Ok(slot) => *slot,
            Err(poisoned) => *poisoned.into_inner(),
        };
        sum.packets_in += stats.packets_in;
        sum.forced_by_queue_limit += stats.forced_by_queue_limit;
        sum.sync_points_written += stats.sync_points_written;
        queued += q;
    }
    crate::metrics::record_live(&sum, queued);
}
