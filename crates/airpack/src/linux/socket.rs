//! The daemon's sockets.
//!
//! Owns: [`BundleSocket`] (raw IP socket for the bundle protocol number, one
//! per address family), [`UdpBundleSocket`] (bundles over UDP), [`RawIpSender`]
//! (IPPROTO_RAW, header-included sends of unchanged IPv4/IPv6 packets), and
//! [`outq_bytes`] (SIOCOUTQ, the link-busy signal). Every socket is
//! nonblocking, close-on-exec and carries SO_MARK = the bypass mark, so
//! nothing the daemon sends is steered back into the TUN.
//!
//! Must not touch: bundle contents (opaque payloads), peers, policy. Received
//! IPv4 headers are checked (version, IHL, total length, protocol) before the
//! payload offset is reported; anything inconsistent is an `InvalidData` error.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

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
}

/// Unsent bytes in a socket's send queue (SIOCOUTQ); for raw and UDP sockets
/// this counts bytes handed to the stack and not yet freed by the driver, so
/// `> 0` means the link (qdisc or device queue) is busy.
pub fn outq_bytes(fd: RawFd) -> io::Result<usize> {
    let _ = fd;
    todo!()
}

/// Raw IP socket for bundles of one protocol number, one address family.
#[derive(Debug)]
pub struct BundleSocket {
    fd: OwnedFd,
    family: Family,
    protocol: u8,
    tos: std::cell::Cell<u8>,
}

impl BundleSocket {
    /// Opens a raw socket for `protocol` (e.g. 253) in `family`, with
    /// SO_MARK = `mark`. Receives every bundle of that protocol addressed to this host.
    pub fn open(family: Family, protocol: u8, mark: u32) -> io::Result<BundleSocket> {
        let _ = (family, protocol, mark);
        todo!()
    }

    /// The family this socket sends and receives.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Sends `payload` to `peer` (the kernel builds the outer header) with
    /// DSCP `dscp` (0..=63; ECN bits 0). The TOS/traffic class is set only
    /// when it changes. `peer` must be of this socket's family (EAFNOSUPPORT).
    pub fn send_to(&self, peer: IpAddr, payload: &[u8], dscp: u8) -> io::Result<()> {
        let _ = (peer, payload, dscp);
        todo!()
    }

    /// Receives one bundle into `buf` (`WouldBlock` if none). IPv4: the
    /// kernel's copy of the outer header is checked and skipped.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<Received> {
        let _ = buf;
        todo!()
    }

    /// SIOCOUTQ of this socket (see [`outq_bytes`]).
    pub fn outq(&self) -> io::Result<usize> {
        outq_bytes(self.fd.as_raw_fd())
    }
}

/// Bundles over UDP (config `transport = "udp"`), one address family.
#[derive(Debug)]
pub struct UdpBundleSocket {
    fd: OwnedFd,
    family: Family,
    tos: std::cell::Cell<u8>,
}

impl UdpBundleSocket {
    /// Binds `local` (e.g. `0.0.0.0:4150` or `[::]:4150`, IPv6 only) with SO_MARK = `mark`.
    pub fn bind(local: SocketAddr, mark: u32) -> io::Result<UdpBundleSocket> {
        let _ = (local, mark);
        todo!()
    }

    /// Sends `payload` to `peer` with DSCP `dscp`.
    pub fn send_to(&self, peer: SocketAddr, payload: &[u8], dscp: u8) -> io::Result<()> {
        let _ = (peer, payload, dscp);
        todo!()
    }

    /// Receives one datagram into `buf` (`offset` is always 0). Returns the
    /// sender's address and port too.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(Received, u16)> {
        let _ = buf;
        todo!()
    }

    /// The bound local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        todo!()
    }

    /// SIOCOUTQ of this socket.
    pub fn outq(&self) -> io::Result<usize> {
        outq_bytes(self.fd.as_raw_fd())
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
        let _ = mark;
        todo!()
    }

    /// Sends `packet` unchanged (version from its first nibble, destination
    /// from its header; the header must be complete: else EINVAL).
    pub fn send(&self, packet: &[u8]) -> io::Result<()> {
        let _ = packet;
        todo!()
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
