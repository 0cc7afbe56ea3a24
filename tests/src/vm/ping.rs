//! The host's side of the serial ping channel (see [`super`]). The guest
//! answers `P <n>` with `A <n> <guest BOOTTIME ns>`; `R` says it is ready,
//! `Q` makes it exit.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Ping;
use crate::live::host_boottime_ns;

/// How the pings are sent.
#[derive(Clone, Debug)]
pub struct PingPlan {
    pub count: u64,
    pub interval: Duration,
    /// Longest wait for the guest's `R` (its boot and the relay's start).
    pub ready_timeout: Duration,
    /// Longest wait for one answer.
    pub answer_timeout: Duration,
}

/// An open serial channel to the guest.
pub struct Channel {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    label: String,
}

impl Channel {
    /// Connects to the host end of the guest's serial port, retrying while
    /// qemu has not created it yet (up to `timeout`).
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Channel, String> {
        let label = socket.display().to_string();
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match UnixStream::connect(socket) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("{label}: cannot connect within {timeout:?}: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let writer = stream.try_clone().map_err(|e| format!("{label}: {e}"))?;
        Ok(Channel {
            reader: BufReader::new(stream),
            writer,
            label,
        })
    }

    fn read_line(&mut self, timeout: Duration) -> Result<String, String> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout))
            .map_err(|e| format!("{}: {e}", self.label))?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err(format!("{}: closed by the guest", self.label)),
            Ok(_) => Ok(line.trim().to_owned()),
            Err(e) => Err(format!("{}: no line within {timeout:?}: {e}", self.label)),
        }
    }

    fn send(&mut self, line: &str) -> Result<(), String> {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| format!("{}: {e}", self.label))
    }

    /// Waits for the guest's `R` (other lines before it are skipped).
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{}: the guest was not ready within {timeout:?} (see its console log)",
                    self.label
                ));
            }
            if self.read_line(left)? == "R" {
                return Ok(());
            }
        }
    }

    /// Sends the pings of `plan`, one at a time, and returns them in order.
    /// `log` gets each as it completes.
    pub fn run(
        &mut self,
        plan: &PingPlan,
        mut log: impl FnMut(&Ping),
    ) -> Result<Vec<Ping>, String> {
        let mut pings = Vec::with_capacity(plan.count as usize);
        let start = Instant::now();
        for n in 0..plan.count {
            // Paced from the start, so a slow answer does not stretch the run.
            let due = start + plan.interval * n as u32;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let send_ns = host_boottime_ns();
            self.send(&format!("P {n}"))?;
            let answer = self.read_line(plan.answer_timeout)?;
            let recv_ns = host_boottime_ns();
            let guest_ns =
                parse_answer(&answer, n).map_err(|e| format!("{}: ping {n}: {e}", self.label))?;
            let ping = Ping {
                n,
                send_ns,
                recv_ns,
                guest_ns,
            };
            log(&ping);
            pings.push(ping);
        }
        Ok(pings)
    }

    /// Tells the guest to stop (`Q`).
    pub fn quit(&mut self) -> Result<(), String> {
        self.send("Q")
    }
}

/// `A <n> <guest ns>` for ping `n`: the guest's stamp.
pub fn parse_answer(answer: &str, n: u64) -> Result<u64, String> {
    let mut parts = answer.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("A"), Some(got), Some(stamp), None) if got == n.to_string() => stamp
            .parse::<u64>()
            .map_err(|e| format!("answer {answer:?}: bad stamp: {e}")),
        _ => Err(format!("answer {answer:?} is not `A {n} <ns>`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_matched_to_their_ping() {
        assert_eq!(parse_answer("A 7 123456", 7), Ok(123_456));
        assert!(parse_answer("A 6 123456", 7).is_err());
        assert!(parse_answer("A 7", 7).is_err());
        assert!(parse_answer("A 7 12x", 7).is_err());
        assert!(parse_answer("A 7 1 2", 7).is_err());
    }
}
