//! NETLINK_ROUTE messages written and read by hand: the RTM_GETROUTE
//! request ([`Query`]), and strict parsers of route replies, route
//! notifications' prefixes and link counters (every length checked; a
//! malformed message is an error, never a guess).
//!
//! Owns: the wire layout (netlink header, rtmsg, ifinfomsg, route
//! attributes) and the constants it needs.
//!
//! Must not touch: sockets, caches or timing (the resolvers and the monitor
//! in [`super`] do the I/O), or what a next hop means to the daemon.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{LinkStats, NextHop, RoutePrefix};

pub(super) const NLMSG_HDRLEN: usize = 16;
pub(super) const RTMSG_LEN: usize = 12;
pub(super) const NLMSG_ERROR: u16 = 2;
pub(super) const NLMSG_DONE: u16 = 3;
pub(super) const NLMSG_OVERRUN: u16 = 4;
pub(super) const RTA_DST: u16 = 1;
pub(super) const RTA_SRC: u16 = 2;
pub(super) const RTA_IIF: u16 = 3;
pub(super) const RTA_OIF: u16 = 4;
pub(super) const RTA_GATEWAY: u16 = 5;
pub(super) const RTA_MARK: u16 = 16;
const RTA_VIA: u16 = 18;
pub(super) const RTN_UNICAST: u8 = 1;
pub(super) const RTN_LOCAL: u8 = 2;
const RTN_BROADCAST: u8 = 3;
const RTN_ANYCAST: u8 = 4;
const RTN_MULTICAST: u8 = 5;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

pub(super) fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed netlink reply: {what}"),
    )
}

/// Iterates the netlink messages of one datagram: (type, flags, seq, payload).
/// Stops with an error at the first inconsistent length.
pub(super) fn messages(mut buf: &[u8]) -> impl Iterator<Item = io::Result<(u16, u16, u32, &[u8])>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        if buf.len() < NLMSG_HDRLEN {
            buf = &[];
            return Some(Err(invalid("truncated header")));
        }
        let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < NLMSG_HDRLEN || len > buf.len() {
            buf = &[];
            return Some(Err(invalid("message length out of range")));
        }
        let ty = u16::from_ne_bytes([buf[4], buf[5]]);
        let flags = u16::from_ne_bytes([buf[6], buf[7]]);
        let seq = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]);
        let payload = &buf[NLMSG_HDRLEN..len];
        buf = &buf[align4(len).min(buf.len())..];
        Some(Ok((ty, flags, seq, payload)))
    })
}

/// Iterates route attributes: (type, value). Stops with an error at the first inconsistent length.
pub(super) fn attributes(mut buf: &[u8]) -> impl Iterator<Item = io::Result<(u16, &[u8])>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        if buf.len() < 4 {
            buf = &[];
            return Some(Err(invalid("truncated attribute")));
        }
        let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
        let ty = u16::from_ne_bytes([buf[2], buf[3]]) & 0x3fff;
        if len < 4 || len > buf.len() {
            buf = &[];
            return Some(Err(invalid("attribute length out of range")));
        }
        let value = &buf[4..len];
        buf = &buf[align4(len).min(buf.len())..];
        Some(Ok((ty, value)))
    })
}

fn addr_from(family: u8, bytes: &[u8]) -> io::Result<IpAddr> {
    match (i32::from(family), bytes.len()) {
        (libc::AF_INET, 4) => Ok(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).into()),
        (libc::AF_INET6, 16) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(bytes);
            Ok(Ipv6Addr::from(a).into())
        }
        _ => Err(invalid("address of unexpected size")),
    }
}

/// The loopback's interface index in every network namespace (the kernel's
/// LOOPBACK_IFINDEX).
pub const LOOPBACK_IFINDEX: u32 = 1;

fn family_of(a: IpAddr) -> u8 {
    match a {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn push_addr_attr(out: &mut Vec<u8>, ty: u16, a: IpAddr) {
    match a {
        IpAddr::V4(a) => {
            out.extend_from_slice(&8u16.to_ne_bytes());
            out.extend_from_slice(&ty.to_ne_bytes());
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.extend_from_slice(&20u16.to_ne_bytes());
            out.extend_from_slice(&ty.to_ne_bytes());
            out.extend_from_slice(&a.octets());
        }
    }
}

fn push_u32_attr(out: &mut Vec<u8>, ty: u16, v: u32) {
    out.extend_from_slice(&8u16.to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(&v.to_ne_bytes());
}

/// What one RTM_GETROUTE asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    /// Destination.
    pub dst: IpAddr,
    /// Source address (RTA_SRC), of the same family as `dst`; `None`: any.
    pub src: Option<IpAddr>,
    /// fwmark (RTA_MARK; 0: none).
    pub mark: u32,
    /// Input interface (RTA_IIF; 0: none). With an input interface the
    /// kernel does an input (forwarding) lookup, as for a received packet.
    pub iif: u32,
}

/// Builds an RTM_GETROUTE request for `dst` with fwmark `mark` into `out`.
pub(super) fn build_request(out: &mut Vec<u8>, seq: u32, dst: IpAddr, mark: u32) {
    build_query(
        out,
        seq,
        &Query {
            dst,
            src: None,
            mark,
            iif: 0,
        },
    )
}

/// Builds an RTM_GETROUTE request for `q` into `out` (a source of another
/// family than the destination is left out).
pub(crate) fn build_query(out: &mut Vec<u8>, seq: u32, q: &Query) {
    out.clear();
    let family = family_of(q.dst);
    let alen: usize = if q.dst.is_ipv4() { 4 } else { 16 };
    let src = q.src.filter(|s| family_of(*s) == family);
    out.extend_from_slice(&0u32.to_ne_bytes()); // length, patched below
    out.extend_from_slice(&libc::RTM_GETROUTE.to_ne_bytes());
    out.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let src_len = if src.is_some() { (alen * 8) as u8 } else { 0 };
    out.extend_from_slice(&[family, (alen * 8) as u8, src_len, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&0u32.to_ne_bytes());
    push_addr_attr(out, RTA_DST, q.dst);
    if let Some(s) = src {
        push_addr_attr(out, RTA_SRC, s);
    }
    if q.iif != 0 {
        push_u32_attr(out, RTA_IIF, q.iif);
    }
    if q.mark != 0 {
        push_u32_attr(out, RTA_MARK, q.mark);
    }
    let total = out.len() as u32;
    out[..4].copy_from_slice(&total.to_ne_bytes());
}

/// Parses the payload of an RTM_NEWROUTE reply for `dst`.
pub(super) fn parse_route(payload: &[u8], dst: IpAddr) -> io::Result<NextHop> {
    if payload.len() < RTMSG_LEN {
        return Err(invalid("short rtmsg"));
    }
    let family = payload[0];
    let rtype = payload[7];
    let mut gateway = None;
    let mut oif = 0u32;
    for attr in attributes(&payload[RTMSG_LEN..]) {
        let (ty, v) = attr?;
        match ty {
            RTA_GATEWAY => gateway = Some(addr_from(family, v)?),
            RTA_VIA => {
                if v.len() < 2 {
                    return Err(invalid("short RTA_VIA"));
                }
                let fam = u16::from_ne_bytes([v[0], v[1]]);
                gateway = Some(addr_from(
                    u8::try_from(fam).map_err(|_| invalid("RTA_VIA family"))?,
                    &v[2..],
                )?);
            }
            RTA_OIF => {
                let b: [u8; 4] = v.try_into().map_err(|_| invalid("RTA_OIF size"))?;
                oif = u32::from_ne_bytes(b);
            }
            _ => {}
        }
    }
    match rtype {
        RTN_LOCAL => Ok(NextHop {
            addr: dst,
            oif,
            gateway: false,
            local: true,
        }),
        RTN_UNICAST | RTN_BROADCAST | RTN_ANYCAST | RTN_MULTICAST => Ok(match gateway {
            Some(gw) => NextHop {
                addr: gw,
                oif,
                gateway: true,
                local: false,
            },
            None => NextHop {
                addr: dst,
                oif,
                gateway: false,
                local: false,
            },
        }),
        // Blackhole, unreachable, prohibit, throw: the kernel normally answers
        // with an error; if not, report it as unreachable.
        _ => Err(io::Error::from_raw_os_error(libc::ENETUNREACH)),
    }
}

/// Parses the payload of an RTM_NEWLINK message.
pub(super) fn parse_link(payload: &[u8]) -> io::Result<LinkStats> {
    const IFINFOMSG_LEN: usize = 16;
    const IFLA_STATS64: u16 = 23;
    if payload.len() < IFINFOMSG_LEN {
        return Err(invalid("short ifinfomsg"));
    }
    let flags = u32::from_ne_bytes([payload[8], payload[9], payload[10], payload[11]]);
    let mut st = LinkStats {
        up: flags & libc::IFF_UP as u32 != 0 && flags & libc::IFF_RUNNING as u32 != 0,
        ..LinkStats::default()
    };
    let mut have_stats = false;
    for attr in attributes(&payload[IFINFOMSG_LEN..]) {
        let (ty, v) = attr?;
        if ty == IFLA_STATS64 {
            if v.len() < 8 * 8 {
                return Err(invalid("short IFLA_STATS64"));
            }
            let f = |i: usize| u64::from_ne_bytes(v[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
            st.rx_packets = f(0);
            st.tx_packets = f(1);
            st.rx_bytes = f(2);
            st.tx_bytes = f(3);
            st.rx_errors = f(4);
            st.tx_errors = f(5);
            st.rx_dropped = f(6);
            st.tx_dropped = f(7);
            have_stats = true;
        }
    }
    if !have_stats {
        return Err(invalid("no IFLA_STATS64"));
    }
    Ok(st)
}

/// Parses the prefixes of an RTM_NEWROUTE/RTM_DELROUTE notification.
pub(super) fn parse_prefix(payload: &[u8]) -> io::Result<RoutePrefix> {
    if payload.len() < RTMSG_LEN {
        return Err(invalid("short rtmsg"));
    }
    let family = payload[0];
    let (dst_len, src_len) = (payload[1], payload[2]);
    let unspec = match i32::from(family) {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => return Err(invalid("route of unknown family")),
    };
    let max = if unspec.is_ipv4() { 32 } else { 128 };
    if dst_len > max || src_len > max {
        return Err(invalid("prefix length out of range"));
    }
    let (mut dst, mut src) = (None, None);
    for attr in attributes(&payload[RTMSG_LEN..]) {
        let (ty, v) = attr?;
        match ty {
            RTA_DST => dst = Some(addr_from(family, v)?),
            RTA_SRC => src = Some(addr_from(family, v)?),
            _ => {}
        }
    }
    // A length without its address (not sent by the kernel) widens to "all":
    // evicting too much is safe, too little is not.
    Ok(RoutePrefix {
        dst: dst.unwrap_or(unspec),
        dst_len: if dst.is_some() { dst_len } else { 0 },
        src: src.filter(|_| src_len > 0).map(|s| (s, src_len)),
    })
}
