//! The VM relay run of `scripts/vm-relay.sh`: a relay in a qemu guest with
//! its own kernel and clocks, checked through a channel the clock sync does
//! not use.
//!
//! - [`ping`]: the host's side of the serial channel. It sends numbered
//!   pings over a serial port of the guest (a unix socket on the host),
//!   stamps send and receive in the host's BOOTTIME and logs the guest's
//!   BOOTTIME stamp of each (`tracesync-vm-guest` writes the same stamp as
//!   a trace event through the relay).
//! - [`check`]: after the capture, every guest ping event's resolved time
//!   must lie in its host [send, receive] window widened by its `err_ns`;
//!   synthetic and ping events are counted for loss and duplication; the
//!   guest's drift and jitter are reported from the estimator (status),
//!   the probe samples (sidecars) and the ping channel.
//! - [`stats`]: quantiles and a least-squares line.

pub mod check;
pub mod ping;
pub mod stats;

use serde_json::json;

/// One ping: host BOOTTIME at send and at receive of the answer, and the
/// guest's BOOTTIME stamp of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ping {
    pub n: u64,
    pub send_ns: u64,
    pub recv_ns: u64,
    pub guest_ns: u64,
}

impl Ping {
    pub fn to_json(&self) -> String {
        json!({
            "n": self.n,
            "send_ns": self.send_ns,
            "recv_ns": self.recv_ns,
            "guest_ns": self.guest_ns,
        })
        .to_string()
    }

    /// One line of a ping log; `Err` names the missing key.
    pub fn from_json(line: &str) -> Result<Ping, String> {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        let key = |k: &str| {
            v[k].as_u64()
                .ok_or_else(|| format!("key {k:?} missing or not an unsigned integer"))
        };
        Ok(Ping {
            n: key("n")?,
            send_ns: key("send_ns")?,
            recv_ns: key("recv_ns")?,
            guest_ns: key("guest_ns")?,
        })
    }
}
