//! Packet-header helpers of the event loop: reading addresses out of raw IP
//! headers and recognising link-scoped destinations. Kernel-facing helpers
//! (txqueuelen, link state, socket buffers, timer slack, scheduling) live in
//! `crate::linux`.
//!
//! Owns: nothing stateful. Must not touch: policy. Header readers check the
//! length before every access (input comes from the network).

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
}
