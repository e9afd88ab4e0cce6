//! Netlink (NETLINK_ROUTE) route lookups and change monitoring.
//!
//! Owns: [`RouteResolver`], synchronous lookups (RTM_GETROUTE for a
//! destination with a given fwmark; RTM_GETLINK counters) with a bounded
//! cache, for work off the packet path, and the netlink socket all route
//! readers open. Its parts: [`AsyncResolver`] (in `resolver`), the packet
//! path's lookups by source and destination that never wait;
//! [`RouteMonitor`] (in `monitor`), a netlink socket subscribed to route,
//! rule, address, link and nexthop changes, which reports the prefixes of
//! changed routes so caches evict only what a change can affect; and the
//! messages (in `nlmsg`), written by hand and parsed strictly (every length
//! checked; malformed replies are errors).
//!
//! Must not touch: peers or policy (the daemon decides what a next hop means).

use std::collections::HashMap;
use std::io;
use std::mem::size_of;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{cvt, cvt_size};

mod monitor;
mod nlmsg;
mod resolver;
#[cfg(test)]
mod tests;

pub use monitor::{in_prefix, Changes, RouteMonitor, RoutePrefix, MAX_PREFIXES};
pub(crate) use nlmsg::build_query;
use nlmsg::{build_request, invalid, messages, parse_link, parse_route, NLMSG_ERROR, NLMSG_HDRLEN};
pub use nlmsg::{Query, LOOPBACK_IFINDEX};
pub use resolver::{Answer, AsyncResolver, ResolverStats};

/// Replies we skip (stale answers to timed-out requests) before giving up on one lookup.
const MAX_STALE_REPLIES: usize = 16;
/// Longest wait of a synchronous [`RouteResolver`] request for its reply (µs).
pub const SYNC_TIMEOUT_US: u64 = 20_000;

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

impl AsRawFd for RouteResolver {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
