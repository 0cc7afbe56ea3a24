//! `file:PATH`: follows a Perfetto trace file being written, like `tail -F`.

use std::path::PathBuf;

use tokio::sync::mpsc;

use super::{Cursor, SourceBatch, SourceContext};

pub(crate) async fn run(
    path: PathBuf,
    label: String,
    index: u16,
    ctx: SourceContext,
    resume: Cursor,
    tx: mpsc::Sender<SourceBatch>,
) {
    let _ = (path, label, index, ctx, resume, tx);
}
