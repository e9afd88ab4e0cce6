//! UDP sockets of the downlink-multiplexing roles (issue 14): the AP's frame
//! senders (one per interface facing the stations, multicast TTL / hop
//! limit 1, no loopback), the registration sockets, and the station's frame
//! receiver (bound to the interface, member of the group). All are
//! nonblocking and carry the daemon's bypass mark, so what the daemon sends
//! is never steered back into its own TUN.
//!
//! Also owns the multicast socket options (`mreqn`, `join_v6`, `set_int`) that
//! neighbour discovery uses too.
//!
//! Must not touch: what goes into the datagrams (the runtime and the core).

use nix::sys::socket::{self as ns, sockopt};
use std::ffi::OsString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

fn udp(v6: bool, ifname: Option<&str>, mark: u32) -> io::Result<OwnedFd> {
    let fam = if v6 {
        ns::AddressFamily::Inet6
    } else {
        ns::AddressFamily::Inet
    };
    let fd = ns::socket(
        fam,
        ns::SockType::Datagram,
        ns::SockFlag::SOCK_NONBLOCK | ns::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    if v6 {
        ns::setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    ns::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if let Some(i) = ifname {
        ns::setsockopt(&fd, sockopt::BindToDevice, &OsString::from(i))?;
    }
    if mark != 0 {
        ns::setsockopt(&fd, sockopt::Mark, &mark)?;
    }
    Ok(fd)
}

fn bind(fd: RawFd, a: SocketAddr) -> io::Result<()> {
    match a {
        SocketAddr::V4(a) => ns::bind(fd, &ns::SockaddrIn::from(a))?,
        SocketAddr::V6(a) => ns::bind(fd, &ns::SockaddrIn6::from(a))?,
    }
    Ok(())
}

fn any(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0))
    } else {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
    }
}

/// IP_ADD_MEMBERSHIP / IP_MULTICAST_IF by interface index (`ip_mreqn`).
pub(crate) fn mreqn(fd: RawFd, opt: libc::c_int, group: Ipv4Addr, ifindex: u32) -> io::Result<()> {
    let m = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr {
            s_addr: u32::from_ne_bytes(group.octets()),
        },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: ifindex as libc::c_int,
    };
    // SAFETY: a valid socket and a properly sized ip_mreqn the kernel copies.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            opt,
            (&m as *const libc::ip_mreqn).cast(),
            std::mem::size_of::<libc::ip_mreqn>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn set_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: a valid socket and an int option value the kernel copies.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn join_v6(fd: RawFd, group: Ipv6Addr, ifindex: u32) -> io::Result<()> {
    let m = libc::ipv6_mreq {
        ipv6mr_multiaddr: libc::in6_addr {
            s6_addr: group.octets(),
        },
        ipv6mr_interface: ifindex,
    };
    // SAFETY: a valid socket and a properly sized ipv6_mreq the kernel copies.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_ADD_MEMBERSHIP,
            (&m as *const libc::ipv6_mreq).cast(),
            std::mem::size_of::<libc::ipv6_mreq>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A frame sender on `ifname` (`None`: unicast, routed), source port
/// `port`, to the family of `dest`; multicast with TTL / hop limit 1, out
/// of `ifname`, not looped back.
pub fn frame_sender(
    ifname: Option<&str>,
    dest: SocketAddr,
    port: u16,
    mark: u32,
) -> io::Result<UdpSocket> {
    let v6 = dest.is_ipv6();
    let fd = udp(v6, ifname, mark)?;
    let raw = fd.as_raw_fd();
    if let Some(i) = ifname {
        let ifindex = super::tun::ifindex(i)?;
        match dest.ip() {
            IpAddr::V4(g) => {
                ns::setsockopt(&fd, sockopt::IpMulticastTtl, &1)?;
                ns::setsockopt(&fd, sockopt::IpMulticastLoop, &false)?;
                mreqn(raw, libc::IP_MULTICAST_IF, g, ifindex)?;
            }
            IpAddr::V6(_) => {
                ns::setsockopt(&fd, sockopt::Ipv6MulticastHops, &1)?;
                set_int(raw, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP, 0)?;
                set_int(
                    raw,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MULTICAST_IF,
                    ifindex as libc::c_int,
                )?;
            }
        }
    }
    bind(raw, any(v6, port))?;
    Ok(UdpSocket::from(fd))
}

/// A UDP socket bound to `port` of the family `v6` (on `ifname` if given):
/// the AP's registration server, the station's registration client.
pub fn udp_socket(v6: bool, ifname: Option<&str>, port: u16, mark: u32) -> io::Result<UdpSocket> {
    let fd = udp(v6, ifname, mark)?;
    bind(fd.as_raw_fd(), any(v6, port))?;
    Ok(UdpSocket::from(fd))
}

/// The station's frame receiver: bound to `port` on `ifname`, member of
/// `group` there when it is a multicast group.
pub fn frame_receiver(ifname: &str, group: IpAddr, port: u16, mark: u32) -> io::Result<UdpSocket> {
    let v6 = group.is_ipv6();
    let fd = udp(v6, Some(ifname), mark)?;
    let raw = fd.as_raw_fd();
    bind(raw, any(v6, port))?;
    if group.is_multicast() {
        let ifindex = super::tun::ifindex(ifname)?;
        match group {
            IpAddr::V4(g) => mreqn(raw, libc::IP_ADD_MEMBERSHIP, g, ifindex)?,
            IpAddr::V6(g) => join_v6(raw, g, ifindex)?,
        }
    }
    Ok(UdpSocket::from(fd))
}
