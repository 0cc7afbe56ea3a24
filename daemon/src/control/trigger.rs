//! `{"cmd":"trigger",...}` on the control socket: the request is checked
//! here (name and spans, as every binary checks them), then handed to the
//! ingest loop, which owns the trigger table and the relays' estimates and
//! answers with the trigger fired or the reason it was refused.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracesync_core::control::TriggerAnswer;
use tracesync_core::trigger::TriggerRequest;
use tracesync_protocol::trigger::{MAX_TRIGGER_SPAN, check_trigger_name};

/// Trigger requests queued for the ingest loop at most (the control
/// socket's clients are bounded too; one more waits).
pub const TRIGGER_QUEUE: usize = 16;

/// How long a trigger waits for the ingest loop's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// A trigger on its way to the ingest loop, with where its answer goes.
#[derive(Debug)]
pub struct TriggerAsk {
    pub request: TriggerRequest,
    /// The trigger fired, or the one-line reason it did not.
    pub reply: oneshot::Sender<Result<TriggerAnswer, String>>,
}

/// Checks a request's name and spans; the error is the line the client
/// gets.
pub fn check(name: &str, before_ns: u64, after_ns: u64) -> Result<TriggerRequest, String> {
    check_trigger_name(name)?;
    let max = u64::try_from(MAX_TRIGGER_SPAN.as_nanos()).unwrap_or(u64::MAX);
    for (what, ns) in [("before", before_ns), ("after", after_ns)] {
        if ns > max {
            return Err(format!(
                "--{what} of {ns} ns is over the {}-second limit",
                MAX_TRIGGER_SPAN.as_secs()
            ));
        }
    }
    Ok(TriggerRequest {
        name: name.to_owned(),
        before_ns,
        after_ns,
    })
}

/// The answer line to a trigger request: the [`TriggerAnswer`] as JSON, or
/// an `{"error":...}` line.
pub async fn answer_line(
    hub: &super::ControlHub,
    name: &str,
    before_ns: u64,
    after_ns: u64,
) -> String {
    let answer = match check(name, before_ns, after_ns) {
        Ok(request) => fire(hub.trigger_sender(), request).await,
        Err(reason) => Err(reason),
    };
    match answer.and_then(|fired| serde_json::to_string(&fired).map_err(|e| e.to_string())) {
        Ok(mut line) => {
            line.push('\n');
            line
        }
        Err(reason) => tracesync_core::control::error_line(&reason),
    }
}

/// Hands `request` to the ingest loop and waits for its answer.
pub async fn fire(
    asks: Option<&mpsc::Sender<TriggerAsk>>,
    request: TriggerRequest,
) -> Result<TriggerAnswer, String> {
    let Some(asks) = asks else {
        return Err("this daemon takes no triggers (no ingest loop is wired)".into());
    };
    let (reply, answer) = oneshot::channel();
    let gone = || "the daemon is stopping; no trigger fired".to_owned();
    asks.send(TriggerAsk { request, reply })
        .await
        .map_err(|_| gone())?;
    match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err(gone()),
        Err(_) => Err(format!(
            "no answer from the ingest loop within {} s; the trigger may still fire",
            ANSWER_TIMEOUT.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_spans_are_checked_before_the_ingest_loop_sees_them() {
        let ok = check("crash", 30_000_000_000, 5_000_000_000);
        assert_eq!(ok.map(|r| r.name), Ok("crash".to_owned()));
        assert!(check("a/b", 0, 0).is_err());
        let long = check("crash", 3_601_000_000_000, 0);
        assert_eq!(
            long,
            Err("--before of 3601000000000 ns is over the 3600-second limit".into())
        );
    }

    #[tokio::test]
    async fn without_an_ingest_loop_a_trigger_is_refused_in_a_line() {
        let request = check("crash", 1, 1).unwrap_or_else(|e| panic!("{e}"));
        let refused = fire(None, request.clone()).await;
        assert!(refused.is_err());
        let (asks, rx) = mpsc::channel(1);
        drop(rx);
        assert_eq!(
            fire(Some(&asks), request).await,
            Err("the daemon is stopping; no trigger fired".into())
        );
    }
}
