//! Receive stamps of probe datagrams (t2 on a relay, t4 on the daemon): the
//! kernel's receive timestamp (`SO_TIMESTAMPNS`) mapped onto the stamping
//! clock through paired REALTIME reads ([`RxStampMapper`]), or that clock
//! read right after the receive when the kernel gives none or its stamp
//! cannot be vouched for.

mod mapper;
mod recvmsg;

use std::net::SocketAddr;

use tokio::net::UdpSocket;

pub use crate::clock::ClockPair;
pub use mapper::{RxFallback, RxStampMapper, RxStampStats};
pub use recvmsg::recvmsg_stamped;

use crate::clock::Clock;

/// Environment switch of kernel receive timestamps on both probe ends.
pub const KERNEL_RX_TIMESTAMPS_ENV: &str = "TRACESYNC_KERNEL_RX_TIMESTAMPS";

/// Default of [`kernel_rx_timestamps_from_env`] and of the config keys.
pub const KERNEL_RX_TIMESTAMPS_DEFAULT: bool = true;

/// Whether the probe sockets ask the kernel for receive timestamps, from
/// [`KERNEL_RX_TIMESTAMPS_ENV`] alone: unset, `on` or `1` yes; `off` or `0`
/// no; anything else is an error (the caller says so and uses the default).
pub fn kernel_rx_timestamps_from_env() -> Result<bool, String> {
    match std::env::var(KERNEL_RX_TIMESTAMPS_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(KERNEL_RX_TIMESTAMPS_DEFAULT),
        Ok(v) => parse_kernel_rx_timestamps(&v),
        Err(e) => Err(format!("{KERNEL_RX_TIMESTAMPS_ENV}: {e}")),
    }
}

/// `on`/`1` or `off`/`0` (the value of [`KERNEL_RX_TIMESTAMPS_ENV`]).
pub fn parse_kernel_rx_timestamps(value: &str) -> Result<bool, String> {
    match value {
        "on" | "1" => Ok(true),
        "off" | "0" => Ok(false),
        other => Err(format!(
            "{KERNEL_RX_TIMESTAMPS_ENV}={other:?}: use on or off; using the default ({})",
            if KERNEL_RX_TIMESTAMPS_DEFAULT {
                "on"
            } else {
                "off"
            }
        )),
    }
}

/// Whether a probe socket asks for kernel receive timestamps: the config
/// key's value (`[sync] kernel-rx-timestamps` of either end), unless
/// [`KERNEL_RX_TIMESTAMPS_ENV`] is set (a switch for test harnesses and
/// diagnosis; it wins). The error names a bad environment value; the
/// caller logs it and keeps the configured value.
pub fn kernel_rx_timestamps(configured: bool) -> (bool, Option<String>) {
    match std::env::var(KERNEL_RX_TIMESTAMPS_ENV) {
        Err(std::env::VarError::NotPresent) => (configured, None),
        Ok(v) => match parse_kernel_rx_timestamps(&v) {
            Ok(on) => (on, None),
            Err(why) => (configured, Some(why)),
        },
        Err(e) => (configured, Some(format!("{KERNEL_RX_TIMESTAMPS_ENV}: {e}"))),
    }
}

/// One datagram received by [`RxStamps::recv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    /// The receive stamp on the stamping clock (ns).
    pub stamp: u64,
    /// The stamp is the kernel's (mapped), not a read after the receive.
    pub kernel: bool,
}

/// How a UDP probe socket's datagrams get their receive stamp.
#[derive(Debug)]
pub struct RxStamps {
    /// None: userspace stamps only (switched off, or the option failed).
    kernel: Option<RxStampMapper>,
    cmsg: Vec<u8>,
    /// Fallbacks logged so far (the log is thinned to powers of two).
    logged_fallbacks: u64,
    /// Names the socket in log lines ("sync socket", "probe responder").
    label: &'static str,
}

impl RxStamps {
    /// Asks the kernel for receive timestamps on `socket` if `configured`
    /// (and the environment switch agrees); logs what it got.
    pub fn new(socket: &UdpSocket, configured: bool, label: &'static str) -> Self {
        let (wanted, bad_env) = kernel_rx_timestamps(configured);
        if let Some(why) = bad_env {
            tracing::warn!("{label}: {why}");
        }
        let kernel = wanted
            .then(|| {
                nix::sys::socket::setsockopt(
                    socket,
                    nix::sys::socket::sockopt::ReceiveTimestampns,
                    &true,
                )
            })
            .and_then(|set| match set {
                Ok(()) => Some(RxStampMapper::new()),
                Err(error) => {
                    tracing::warn!(%error, "{label}: no kernel receive timestamps (SO_TIMESTAMPNS); datagrams are stamped after the receive");
                    None
                }
            });
        tracing::debug!(kernel = kernel.is_some(), "{label}: receive timestamps");
        Self {
            kernel,
            cmsg: nix::cmsg_space!(nix::sys::time::TimeSpec),
            logged_fallbacks: 0,
            label,
        }
    }

    /// A paired read before waiting: the lower end of the interval a
    /// kernel stamp is checked against.
    pub fn before_wait<C: Clock + ?Sized>(&mut self, clock: &C) {
        if let Some(mapper) = self.kernel.as_mut() {
            mapper.note(clock.realtime_pair());
        }
    }

    /// Receives one datagram and stamps it on `clock`.
    pub async fn recv<C: Clock + ?Sized>(
        &mut self,
        socket: &UdpSocket,
        buffer: &mut [u8],
        clock: &C,
    ) -> std::io::Result<Received> {
        if self.kernel.is_none() {
            let (len, from) = socket.recv_from(buffer).await?;
            return Ok(Received {
                len,
                from,
                stamp: clock.boottime(),
                kernel: false,
            });
        }
        let cmsg = &mut self.cmsg;
        let (len, from, kernel, now) = socket
            .async_io(tokio::io::Interest::READABLE, || {
                recvmsg_stamped(socket, &mut *buffer, &mut *cmsg, || clock.realtime_pair())
            })
            .await?;
        Ok(self.stamped(len, from, kernel, now))
    }

    /// Receives a datagram already waiting, without waiting (`WouldBlock`
    /// when there is none): a caller that took one drains what queued
    /// behind it at once, without a turn of its loop per datagram.
    pub fn try_recv<C: Clock + ?Sized>(
        &mut self,
        socket: &UdpSocket,
        buffer: &mut [u8],
        clock: &C,
    ) -> std::io::Result<Received> {
        if self.kernel.is_none() {
            let (len, from) = socket.try_recv_from(buffer)?;
            return Ok(Received {
                len,
                from,
                stamp: clock.boottime(),
                kernel: false,
            });
        }
        let cmsg = &mut self.cmsg;
        let (len, from, kernel, now) = socket.try_io(tokio::io::Interest::READABLE, || {
            recvmsg_stamped(socket, &mut *buffer, &mut *cmsg, || clock.realtime_pair())
        })?;
        Ok(self.stamped(len, from, kernel, now))
    }

    /// The receive stamp of a datagram read with the kernel's stamp asked
    /// for (`now`: the paired read right after the receive).
    fn stamped(
        &mut self,
        len: usize,
        from: SocketAddr,
        kernel: Option<u64>,
        now: ClockPair,
    ) -> Received {
        let Some(mapper) = self.kernel.as_mut() else {
            return Received {
                len,
                from,
                stamp: now.clock_ns,
                kernel: false,
            };
        };
        let before = mapper.stats().kernel;
        let stamp = mapper.map(kernel, now);
        let stats = mapper.stats();
        if stats.fallbacks() > self.logged_fallbacks && stats.fallbacks().is_power_of_two() {
            self.logged_fallbacks = stats.fallbacks();
            tracing::debug!(
                ?stats,
                "{}: kernel receive timestamp not usable; stamped after the receive",
                self.label
            );
        }
        Received {
            len,
            from,
            stamp,
            kernel: stats.kernel > before,
        }
    }

    /// The mapper's counters (None: userspace stamps only).
    pub fn stats(&self) -> Option<RxStampStats> {
        self.kernel.as_ref().map(RxStampMapper::stats)
    }
}

impl Drop for RxStamps {
    /// The summary line, however the socket's run ends.
    fn drop(&mut self) {
        if let Some(RxStampStats {
            kernel,
            missing,
            after_now,
            before_anchor,
            clocks_moved,
        }) = self.stats()
        {
            tracing::info!(
                kernel,
                missing,
                after_now,
                before_anchor,
                clocks_moved,
                "{}: receive timestamps (kernel used, userspace fallbacks by reason)",
                self.label
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_values_parse() {
        assert_eq!(parse_kernel_rx_timestamps("on"), Ok(true));
        assert_eq!(parse_kernel_rx_timestamps("0"), Ok(false));
        assert!(parse_kernel_rx_timestamps("yes").is_err());
    }
}
