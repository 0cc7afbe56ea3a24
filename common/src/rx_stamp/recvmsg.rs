//! Receiving a datagram with the kernel's receive timestamp.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg};

/// One non-blocking `recvmsg`: (length, sender, the kernel's receive
/// timestamp in REALTIME ns if it gave one, what `after_receive` read right
/// after the call: the paired clock read the mapping needs).
pub fn recvmsg_stamped<T>(
    socket: &impl AsRawFd,
    buffer: &mut [u8],
    cmsg: &mut [u8],
    after_receive: impl FnOnce() -> T,
) -> std::io::Result<(usize, SocketAddr, Option<u64>, T)> {
    let mut iov = [std::io::IoSliceMut::new(buffer)];
    let msg = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(cmsg),
        MsgFlags::MSG_DONTWAIT,
    )?;
    let now = after_receive();
    let kernel = msg.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|c| match c {
            ControlMessageOwned::ScmTimestampns(ts) if ts.tv_sec() >= 0 => {
                Some(ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
            }
            _ => None,
        })
    });
    let from = msg
        .address
        .and_then(|a| {
            a.as_sockaddr_in()
                .map(|a| SocketAddr::from(*a))
                .or_else(|| a.as_sockaddr_in6().map(|a| SocketAddr::from(*a)))
        })
        .ok_or_else(|| std::io::Error::other("datagram without an IP sender address"))?;
    Ok((msg.bytes, from, kernel, now))
}
