//! `tracesync trigger NAME`: fires a flight-recorder trigger at the daemon
//! over its control socket and prints what it answered (the trigger's id,
//! host time and snapshot file), or why it refused (exit 75: over the
//! name's rate limit, or another refusal; retry later).

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use tracesync_common::exit;
use tracesync_core::control::{Request, TriggerAnswer};
use tracesync_protocol::trigger::format_span;

use crate::connect::{self, Target};

/// The trigger as the command line gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerArgs {
    pub name: String,
    pub before: Duration,
    pub after: Duration,
}

/// Longest answer line read.
const MAX_ANSWER_BYTES: u64 = 64 << 10;

pub fn run(target: &Target, args: &TriggerArgs) -> u8 {
    if let Err(reason) = tracesync_protocol::trigger::check_trigger_name(&args.name) {
        eprintln!("tracesync: {reason}");
        return exit::USAGE;
    }
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let request = Request::Trigger {
        name: args.name.clone(),
        before_ns: nanos(args.before),
        after_ns: nanos(args.after),
    };
    let conn = match connect::open(target, &request) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(15)));
    let mut line = Vec::new();
    if let Err(e) = BufReader::new(conn)
        .take(MAX_ANSWER_BYTES)
        .read_until(b'\n', &mut line)
    {
        return connect::unreachable(target, &format!("no answer to the trigger: {e}"));
    }
    if let Some(refused) = connect::refusal(&line) {
        eprintln!("tracesync: trigger {} not fired: {refused}", args.name);
        return exit::TEMPFAIL;
    }
    match serde_json::from_slice::<TriggerAnswer>(&line) {
        Ok(answer) => {
            println!("{}", describe(&answer));
            exit::OK
        }
        Err(e) => {
            eprintln!(
                "tracesync: the daemon at {} sent a bad answer: {e}; are the daemon and this \
                 tool the same version?",
                target.display()
            );
            exit::DATAERR
        }
    }
}

/// The line printed for a trigger that fired.
pub fn describe(answer: &TriggerAnswer) -> String {
    format!(
        "trigger {} fired (id {:016x}) at host time {} ns: window {} before, {} after; {} ring \
         relay(s) asked; snapshot {}",
        answer.name,
        answer.id,
        answer.host_time_ns,
        format_span(Duration::from_nanos(answer.before_ns)),
        format_span(Duration::from_nanos(answer.after_ns)),
        answer.ring_relays,
        answer.snapshot
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fired_trigger_is_one_line_with_its_snapshot() {
        let answer = TriggerAnswer {
            id: 0xab,
            name: "crash".into(),
            host_time_ns: 12,
            before_ns: 30_000_000_000,
            after_ns: 500_000_000,
            ring_relays: 4,
            snapshot: "snapshot-20260101T000000Z-crash.pftrace".into(),
        };
        assert_eq!(
            describe(&answer),
            "trigger crash fired (id 00000000000000ab) at host time 12 ns: window 30s before, \
             500ms after; 4 ring relay(s) asked; snapshot snapshot-20260101T000000Z-crash.pftrace"
        );
    }
}
