//! `unix:PATH` (a listening socket, one stream per producer connection) and
//! `stdin`: Trace-framed packets from local producers.

use std::path::PathBuf;

use tokio::sync::mpsc;

use super::{SourceBatch, SourceContext};

pub(crate) async fn run_unix(
    path: PathBuf,
    label: String,
    index: u16,
    ctx: SourceContext,
    tx: mpsc::Sender<SourceBatch>,
) {
    let _ = (path, label, index, ctx, tx);
}

pub(crate) async fn run_stdin(
    label: String,
    index: u16,
    ctx: SourceContext,
    tx: mpsc::Sender<SourceBatch>,
) {
    let _ = (label, index, ctx, tx);
}
