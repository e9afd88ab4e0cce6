//! Route change monitoring: a netlink socket subscribed to route, rule,
//! address, link and nexthop changes ([`RouteMonitor`]), which reports what
//! kinds changed ([`Changes`]) and the prefixes of changed routes
//! ([`RoutePrefix`]) so caches evict only what a change can affect.
//!
//! Owns: the subscription, the bounded drain of notifications and their
//! classification.
//!
//! Must not touch: the caches themselves (their owners evict with
//! [`RoutePrefix::covers`]) or message layout ([`super::nlmsg`]).

use std::io;
use std::mem::size_of;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::netlink_socket;
use super::nlmsg::{messages, parse_prefix, NLMSG_DONE, NLMSG_ERROR, NLMSG_OVERRUN};
use crate::linux::cvt_size;

const SOL_NETLINK: libc::c_int = 270;

/// Notification datagrams one [`RouteMonitor::drain`] reads at most.
const MAX_DRAIN: usize = 1024;

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
pub(super) fn classify(datagram: &[u8], c: &mut Changes, prefixes: &mut Vec<RoutePrefix>) {
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
