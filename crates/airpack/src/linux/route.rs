//! Netlink (NETLINK_ROUTE) route lookups and change monitoring.
//!
//! Owns: [`RouteResolver`], synchronous lookups (RTM_GETROUTE for a
//! destination with a given fwmark; RTM_GETLINK counters) with a bounded
//! cache, for work off the packet path; [`AsyncResolver`] (in `resolver`),
//! the packet path's lookups by source and destination that never wait; and
//! [`RouteMonitor`], a netlink socket subscribed to route, rule, address,
//! link and nexthop changes, which reports the prefixes of changed routes so
//! caches evict only what a change can affect. Messages are written by hand
//! and replies parsed strictly (every length checked; malformed replies are
//! errors).
//!
//! Must not touch: peers or policy (the daemon decides what a next hop means).

use std::collections::HashMap;
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_size};

mod resolver;
pub use resolver::{Answer, AsyncResolver, ResolverStats};

const NLMSG_HDRLEN: usize = 16;
const RTMSG_LEN: usize = 12;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const RTA_DST: u16 = 1;
const RTA_SRC: u16 = 2;
const RTA_IIF: u16 = 3;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_MARK: u16 = 16;
const RTA_VIA: u16 = 18;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;
const RTN_BROADCAST: u8 = 3;
const RTN_ANYCAST: u8 = 4;
const RTN_MULTICAST: u8 = 5;
const SOL_NETLINK: libc::c_int = 270;
/// Replies we skip (stale answers to timed-out requests) before giving up on one lookup.
const MAX_STALE_REPLIES: usize = 16;
/// Longest wait of a synchronous [`RouteResolver`] request for its reply (µs).
pub const SYNC_TIMEOUT_US: u64 = 20_000;
/// Notification datagrams one [`RouteMonitor::drain`] reads at most.
const MAX_DRAIN: usize = 1024;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn netlink_socket(nonblocking: bool) -> io::Result<OwnedFd> {
    let ty =
        libc::SOCK_RAW | libc::SOCK_CLOEXEC | if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain socket(2) call, checked before wrapping.
    let fd = cvt(unsafe { libc::socket(libc::AF_NETLINK, ty, libc::NETLINK_ROUTE) })?;
    // SAFETY: fd is freshly created and owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain old data; pid 0 lets the kernel assign one.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: sa is a valid sockaddr_nl of the given size.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed netlink reply: {what}"),
    )
}

/// Iterates the netlink messages of one datagram: (type, flags, seq, payload).
/// Stops with an error at the first inconsistent length.
fn messages(mut buf: &[u8]) -> impl Iterator<Item = io::Result<(u16, u16, u32, &[u8])>> {
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
fn attributes(mut buf: &[u8]) -> impl Iterator<Item = io::Result<(u16, &[u8])>> {
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
fn build_request(out: &mut Vec<u8>, seq: u32, dst: IpAddr, mark: u32) {
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
fn parse_route(payload: &[u8], dst: IpAddr) -> io::Result<NextHop> {
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

/// Default bound of the resolver cache.
pub const DEFAULT_CACHE_ENTRIES: usize = 4096;

/// The kernel's answer for one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NextHop {
    /// The gateway, or the destination itself when it is on-link (or local).
    pub addr: IpAddr,
    /// Output interface index (the loopback for local destinations).
    pub oif: u32,
    /// Whether `addr` is a gateway from the route (false: on-link destination).
    pub gateway: bool,
    /// Whether the destination is an address of this host (RTN_LOCAL).
    pub local: bool,
}

/// Next-hop lookups with a bounded cache.
#[derive(Debug)]
pub struct RouteResolver {
    fd: OwnedFd,
    mark: u32,
    seq: u32,
    cache: HashMap<IpAddr, Result<NextHop, i32>>,
    capacity: usize,
    req: Vec<u8>,
    resp: Vec<u8>,
}

impl RouteResolver {
    /// Opens a netlink socket; lookups carry fwmark `mark` (the bypass mark).
    pub fn new(mark: u32) -> io::Result<RouteResolver> {
        Self::with_capacity(mark, DEFAULT_CACHE_ENTRIES)
    }

    /// Like [`RouteResolver::new`] with a cache bound of `capacity` entries
    /// (when full the cache is cleared: bounded memory, no eviction cost).
    pub fn with_capacity(mark: u32, capacity: usize) -> io::Result<RouteResolver> {
        let fd = netlink_socket(false)?;
        // Lookups are synchronous. The kernel answers RTM_GETROUTE (and, on
        // current kernels, RTM_GETLINK) inside send(2) without the RTNL lock,
        // so the reply is queued before recv is called; the timeout only
        // bounds the wait for a reply the kernel dropped (receive buffer
        // full). The packet path uses [`AsyncResolver`], which never waits.
        super::set_recv_timeout(fd.as_fd(), SYNC_TIMEOUT_US as u32)?;
        let capacity = capacity.max(1);
        Ok(RouteResolver {
            fd,
            mark,
            seq: 0,
            cache: HashMap::with_capacity(capacity),
            capacity,
            req: Vec::with_capacity(64),
            resp: vec![0u8; 8192],
        })
    }

    /// The next hop toward `dst`, from the cache or the kernel. Unreachable
    /// destinations return the kernel's error (ENETUNREACH, EHOSTUNREACH,
    /// EACCES for prohibit, EINVAL for blackhole); errors are cached too
    /// (netlink I/O failures are not).
    pub fn lookup(&mut self, dst: IpAddr) -> io::Result<NextHop> {
        if let Some(r) = self.cache.get(&dst) {
            return r.map_err(io::Error::from_raw_os_error);
        }
        let r = self.lookup_uncached(dst);
        let cached = match &r {
            Ok(nh) => Ok(*nh),
            Err(e) => match e.raw_os_error() {
                Some(errno)
                    if errno != libc::EAGAIN && errno != libc::EINTR && errno != libc::ENOBUFS =>
                {
                    Err(errno)
                }
                _ => return r,
            },
        };
        if self.cache.len() >= self.capacity {
            self.cache.clear();
        }
        self.cache.insert(dst, cached);
        r
    }

    /// Asks the kernel, bypassing (and not filling) the cache.
    pub fn lookup_uncached(&mut self, dst: IpAddr) -> io::Result<NextHop> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        build_request(&mut self.req, seq, dst, self.mark);
        let payload = self.transact(seq, libc::RTM_NEWROUTE)?;
        parse_route(payload, dst)
    }

    /// Counters and up/running state of interface `ifindex` (ENODEV if absent).
    /// One netlink round trip; meant for periodic statistics, not per packet.
    pub fn link_stats(&mut self, ifindex: u32) -> io::Result<LinkStats> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let index =
            i32::try_from(ifindex).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
        self.req.clear();
        self.req
            .extend_from_slice(&((NLMSG_HDRLEN + 16) as u32).to_ne_bytes());
        self.req.extend_from_slice(&libc::RTM_GETLINK.to_ne_bytes());
        self.req
            .extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
        self.req.extend_from_slice(&seq.to_ne_bytes());
        self.req.extend_from_slice(&0u32.to_ne_bytes());
        // struct ifinfomsg: family, pad, type, index, flags, change.
        self.req
            .extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
        self.req.extend_from_slice(&index.to_ne_bytes());
        self.req.extend_from_slice(&0u32.to_ne_bytes());
        self.req.extend_from_slice(&0u32.to_ne_bytes());
        let payload = self.transact(seq, libc::RTM_NEWLINK)?;
        parse_link(payload)
    }

    /// Sends `self.req` and returns the payload of the reply with `seq` and
    /// type `want` (NLMSG_ERROR becomes the kernel's errno).
    fn transact(&mut self, seq: u32, want: u16) -> io::Result<&[u8]> {
        // An unconnected netlink socket sends to port 0, the kernel.
        // SAFETY: req is a valid readable buffer of req.len() bytes.
        let n = cvt_size(unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                self.req.as_ptr().cast(),
                self.req.len(),
                0,
            )
        })?;
        if n != self.req.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short netlink send",
            ));
        }
        for _ in 0..MAX_STALE_REPLIES {
            // SAFETY: resp is a writable buffer of resp.len() bytes.
            let n = cvt_size(unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.resp.as_mut_ptr().cast(),
                    self.resp.len(),
                    0,
                )
            })?;
            let n = n.min(self.resp.len());
            let mut found: Option<(usize, usize)> = None;
            for msg in messages(&self.resp[..n]) {
                let (ty, _flags, mseq, payload) = msg?;
                if mseq != seq {
                    continue;
                }
                if ty == NLMSG_ERROR {
                    if payload.len() < 4 {
                        return Err(invalid("short NLMSG_ERROR"));
                    }
                    let code = i32::from_ne_bytes([payload[0], payload[1], payload[2], payload[3]]);
                    return Err(if code < 0 {
                        io::Error::from_raw_os_error(-code)
                    } else {
                        invalid("NLMSG_ERROR without error for a request")
                    });
                }
                if ty != want {
                    return Err(invalid("unexpected message type"));
                }
                let start = payload.as_ptr() as usize - self.resp.as_ptr() as usize;
                found = Some((start, payload.len()));
                break;
            }
            if let Some((start, len)) = found {
                return Ok(&self.resp[start..start + len]);
            }
        }
        Err(io::Error::new(io::ErrorKind::TimedOut, "no netlink reply"))
    }

    /// Forgets every cached answer.
    pub fn invalidate(&mut self) {
        self.cache.clear();
    }

    /// Forgets the cached answers a change of these routes can affect;
    /// returns how many.
    pub fn evict(&mut self, prefixes: &[RoutePrefix]) -> usize {
        let before = self.cache.len();
        self.cache
            .retain(|dst, _| !prefixes.iter().any(|p| p.covers(None, *dst)));
        before - self.cache.len()
    }

    /// Number of cached answers.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}

/// Counters and state of one interface (RTM_GETLINK, IFLA_STATS64).
///
/// For the TUN, `tx_dropped` counts steered packets the kernel dropped
/// because the daemon did not read them in time (queue full), and
/// `rx_dropped` packets the daemon wrote that the stack could not take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets received (for the TUN: written by the daemon).
    pub rx_packets: u64,
    /// Packets transmitted (for the TUN: read by the daemon).
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Packets dropped on transmit (TUN: queue toward the daemon full).
    pub tx_dropped: u64,
    /// IFF_UP and IFF_RUNNING (administratively up, with carrier).
    pub up: bool,
}

/// Parses the payload of an RTM_NEWLINK message.
fn parse_link(payload: &[u8]) -> io::Result<LinkStats> {
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

/// What a [`RouteMonitor::drain`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Route added/removed (IPv4 or IPv6); which ones: [`RouteMonitor::prefixes`].
    pub route: bool,
    /// Policy rule added/removed.
    pub rule: bool,
    /// Address added/removed.
    pub addr: bool,
    /// Link added/removed/changed (including up/down).
    pub link: bool,
    /// Nexthop object added/removed/replaced (routes using it change without
    /// a route notification).
    pub nexthop: bool,
    /// Route notifications whose prefixes were not recorded (more than
    /// [`MAX_PREFIXES`] in one drain, or unparsable).
    pub prefixes_lost: bool,
    /// The kernel dropped notifications (ENOBUFS): assume everything changed.
    pub overrun: bool,
}

impl Changes {
    /// Whether anything that can change a next hop happened.
    pub fn any(&self) -> bool {
        self.route || self.rule || self.addr || self.link || self.nexthop || self.overrun
    }

    /// Whether a cached next hop outside the recorded route prefixes may have
    /// changed too: rules, addresses (the local table, and whether a source
    /// is local), links (IPv4 removes a down link's routes without a
    /// notification), nexthop objects, lost notifications.
    pub fn all(&self) -> bool {
        self.rule || self.addr || self.link || self.nexthop || self.prefixes_lost || self.overrun
    }
}

/// Route prefixes recorded per [`RouteMonitor::drain`] at most.
pub const MAX_PREFIXES: usize = 256;

/// The prefixes of one added or removed route: only lookups whose
/// destination (and source, for a source-specific route) fall inside can
/// change because of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutePrefix {
    /// Destination prefix (the unspecified address with `dst_len` 0 for a default route).
    pub dst: IpAddr,
    /// Its length in bits.
    pub dst_len: u8,
    /// Source prefix of a source-specific (IPv6 `from`) route.
    pub src: Option<(IpAddr, u8)>,
}

/// Whether `a` lies in `net/len` (same family).
pub fn in_prefix(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let len = u32::from(len.min(32));
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let len = u32::from(len.min(128));
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl RoutePrefix {
    /// Whether a lookup of `dst` from `src` (`None`: no source) can be
    /// changed by this route. A lookup without a source is conservatively
    /// covered by a source-specific route.
    pub fn covers(&self, src: Option<IpAddr>, dst: IpAddr) -> bool {
        if !in_prefix(dst, self.dst, self.dst_len) {
            return false;
        }
        match (self.src, src) {
            (Some((net, len)), Some(s)) => in_prefix(s, net, len),
            _ => true,
        }
    }
}

/// Parses the prefixes of an RTM_NEWROUTE/RTM_DELROUTE notification.
fn parse_prefix(payload: &[u8]) -> io::Result<RoutePrefix> {
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

/// A netlink socket subscribed to route, rule, address, link and nexthop
/// changes (nonblocking).
#[derive(Debug)]
pub struct RouteMonitor {
    fd: OwnedFd,
    buf: Vec<u8>,
    prefixes: Vec<RoutePrefix>,
}

const RTM_NEWNEXTHOP: u16 = 104;
const RTM_DELNEXTHOP: u16 = 105;
const RTNLGRP_NEXTHOP: libc::c_uint = 32;

/// Folds one notification datagram into `c` and the changed route prefixes
/// into `prefixes` (bounded); a malformed datagram counts as an overrun.
fn classify(datagram: &[u8], c: &mut Changes, prefixes: &mut Vec<RoutePrefix>) {
    for msg in messages(datagram) {
        match msg {
            Ok((ty, _, _, payload)) => match ty {
                libc::RTM_NEWLINK | libc::RTM_DELLINK => c.link = true,
                libc::RTM_NEWADDR | libc::RTM_DELADDR => c.addr = true,
                libc::RTM_NEWROUTE | libc::RTM_DELROUTE => {
                    c.route = true;
                    match parse_prefix(payload) {
                        Ok(p) if prefixes.len() < MAX_PREFIXES => {
                            if !prefixes.contains(&p) {
                                prefixes.push(p);
                            }
                        }
                        _ => c.prefixes_lost = true,
                    }
                }
                libc::RTM_NEWRULE | libc::RTM_DELRULE => c.rule = true,
                RTM_NEWNEXTHOP | RTM_DELNEXTHOP => c.nexthop = true,
                NLMSG_OVERRUN => c.overrun = true,
                NLMSG_DONE | NLMSG_ERROR => {}
                _ => {}
            },
            Err(_) => {
                c.overrun = true;
                return;
            }
        }
    }
}

impl RouteMonitor {
    /// Opens and subscribes.
    pub fn new() -> io::Result<RouteMonitor> {
        let fd = netlink_socket(true)?;
        for group in [
            libc::RTNLGRP_LINK,
            libc::RTNLGRP_IPV4_IFADDR,
            libc::RTNLGRP_IPV4_ROUTE,
            libc::RTNLGRP_IPV4_RULE,
            libc::RTNLGRP_IPV6_IFADDR,
            libc::RTNLGRP_IPV6_ROUTE,
            libc::RTNLGRP_IPV6_RULE,
            RTNLGRP_NEXTHOP,
        ] {
            let g = group as libc::c_int;
            // SAFETY: g is a c_int living across the call.
            let r = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    SOL_NETLINK,
                    libc::NETLINK_ADD_MEMBERSHIP,
                    (&g as *const libc::c_int).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            // IPv6 groups fail on kernels without IPv6, the nexthop group
            // before Linux 5.3; the rest must work.
            if r < 0
                && !matches!(
                    group,
                    libc::RTNLGRP_IPV6_IFADDR
                        | libc::RTNLGRP_IPV6_ROUTE
                        | libc::RTNLGRP_IPV6_RULE
                        | RTNLGRP_NEXTHOP
                )
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(RouteMonitor {
            fd,
            buf: vec![0u8; 32 * 1024],
            prefixes: Vec::with_capacity(MAX_PREFIXES),
        })
    }

    /// Reads pending notifications (never blocks; at most 1024 datagrams per
    /// call, so a flood cannot starve the caller: the fd stays readable) and
    /// reports what kinds of change were seen; the changed routes' prefixes
    /// are in [`RouteMonitor::prefixes`] until the next drain.
    pub fn drain(&mut self) -> io::Result<Changes> {
        let mut c = Changes::default();
        self.prefixes.clear();
        for _ in 0..MAX_DRAIN {
            // SAFETY: buf is a writable buffer of buf.len() bytes.
            let r = cvt_size(unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            });
            let n = match r {
                Ok(n) => n.min(self.buf.len()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    c.overrun = true;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            classify(&self.buf[..n], &mut c, &mut self.prefixes);
        }
        Ok(c)
    }

    /// The prefixes of the routes added or removed, as of the last drain.
    pub fn prefixes(&self) -> &[RoutePrefix] {
        &self.prefixes
    }
}

impl AsRawFd for RouteResolver {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsRawFd for RouteMonitor {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for RouteMonitor {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nlmsg(ty: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn rta(ty: u16, value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn rtmsg(family: u8, rtype: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut v = vec![family, 32, 0, 0, 254, 0, 0, rtype, 0, 0, 0, 0];
        for a in attrs {
            v.extend_from_slice(a);
        }
        v
    }

    #[test]
    fn request_layout() {
        let mut out = Vec::new();
        build_request(&mut out, 9, "10.0.0.1".parse().unwrap(), 0x4151);
        assert_eq!(out.len(), 16 + 12 + 8 + 8);
        assert_eq!(
            u32::from_ne_bytes(out[0..4].try_into().unwrap()) as usize,
            out.len()
        );
        assert_eq!(u16::from_ne_bytes([out[4], out[5]]), libc::RTM_GETROUTE);
        assert_eq!(out[16], libc::AF_INET as u8);
        assert_eq!(out[17], 32);
        assert_eq!(&out[32..36], &[10, 0, 0, 1]);
        assert_eq!(&out[40..44], &0x4151u32.to_ne_bytes());
        build_request(&mut out, 9, "fd00::1".parse().unwrap(), 0);
        assert_eq!(out.len(), 16 + 12 + 20);
        assert_eq!(out[17], 128);
    }

    #[test]
    fn query_carries_source_and_input_interface() {
        let mut out = Vec::new();
        let q = Query {
            dst: "fd09::5".parse().unwrap(),
            src: Some("fd07::1".parse().unwrap()),
            mark: 0,
            iif: 0,
        };
        build_query(&mut out, 3, &q);
        assert_eq!(out.len(), 16 + 12 + 20 + 20);
        assert_eq!((out[17], out[18]), (128, 128), "dst_len, src_len");
        let attrs: Vec<_> = attributes(&out[28..]).map(|a| a.unwrap()).collect();
        assert_eq!(attrs[1].0, RTA_SRC);
        assert_eq!(attrs[1].1, &"fd07::1".parse::<Ipv6Addr>().unwrap().octets());
        // IPv4 input lookup; a source of the other family is left out.
        let q = Query {
            dst: "10.9.0.5".parse().unwrap(),
            src: Some("fd07::1".parse().unwrap()),
            mark: 7,
            iif: LOOPBACK_IFINDEX,
        };
        build_query(&mut out, 4, &q);
        assert_eq!(out[18], 0);
        let attrs: Vec<_> = attributes(&out[28..]).map(|a| a.unwrap().0).collect();
        assert_eq!(attrs, vec![RTA_DST, RTA_IIF, RTA_MARK]);
    }

    #[test]
    fn route_notifications_give_prefixes() {
        let dst = rta(
            RTA_DST,
            &[0xfd, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        );
        let src = rta(
            RTA_SRC,
            &[0xfd, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        );
        let mut m = rtmsg(libc::AF_INET6 as u8, RTN_UNICAST, &[dst.clone(), src]);
        m[1] = 64;
        m[2] = 64;
        let p = parse_prefix(&m).unwrap();
        assert_eq!((p.dst_len, p.src.map(|s| s.1)), (64, Some(64)));
        assert!(p.covers(Some("fd07::9".parse().unwrap()), "fd09::1".parse().unwrap()));
        assert!(!p.covers(Some("fd08::9".parse().unwrap()), "fd09::1".parse().unwrap()));
        assert!(!p.covers(Some("fd07::9".parse().unwrap()), "fd0a::1".parse().unwrap()));
        assert!(p.covers(None, "fd09::1".parse().unwrap()));
        // Default route (no RTA_DST): every destination of the family.
        let mut d = rtmsg(libc::AF_INET as u8, RTN_UNICAST, &[]);
        d[1] = 0;
        let p = parse_prefix(&d).unwrap();
        assert!(p.covers(None, "192.0.2.1".parse().unwrap()));
        assert!(!p.covers(None, "fd09::1".parse().unwrap()));
        // Length beyond the family, wrong address size.
        let mut bad = rtmsg(libc::AF_INET as u8, RTN_UNICAST, &[]);
        bad[1] = 33;
        assert!(parse_prefix(&bad).is_err());
        let mut bad = rtmsg(libc::AF_INET as u8, RTN_UNICAST, &[dst]);
        bad[1] = 24;
        assert!(parse_prefix(&bad).is_err());
        // Through classify: the prefix is recorded, not "all".
        let mut c = Changes::default();
        let mut ps = Vec::new();
        classify(&nlmsg(libc::RTM_NEWROUTE, 0, &m), &mut c, &mut ps);
        assert!(c.route && !c.all() && ps.len() == 1, "{c:?} {ps:?}");
    }

    #[test]
    fn parses_gateway_onlink_local_and_rejects_bad_lengths() {
        let dst: IpAddr = "10.9.0.1".parse().unwrap();
        let gw = rtmsg(
            2,
            RTN_UNICAST,
            &[
                rta(RTA_GATEWAY, &[10, 0, 0, 254]),
                rta(RTA_OIF, &7u32.to_ne_bytes()),
            ],
        );
        assert_eq!(
            parse_route(&gw, dst).unwrap(),
            NextHop {
                addr: "10.0.0.254".parse().unwrap(),
                oif: 7,
                gateway: true,
                local: false
            }
        );
        let onlink = rtmsg(2, RTN_UNICAST, &[rta(RTA_OIF, &3u32.to_ne_bytes())]);
        assert_eq!(
            parse_route(&onlink, dst).unwrap(),
            NextHop {
                addr: dst,
                oif: 3,
                gateway: false,
                local: false
            }
        );
        let local = rtmsg(2, RTN_LOCAL, &[rta(RTA_OIF, &1u32.to_ne_bytes())]);
        assert!(parse_route(&local, dst).unwrap().local);
        // Gateway of the wrong size, attribute overrunning the message, short rtmsg.
        assert!(parse_route(
            &rtmsg(2, RTN_UNICAST, &[rta(RTA_GATEWAY, &[10, 0, 0])]),
            dst
        )
        .is_err());
        let mut overrun = rtmsg(2, RTN_UNICAST, &[rta(RTA_OIF, &3u32.to_ne_bytes())]);
        overrun[12] = 200;
        assert!(parse_route(&overrun, dst).is_err());
        assert!(parse_route(&[2, 32, 0], dst).is_err());
        assert!(parse_route(&rtmsg(2, 6, &[]), dst).is_err()); // blackhole
    }

    #[test]
    fn link_stats_parse_and_length_checks() {
        let mut p = vec![0u8; 16];
        p[8..12].copy_from_slice(&((libc::IFF_UP | libc::IFF_RUNNING) as u32).to_ne_bytes());
        let mut stats = Vec::new();
        for i in 1..=24u64 {
            stats.extend_from_slice(&i.to_ne_bytes());
        }
        p.extend(rta(23, &stats));
        let st = parse_link(&p).unwrap();
        assert!(st.up);
        assert_eq!(
            (st.rx_packets, st.tx_packets, st.rx_dropped, st.tx_dropped),
            (1, 2, 7, 8)
        );
        // Stats too short, missing, or ifinfomsg truncated.
        let mut short = vec![0u8; 16];
        short.extend(rta(23, &stats[..56]));
        assert!(parse_link(&short).is_err());
        assert!(parse_link(&[0u8; 16]).is_err());
        assert!(parse_link(&[0u8; 12]).is_err());
    }

    #[test]
    fn message_iteration_checks_lengths() {
        let mut d = nlmsg(libc::RTM_NEWROUTE, 1, &[0; 12]);
        d.extend(nlmsg(libc::RTM_NEWLINK, 2, &[0; 16]));
        let v: Vec<_> = messages(&d).map(|m| m.unwrap().0).collect();
        assert_eq!(v, vec![libc::RTM_NEWROUTE, libc::RTM_NEWLINK]);
        let mut c = Changes::default();
        let mut p = Vec::new();
        classify(&d, &mut c, &mut p);
        assert!(c.route && c.link && !c.addr && !c.overrun);
        // An all-zero rtmsg is not a known family: the prefix is lost, not guessed.
        assert!(c.prefixes_lost && p.is_empty());
        // Length field larger than the datagram.
        let mut bad = nlmsg(libc::RTM_NEWADDR, 1, &[0; 4]);
        bad[0] = 200;
        assert!(messages(&bad).next().unwrap().is_err());
        let mut c = Changes::default();
        classify(&bad, &mut c, &mut Vec::new());
        assert!(c.overrun && !c.addr);
        // Length smaller than a header; trailing garbage shorter than a header.
        let mut small = nlmsg(libc::RTM_NEWADDR, 1, &[]);
        small[0] = 8;
        assert!(messages(&small).next().unwrap().is_err());
        assert!(messages(&[0u8; 7]).next().unwrap().is_err());
    }
}
