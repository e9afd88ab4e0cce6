//! The Wi-Fi access category of what the daemon sends (issue 14 point 10:
//! the AP's multiplexed frames on AC_VO). A Linux AP (mac80211) picks a
//! frame's 802.11 user priority (UP) and with it its WMM queue in
//! `cfg80211_classify8021d`: an `skb->priority` of 256-263 forces UP
//! `priority - 256`; otherwise the IP header's DSCP decides: its three high
//! bits, with the exceptions of RFC 8325 section 4 on kernels that carry
//! them (EF and VA -> 6, CS6 -> 7, AF1x and CS2 -> 0, AF2x -> 3, CS3 and
//! AF3x -> 4). Older kernels use the three high bits alone, which puts EF
//! (46) on UP 5, AC_VI: so a socket marked here gets both the DSCP in its
//! IP header (for the wired hops and for kernels and APs that classify by
//! DSCP) and SO_PRIORITY 256 + UP (the queue on this host's own radio,
//! whatever its kernel's table).
//!
//! Owns: [`user_priority`] (the DSCP -> UP table), [`access_category`],
//! [`mark`] (IP_TOS / IPV6_TCLASS and SO_PRIORITY on a socket) and
//! [`set_user_priority`]. Must not touch: which sockets are marked (the
//! runtime decides), the packets' bytes.

use std::io;
use std::os::fd::RawFd;

use super::mcast::set_int;

/// The 802.11 user priority (0-7) mac80211 gives an IP packet of DSCP
/// `dscp` (0-63) without a QoS map: RFC 8325's mapping as
/// `cfg80211_classify8021d` implements it.
pub fn user_priority(dscp: u8) -> u8 {
    match dscp & 0x3f {
        10 | 12 | 14 | 16 => 0, // AF11-AF13 (high-throughput data), CS2 (OAM)
        18 | 20 | 22 => 3,      // AF21-AF23 (low-latency data)
        24 | 26 | 28 | 30 => 4, // CS3 (broadcast video), AF31-AF33 (streaming)
        44 | 46 => 6,           // VA, EF (telephony)
        48 => 7,                // CS6 (network control)
        d => d >> 3,            // the three high bits (RFC 8325 section 2.3)
    }
}

/// The WMM access category of user priority `up` (802.11 table 10-1).
pub fn access_category(up: u8) -> &'static str {
    match up {
        1 | 2 => "AC_BK",
        4 | 5 => "AC_VI",
        6 | 7 => "AC_VO",
        _ => "AC_BE",
    }
}

/// SO_PRIORITY 256 + `up`: mac80211 queues the socket's frames at user
/// priority `up` whatever their DSCP (needs CAP_NET_ADMIN).
pub fn set_user_priority(fd: RawFd, up: u8) -> io::Result<()> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_PRIORITY,
        256 + libc::c_int::from(up & 7),
    )
}

/// Marks the UDP socket `fd` (IPv6 when `v6`) as traffic of DSCP `dscp`:
/// IP_TOS / IPV6_TCLASS = `dscp << 2` (ECN bits 0) and, unless `dscp` is
/// 0 (leave the default), SO_PRIORITY 256 + [`user_priority`]`(dscp)`.
pub fn mark(fd: RawFd, v6: bool, dscp: u8) -> io::Result<()> {
    let tos = libc::c_int::from(dscp & 0x3f) << 2;
    if v6 {
        set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, tos)?;
    } else {
        set_int(fd, libc::IPPROTO_IP, libc::IP_TOS, tos)?;
    }
    if dscp != 0 {
        set_user_priority(fd, user_priority(dscp))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn dscp_to_user_priority_follows_rfc_8325() {
        let cases = [
            (0, 0, "AC_BE"),  // DF
            (8, 1, "AC_BK"),  // CS1
            (10, 0, "AC_BE"), // AF11
            (16, 0, "AC_BE"), // CS2
            (18, 3, "AC_BE"), // AF21
            (24, 4, "AC_VI"), // CS3
            (34, 4, "AC_VI"), // AF41
            (32, 4, "AC_VI"), // CS4
            (40, 5, "AC_VI"), // CS5
            (44, 6, "AC_VO"), // VA
            (46, 6, "AC_VO"), // EF
            (48, 7, "AC_VO"), // CS6
            (56, 7, "AC_VO"), // CS7
        ];
        for (dscp, up, ac) in cases {
            assert_eq!(user_priority(dscp), up, "DSCP {dscp}");
            assert_eq!(access_category(up), ac, "DSCP {dscp}");
        }
        // every DSCP maps to a valid UP; the bits above the DSCP are ignored
        for d in 0..=255u8 {
            assert!(user_priority(d) < 8);
            assert_eq!(user_priority(d), user_priority(d & 0x3f));
        }
    }

    fn get(fd: RawFd, level: libc::c_int, name: libc::c_int) -> libc::c_int {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt(2) into a c_int.
        let r = unsafe {
            libc::getsockopt(
                fd,
                level,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        v
    }

    #[test]
    fn mark_sets_the_tos_byte_and_the_priority() {
        let s4 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        match mark(s4.as_raw_fd(), false, 46) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                eprintln!("SKIP: SO_PRIORITY 262 needs CAP_NET_ADMIN");
                return;
            }
            r => r.unwrap(),
        }
        let fd = s4.as_raw_fd();
        assert_eq!(get(fd, libc::IPPROTO_IP, libc::IP_TOS), 0xb8);
        assert_eq!(get(fd, libc::SOL_SOCKET, libc::SO_PRIORITY), 262);
        // DSCP 0: the TOS byte cleared, the priority left as it was
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        mark(s.as_raw_fd(), false, 0).unwrap();
        assert_eq!(get(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS), 0);
        assert_eq!(get(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PRIORITY), 0);
        if let Ok(s6) = std::net::UdpSocket::bind("[::1]:0") {
            mark(s6.as_raw_fd(), true, 46).unwrap();
            assert_eq!(
                get(s6.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
                0xb8
            );
            assert_eq!(
                get(s6.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PRIORITY),
                262
            );
        }
    }
}
