//! Packets waiting for their next hop.
//!
//! A TUN packet whose (source, destination) misses the route cache is parked
//! while [`AsyncResolver`](crate::linux::route::AsyncResolver) asks the
//! kernel, and released in arrival order as soon as the answer is read from
//! the netlink socket (on the same loop, usually within the same wakeup: the
//! kernel answers inside send). Parking rather than sending the packet
//! unchanged meanwhile keeps a flow's packets in order: a packet sent
//! unchanged would overtake the ones still held in its peer's queue.
//!
//! Bounds: at most [`SLOTS`] packets of at most [`SLOT_LEN`] bytes wait, in
//! one buffer allocated at start; a request expires after
//! [`LOOKUP_TIMEOUT_US`]. A packet that cannot wait (park full, too big, too
//! many requests in flight) or whose lookup expired goes out unchanged (the
//! kernel routes it as if airpack were not there) and is counted by reason.
//! Nothing parked is lost: shutdown releases the park like a timeout.
//!
//! Must not touch: the lookups themselves, the engine's queues.

use super::{Daemon, Dest};
use crate::linux::monotonic_micros;
use crate::linux::route::Answer;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::IpAddr;

/// Packets parked at most.
pub(super) const SLOTS: usize = 256;
/// Largest packet that can be parked (voice packets are far smaller).
pub(super) const SLOT_LEN: usize = 2048;
/// A lookup without an answer after this long is dropped; its packets go
/// out unchanged (µs). Well under a voice hold time's 1 ms budget.
pub(super) const LOOKUP_TIMEOUT_US: u64 = 500;

struct Held {
    slot: u16,
    len: u16,
    src: Option<IpAddr>,
    dst: IpAddr,
    since: u64,
}

/// Counters of the park (all packets, since start).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ParkCounters {
    /// Packets parked.
    pub parked: u64,
    /// Parked packets released with the kernel's answer.
    pub released: u64,
    /// Parked packets sent unchanged: their lookup expired or was not answerable.
    pub expired_unchanged: u64,
    /// Packets sent unchanged because the park was full.
    pub full_unchanged: u64,
    /// Packets sent unchanged because they were longer than a slot.
    pub too_big_unchanged: u64,
    /// Packets sent unchanged because the lookup could not be asked.
    pub unavailable_unchanged: u64,
    /// Longest time a packet waited in the park (µs).
    pub max_wait_us: u64,
    /// Sum of the waits (µs).
    pub total_wait_us: u64,
}

/// The parked packets.
pub(super) struct Park {
    buf: Vec<u8>,
    queue: VecDeque<Held>,
    free: Vec<u16>,
    pub(super) counters: ParkCounters,
}

impl Park {
    pub(super) fn new() -> Park {
        Park {
            buf: vec![0; SLOTS * SLOT_LEN],
            queue: VecDeque::with_capacity(SLOTS),
            free: (0..SLOTS as u16).rev().collect(),
            counters: ParkCounters::default(),
        }
    }

    /// Packets waiting.
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn json(&self) -> Value {
        let c = &self.counters;
        json!({
            "waiting": self.queue.len(),
            "parked": c.parked,
            "released": c.released,
            "max_wait_us": c.max_wait_us,
            "total_wait_us": c.total_wait_us,
            "unchanged": {
                "lookup_expired": c.expired_unchanged,
                "park_full": c.full_unchanged,
                "too_big": c.too_big_unchanged,
                "lookup_unavailable": c.unavailable_unchanged,
            },
        })
    }
}

/// The source to look up with (none for an unspecified source).
pub(super) fn lookup_source(src: IpAddr) -> Option<IpAddr> {
    (!src.is_unspecified()).then_some(src)
}

impl Daemon {
    /// Parks `tun_buf[..n]` (from `src` to `dst`) until its lookup completes;
    /// sends it unchanged if it cannot wait.
    pub(super) fn park(&mut self, now: u64, src: IpAddr, dst: IpAddr, n: usize) {
        let slot = match (n <= SLOT_LEN, self.park.free.pop()) {
            (true, Some(s)) => s,
            (fits, s) => {
                if let Some(s) = s {
                    self.park.free.push(s);
                }
                if fits {
                    self.park.counters.full_unchanged += 1;
                } else {
                    self.park.counters.too_big_unchanged += 1;
                }
                let buf = std::mem::take(&mut self.tun_buf);
                self.deliver(now, dst, Dest::Unchanged, &buf[..n]);
                self.tun_buf = buf;
                return;
            }
        };
        let off = usize::from(slot) * SLOT_LEN;
        self.park.buf[off..off + n].copy_from_slice(&self.tun_buf[..n]);
        self.park.queue.push_back(Held {
            slot,
            len: n as u16,
            src: lookup_source(src),
            dst,
            since: now,
        });
        self.park.counters.parked += 1;
    }

    /// The resolver's socket is readable, or a request may have expired:
    /// reads the answers and releases the packets they were waiting for.
    pub(super) fn on_lookups(&mut self, now: u64) {
        self.lookups.poll();
        self.lookups.expire(now);
        self.release(now, false);
    }

    /// Releases, in arrival order, every parked packet whose lookup finished
    /// (`all`: every packet; those without an answer go out unchanged).
    pub(super) fn release(&mut self, now: u64, all: bool) {
        if self.park.queue.is_empty() {
            return;
        }
        let buf = std::mem::take(&mut self.park.buf);
        let waited_until = monotonic_micros();
        for _ in 0..self.park.queue.len() {
            let Some(h) = self.park.queue.pop_front() else {
                break;
            };
            let dest = match self.lookups.state(h.src, h.dst) {
                Some(Answer::Ready(r)) => {
                    self.park.counters.released += 1;
                    self.resolved(h.dst, r)
                }
                Some(Answer::Pending) if !all => {
                    self.park.queue.push_back(h);
                    continue;
                }
                _ => {
                    self.park.counters.expired_unchanged += 1;
                    Dest::Unchanged
                }
            };
            let wait = waited_until.saturating_sub(h.since);
            let c = &mut self.park.counters;
            c.max_wait_us = c.max_wait_us.max(wait);
            c.total_wait_us += wait;
            let off = usize::from(h.slot) * SLOT_LEN;
            self.deliver(now, h.dst, dest, &buf[off..off + usize::from(h.len)]);
            self.park.free.push(h.slot);
        }
        self.park.buf = buf;
    }
}
