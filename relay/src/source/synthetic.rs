//! `synthetic:RATE`: the built-in generator.

use tokio::sync::mpsc;

use super::{Cursor, SourceBatch, SourceContext, SyntheticSpec};

pub(crate) async fn run(
    spec: SyntheticSpec,
    index: u16,
    ctx: SourceContext,
    resume: Cursor,
    tx: mpsc::Sender<SourceBatch>,
) {
    let _ = (spec, index, ctx, resume, tx);
}
