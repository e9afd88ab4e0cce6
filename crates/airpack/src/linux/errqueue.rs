//! Loss reporting on the daemon's sockets: error queues and receive-queue
//! drops.
//!
//! Owns: turning on IP_RECVERR / IPV6_RECVERR and SO_RXQ_OVFL, reading a
//! socket's error queue ([`drain_error_queue`], entries classified as
//! [`ErrorReport`]s), the receive call that picks up the SO_RXQ_OVFL count
//! ([`recv_counting`]) and the SO_MEMINFO drop count. The sockets
//! themselves are [`super::socket`]'s.
//!
//! Kernel facts this relies on: without IP_RECVERR, UDP (`udp_send_skb`)
//! and raw (`raw_sendmsg`, `raw_send_hdrinc`) sends swallow ENOBUFS from a
//! full qdisc; with it they return it, and ICMP errors are queued on the
//! socket's error queue, raise EPOLLERR until read, and leave a pending
//! error (`sk_err`) that the next UDP send returns once instead of sending
//! (reading the queue clears it). SO_RXQ_OVFL's count (`sk_drops`) is only
//! attached to datagrams queued after a drop, so the current value comes
//! from SO_MEMINFO.
//!
//! Must not touch: what is sent or received (payloads), policy.

use std::cell::Cell;
use std::io;
use std::mem::{size_of, size_of_val, zeroed};
use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::socket::{from_sockaddr, setsockopt_int, Family};
use super::{cvt, cvt_size};

/// SO_RXQ_OVFL and SO_MEMINFO (the asm-generic values, which x86, ARM and
/// MIPS use; SPARC has its own).
#[cfg(not(target_arch = "sparc64"))]
const SO_RXQ_OVFL: libc::c_int = 40;
#[cfg(target_arch = "sparc64")]
const SO_RXQ_OVFL: libc::c_int = 0x0024;
#[cfg(not(target_arch = "sparc64"))]
const SO_MEMINFO: libc::c_int = 55;
#[cfg(target_arch = "sparc64")]
const SO_MEMINFO: libc::c_int = 0x0039;

/// Turns on IP_RECVERR (IPv4) or IPV6_RECVERR (IPv6). Without it the
/// kernel's UDP and raw `sendmsg` swallow ENOBUFS from a full qdisc
/// (`udp_send_skb`, `raw_sendmsg`, `raw_send_hdrinc`: the datagram is gone
/// and the send "succeeds"), and ICMP errors are not reported for
/// unconnected sockets. With it the send fails with ENOBUFS, and ICMP
/// errors (and local ones such as EMSGSIZE) are queued on the socket's
/// error queue, which must then be drained ([`drain_error_queue`]): it
/// keeps the socket in EPOLLERR and sets a pending error (`sk_err`) that
/// the next send or receive would return.
pub(super) fn enable_error_reports(fd: RawFd, family: Family) -> io::Result<()> {
    match family {
        Family::V4 => setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1),
        Family::V6 => setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1),
    }
}

/// Turns on SO_RXQ_OVFL: every received datagram carries the socket's
/// cumulative count of datagrams dropped from its receive queue (once it is
/// not zero), read by [`recv_counting`].
pub(super) fn enable_rx_drop_count(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, SO_RXQ_OVFL, 1)
}

/// The kernel's count of datagrams this socket dropped on receive
/// (`sk_drops`: receive buffer full, and for UDP also bad checksums and
/// socket filter drops), via SO_MEMINFO (Linux 4.12). Unlike the
/// SO_RXQ_OVFL value it is current even when no datagram arrived since the
/// last drop.
fn socket_drops(fd: RawFd) -> io::Result<u32> {
    let mut v = [0u32; 16];
    let mut len = size_of_val(&v) as libc::socklen_t;
    // SAFETY: v is writable for len bytes; the kernel copies at most len.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_MEMINFO,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    let i = libc::SK_MEMINFO_DROPS as usize;
    if (len as usize) < (i + 1) * 4 {
        return Err(io::Error::from_raw_os_error(libc::ENOPROTOOPT));
    }
    Ok(v[i])
}

/// recvmsg with MSG_TRUNC: returns (real datagram length, sender), like
/// `recvfrom`; a datagram longer than `buf` is an `InvalidData` error (it
/// was cut). The SO_RXQ_OVFL count the datagram carries, if any, is stored
/// in `drops` (it is cumulative, so the latest value is the total). Also
/// returns the TOS / traffic class from an IP_TOS / IPV6_TCLASS control
/// message (0 without one; enabled per socket where the outer ECN is needed).
pub(super) fn recv_counting(
    fd: RawFd,
    buf: &mut [u8],
    drops: &Cell<u32>,
) -> io::Result<(usize, SocketAddr, u8)> {
    // SAFETY: sockaddr_storage and msghdr are plain old data.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for a few int-sized control messages (SO_RXQ_OVFL, IP_TOS /
    // IPV6_TCLASS); u64 for alignment.
    let mut control = [0u64; 16];
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut ss as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: msg points at live buffers of the sizes it gives.
    let n = cvt_size(unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_TRUNC) })?;
    let mut tos = 0u8;
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG
    // macros stay within it and data is read unaligned after a length check.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let h = &*c;
            let data = libc::CMSG_DATA(c);
            let len = (h.cmsg_len as usize).saturating_sub(data as usize - c as usize);
            match (h.cmsg_level, h.cmsg_type) {
                (libc::SOL_SOCKET, SO_RXQ_OVFL) if len >= 4 => {
                    drops.set(std::ptr::read_unaligned(data.cast::<u32>()));
                }
                (libc::IPPROTO_IP, libc::IP_TOS) if len >= 1 => tos = *data,
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) if len >= size_of::<libc::c_int>() => {
                    tos = std::ptr::read_unaligned(data.cast::<libc::c_int>()) as u8;
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n > buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("datagram of {n} bytes truncated to {}", buf.len()),
        ));
    }
    let src = from_sockaddr(&ss, msg.msg_namelen).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "unexpected sender address family",
        )
    })?;
    Ok((n, src, tos))
}

/// What one entry of a socket's error queue reports, by origin and ICMP type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorReport {
    /// Raised by the local stack (SO_EE_ORIGIN_LOCAL, e.g. EMSGSIZE): the
    /// send that caused it failed synchronously too (and was counted there).
    Local,
    /// ICMP / ICMPv6 destination unreachable: a datagram that left was not
    /// delivered (the peer's host, protocol or port, or a route on the way).
    Unreachable,
    /// ICMP fragmentation needed / ICMPv6 packet too big.
    TooBig,
    /// ICMP / ICMPv6 time exceeded (TTL / hop limit).
    TimeExceeded,
    /// Any other ICMP / ICMPv6 error (parameter problem, ...).
    OtherIcmp,
    /// Another origin (timestamping, zero copy: not used by airpack), or an
    /// entry without a readable `sock_extended_err`.
    Other,
}

impl ErrorReport {
    /// Number of variants.
    pub const COUNT: usize = 6;
    /// Every variant, in counter order.
    pub const ALL: [ErrorReport; ErrorReport::COUNT] = [
        ErrorReport::Local,
        ErrorReport::Unreachable,
        ErrorReport::TooBig,
        ErrorReport::TimeExceeded,
        ErrorReport::OtherIcmp,
        ErrorReport::Other,
    ];

    /// Dense index, in [`ErrorReport::ALL`] order.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Stable counter name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorReport::Local => "local",
            ErrorReport::Unreachable => "icmp_unreachable",
            ErrorReport::TooBig => "icmp_too_big",
            ErrorReport::TimeExceeded => "icmp_time_exceeded",
            ErrorReport::OtherIcmp => "icmp_other",
            ErrorReport::Other => "other",
        }
    }

    /// Classifies a `sock_extended_err` by `ee_origin`, `ee_type`, `ee_code`.
    pub fn classify(origin: u8, ty: u8, code: u8) -> ErrorReport {
        match (origin, ty, code) {
            (libc::SO_EE_ORIGIN_LOCAL, _, _) => ErrorReport::Local,
            // ICMP: 3 destination unreachable (code 4: fragmentation needed), 11 time exceeded.
            (libc::SO_EE_ORIGIN_ICMP, 3, 4) => ErrorReport::TooBig,
            (libc::SO_EE_ORIGIN_ICMP, 3, _) => ErrorReport::Unreachable,
            (libc::SO_EE_ORIGIN_ICMP, 11, _) => ErrorReport::TimeExceeded,
            (libc::SO_EE_ORIGIN_ICMP, _, _) => ErrorReport::OtherIcmp,
            // ICMPv6: 1 destination unreachable, 2 packet too big, 3 time exceeded.
            (libc::SO_EE_ORIGIN_ICMP6, 1, _) => ErrorReport::Unreachable,
            (libc::SO_EE_ORIGIN_ICMP6, 2, _) => ErrorReport::TooBig,
            (libc::SO_EE_ORIGIN_ICMP6, 3, _) => ErrorReport::TimeExceeded,
            (libc::SO_EE_ORIGIN_ICMP6, _, _) => ErrorReport::OtherIcmp,
            _ => ErrorReport::Other,
        }
    }
}

/// Reads up to `max` entries of `fd`'s error queue (MSG_ERRQUEUE, never
/// blocking), calling `report` with each entry's class and errno; returns
/// how many were read (fewer than `max`: the queue is empty). Reading also
/// clears the socket's pending error once no ICMP entry is left.
pub fn drain_error_queue(fd: RawFd, max: usize, mut report: impl FnMut(ErrorReport, u32)) -> usize {
    for read in 0..max {
        // The offending datagram's head (cut: MSG_TRUNC) and the control
        // messages: sock_extended_err plus the offender's address.
        let mut data = [0u8; 64];
        let mut control = [0u64; 32];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: msghdr is plain old data.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&control) as _;
        // SAFETY: msg points at live buffers of the sizes it gives.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            // EAGAIN: empty. Anything else: nothing more can be read now.
            return read;
        }
        let mut found = false;
        // SAFETY: as in `recv_counting`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = &*c;
                let ours = (h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_RECVERR)
                    || (h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
                let len = libc::CMSG_LEN(size_of::<libc::sock_extended_err>() as u32) as usize;
                if ours && h.cmsg_len as usize >= len {
                    let ee = std::ptr::read_unaligned(
                        libc::CMSG_DATA(c).cast::<libc::sock_extended_err>(),
                    );
                    report(
                        ErrorReport::classify(ee.ee_origin, ee.ee_type, ee.ee_code),
                        ee.ee_errno,
                    );
                    found = true;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if !found {
            report(ErrorReport::Other, 0);
        }
    }
    max
}

/// Reads and clears a socket's pending error (SO_ERROR); the errno, if
/// one was pending. For sockets that are never read (the raw senders): a
/// pending error whose report could not be queued would otherwise keep
/// EPOLLERR raised.
pub fn take_pending_error(fd: RawFd) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v is a writable c_int of the given length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0 && v != 0).then_some(v)
}

/// See [`UdpBundleSocket::rx_queue_drops`].
pub(super) fn rx_queue_drops(fd: RawFd, seen: &Cell<u32>) -> u64 {
    u64::from(socket_drops(fd).unwrap_or(0).max(seen.get()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::UdpBundleSocket;
    use std::os::fd::AsRawFd;

    /// Waits (bounded) until `fd` reports `events`.
    fn wait_for(fd: RawFd, events: libc::c_short) -> bool {
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 5_000) };
        n == 1 && p.revents & events != 0
    }

    #[test]
    fn icmp_errors_are_read_from_the_error_queue() {
        let s = UdpBundleSocket::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
        // A port nobody listens on: bind one, note it, close it.
        let closed = {
            let t = UdpBundleSocket::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
            t.local_addr().unwrap()
        };
        assert_eq!(s.drain_errors(16, |_, _| panic!("empty queue")), 0);
        let mut got = Vec::new();
        for _ in 0..3 {
            s.send_to(closed, b"hello", 0).unwrap();
            // The loopback ICMP port unreachable arrives (almost) at once;
            // with IP_RECVERR it is queued on the error queue (EPOLLERR).
            assert!(wait_for(s.as_raw_fd(), libc::POLLERR), "no EPOLLERR");
            assert_eq!(s.drain_errors(16, |k, errno| got.push((k, errno))), 1);
        }
        assert!(got
            .iter()
            .all(|&(k, e)| k == ErrorReport::Unreachable && e == libc::ECONNREFUSED as u32));
        // Not drained, the report also leaves a pending error that fails
        // the next send (which never left), once.
        s.send_to(closed, b"hello", 0).unwrap();
        assert!(wait_for(s.as_raw_fd(), libc::POLLERR), "no EPOLLERR");
        let e = s.send_to(closed, b"hello", 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED));
        // That send consumed the pending error but not the queue entries.
        assert!(wait_for(s.as_raw_fd(), libc::POLLERR), "no EPOLLERR");
        let mut n = 0;
        for _ in 0..100 {
            n += s.drain_errors(16, |k, _| assert_eq!(k, ErrorReport::Unreachable));
            if n >= 1 && !wait_for_now(s.as_raw_fd(), libc::POLLERR) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(n >= 1);
        // Drained: no EPOLLERR, and no pending error fails the next receive.
        assert!(!wait_for_now(s.as_raw_fd(), libc::POLLERR));
        let mut buf = [0u8; 16];
        assert_eq!(
            s.recv_from(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    fn wait_for_now(fd: RawFd, events: libc::c_short) -> bool {
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & events != 0
    }

    #[test]
    fn receive_queue_drops_are_counted() {
        let r = UdpBundleSocket::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
        // The smallest receive buffer the kernel allows (a few KiB).
        setsockopt_int(r.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 1).unwrap();
        let to = r.local_addr().unwrap();
        let s = UdpBundleSocket::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
        assert_eq!(r.rx_queue_drops(), 0);
        const SENT: u64 = 200;
        for _ in 0..SENT {
            s.send_to(to, &[7u8; 1000], 0).unwrap();
        }
        let mut buf = [0u8; 2048];
        let mut received = 0u64;
        while wait_for_now(r.as_raw_fd(), libc::POLLIN) {
            r.recv_from(&mut buf).unwrap();
            received += 1;
        }
        let dropped = r.rx_queue_drops();
        assert!(received > 0 && dropped > 0, "{received} {dropped}");
        // Loopback loses nothing else: every datagram was queued or dropped.
        assert_eq!(received + dropped, SENT);
        // The datagrams read were queued before the first drop: they carry
        // no SO_RXQ_OVFL count. One queued now carries the total so far.
        assert_eq!(r.rx_drops_seen(), 0);
        s.send_to(to, &[7u8; 100], 0).unwrap();
        assert!(wait_for(r.as_raw_fd(), libc::POLLIN));
        r.recv_from(&mut buf).unwrap();
        assert_eq!(u64::from(r.rx_drops_seen()), dropped);
        assert_eq!(r.rx_queue_drops(), dropped);
    }

    #[test]
    fn error_reports_are_classified() {
        use ErrorReport::*;
        let c = ErrorReport::classify;
        assert_eq!(c(libc::SO_EE_ORIGIN_LOCAL, 0, 0), Local);
        assert_eq!(c(libc::SO_EE_ORIGIN_ICMP, 3, 3), Unreachable);
        assert_eq!(c(libc::SO_EE_ORIGIN_ICMP, 3, 4), TooBig);
        assert_eq!(c(libc::SO_EE_ORIGIN_ICMP, 11, 0), TimeExceeded);
        assert_eq!(c(libc::SO_EE_ORIGIN_ICMP, 12, 0), OtherIcmp);
        assert_eq!(c(libc::SO_EE_ORIGIN_ICMP6, 1, 4), Unreachable);
        assert_eq!(c(libc::SO_EE_ORIGIN_ICMP6, 2, 0), TooBig);
        assert_eq!(c(libc::SO_EE_ORIGIN_ICMP6, 3, 0), TimeExceeded);
        assert_eq!(c(libc::SO_EE_ORIGIN_ICMP6, 4, 0), OtherIcmp);
        assert_eq!(c(4, 0, 0), Other);
        for (i, k) in ErrorReport::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
    }
}
