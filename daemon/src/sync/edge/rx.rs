//! t4 of the sync socket's datagrams: the kernel's receive timestamp mapped
//! onto host BOOTTIME through paired REALTIME reads, or the BOOTTIME read
//! right after the receive.

#[path = "../../../../relay/src/rx_stamp.rs"]
mod rx_stamp;

use tokio::net::UdpSocket;
use tracesync_protocol::probe::{ClockPair, RxStampMapper, RxStampStats};

use crate::hostclock::boottime_ns;

/// How the UDP socket's datagrams get t4: the kernel's receive timestamp
/// mapped onto BOOTTIME, or the BOOTTIME read right after the receive.
pub(super) struct RxStamps {
    /// None: userspace stamps only (switched off, or the option failed).
    kernel: Option<RxStampMapper>,
    cmsg: Vec<u8>,
    /// Fallbacks logged so far (the log is thinned to powers of two).
    logged_fallbacks: u64,
}

impl RxStamps {
    /// `configured`: `[sync] kernel-rx-timestamps`.
    pub(super) fn new(socket: &UdpSocket, configured: bool) -> Self {
        let (wanted, bad_env) = tracesync_protocol::probe::kernel_rx_timestamps(configured);
        if let Some(why) = bad_env {
            tracing::warn!("sync: {why}");
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
                    tracing::warn!(%error, "sync socket: no kernel receive timestamps (SO_TIMESTAMPNS); t4 is stamped after the receive");
                    None
                }
            });
        tracing::debug!(kernel = kernel.is_some(), "sync socket: receive timestamps");
        Self {
            kernel,
            cmsg: nix::cmsg_space!(nix::sys::time::TimeSpec),
            logged_fallbacks: 0,
        }
    }

    /// A paired read before waiting: the lower end of the interval a
    /// kernel stamp is checked against.
    pub(super) fn before_wait(&mut self) {
        if let Some(mapper) = self.kernel.as_mut() {
            mapper.note(clock_pair());
        }
    }

    /// Receives one datagram: (length, sender, t4).
    pub(super) async fn recv(
        &mut self,
        socket: &UdpSocket,
        buffer: &mut [u8],
    ) -> std::io::Result<(usize, std::net::SocketAddr, u64)> {
        let Some(mapper) = self.kernel.as_mut() else {
            let (length, from) = socket.recv_from(buffer).await?;
            return Ok((length, from, boottime_ns()));
        };
        let cmsg = &mut self.cmsg;
        let (length, from, kernel, now) = socket
            .async_io(tokio::io::Interest::READABLE, || {
                rx_stamp::recvmsg_stamped(socket, &mut *buffer, &mut *cmsg, clock_pair)
            })
            .await?;
        let t4 = mapper.map(kernel, now);
        let stats = mapper.stats();
        if stats.fallbacks() > self.logged_fallbacks && stats.fallbacks().is_power_of_two() {
            self.logged_fallbacks = stats.fallbacks();
            tracing::debug!(
                ?stats,
                "sync socket: kernel receive timestamp not usable; stamped after the receive"
            );
        }
        Ok((length, from, t4))
    }

    pub(super) fn log_summary(&self) {
        if let Some(mapper) = &self.kernel {
            let RxStampStats {
                kernel,
                missing,
                after_now,
                before_anchor,
                clocks_moved,
            } = mapper.stats();
            tracing::info!(
                kernel,
                missing,
                after_now,
                before_anchor,
                clocks_moved,
                "sync socket: receive timestamps (kernel used, userspace fallbacks by reason)"
            );
        }
    }
}

/// REALTIME read around BOOTTIME (the midpoint), for [`RxStampMapper`]:
/// the tightest of up to 3 tries (a preemption between the reads would
/// skew the pair).
fn clock_pair() -> ClockPair {
    let mut best: Option<(u64, ClockPair)> = None;
    for _ in 0..3 {
        let before = realtime_ns();
        let clock_ns = boottime_ns();
        let after = realtime_ns();
        let width = after.saturating_sub(before);
        let pair = ClockPair {
            realtime_ns: before + width / 2,
            clock_ns,
        };
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, pair));
        }
        if width <= PAIR_READ_GOOD_NS {
            break;
        }
    }
    best.map(|(_, pair)| pair).unwrap_or_default()
}

/// A paired read this tight is taken at once.
const PAIR_READ_GOOD_NS: u64 = 2_000;

fn realtime_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_REALTIME).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}
