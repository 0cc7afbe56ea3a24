//! A task on a thread of its own, with a single-threaded tokio runtime.
//!
//! Both probe ends stamp datagrams on such a thread: a probe's send and
//! receive stamps must not wait behind other work on a shared worker (that
//! delay would land on one leg of the round trip only).

use std::future::Future;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// Runs `task(stop)` on a new thread named `name` with its own current-thread
/// runtime. `stop` is a child of `shutdown`; it is also cancelled when the
/// returned future is dropped, so dropping or aborting the awaiting task
/// stops the thread. The future completes when the thread's task has ended
/// (at once if the thread or runtime could not start: that is logged with
/// `what`, the thing that is then off).
pub fn spawn_on_own_thread<F, Fut>(
    name: &str,
    what: &'static str,
    shutdown: &CancellationToken,
    task: F,
) -> impl Future<Output = ()> + Send + 'static
where
    F: FnOnce(CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let stop = shutdown.child_token();
    let stop_on_drop = stop.clone().drop_guard();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let thread_name = name.to_owned();
    let started = std::thread::Builder::new()
        .name(thread_name.clone())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(task(stop)),
                Err(error) => {
                    tracing::error!(%error, "{thread_name}: cannot build a runtime; {what} is off");
                }
            }
            drop(done_tx);
        });
    if let Err(error) = &started {
        tracing::error!(%error, "{name}: cannot start a thread; {what} is off");
    }
    async move {
        let _stop_on_drop = stop_on_drop;
        // Err (sender dropped) is the normal end: the thread finished.
        let _ = done_rx.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_on_its_own_thread_and_stops_when_dropped() {
        let shutdown = CancellationToken::new();
        let (tx, rx) = oneshot::channel();
        let done = spawn_on_own_thread("test-own", "the test", &shutdown, |stop| async move {
            let _ = tx.send(std::thread::current().name().map(str::to_owned));
            stop.cancelled().await;
        });
        assert_eq!(rx.await.unwrap().as_deref(), Some("test-own"));
        // Dropping the waiter cancels `stop`; the thread ends.
        let handle = tokio::spawn(done);
        handle.abort();
        let _ = handle.await;
        let done = spawn_on_own_thread("test-own-2", "the test", &shutdown, |stop| async move {
            stop.cancelled().await;
        });
        shutdown.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), done)
            .await
            .expect("the thread ends on shutdown");
    }
}
