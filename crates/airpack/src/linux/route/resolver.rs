//! Next-hop lookups for the packet path that never wait.
//!
//! Owns: a nonblocking NETLINK_ROUTE socket, the requests in flight (by
//! sequence number, each with a deadline) and a bounded cache of answers
//! keyed by (source, destination).
//!
//! A lookup that misses the cache sends RTM_GETROUTE with RTA_DST and RTA_SRC
//! and returns at once; the answer is read when the socket is readable
//! ([`AsyncResolver::poll`]). The kernel answers RTM_GETROUTE inside send(2)
//! without the RTNL lock, so [`AsyncResolver::lookup`] polls once right after
//! sending and usually has the answer; correctness never depends on that.
//! Replies are matched by sequence number; requests without a reply by their
//! deadline are dropped ([`AsyncResolver::expire`]); replies to requests whose
//! routes changed meanwhile are not cached but asked again.
//!
//! What a lookup matches of the kernel's own decision for the packet:
//! destination, source (IPv6 source-specific routes, `ip rule from`), and the
//! resolver's fixed fwmark. IPv4 output lookups refuse a source that is not
//! a local address (ENETUNREACH/EINVAL); such a (forwarded) packet is looked
//! up again as input from the loopback (RTA_IIF 1), which needs forwarding
//! on and a loose or no rp_filter on `lo`. Not matched: the packet's own
//! fwmark (the TUN does not carry it; rules for other marks are not seen),
//! its input interface (`ip rule iif`), TOS/DSCP, UID, and the flow hash of
//! multipath routes (ports are not part of the lookup).
//!
//! Must not touch: what a next hop means to the daemon, the packets waiting
//! for an answer (the caller parks them).

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::{
    build_query, messages, netlink_socket, parse_route, NextHop, Query, RoutePrefix,
    LOOPBACK_IFINDEX, NLMSG_ERROR,
};
use crate::linux::{cvt_size, monotonic_micros};

/// Requests in flight at most; a lookup beyond is [`Answer::Unavailable`].
pub const MAX_PENDING: usize = 256;
/// Datagrams one [`AsyncResolver::poll`] reads at most.
const MAX_POLL: usize = 256;
/// Receive buffer asked for the socket (replies queued while the loop works).
const RCVBUF: libc::c_int = 1 << 20;

/// (source, destination) of a lookup; `None`: no source.
pub type Key = (Option<IpAddr>, IpAddr);

/// The state of one lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The kernel's answer: a next hop, or its errno (no route, prohibit, ...).
    Ready(Result<NextHop, i32>),
    /// Asked; the answer comes with a later [`AsyncResolver::poll`] (or the
    /// request expires).
    Pending,
    /// Not asked: too many requests in flight, or the request could not be sent.
    Unavailable,
}

/// Counters of an [`AsyncResolver`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResolverStats {
    /// Requests sent (including IPv4 input fallbacks and re-asks).
    pub requests: u64,
    /// Answers cached.
    pub answers: u64,
    /// Answers found by the poll right after the send.
    pub answered_at_once: u64,
    /// IPv4 lookups repeated as input lookups (the source is not local).
    pub input_fallbacks: u64,
    /// Replies for routes that changed while asked: asked again.
    pub stale_replies: u64,
    /// Requests dropped at their deadline without a reply.
    pub timeouts: u64,
    /// Lookups not asked (too many in flight, or send failed).
    pub unavailable: u64,
    /// Replies lost: the socket's receive buffer overflowed (ENOBUFS).
    pub overruns: u64,
    /// Malformed replies (not cached).
    pub malformed: u64,
    /// Cache entries evicted because a covering route changed.
    pub evicted: u64,
    /// Whole-cache flushes (rule, address, link or nexthop change; lost notifications).
    pub flushes: u64,
    /// Entries evicted to stay within the cache bound.
    pub capacity_evictions: u64,
    /// Longest time one request's send(2) took (µs): the kernel answers
    /// inside it, so this is what a lookup costs the loop.
    pub max_send_us: u64,
}

struct Req {
    key: Key,
    deadline: u64,
    input: bool,
    stale: bool,
}

/// Nonblocking next-hop lookups by (source, destination) with a bounded cache.
#[derive(Debug)]
pub struct AsyncResolver {
    fd: OwnedFd,
    mark: u32,
    seq: u32,
    timeout_us: u64,
    cache: HashMap<Key, Result<NextHop, i32>>,
    capacity: usize,
    pending: HashMap<u32, Req>,
    inflight: HashMap<Key, u32>,
    req: Vec<u8>,
    resp: Vec<u8>,
    stats: ResolverStats,
}

impl std::fmt::Debug for Req {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Req({:?}, {})", self.key, self.deadline)
    }
}

fn transient(errno: i32) -> bool {
    matches!(
        errno,
        libc::EAGAIN | libc::EINTR | libc::ENOBUFS | libc::ENOMEM
    )
}

impl AsyncResolver {
    /// Opens the socket; lookups carry fwmark `mark` (0: none), the cache
    /// holds at most `capacity` answers, requests expire after `timeout_us`.
    pub fn new(mark: u32, capacity: usize, timeout_us: u64) -> io::Result<AsyncResolver> {
        let fd = netlink_socket(true)?;
        // SAFETY: RCVBUF is a c_int living across the call. Failure leaves
        // the default buffer (replies then overflow sooner; counted).
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&RCVBUF as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        let capacity = capacity.max(1);
        Ok(AsyncResolver {
            fd,
            mark,
            seq: 0,
            timeout_us: timeout_us.max(1),
            cache: HashMap::with_capacity(capacity),
            capacity,
            pending: HashMap::with_capacity(MAX_PENDING),
            inflight: HashMap::with_capacity(MAX_PENDING),
            req: Vec::with_capacity(96),
            resp: vec![0u8; 16 * 1024],
            stats: ResolverStats::default(),
        })
    }

    /// The next hop for a packet from `src` to `dst` at time `now` (µs): from
    /// the cache, or asked now (never waits).
    pub fn lookup(&mut self, now: u64, src: Option<IpAddr>, dst: IpAddr) -> Answer {
        let key = (src, dst);
        if let Some(a) = self.state(src, dst) {
            return a;
        }
        if self.pending.len() >= MAX_PENDING || !self.send(key, false, now + self.timeout_us) {
            self.stats.unavailable += 1;
            return Answer::Unavailable;
        }
        self.poll();
        match self.state(src, dst) {
            Some(a @ Answer::Ready(_)) => {
                self.stats.answered_at_once += 1;
                a
            }
            Some(a) => a,
            // Answered but not cacheable (malformed, transient error).
            None => Answer::Unavailable,
        }
    }

    /// What is known about (src, dst) without asking: `None` when nothing is
    /// cached nor in flight (never asked, expired, or evicted).
    pub fn state(&self, src: Option<IpAddr>, dst: IpAddr) -> Option<Answer> {
        let key = (src, dst);
        if let Some(r) = self.cache.get(&key) {
            return Some(Answer::Ready(*r));
        }
        self.inflight.contains_key(&key).then_some(Answer::Pending)
    }

    fn send(&mut self, key: Key, input: bool, deadline: u64) -> bool {
        self.seq = self.seq.wrapping_add(1).max(1);
        let seq = self.seq;
        let q = Query {
            dst: key.1,
            src: key.0,
            mark: self.mark,
            iif: if input { LOOPBACK_IFINDEX } else { 0 },
        };
        build_query(&mut self.req, seq, &q);
        let t0 = monotonic_micros();
        // SAFETY: req is a valid readable buffer of req.len() bytes.
        let r = cvt_size(unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                self.req.as_ptr().cast(),
                self.req.len(),
                libc::MSG_DONTWAIT,
            )
        });
        let took = monotonic_micros().saturating_sub(t0);
        self.stats.max_send_us = self.stats.max_send_us.max(took);
        if !matches!(r, Ok(n) if n == self.req.len()) {
            return false;
        }
        self.stats.requests += 1;
        self.pending.insert(
            seq,
            Req {
                key,
                deadline,
                input,
                stale: false,
            },
        );
        self.inflight.insert(key, seq);
        true
    }

    /// Reads every reply available now (never blocks; bounded per call) and
    /// caches the answers; returns how many lookups completed (answered, or
    /// dropped as unanswerable).
    pub fn poll(&mut self) -> usize {
        let mut done = 0;
        for _ in 0..MAX_POLL {
            // SAFETY: resp is a writable buffer of resp.len() bytes.
            let r = cvt_size(unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.resp.as_mut_ptr().cast(),
                    self.resp.len(),
                    libc::MSG_DONTWAIT,
                )
            });
            let n = match r {
                Ok(n) => n.min(self.resp.len()),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // Replies were lost; their requests expire.
                    self.stats.overruns += 1;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let resp = std::mem::take(&mut self.resp);
            for msg in messages(&resp[..n]) {
                let Ok((ty, _flags, seq, payload)) = msg else {
                    self.stats.malformed += 1;
                    break;
                };
                if let Some(req) = self.pending.remove(&seq) {
                    done += self.complete(req, seq, ty, payload);
                }
            }
            self.resp = resp;
        }
        done
    }

    /// Handles the reply to `req`; returns 1 when the lookup is finished.
    fn complete(&mut self, req: Req, seq: u32, ty: u16, payload: &[u8]) -> usize {
        if self.inflight.get(&req.key) == Some(&seq) {
            self.inflight.remove(&req.key);
        }
        let result = if ty == NLMSG_ERROR {
            match payload.get(..4) {
                Some(b) => {
                    let code = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                    if code < 0 {
                        Err(Some(-code))
                    } else {
                        Err(None)
                    }
                }
                None => Err(None),
            }
        } else if ty == libc::RTM_NEWROUTE {
            parse_route(payload, req.key.1).map_err(|e| e.raw_os_error())
        } else {
            Err(None)
        };
        let result = match result {
            Ok(nh) => Ok(nh),
            Err(Some(errno)) if !transient(errno) => Err(errno),
            Err(e) => {
                // Not cached: the packets waiting go out unchanged, the
                // next packet asks again.
                if e.is_none() {
                    self.stats.malformed += 1;
                }
                return 1;
            }
        };
        if req.stale {
            // The routes changed after the kernel answered: ask again (the
            // packets waiting keep the first deadline).
            self.stats.stale_replies += 1;
            return usize::from(!self.send(req.key, req.input, req.deadline));
        }
        if let (Err(libc::ENETUNREACH | libc::EINVAL), false, Some(_), IpAddr::V4(_)) =
            (result, req.input, req.key.0, req.key.1)
        {
            // IPv4 output lookups need a local source; a forwarded packet's
            // was routed as input.
            self.stats.input_fallbacks += 1;
            return usize::from(!self.send(req.key, true, req.deadline));
        }
        if self.cache.len() >= self.capacity {
            if let Some(k) = self.cache.keys().next().copied() {
                self.cache.remove(&k);
                self.stats.capacity_evictions += 1;
            }
        }
        self.cache.insert(req.key, result);
        self.stats.answers += 1;
        1
    }

    /// Drops requests whose deadline passed; returns how many.
    pub fn expire(&mut self, now: u64) -> usize {
        if self.next_deadline().map_or(true, |d| d > now) {
            return 0;
        }
        let before = self.pending.len();
        let inflight = &mut self.inflight;
        self.pending.retain(|seq, r| {
            let keep = r.deadline > now;
            if !keep && inflight.get(&r.key) == Some(seq) {
                inflight.remove(&r.key);
            }
            keep
        });
        let n = before - self.pending.len();
        self.stats.timeouts += n as u64;
        n
    }

    /// The earliest deadline of a request in flight.
    pub fn next_deadline(&self) -> Option<u64> {
        self.pending.values().map(|r| r.deadline).min()
    }

    /// Requests in flight.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Forgets the answers a change of these routes can affect (and marks
    /// such requests in flight so their replies are asked again); returns
    /// how many answers were forgotten.
    pub fn evict(&mut self, prefixes: &[RoutePrefix]) -> usize {
        let covered = |k: &Key| prefixes.iter().any(|p| p.covers(k.0, k.1));
        let before = self.cache.len();
        self.cache.retain(|k, _| !covered(k));
        for r in self.pending.values_mut() {
            if covered(&r.key) {
                r.stale = true;
            }
        }
        let n = before - self.cache.len();
        self.stats.evicted += n as u64;
        n
    }

    /// Forgets every answer (and asks again for those in flight).
    pub fn invalidate(&mut self) {
        self.cache.clear();
        for r in self.pending.values_mut() {
            r.stale = true;
        }
        self.stats.flushes += 1;
    }

    /// Number of cached answers.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// The counters.
    pub fn stats(&self) -> ResolverStats {
        self.stats
    }
}

impl AsRawFd for AsyncResolver {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn nh(a: &str) -> NextHop {
        NextHop {
            addr: a.parse().unwrap(),
            oif: 2,
            gateway: true,
            local: false,
        }
    }

    #[test]
    fn loopback_lookup_completes_without_waiting() {
        // Works unprivileged in any namespace: 127.0.0.1 is local.
        let mut r = AsyncResolver::new(0, 16, 1_000_000).unwrap();
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut a = r.lookup(0, None, lo);
        for _ in 0..1000 {
            if a != Answer::Pending {
                break;
            }
            r.poll();
            a = r.state(None, lo).unwrap_or(Answer::Unavailable);
        }
        match a {
            Answer::Ready(Ok(nh)) => assert!(nh.local, "{nh:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.pending(), 0);
        assert_eq!(r.cached(), 1);
        // A second lookup is a cache hit: no request.
        let sent = r.stats().requests;
        assert!(matches!(r.lookup(1, None, lo), Answer::Ready(Ok(_))));
        assert_eq!(r.stats().requests, sent);
    }

    #[test]
    fn eviction_is_per_prefix_and_source_aware() {
        let mut r = AsyncResolver::new(0, 8, 1_000).unwrap();
        let s1: IpAddr = "fd07::1".parse().unwrap();
        let s2: IpAddr = "fd08::1".parse().unwrap();
        let d: IpAddr = "fd09::5".parse().unwrap();
        let other: IpAddr = "fd0a::5".parse().unwrap();
        for k in [(Some(s1), d), (Some(s2), d), (None, other)] {
            r.cache.insert(k, Ok(nh("fd00::2")));
        }
        r.cache.insert(
            (None, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
            Err(libc::ENETUNREACH),
        );
        // A source-specific route for fd09::/64 from fd07::/64: only s1's entry.
        let p = RoutePrefix {
            dst: "fd09::".parse().unwrap(),
            dst_len: 64,
            src: Some(("fd07::".parse().unwrap(), 64)),
        };
        assert_eq!(r.evict(&[p]), 1);
        assert!(r.state(Some(s1), d).is_none());
        assert!(r.state(Some(s2), d).is_some());
        // A plain route for fd09::/64 covers every source.
        let p = RoutePrefix { src: None, ..p };
        assert_eq!(r.evict(&[p]), 1);
        // An IPv6 default route covers every IPv6 entry, no IPv4 one.
        let p = RoutePrefix {
            dst: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            dst_len: 0,
            src: None,
        };
        assert_eq!(r.evict(&[p]), 1);
        assert_eq!(r.cached(), 1);
        r.invalidate();
        assert_eq!(r.cached(), 0);
        assert_eq!(r.stats().evicted, 3);
    }

    #[test]
    fn cache_is_bounded_and_requests_expire() {
        let mut r = AsyncResolver::new(0, 4, 100).unwrap();
        for i in 1..=20u8 {
            let a = r.lookup(0, None, IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)));
            assert!(matches!(a, Answer::Ready(_) | Answer::Pending), "{a:?}");
            r.poll();
            assert!(r.cached() <= 4);
        }
        // A request in flight with no reply (built by hand) expires.
        r.pending.insert(
            7,
            Req {
                key: (None, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))),
                deadline: 50,
                input: false,
                stale: false,
            },
        );
        r.inflight
            .insert((None, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))), 7);
        assert_eq!(r.next_deadline(), Some(50));
        assert_eq!(r.expire(49), 0);
        assert_eq!(r.expire(50), 1);
        assert!(r
            .state(None, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))
            .is_none());
        assert_eq!(r.next_deadline(), None);
    }
}
