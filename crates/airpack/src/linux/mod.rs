//! Linux I/O primitives for the daemon: small, tested wrappers over kernel networking.
//!
//! Owns: the TUN device and batched writes into it ([`tun`]), the kernel
//! steering state (tcx egress links running the class rules as an eBPF
//! program ([`ebpf`], translated from the classic BPF of [`cbpf`]), the
//! end-to-end nftables guard, sysctls: [`steer`]), the run-state file and
//! the config-less cleanup after a crash ([`state`]), netlink
//! route lookups and change monitoring ([`route`]), the daemon's sockets (raw
//! bundle sockets, UDP bundle sockets, the header-included raw sender, SIOCOUTQ:
//! [`socket`]), timerfd/signalfd ([`timer`]), a tiny epoll wrapper ([`poll`]), the Wi-Fi
//! access category of the daemon's own sockets ([`wmm`]),
//! and network-namespace helpers for tests and the lab ([`netns`]).
//!
//! Must not touch: aggregation policy, wire formats, configuration parsing or
//! statistics layout (the daemon and `airpack-core` own those). Nothing here
//! logs per packet or allocates per packet; every error is returned as an
//! `io::Error`, and send errors can be classified with [`ErrorKind::of`] so the
//! daemon counts them by reason.

mod atomic64;
pub mod busy;
mod busy_medium;
pub mod cbpf;
pub mod ebpf;
pub mod errqueue;
pub mod htb;
pub mod mcast;
pub mod netns;
pub mod packet;
pub mod poll;
pub mod radio;
pub mod route;
pub mod socket;
pub mod state;
pub mod steer;
pub mod survey;
pub mod tim_steer;
pub mod timer;
pub mod tun;
pub mod wmm;

pub use poll::{Event, Events, Interest, Poller};
pub use route::{Changes, LinkStats, NextHop, RouteMonitor, RouteResolver};
pub use socket::{
    outq_bytes, scoped, set_buffer, BundleSocket, Family, RawIpSender, Received, UdpBundleSocket,
};
pub use steer::{Match, SteerSpec, Steering};
pub use timer::{monotonic_micros, set_realtime, set_timer_slack, CpuLatency, Signals, Timer};
pub use tun::{Tun, TunBatch};

use std::io;

/// Why a send (or receive) failed, for per-reason counters
/// (`daemon.send_errors` in `airpack stats --json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// ENOBUFS: a local queue (qdisc, socket buffer) was full.
    NoBufs,
    /// ENETUNREACH: no route.
    NetUnreach,
    /// EHOSTUNREACH: route exists but the host is unreachable (e.g. failed ARP/ND).
    HostUnreach,
    /// EMSGSIZE: larger than the path/interface MTU.
    MsgSize,
    /// EAGAIN/EWOULDBLOCK: nonblocking socket or TUN queue full.
    WouldBlock,
    /// Anything else (ENETDOWN, EPERM from netfilter, ...).
    Other,
}

impl ErrorKind {
    /// Every kind, in counter order.
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::NoBufs,
        ErrorKind::NetUnreach,
        ErrorKind::HostUnreach,
        ErrorKind::MsgSize,
        ErrorKind::WouldBlock,
        ErrorKind::Other,
    ];

    /// Classifies an I/O error by its errno.
    pub fn of(err: &io::Error) -> ErrorKind {
        match err.raw_os_error() {
            Some(libc::ENOBUFS) => ErrorKind::NoBufs,
            Some(libc::ENETUNREACH) => ErrorKind::NetUnreach,
            Some(libc::EHOSTUNREACH) => ErrorKind::HostUnreach,
            Some(libc::EMSGSIZE) => ErrorKind::MsgSize,
            Some(libc::EAGAIN) => ErrorKind::WouldBlock,
            _ if err.kind() == io::ErrorKind::WouldBlock => ErrorKind::WouldBlock,
            _ => ErrorKind::Other,
        }
    }

    /// Stable counter name: `enobufs`, `enetunreach`, `ehostunreach`, `emsgsize`, `eagain`, `other`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::NoBufs => "enobufs",
            ErrorKind::NetUnreach => "enetunreach",
            ErrorKind::HostUnreach => "ehostunreach",
            ErrorKind::MsgSize => "emsgsize",
            ErrorKind::WouldBlock => "eagain",
            ErrorKind::Other => "other",
        }
    }

    /// Index into a `[u64; 6]` counter array, in [`ErrorKind::ALL`] order.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Converts a libc return value (`-1` = error) into an `io::Result`.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Like [`cvt`] for `ssize_t` returns.
pub(crate) fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Bounds how long a blocking `recv` on `fd` waits (SO_RCVTIMEO), µs.
pub(crate) fn set_recv_timeout(fd: std::os::fd::BorrowedFd<'_>, us: u32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let tv = libc::timeval {
        tv_sec: (us / 1_000_000) as _,
        tv_usec: (us % 1_000_000) as _,
    };
    // SAFETY: tv is a valid timeval of the given size.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Discards whatever the (non-blocking read of the) socket holds: the
/// netlink readers' answers that arrive after they stopped waiting.
pub(crate) fn drain(fd: &std::os::fd::OwnedFd, rx: &mut [u8]) {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: rx is a valid writable buffer of its length.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                rx.as_mut_ptr().cast(),
                rx.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            break;
        }
    }
}

/// A blocking netlink socket of protocol `proto` whose `recv` gives up
/// after `recv_timeout_us` (for dumps read off the packet path).
pub(crate) fn netlink_socket(
    proto: libc::c_int,
    recv_timeout_us: u32,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    // SAFETY: plain socket(2), checked before wrapping.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto) })?;
    // SAFETY: fd was just created and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_recv_timeout(fd.as_fd(), recv_timeout_us)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_classify_errnos() {
        let k = |e| ErrorKind::of(&io::Error::from_raw_os_error(e));
        assert_eq!(k(libc::ENOBUFS), ErrorKind::NoBufs);
        assert_eq!(k(libc::ENETUNREACH), ErrorKind::NetUnreach);
        assert_eq!(k(libc::EHOSTUNREACH), ErrorKind::HostUnreach);
        assert_eq!(k(libc::EMSGSIZE), ErrorKind::MsgSize);
        assert_eq!(k(libc::EAGAIN), ErrorKind::WouldBlock);
        assert_eq!(k(libc::EPERM), ErrorKind::Other);
        for (i, k) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
    }
}
