//! The daemon's sockets.
//!
//! Owns: [`BundleSocket`] (raw IP socket for the bundle protocol number, one
//! per address family), [`UdpBundleSocket`] (bundles over UDP), [`RawIpSender`]
//! (IPPROTO_RAW, header-included sends of unchanged IPv4/IPv6 packets), and
//! [`outq_bytes`] (SIOCOUTQ, the link-busy signal). Every socket is
//! nonblocking, close-on-exec and carries SO_MARK = the bypass mark, so
//! nothing the daemon sends is steered back into the TUN.
//!
//! Loss reporting (see [`super::errqueue`]): every
//! socket has IP_RECVERR / IPV6_RECVERR on, so a full local queue (qdisc)
//! fails the send with ENOBUFS instead of being swallowed by the kernel, and
//! ICMP errors land in the socket's error queue ([`drain_error_queue`]);
//! the bundle sockets have SO_RXQ_OVFL on and count their receive-queue drops.
//!
//! Must not touch: bundle contents (opaque payloads), peers, policy. Received
//! IPv4 headers are checked (version, IHL, total length, protocol) before the
//! payload offset is reported; anything inconsistent is an `InvalidData` error.
//!
//! Outer header (docs/wire-format.md): bundles are sent with the TOS /
//! traffic class `DSCP << 2 | ECN` the engine chose; IPv4 bundle sockets use
//! IP_PMTUDISC_DONT, so the kernel sends them with DF clear (a router on a
//! path with a smaller MTU fragments them instead of dropping them). Every
//! received bundle reports its outer ECN field (the raw IPv4 header, or the
//! IP_TOS / IPV6_TCLASS control message).

use std::cell::Cell;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::errqueue::{
    drain_error_queue, enable_error_reports, enable_rx_drop_count, recv_counting, rx_queue_drops,
    take_pending_error, ErrorReport,
};
use super::{cvt, cvt_size};

fn new_socket(
    domain: libc::c_int,
    ty: libc::c_int,
    protocol: libc::c_int,
    mark: u32,
) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call, checked before wrapping.
    let fd = cvt(unsafe {
        libc::socket(
            domain,
            ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            protocol,
        )
    })?;
    // SAFETY: fd is freshly created and owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if mark != 0 {
        setsockopt_int(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MARK,
            mark as libc::c_int,
        )?;
    }
    Ok(fd)
}

pub(super) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: value is a c_int living across the call; its size is passed.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// A socket address in C form plus its length.
fn to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            (ss, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            (ss, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// Converts a kernel-filled socket address; `None` for other families or short lengths.
pub(super) fn from_sockaddr(
    ss: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: family and length say this is a sockaddr_in.
            let sin: libc::sockaddr_in =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: family and length say this is a sockaddr_in6.
            let sin6: libc::sockaddr_in6 =
                unsafe { std::ptr::read((ss as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn send_to_raw(fd: RawFd, dst: SocketAddr, payload: &[u8]) -> io::Result<()> {
    let (ss, len) = to_sockaddr(dst);
    // SAFETY: payload and ss are valid for the call; len is ss's real length.
    let n = cvt_size(unsafe {
        libc::sendto(
            fd,
            payload.as_ptr().cast(),
            payload.len(),
            0,
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    })?;
    if n != payload.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
    }
    Ok(())
}

/// Sets IP_TOS / IPV6_TCLASS to `dscp << 2 | ecn` if it differs from the
/// cached value (the kernel keeps the ECN bits of a raw or UDP socket's TOS).
fn set_tos(fd: RawFd, family: Family, cache: &Cell<u8>, dscp: u8, ecn: u8) -> io::Result<()> {
    let tos = (dscp & 0x3f) << 2 | (ecn & 3);
    if cache.get() == tos {
        return Ok(());
    }
    match family {
        Family::V4 => setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TOS, tos as libc::c_int)?,
        Family::V6 => setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_TCLASS,
            tos as libc::c_int,
        )?,
    }
    cache.set(tos);
    Ok(())
}

/// Checks the IPv4 header a raw IPv4 socket delivers in front of the payload:
/// returns (payload offset, payload length).
fn strip_ipv4_header(pkt: &[u8], protocol: u8) -> io::Result<(usize, usize)> {
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad outer IPv4 header: {what}"),
        )
    };
    if pkt.len() < 20 {
        return Err(bad("shorter than 20 bytes"));
    }
    if pkt[0] >> 4 != 4 {
        return Err(bad("version is not 4"));
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    if ihl < 20 || ihl > pkt.len() {
        return Err(bad("header length out of range"));
    }
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    if total != pkt.len() {
        return Err(bad("total length differs from the datagram length"));
    }
    if pkt[9] != protocol {
        return Err(bad("unexpected protocol"));
    }
    Ok((ihl, total - ihl))
}

/// Makes an IPv4 socket send with DF clear (IP_MTU_DISCOVER = IP_PMTUDISC_DONT).
fn clear_df(fd: RawFd) -> io::Result<()> {
    setsockopt_int(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DONT,
    )
}

/// Asks for the TOS / traffic class of every received datagram as a control
/// message (IP_RECVTOS / IPV6_RECVTCLASS).
fn recv_tos(fd: RawFd, family: Family) -> io::Result<()> {
    match family {
        Family::V4 => setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1),
        Family::V6 => setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1),
    }
}

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// AF_INET.
    V4,
    /// AF_INET6.
    V6,
}

impl Family {
    /// The family of `addr`.
    pub fn of(addr: IpAddr) -> Family {
        if addr.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    /// The socket domain: AF_INET or AF_INET6.
    fn domain(self) -> libc::c_int {
        match self {
            Family::V4 => libc::AF_INET,
            Family::V6 => libc::AF_INET6,
        }
    }
}

/// One received bundle: `buf[offset..offset + len]` is the payload (after
/// the outer IPv4 header, if any, or the UDP header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Payload length.
    pub len: usize,
    /// Sender address (the outer source).
    pub src: IpAddr,
    /// Where the payload starts in the buffer.
    pub offset: usize,
    /// The sender's IPv6 scope (sin6_scope_id: the receiving interface's
    /// index for a link-local source); 0 for IPv4 and global addresses.
    pub scope: u32,
    /// The ECN field of the outer header (0..=3).
    pub ecn: u8,
}

/// Unsent bytes in a socket's send queue (SIOCOUTQ); for raw and UDP sockets
/// this counts bytes handed to the stack and not yet freed by the driver, so
/// `> 0` means the link (qdisc or device queue) is busy.
pub fn outq_bytes(fd: RawFd) -> io::Result<usize> {
    let mut v: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int into v.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut v) })?;
    Ok(usize::try_from(v).unwrap_or(0))
}

/// Sets a socket's receive (`send == false`) or send buffer to `bytes`,
/// beyond `net.core.rmem_max`/`wmem_max` if the caller has CAP_NET_ADMIN
/// (SO_RCVBUFFORCE / SO_SNDBUFFORCE, falling back to the capped option).
/// Returns the size the kernel reports afterwards (it doubles the request
/// for bookkeeping).
pub fn set_buffer(fd: RawFd, bytes: u32, send: bool) -> io::Result<usize> {
    let v = libc::c_int::try_from(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let (force, plain) = if send {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    } else {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    };
    if setsockopt_int(fd, libc::SOL_SOCKET, force, v).is_err() {
        setsockopt_int(fd, libc::SOL_SOCKET, plain, v)?;
    }
    let mut out: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: out is a writable c_int of the given length.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            plain,
            (&mut out as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(usize::try_from(out).unwrap_or(0))
}

/// Raw IP socket for bundles of one protocol number, one address family.
#[derive(Debug)]
pub struct BundleSocket {
    fd: OwnedFd,
    family: Family,
    protocol: u8,
    tos: Cell<u8>,
    /// Latest SO_RXQ_OVFL count seen on a received datagram.
    rx_drops: Cell<u32>,
}

impl BundleSocket {
    /// Opens a raw socket for `protocol` (e.g. 253) in `family`, with
    /// SO_MARK = `mark`. Receives every bundle of that protocol addressed to this host.
    pub fn open(family: Family, protocol: u8, mark: u32) -> io::Result<BundleSocket> {
        let fd = new_socket(
            family.domain(),
            libc::SOCK_RAW,
            libc::c_int::from(protocol),
            mark,
        )?;
        enable_error_reports(fd.as_raw_fd(), family)?;
        enable_rx_drop_count(fd.as_raw_fd())?;
        match family {
            Family::V4 => clear_df(fd.as_raw_fd())?,
            // IPv4 delivers the outer header with the payload; IPv6 the traffic class as a control message.
            Family::V6 => recv_tos(fd.as_raw_fd(), family)?,
        }
        Ok(BundleSocket {
            fd,
            family,
            protocol,
            tos: Cell::new(0),
            rx_drops: Cell::new(0),
        })
    }

    /// The family this socket sends and receives.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Sends `payload` to `peer` (the kernel builds the outer header) with
    /// DSCP `dscp` (0..=63; ECN bits 0). The TOS/traffic class is set only
    /// when it changes. `peer` must be of this socket's family (EAFNOSUPPORT).
    pub fn send_to(&self, peer: IpAddr, payload: &[u8], dscp: u8) -> io::Result<()> {
        self.send_to_scoped(peer, 0, payload, dscp)
    }

    /// [`BundleSocket::send_to_scoped`] with the outer ECN field `ecn` (0..=3).
    pub fn send_to_ecn(
        &self,
        peer: IpAddr,
        scope: u32,
        payload: &[u8],
        dscp: u8,
        ecn: u8,
    ) -> io::Result<()> {
        if Family::of(peer) != self.family {
            return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
        }
        set_tos(self.fd.as_raw_fd(), self.family, &self.tos, dscp, ecn)?;
        send_to_raw(self.fd.as_raw_fd(), scoped(peer, 0, scope), payload)
    }

    /// Like [`BundleSocket::send_to`] with an IPv6 scope: `scope` is the
    /// interface index a link-local `peer` (fe80::/10) is reached through
    /// (sin6_scope_id; the kernel answers EINVAL for a link-local peer
    /// without one). Ignored for IPv4.
    pub fn send_to_scoped(
        &self,
        peer: IpAddr,
        scope: u32,
        payload: &[u8],
        dscp: u8,
    ) -> io::Result<()> {
        self.send_to_ecn(peer, scope, payload, dscp, 0)
    }

    /// Receives one bundle into `buf` (`WouldBlock` if none). IPv4: the
    /// kernel's copy of the outer header is checked and skipped; a datagram
    /// larger than `buf` or with an inconsistent header is `InvalidData`
    /// (and consumed: the next call reads the next datagram).
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<Received> {
        let (n, from, tos) = recv_counting(self.fd.as_raw_fd(), buf, &self.rx_drops)?;
        let (src, scope) = (canonical(from.ip()), scope_of(from));
        match self.family {
            Family::V4 => {
                // The kernel's copy of the outer IPv4 header carries the ECN field.
                let (offset, len) = strip_ipv4_header(&buf[..n], self.protocol)?;
                Ok(Received {
                    len,
                    src,
                    offset,
                    scope,
                    ecn: buf[1] & 3,
                })
            }
            Family::V6 => Ok(Received {
                len: n,
                src,
                offset: 0,
                scope,
                ecn: tos & 3,
            }),
        }
    }

    /// SIOCOUTQ of this socket (see [`outq_bytes`]).
    pub fn outq(&self) -> io::Result<usize> {
        outq_bytes(self.fd.as_raw_fd())
    }

    /// Datagrams dropped from this socket's receive queue so far (see
    /// [`UdpBundleSocket::rx_queue_drops`]).
    pub fn rx_queue_drops(&self) -> u64 {
        rx_queue_drops(self.fd.as_raw_fd(), &self.rx_drops)
    }

    /// Drains up to `max` error-queue entries (see [`drain_error_queue`]).
    pub fn drain_errors(&self, max: usize, report: impl FnMut(ErrorReport, u32)) -> usize {
        drain_error_queue(self.fd.as_raw_fd(), max, report)
    }
}

/// Bundles over UDP (config `transport = "udp"`), one address family.
#[derive(Debug)]
pub struct UdpBundleSocket {
    fd: OwnedFd,
    family: Family,
    tos: Cell<u8>,
    /// Latest SO_RXQ_OVFL count seen on a received datagram.
    rx_drops: Cell<u32>,
}

impl UdpBundleSocket {
    /// Binds `local` (e.g. `0.0.0.0:4150` or `[::]:4150`, IPv6 only) with SO_MARK = `mark`.
    pub fn bind(local: SocketAddr, mark: u32) -> io::Result<UdpBundleSocket> {
        let family = Family::of(local.ip());
        let fd = new_socket(family.domain(), libc::SOCK_DGRAM, 0, mark)?;
        if family == Family::V6 {
            setsockopt_int(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        }
        match family {
            Family::V4 => clear_df(fd.as_raw_fd())?,
            Family::V6 => {}
        }
        recv_tos(fd.as_raw_fd(), family)?;
        let (ss, len) = to_sockaddr(local);
        // SAFETY: ss/len describe a valid socket address.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&ss as *const libc::sockaddr_storage).cast(),
                len,
            )
        })?;
        enable_error_reports(fd.as_raw_fd(), family)?;
        enable_rx_drop_count(fd.as_raw_fd())?;
        Ok(UdpBundleSocket {
            fd,
            family,
            tos: Cell::new(0),
            rx_drops: Cell::new(0),
        })
    }

    /// Sends `payload` to `peer` with DSCP `dscp` (EAFNOSUPPORT for the other family).
    pub fn send_to(&self, peer: SocketAddr, payload: &[u8], dscp: u8) -> io::Result<()> {
        self.send_to_ecn(peer, payload, dscp, 0)
    }

    /// [`UdpBundleSocket::send_to`] with the outer ECN field `ecn` (0..=3).
    pub fn send_to_ecn(
        &self,
        peer: SocketAddr,
        payload: &[u8],
        dscp: u8,
        ecn: u8,
    ) -> io::Result<()> {
        if Family::of(peer.ip()) != self.family {
            return Err(io::Error::from_raw_os_error(libc::EAFNOSUPPORT));
        }
        set_tos(self.fd.as_raw_fd(), self.family, &self.tos, dscp, ecn)?;
        send_to_raw(self.fd.as_raw_fd(), peer, payload)
    }

    /// Receives one datagram into `buf` (`offset` is always 0). Returns the
    /// sender's port too. A datagram larger than `buf` is `InvalidData`.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(Received, u16)> {
        let (n, src, tos) = recv_counting(self.fd.as_raw_fd(), buf, &self.rx_drops)?;
        Ok((
            Received {
                len: n,
                src: canonical(src.ip()),
                offset: 0,
                scope: scope_of(src),
                ecn: tos & 3,
            },
            src.port(),
        ))
    }

    /// The bound local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        // SAFETY: sockaddr_storage is plain old data.
        let mut ss: libc::sockaddr_storage = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: ss is writable for len bytes.
        cvt(unsafe {
            libc::getsockname(
                self.fd.as_raw_fd(),
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        })?;
        from_sockaddr(&ss, len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected address family"))
    }

    /// SIOCOUTQ of this socket.
    pub fn outq(&self) -> io::Result<usize> {
        outq_bytes(self.fd.as_raw_fd())
    }

    /// Datagrams dropped from this socket's receive queue so far (receive
    /// buffer full; the kernel's `sk_drops`): the larger of the SO_RXQ_OVFL
    /// count last carried by a received datagram and the current SO_MEMINFO
    /// count. Which bundles they were, and so how many packets they held,
    /// cannot be known: this counts datagrams.
    pub fn rx_queue_drops(&self) -> u64 {
        rx_queue_drops(self.fd.as_raw_fd(), &self.rx_drops)
    }

    /// Drains up to `max` error-queue entries (see [`drain_error_queue`]).
    pub fn drain_errors(&self, max: usize, report: impl FnMut(ErrorReport, u32)) -> usize {
        drain_error_queue(self.fd.as_raw_fd(), max, report)
    }

    /// The SO_RXQ_OVFL count last seen on a received datagram (tests).
    #[cfg(test)]
    pub(crate) fn rx_drops_seen(&self) -> u32 {
        self.rx_drops.get()
    }
}

/// Sends whole IPv4/IPv6 packets unchanged (IPPROTO_RAW, header included),
/// routed by their destination, with SO_MARK = the bypass mark.
#[derive(Debug)]
pub struct RawIpSender {
    v4: OwnedFd,
    v6: Option<OwnedFd>,
}

impl RawIpSender {
    /// Opens the IPv4 and (if the kernel has IPv6) the IPv6 raw senders.
    pub fn open(mark: u32) -> io::Result<RawIpSender> {
        // IPPROTO_RAW implies IP_HDRINCL (IPv4) and IPV6_HDRINCL (IPv6).
        let v4 = new_socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW, mark)?;
        enable_error_reports(v4.as_raw_fd(), Family::V4)?;
        let v6 = match new_socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_RAW, mark) {
            Ok(fd) => Some(fd),
            Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => None,
            Err(e) => return Err(e),
        };
        if let Some(v6) = &v6 {
            enable_error_reports(v6.as_raw_fd(), Family::V6)?;
        }
        Ok(RawIpSender { v4, v6 })
    }

    /// SO_PRIORITY 256 + `up` on both senders: a Linux AP's mac80211 queues
    /// what they send at 802.11 user priority `up` ([`super::wmm`]).
    pub fn set_user_priority(&self, up: u8) -> io::Result<()> {
        super::wmm::set_user_priority(self.v4.as_raw_fd(), up)?;
        if let Some(v6) = &self.v6 {
            super::wmm::set_user_priority(v6.as_raw_fd(), up)?;
        }
        Ok(())
    }

    /// Sends `packet` unchanged (version from its first nibble, destination
    /// from its header; the header must be complete: else EINVAL; IPv6 when
    /// the kernel has none: EAFNOSUPPORT).
    pub fn send(&self, packet: &[u8]) -> io::Result<()> {
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        match packet.first().map(|b| b >> 4) {
            Some(4) if packet.len() >= 20 => {
                let dst = Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
                send_to_raw(self.v4.as_raw_fd(), SocketAddr::new(dst.into(), 0), packet)
            }
            Some(6) if packet.len() >= 40 => {
                let fd = self
                    .v6
                    .as_ref()
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))?;
                let mut d = [0u8; 16];
                d.copy_from_slice(&packet[24..40]);
                // The port field of a raw IPv6 sockaddr must be 0 for IPPROTO_RAW (it would be read as a protocol).
                send_to_raw(
                    fd.as_raw_fd(),
                    SocketAddr::new(Ipv6Addr::from(d).into(), 0),
                    packet,
                )
            }
            _ => Err(einval()),
        }
    }

    /// SIOCOUTQ summed over both sockets.
    pub fn outq(&self) -> io::Result<usize> {
        let mut n = outq_bytes(self.v4.as_raw_fd())?;
        if let Some(v6) = &self.v6 {
            n += outq_bytes(v6.as_raw_fd())?;
        }
        Ok(n)
    }

    /// The IPv4 socket (for polling writability).
    pub fn v4_fd(&self) -> RawFd {
        self.v4.as_raw_fd()
    }

    /// The IPv6 socket, if the kernel has IPv6.
    pub fn v6_fd(&self) -> Option<RawFd> {
        self.v6.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Drains up to `max` error-queue entries of both sockets (see
    /// [`drain_error_queue`]; IPPROTO_RAW sockets get only local errors such
    /// as EMSGSIZE: ICMP errors are matched to sockets of the inner protocol).
    pub fn drain_errors(&self, max: usize, mut report: impl FnMut(ErrorReport, u32)) -> usize {
        let mut n = drain_error_queue(self.v4.as_raw_fd(), max, &mut report);
        if let Some(v6) = &self.v6 {
            n += drain_error_queue(v6.as_raw_fd(), max, &mut report);
        }
        if n == 0 {
            // EPOLLERR without a queued report: a bare pending error.
            for fd in std::iter::once(self.v4.as_raw_fd()).chain(self.v6_fd()) {
                if let Some(errno) = take_pending_error(fd) {
                    report(ErrorReport::Other, errno as u32);
                    n += 1;
                }
            }
        }
        n
    }
}

/// A socket address for `ip`:`port`; `scope` becomes sin6_scope_id (IPv6 only).
pub fn scoped(ip: IpAddr, port: u16, scope: u32) -> SocketAddr {
    match ip {
        IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope)),
        v4 => SocketAddr::new(v4, port),
    }
}

/// The IPv6 scope id of a received source address (0 for IPv4).
fn scope_of(addr: SocketAddr) -> u32 {
    match addr {
        SocketAddr::V6(a) => a.scope_id(),
        SocketAddr::V4(_) => 0,
    }
}

/// IPv4-mapped IPv6 addresses are reported as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

impl AsRawFd for BundleSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for BundleSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for UdpBundleSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for UdpBundleSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_header(total: u16, proto: u8) -> Vec<u8> {
        let mut h = vec![0u8; usize::from(total)];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[9] = proto;
        h
    }

    #[test]
    fn outer_ipv4_header_is_checked() {
        assert_eq!(
            strip_ipv4_header(&v4_header(30, 253), 253).unwrap(),
            (20, 10)
        );
        assert!(strip_ipv4_header(&v4_header(30, 17), 253).is_err());
        let mut p = v4_header(30, 253);
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        assert!(strip_ipv4_header(&p, 253).is_err());
        let mut p = v4_header(30, 253);
        p[0] = 0x4f; // IHL 60 > 30
        assert!(strip_ipv4_header(&p, 253).is_err());
        let mut p = v4_header(30, 253);
        p[0] = 0x44; // IHL 16 < 20
        assert!(strip_ipv4_header(&p, 253).is_err());
        let mut p = v4_header(30, 253);
        p[0] = 0x65;
        assert!(strip_ipv4_header(&p, 253).is_err());
        assert!(strip_ipv4_header(&[0x45; 19], 253).is_err());
        let mut p = v4_header(32, 253);
        p[0] = 0x46; // 4 bytes of options
        assert_eq!(strip_ipv4_header(&p, 253).unwrap(), (24, 8));
    }

    #[test]
    fn sockaddr_round_trip() {
        for a in ["10.1.2.3:4150", "[fd00::1]:9", "[fe80::1%3]:0"] {
            let a: SocketAddr = a.parse().unwrap();
            let (ss, len) = to_sockaddr(a);
            assert_eq!(from_sockaddr(&ss, len), Some(a));
        }
        let (ss, _) = to_sockaddr("10.0.0.1:1".parse().unwrap());
        assert_eq!(from_sockaddr(&ss, 4), None);
    }

    #[test]
    fn buffers_can_be_sized() {
        let u = UdpBundleSocket::bind("127.0.0.1:0".parse().unwrap(), 0).unwrap();
        let got = set_buffer(u.as_raw_fd(), 1 << 20, false).unwrap();
        // Unprivileged runs are capped by rmem_max; root gets at least the request.
        if nix::unistd::geteuid().is_root() {
            assert!(got >= 1 << 20, "{got}");
        } else {
            assert!(got > 0);
        }
        assert!(set_buffer(u.as_raw_fd(), 256 << 10, true).unwrap() > 0);
        assert!(set_buffer(u.as_raw_fd(), u32::MAX, true).is_err());
    }

    #[test]
    fn raw_sender_rejects_truncated_headers() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP: needs root");
            return;
        }
        let s = RawIpSender::open(0).unwrap();
        for bad in [&[][..], &[0x45; 19][..], &[0x60; 39][..], &[0x50; 40][..]] {
            assert_eq!(s.send(bad).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        }
    }
}
