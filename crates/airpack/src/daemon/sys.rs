//! Small helpers the event loop needs that the `linux` module does not (yet)
//! offer: reading addresses out of raw IP headers, and setting the TUN's
//! transmit queue length.
//!
//! Owns: nothing stateful. Must not touch: policy. Header readers check the
//! length before every access (input comes from the network).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Source and destination of an IPv4/IPv6 packet, if its fixed header is present.
pub fn addrs(pkt: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match pkt.first()? >> 4 {
        4 if pkt.len() >= 20 => {
            let s: [u8; 4] = pkt[12..16].try_into().ok()?;
            let d: [u8; 4] = pkt[16..20].try_into().ok()?;
            Some((IpAddr::V4(Ipv4Addr::from(s)), IpAddr::V4(Ipv4Addr::from(d))))
        }
        6 if pkt.len() >= 40 => {
            let s: [u8; 16] = pkt[8..24].try_into().ok()?;
            let d: [u8; 16] = pkt[24..40].try_into().ok()?;
            Some((IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d))))
        }
        _ => None,
    }
}

/// Link-scoped destinations: IPv4 169.254/16 and 224.0.0.0/24, IPv6 fe80::/10
/// and multicast of scope interface/link (ff01::/16, ff02::/16).
pub fn link_scoped(dst: IpAddr) -> bool {
    match dst {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_link_local() || (o[0] == 224 && o[1] == 0 && o[2] == 0) || a.is_broadcast()
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xff0f) == 0xff01 || (s[0] & 0xff0f) == 0xff02
        }
    }
}

/// Sets the transmit queue length of interface `name` (SIOCSIFTXQLEN). For a
/// TUN device this is the number of packets the kernel queues for the daemon.
pub fn set_txqueuelen(name: &str, len: u32) -> io::Result<()> {
    #[repr(C)]
    struct IfReqQlen {
        name: [u8; 16],
        qlen: libc::c_int,
        _pad: [u8; 20],
    }
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 15 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    let mut req = IfReqQlen {
        name: [0; 16],
        qlen: len.min(i32::MAX as u32) as libc::c_int,
        _pad: [0; 20],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: plain socket(2) call; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCSIFTXQLEN reads a struct ifreq (name + int) that we own.
    let r = unsafe { libc::ioctl(fd, libc::SIOCSIFTXQLEN as _, &mut req) };
    let err = io::Error::last_os_error();
    // SAFETY: fd was opened above and is not used afterwards.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(err);
    }
    Ok(())
}

/// Whether interface `name` is up and running (IFF_UP and IFF_RUNNING), via
/// SIOCGIFFLAGS; `None` when it does not exist.
pub fn link_up(name: &str) -> Option<bool> {
    #[repr(C)]
    struct IfReqFlags {
        name: [u8; 16],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 15 {
        return None;
    }
    let mut req = IfReqFlags {
        name: [0; 16],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: plain socket(2) call; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: SIOCGIFFLAGS fills the flags of a struct ifreq we own.
    let r = unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) };
    // SAFETY: fd was opened above and is not used afterwards.
    unsafe { libc::close(fd) };
    if r < 0 {
        return None;
    }
    let f = req.flags as libc::c_int;
    Some(f & libc::IFF_UP != 0 && f & libc::IFF_RUNNING != 0)
}

/// Raises a socket's receive buffer to `bytes` (SO_RCVBUFFORCE as root, else
/// SO_RCVBUF up to the sysctl limit): bundles arriving while the loop is busy
/// wait in the kernel instead of being dropped.
pub fn set_rcvbuf(fd: std::os::fd::RawFd, bytes: i32) -> io::Result<()> {
    let set = |opt| {
        // SAFETY: setsockopt with a valid int value on a caller-owned fd.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as u32,
            )
        }
    };
    if set(libc::SO_RCVBUFFORCE) == 0 || set(libc::SO_RCVBUF) == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets this thread's timer slack (ns): timerfd deadlines fire this close to
/// the requested time (the default slack is 50 µs).
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain integer.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Runs this thread under SCHED_FIFO at `priority` (1-99).
pub fn set_realtime(priority: u8) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority as libc::c_int,
    };
    // SAFETY: sched_setscheduler on the calling thread with a valid param.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_from_headers() {
        let mut v4 = [0u8; 20];
        v4[0] = 0x45;
        v4[12..16].copy_from_slice(&[10, 0, 0, 1]);
        v4[16..20].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(
            addrs(&v4),
            Some(("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()))
        );
        assert_eq!(addrs(&v4[..19]), None);
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[23] = 1;
        v6[39] = 2;
        assert_eq!(
            addrs(&v6),
            Some(("::1".parse().unwrap(), "::2".parse().unwrap()))
        );
        assert_eq!(addrs(&v6[..39]), None);
        assert_eq!(addrs(&[]), None);
        assert_eq!(addrs(&[0x50; 60]), None);
    }

    #[test]
    fn link_scope() {
        for a in [
            "fe80::1",
            "ff02::16",
            "ff02::2",
            "ff01::1",
            "169.254.1.1",
            "224.0.0.22",
            "255.255.255.255",
        ] {
            assert!(link_scoped(a.parse().unwrap()), "{a}");
        }
        for a in [
            "10.0.0.1",
            "fd00::1",
            "2001:db8::1",
            "ff05::2",
            "239.1.1.1",
            "224.0.1.1",
        ] {
            assert!(!link_scoped(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn timer_slack_and_rcvbuf() {
        set_timer_slack(1000).unwrap();
        // SAFETY: PR_GET_TIMERSLACK returns the current slack.
        assert_eq!(
            unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) },
            1000
        );
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        set_rcvbuf(std::os::fd::AsRawFd::as_raw_fd(&s), 1 << 20).unwrap();
    }

    #[test]
    fn loopback_state() {
        // `lo` exists in every namespace; it may be down in a fresh one.
        assert!(link_up("lo").is_some());
        assert_eq!(link_up("no-such-if0"), None);
    }
}
