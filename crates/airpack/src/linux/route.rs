//! Netlink (NETLINK_ROUTE) route lookups and change monitoring.
//!
//! Owns: [`RouteResolver`], which asks the kernel (RTM_GETROUTE with the
//! bypass mark, so the steering rule is not hit) for the next hop toward a
//! destination and keeps a bounded cache of answers; and [`RouteMonitor`], a
//! netlink socket subscribed to route, rule, address and link changes whose
//! readiness means "invalidate the cache". Messages are written by hand and
//! replies parsed strictly (every length checked; malformed replies are errors).
//!
//! Must not touch: peers or policy (the daemon decides what a next hop means).

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

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
    cache: std::collections::HashMap<IpAddr, Result<NextHop, i32>>,
    capacity: usize,
}

impl RouteResolver {
    /// Opens a netlink socket; lookups carry fwmark `mark` (the bypass mark).
    pub fn new(mark: u32) -> io::Result<RouteResolver> {
        Self::with_capacity(mark, DEFAULT_CACHE_ENTRIES)
    }

    /// Like [`RouteResolver::new`] with a cache bound of `capacity` entries
    /// (when full the cache is cleared: bounded memory, no eviction cost).
    pub fn with_capacity(mark: u32, capacity: usize) -> io::Result<RouteResolver> {
        let _ = (mark, capacity);
        todo!()
    }

    /// The next hop toward `dst`, from the cache or the kernel. Unreachable
    /// destinations return the kernel's error (ENETUNREACH, EHOSTUNREACH,
    /// EACCES for prohibit, EINVAL for blackhole); errors are cached too.
    pub fn lookup(&mut self, dst: IpAddr) -> io::Result<NextHop> {
        let _ = dst;
        todo!()
    }

    /// Asks the kernel, bypassing (and not filling) the cache.
    pub fn lookup_uncached(&mut self, dst: IpAddr) -> io::Result<NextHop> {
        let _ = dst;
        todo!()
    }

    /// Forgets every cached answer.
    pub fn invalidate(&mut self) {
        self.cache.clear();
    }

    /// Number of cached answers.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}

/// What a [`RouteMonitor::drain`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Route added/removed (IPv4 or IPv6).
    pub route: bool,
    /// Policy rule added/removed.
    pub rule: bool,
    /// Address added/removed.
    pub addr: bool,
    /// Link added/removed/changed (including up/down).
    pub link: bool,
    /// The kernel dropped notifications (ENOBUFS): assume everything changed.
    pub overrun: bool,
}

impl Changes {
    /// Whether anything that can change a next hop happened.
    pub fn any(&self) -> bool {
        self.route || self.rule || self.addr || self.link || self.overrun
    }
}

/// A netlink socket subscribed to route, rule, address and link changes (nonblocking).
#[derive(Debug)]
pub struct RouteMonitor {
    fd: OwnedFd,
}

impl RouteMonitor {
    /// Opens and subscribes.
    pub fn new() -> io::Result<RouteMonitor> {
        todo!()
    }

    /// Reads every pending notification (never blocks; bounded by what is
    /// queued) and reports what kinds of change were seen.
    pub fn drain(&mut self) -> io::Result<Changes> {
        todo!()
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
