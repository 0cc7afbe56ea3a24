//! The ingest loop's commits: request one at each tick, ack what the
//! writer reports durable, recover after failures (see `ingest.rs`).

use std::io;

use tracing::info;

use super::{Ingest, unix_ms};
use crate::server::engine::{Core, Fanout, Writer};

impl<C, W> Ingest<C, W>
where
    C: Core,
    W: Writer<C::SyncUpdate>,
{
    /// Writes what is pending, takes a commit point and requests a commit
    /// covering it; acks what is durable already.
    pub(super) fn commit(&mut self, packets: &impl Fanout) {
        if !self.write_unwritten(packets) {
            return;
        }
        self.take_durable();
        let point = self.core.commit_point();
        let durable = if self.dirty {
            match self.writer.request_commit() {
                Ok(commit) => {
                    self.dirty = false;
                    self.summary.commits += 1;
                    if let Some(ts) = self.output_ts.requested(commit, self.written_ts) {
                        self.durable_ts = self.durable_ts.max(ts);
                    }
                    self.acks.requested(commit, point)
                }
                Err(e) => {
                    self.failed("commit", &e);
                    return;
                }
            }
        } else {
            if let Some(ts) = self.output_ts.unchanged(self.written_ts) {
                self.durable_ts = self.durable_ts.max(ts);
            }
            self.acks.unchanged(point)
        };
        self.recovered();
        if let Some(point) = durable {
            self.ack(point);
        }
    }

    /// Takes the commits the writer finished and acks what they cover.
    pub(super) fn take_durable(&mut self) {
        let polled = self.writer.poll_commits();
        self.on_commits(polled);
    }

    pub(super) fn on_commits(&mut self, polled: io::Result<Option<u64>>) {
        match polled {
            Ok(Some(through)) => {
                if let Some(ts) = self.output_ts.durable(through) {
                    self.durable_ts = self.durable_ts.max(ts);
                }
                let durable = self.acks.durable(through);
                self.recovered();
                if let Some(point) = durable {
                    self.ack(point);
                }
            }
            Ok(None) => {}
            Err(e) => {
                // What the failed commit covered still needs one.
                self.dirty = true;
                self.failed("commit", &e);
            }
        }
    }

    /// After a failure: the output works again once everything is written
    /// and no point waits for a commit.
    fn recovered(&mut self) {
        if !self.failing || !self.unwritten.is_empty() || self.dirty || !self.acks.idle() {
            return;
        }
        self.failing = false;
        let since = self.output.failing_since_unix_ms.take().unwrap_or(0);
        self.output.failing = false;
        info!(
            "the output is writable again after {} ms ({} failed attempts in all); \
             acknowledging relays",
            unix_ms().saturating_sub(since),
            self.output.errors
        );
    }

    /// Everything drained up to `point` is durable: send the acks.
    fn ack(&mut self, point: C::CommitPoint) {
        for (slot, through) in self.core.committed_through(point) {
            if let Some(entry) = self.sessions.get(&slot) {
                entry.feedback.send_if_modified(|feedback| {
                    let grew = through > feedback.acked_through_batch;
                    if grew {
                        feedback.acked_through_batch = through;
                    }
                    grew
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use tokio::sync::{broadcast, watch};
    use tracesync_protocol::relay::v1;

    use super::super::{IngestSettings, SessionEntry};
    use super::*;
    use crate::server::engine::{Admitted, Slot};
    use crate::server::events::Feedback;
    use tracesync_core::live::OutPacket;
    use tracesync_core::status::MachineStatus;

    /// A core whose commit point `p` acks batch `p` of slot 1.
    #[derive(Default)]
    struct PointCore {
        points: u64,
    }

    /// [`PointCore`] refuses every Hello (the tests connect none).
    #[derive(Debug, thiserror::Error)]
    #[error("unused")]
    struct Unused;

    impl Core for PointCore {
        type SyncUpdate = ();
        type CommitPoint = u64;
        type Refusal = Unused;
        type SessionError = std::convert::Infallible;
        fn connect(&mut self, _: &v1::Hello, _: u64) -> Result<Admitted, Unused> {
            Err(Unused)
        }
        fn batch(&mut self, _: Slot, _: v1::Batch, _: u64) -> Result<(), Self::SessionError> {
            Ok(())
        }
        fn heartbeat(
            &mut self,
            _: Slot,
            _: &v1::Heartbeat,
            _: u64,
        ) -> Result<(), Self::SessionError> {
            Ok(())
        }
        fn sync(&mut self, (): &()) {}
        fn disconnect(&mut self, _: Slot) {}
        fn host_tick(&mut self, _: u64) {}
        fn drain(&mut self, _: u64, _: &mut Vec<OutPacket>) {}
        fn flush_all(&mut self, _: &mut Vec<OutPacket>) {}
        fn commit_point(&mut self) -> u64 {
            self.points += 1;
            self.points
        }
        fn committed_through(&mut self, point: u64) -> Vec<(Slot, u64)> {
            vec![(1, point)]
        }
        fn status(&self) -> Vec<MachineStatus> {
            Vec::new()
        }
    }

    /// A writer whose commits finish when the test says.
    #[derive(Default)]
    struct LaterWriter {
        issued: u64,
        reports: VecDeque<io::Result<Option<u64>>>,
        fail_requests: bool,
    }

    impl Writer<()> for LaterWriter {
        fn write(&mut self, _: &OutPacket, _: SystemTime) -> io::Result<()> {
            Ok(())
        }
        fn commit(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn request_commit(&mut self) -> io::Result<Option<u64>> {
            if self.fail_requests {
                return Err(io::Error::other("ENOSPC"));
            }
            self.issued += 1;
            Ok(Some(self.issued))
        }
        fn poll_commits(&mut self) -> io::Result<Option<u64>> {
            self.reports.pop_front().unwrap_or(Ok(None))
        }
        fn write_sync_samples(&mut self, (): &()) -> io::Result<()> {
            Ok(())
        }
        fn current_path(&self) -> Option<PathBuf> {
            None
        }
        fn close(self) -> io::Result<()> {
            Ok(())
        }
    }

    type Loop = Ingest<PointCore, LaterWriter>;

    fn ingest() -> (Loop, watch::Receiver<Feedback>) {
        let settings = IngestSettings::new(Duration::from_millis(100));
        let mut ingest = Ingest::new(PointCore::default(), LaterWriter::default(), settings);
        let (feedback, rx) = watch::channel(Feedback {
            acked_through_batch: 0,
            close: None,
            paused: false,
        });
        ingest.sessions.insert(
            1,
            SessionEntry {
                session_id: 1,
                feedback,
                outgoing: tokio::sync::mpsc::channel(1).0,
            },
        );
        (ingest, rx)
    }

    fn acked(rx: &watch::Receiver<Feedback>) -> u64 {
        rx.borrow().acked_through_batch
    }

    fn tail() -> broadcast::Sender<Arc<OutPacket>> {
        broadcast::channel(4).0
    }

    #[test]
    fn acks_wait_for_the_commit_that_covers_them() {
        let (mut ingest, rx) = ingest();
        let tail = tail();
        ingest.dirty = true;
        // Point 1, commit 1 requested: no ack yet.
        ingest.commit(&tail);
        assert_eq!(acked(&rx), 0);
        // Nothing written since: point 2 waits for commit 1 as well.
        ingest.commit(&tail);
        assert_eq!(acked(&rx), 0);
        ingest.writer.reports.push_back(Ok(Some(1)));
        ingest.take_durable();
        assert_eq!(acked(&rx), 2);
        // Idle and nothing new: a point is durable at once.
        ingest.commit(&tail);
        assert_eq!(acked(&rx), 3);
    }

    #[test]
    fn a_failed_commit_acks_nothing_until_a_retry_is_durable() {
        let (mut ingest, rx) = ingest();
        let tail = tail();
        ingest.dirty = true;
        ingest.commit(&tail);
        ingest
            .writer
            .reports
            .push_back(Err(io::Error::other("EIO")));
        ingest.take_durable();
        assert!(ingest.failing && ingest.dirty);
        assert_eq!(acked(&rx), 0);
        // The retry cannot start either: still nothing.
        ingest.writer.fail_requests = true;
        ingest.commit(&tail);
        assert!(ingest.failing);
        // It starts (commit 2) and becomes durable: the points ack, the
        // output works again.
        ingest.writer.fail_requests = false;
        ingest.commit(&tail);
        assert!(ingest.failing);
        assert_eq!(acked(&rx), 0);
        ingest.writer.reports.push_back(Ok(Some(2)));
        ingest.take_durable();
        assert!(!ingest.failing);
        assert_eq!(acked(&rx), 3);
        assert_eq!(ingest.output.episodes, 1);
    }
}
