//! The aggregation engine: per-peer queues, triggers, traffic classes,
//! link-busy input, statistics. A sans-IO state machine in the shape of
//! quinn-proto: the driver calls `handle_*` with packets and time, then
//! drains [`Engine::poll_transmit`] and sleeps until [`Engine::poll_timeout`].
//!
//! Owns: queueing policy and accounting. Every packet handed in leaves (in a
//! bundle, alone, or bypassed) or is counted in [`Counters::dropped`].
//!
//! Must not touch: sockets, clocks, threads, routing (the caller names the
//! peer), or byte layouts (that is [`crate::wire`]).
//!
//! ## Driving loop
//! ```text
//! on packet:     engine.handle_packet(now, peer, bytes, mark)
//! on link state: engine.set_link_busy(now, busy)
//!            or: engine.set_medium(now, utilisation_permille, busy)
//! on timer:      engine.handle_timeout(now)
//! after each:    while let Some(t) = engine.poll_transmit(now, &mut buf) { send(&buf[..t.len]) }
//!                arm timer at engine.poll_timeout()
//! on stop:       engine.flush(); drain poll_transmit
//! ```
//!
//! ## Semantics (decisions where the seeds leave room)
//! * A packet enters a peer's queue (bundle or opportunistic class), the
//!   bypass FIFO (bypass class: TCP SYN/FIN/RST, fragments, packets over half
//!   the peer's `max_size`, packets the peer's encoding cannot carry, anything
//!   the rules send there) or is dropped and counted ([`Verdict`]).
//! * A peer's queue may send ([`Reason`]) when: its oldest packet has waited
//!   `hold_time` (Timeout); a bundle of the whole queue, outer overhead
//!   included, reaches `min_size` or reaches/exceeds `max_size`, or the queue
//!   holds `max_packets` (Size); the link is idle and the mode is
//!   [`LinkMode::HoldWhileBusy`] or [`LinkMode::Adaptive`], or the queue
//!   holds an opportunistic packet (Idle); [`Engine::flush`] or [`Engine::remove_peer`] (Flush); the peer
//!   does not accept bundles (NotAccepted, every packet alone at once).
//! * [`LinkMode::Adaptive`] (see [`policy`]): the link counts as busy when
//!   the driver says so or the medium's utilisation (`set_medium`) reaches a
//!   threshold, and a queue's deadline is also bounded by each queued
//!   packet's share of the per-flow delay budget (Timeout).
//! * Opportunistic packets that joined a bundle while the link was busy are
//!   still bounded by the peer's hold time, so a driver that never reports an
//!   idle link cannot strand them.
//! * Service: due peers first (earliest deadline), then the fullest ready
//!   peer; bypass and bundle output alternate. Each transmit takes the longest
//!   prefix of the queue that fits `max_size - outer_overhead` and
//!   `max_packets`; a prefix of one packet leaves as that packet, unchanged.
//! * Queue limits drop the oldest packets; a packet larger than the byte limit
//!   on its own is dropped itself. The bypass FIFO drops the newest when full.
//! * A removed peer's packets leave alone (Flush); its slot counts against
//!   `max_peers` until they have gone. [`DropReason::PeerRemoved`] is never
//!   produced by this engine (nothing is discarded on removal).
//! * Dynamic marking: a mark with both low bits set and a non-zero
//!   `(mark >> 2) & 0xFFFF` sets the peer's `max_size`, before the packet is
//!   classified.
//! * Time: the engine keeps the largest `now` it has been given; a packet's
//!   hold time is measured from that.

pub mod classify;
mod deadlines;
#[cfg(test)]
mod fast_path_tests;
mod fifo;
pub mod policy;
pub mod stats;
mod table;

use classify::Udp4Rules;
pub use classify::{Classifier, Rule, TrafficClass};
pub use policy::AdaptiveHold;
pub use stats::{Counters, DropReason, Histogram, Stats};

use crate::wire::{
    self, ip, Bundle, BundleWriter, DecodeError, Encoding, RxContext, MAX_BUNDLE,
    MAX_PACKETS_PER_BUNDLE,
};
use crate::Micros;
use core::cmp::Reverse;
use core::net::IpAddr;
use deadlines::Deadlines;
use fifo::{ByteFifo, Ring};
use std::collections::BinaryHeap;
use table::PeerTable;

/// Who a queue is for: the next hop (hop-by-hop) or the tunnel endpoint (end-to-end).
pub type PeerKey = IpAddr;

/// When a bundle may be released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LinkMode {
    /// Seed 001: hold until minimum size, maximum size or hold time.
    #[default]
    Fixed,
    /// Seed 004 / seed 000: additionally release as soon as the link is idle,
    /// so at low load nothing waits.
    HoldWhileBusy,
    /// Issue 11: hold only while holding is free or cheap (the medium is
    /// busy, or its utilisation is high), never beyond the hold time nor a
    /// packet's share of a per-flow delay budget. See [`policy`].
    Adaptive(AdaptiveHold),
}

/// Per-peer aggregation parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConfig {
    /// Bundle layout understood by this peer.
    pub encoding: Encoding,
    /// Whether the peer is known to accept bundles. When false every packet for
    /// it leaves unchanged (never blackhole a node without airpack).
    pub accepts_bundles: bool,
    /// Maximum time a `bundle`-class packet waits, from its arrival (µs).
    pub hold_time: Micros,
    /// Send as soon as a bundle would reach this many bytes (outer overhead included).
    pub min_size: usize,
    /// Never send a bundle larger than this, outer overhead included (bytes).
    pub max_size: usize,
    /// Never put more packets than this in one bundle.
    pub max_packets: usize,
    /// Bytes the transport adds in front of the bundle payload (20 for raw IPv4,
    /// 28 for UDP over IPv4, 40/48 for IPv6); counted against `max_size`.
    pub outer_overhead: usize,
    /// Queue limit in bytes; beyond it the oldest packet is dropped.
    pub queue_limit_bytes: usize,
    /// Queue limit in packets; beyond it the oldest packet is dropped.
    pub queue_limit_packets: usize,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            encoding: Encoding::Native,
            accepts_bundles: true,
            hold_time: 5_000,
            min_size: 1_400,
            max_size: 1_500,
            max_packets: 64,
            outer_overhead: 20,
            queue_limit_bytes: 32 * 1024,
            queue_limit_packets: 256,
        }
    }
}

/// Engine-wide configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Bound on the peer table.
    pub max_peers: usize,
    /// Parameters for peers created on demand by [`Engine::handle_packet`].
    pub peer_defaults: PeerConfig,
    /// Fixed hold time or hold-while-busy.
    pub link_mode: LinkMode,
    /// Traffic classifier.
    pub classifier: Classifier,
    /// Seed 001's dynamic marking: when true and a packet's `mark` has the
    /// aggregation bits, the peer's max size becomes `(mark >> 2) & 0xFFFF`.
    pub dynamic_marking: bool,
    /// Bound on the bypass FIFO, in packets.
    pub bypass_queue_limit: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_peers: 1024,
            peer_defaults: PeerConfig::default(),
            link_mode: LinkMode::Fixed,
            classifier: Classifier::default(),
            dynamic_marking: false,
            bypass_queue_limit: 256,
        }
    }
}

/// What [`Engine::poll_transmit`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransmitKind {
    /// A bundle payload (format header + packets) to send with the peer's
    /// encoding's protocol number; `packets` inner packets.
    Bundle {
        /// Inner packets in the bundle.
        packets: u16,
        /// Encoding used.
        encoding: Encoding,
    },
    /// One packet of the bundle or opportunistic class, unchanged (its time was
    /// up alone, or the peer does not accept bundles).
    Single,
    /// One bypass-class packet, unchanged.
    Bypass,
}

/// One datagram ready to leave: `buf[..len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Next hop or tunnel endpoint.
    pub peer: PeerKey,
    /// Bytes written at the start of the caller's buffer.
    pub len: usize,
    /// Bundle or unchanged packet.
    pub kind: TransmitKind,
    /// DSCP for the outer header: the highest DSCP of the packets inside, so
    /// voice is never demoted to best effort.
    pub dscp: u8,
    /// ECN field for the outer header of a bundle (RFC 6040, applied to a
    /// bundle as a whole): ECT(0) when every packet inside is ECN-capable
    /// (ECT(0), ECT(1) or CE), else Not-ECT, so a CE mark on the way can
    /// always be passed on to every inner packet. 0 for an unchanged packet
    /// (it leaves with its own header).
    pub ecn: u8,
    /// Why this datagram left now.
    pub reason: Reason,
}

/// Why a [`Transmit`] left when it did (each trigger is also a counter in [`Counters`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The oldest queued packet reached its hold time (`sent_on_timeout`).
    Timeout,
    /// Minimum size, maximum size or maximum packet count reached (`sent_on_size`).
    Size,
    /// The link is idle: hold-while-busy release, or an opportunistic packet (`sent_on_idle`).
    Idle,
    /// [`Engine::flush`] or [`Engine::remove_peer`] (`sent_on_flush`).
    Flush,
    /// The peer does not accept bundles, so its packets leave at once, unchanged.
    NotAccepted,
    /// A bypass-class packet.
    Bypass,
}

/// Result of [`Engine::handle_packet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Queued (possibly ready to transmit already).
    Queued(TrafficClass),
    /// Dropped and counted.
    Dropped(DropReason),
}

// ---------------------------------------------------------------------------
// Internal state
// ---------------------------------------------------------------------------

/// Metadata of one queued packet. Its bytes are in the peer's [`ByteFifo`],
/// back to back in queue order, each packet behind the separator it gets as a
/// later (not first) packet of a bundle in the peer's encoding: `cost` bytes,
/// the packet being the last `len` of them.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    arrival: Micros,
    len: u32,
    /// Bytes this packet adds to a bundle when it is not the first (separator + packet).
    cost: u32,
    /// The packet's TOS / traffic class byte: DSCP << 2 | ECN.
    tos: u8,
    opportunistic: bool,
    /// The peer's current encoding can carry the packet (checked at arrival
    /// from the parsed headers, and again if the encoding changes).
    carry: bool,
}

/// Sums over records removed from a queue (see `Slot::forget_front`).
#[derive(Clone, Copy, Debug, Default)]
struct Removed {
    bytes: usize,
    cost: usize,
    opportunistic: usize,
    nocarry: usize,
    /// Records whose ECN field is Not-ECT.
    not_ect: usize,
    /// Sum of arrival times, modulo 2^64.
    arrivals: u64,
}

impl Removed {
    #[inline(always)]
    fn add(&mut self, e: &Entry) {
        self.bytes += e.len as usize;
        self.cost += e.cost as usize;
        self.opportunistic += e.opportunistic as usize;
        self.nocarry += !e.carry as usize;
        self.not_ect += (e.tos & 3 == 0) as usize;
        self.arrivals = self.arrivals.wrapping_add(e.arrival);
    }
}

/// One bypass packet (bytes in the bypass [`ByteFifo`]).
#[derive(Clone, Copy, Debug, Default)]
struct BypassEntry {
    len: u32,
    /// Peer slot and its generation, to charge the peer's statistics (if it still exists).
    slot: u32,
    gen: u32,
    dscp: u8,
}

/// A peer's queue, configuration and statistics.
#[derive(Debug)]
struct Slot {
    key: PeerKey,
    /// In the peer table (false: free, or draining after `remove_peer`).
    live: bool,
    /// Removed by `remove_peer` with packets still queued: they leave alone, then the slot is freed.
    draining: bool,
    /// Configured with `set_peer` (keeps its config across `reconfigure`).
    explicit: bool,
    /// Bumped when the slot is freed, so bypass entries stop charging its statistics.
    gen: u32,
    cfg: PeerConfig,
    q: Ring<Entry>,
    bytes: ByteFifo,
    queued_bytes: usize,
    /// Sum of `Entry::cost` over `q`.
    cost_sum: usize,
    /// Format header plus what the first packet costs beyond `Entry::cost`
    /// (kept up to date by `Engine::refresh` whenever the front changes).
    fixed_cost: usize,
    /// `cfg.max_packets` clamped to what a bundle may hold (kept by `Slot::sync`).
    max_packets: usize,
    /// `size_ready`'s byte condition is `cost_sum >= ready_cost` (kept by `Slot::sync`).
    ready_cost: usize,
    opportunistic: usize,
    /// Records in `q` whose `carry` is false.
    nocarry: usize,
    /// Records in `q` whose ECN field is Not-ECT (a bundle's outer header
    /// is ECT(0) only when none is).
    not_ect: usize,
    /// Sum of `Entry::arrival` over `q`, modulo 2^64 (differences of such
    /// sums are exact when the true difference fits in 64 bits).
    arrival_sum: u64,
    /// The highest `Entry::tos` in `q` when `tos_exact`; otherwise at
    /// least that (packets have left since the queue was last empty). Its
    /// DSCP (`>> 2`) is the highest DSCP: the TOS orders by DSCP first.
    tos_max: u8,
    tos_exact: bool,
    /// Packets at the front of `q` that `flush`/`remove_peer` made ready.
    flush_pending: usize,
    /// Generation of the one valid deadline-heap entry.
    dl_gen: u32,
    /// Generation of the one valid ready-heap entry.
    rd_gen: u32,
    in_ready: bool,
    in_wake: bool,
    /// `!in_ready && !draining && flush_pending == 0 && cfg.accepts_bundles
    /// && opportunistic == 0` (kept by `Slot::sync_calm`): with an idle link
    /// in fixed mode, a push can only make the queue ready by its size.
    calm: bool,
    /// [`Engine::handle_packet`]'s shortest path (a short packet pushed in
    /// the native encoding that changes nothing but the queue) applies when
    /// `q.len() - 1 < fast_len` (wrapping: the queue is not empty) and
    /// `cost_sum + cost < fast_cost`. `fast_len` is zero unless the queue is
    /// `calm` in the native encoding; see `Slot::sync_calm` and `Slot::sync`.
    fast_len: usize,
    fast_cost: usize,
    /// [`LinkMode::Adaptive`]: no later than the earliest time a queued
    /// packet's delay-budget share runs out (`Micros::MAX` in other modes).
    /// Set when a packet joins (`Engine::note_budget`); after a partial send
    /// it may be earlier than needed, which only releases early.
    budget_due: Micros,
    stats: Stats,
}

impl Slot {
    fn new(key: PeerKey, cfg: PeerConfig, explicit: bool) -> Self {
        Slot {
            key,
            live: true,
            draining: false,
            explicit,
            gen: 0,
            cfg,
            q: Ring::default(),
            bytes: ByteFifo::default(),
            queued_bytes: 0,
            cost_sum: 0,
            fixed_cost: 0,
            max_packets: 0,
            ready_cost: 0,
            opportunistic: 0,
            nocarry: 0,
            not_ect: 0,
            arrival_sum: 0,
            tos_max: 0,
            tos_exact: false,
            flush_pending: 0,
            dl_gen: 0,
            rd_gen: 0,
            in_ready: false,
            in_wake: false,
            calm: false,
            fast_len: 0,
            fast_cost: 0,
            budget_due: Micros::MAX,
            stats: Stats::default(),
        }
        .synced()
    }

    fn synced(mut self) -> Self {
        self.sync();
        self
    }

    /// Recomputes the values derived from `cfg` and `fixed_cost`; called
    /// whenever either changes.
    fn sync(&mut self) {
        self.max_packets = self.cfg.max_packets.clamp(1, MAX_PACKETS_PER_BUNDLE);
        // wire_estimate() >= min(min_size, max_size), with the cost sum alone.
        self.ready_cost = self
            .cfg
            .min_size
            .min(self.cfg.max_size)
            .saturating_sub(self.cfg.outer_overhead.saturating_add(self.fixed_cost));
        // Below the readiness threshold and (conservatively: a packet's cost
        // is at least its length) within the byte limit after the push.
        self.fast_cost = self
            .ready_cost
            .min(self.cfg.queue_limit_bytes.saturating_add(1));
        self.sync_calm();
    }

    /// Recomputes `calm` and `fast_len`; called whenever one of their inputs changes.
    #[inline]
    fn sync_calm(&mut self) {
        self.calm = !self.in_ready
            && !self.draining
            && self.flush_pending == 0
            && self.cfg.accepts_bundles
            && self.opportunistic == 0;
        // With `n = q.len()` before the push: `1 <= n` (the front stays),
        // `n + 1 < max_packets` (not ready by count after it) and
        // `n < queue_limit_packets` (room for it), i.e. `n - 1 < fast_len`.
        self.fast_len = if self.calm && self.cfg.encoding == Encoding::Native {
            (self.max_packets.saturating_sub(2)).min(self.cfg.queue_limit_packets.saturating_sub(1))
        } else {
            0
        };
    }

    /// Clears `calm` (and with it `fast_len`).
    #[inline]
    fn clear_calm(&mut self) {
        self.calm = false;
        self.fast_len = 0;
    }

    /// Replaces the configuration.
    fn set_cfg(&mut self, cfg: PeerConfig) {
        self.cfg = cfg;
        self.sync();
    }

    /// Changes the maximum bundle size.
    fn set_max_size(&mut self, max_size: usize) {
        self.cfg.max_size = max_size;
        self.sync();
    }

    /// Appends a packet (behind its later-packet separator, ready to be
    /// copied into a bundle) and its record; no limits, no readiness.
    #[inline(always)]
    fn push(&mut self, now: Micros, packet: &[u8], tos: u8, opportunistic: bool, carry: bool) {
        let len = packet.len();
        if self.q.is_empty() {
            self.tos_max = tos;
            self.tos_exact = true;
        } else {
            self.tos_max = self.tos_max.max(tos);
        }
        let (sep, k) = match self.cfg.encoding {
            // The usual voice case, without the general separator writer.
            Encoding::Native if len < 0x80 => (len as u32, 1),
            enc => {
                let (sep, k) = enc.later_separator(packet);
                (u32::from_le_bytes(sep), k)
            }
        };
        self.append(now, packet, tos, (sep, k), opportunistic, carry);
    }

    /// [`Slot::push`] of a packet shorter than 128 bytes in the native
    /// encoding (one-byte separator), bundle class, that an IPv4 packet is,
    /// onto a non-empty queue: the shortest path, see `fast_len`.
    #[inline(always)]
    fn push_native_short(&mut self, now: Micros, packet: &[u8], tos: u8) {
        debug_assert!(!self.q.is_empty() && packet.len() < 0x80);
        debug_assert_eq!(self.cfg.encoding, Encoding::Native);
        // (A branch: the TOS of a voice flow rarely changes.)
        if tos > self.tos_max {
            self.tos_max = tos;
        }
        self.append(now, packet, tos, (packet.len() as u32, 1), false, true);
    }

    /// The part of a push after the TOS maximum: the packet behind its separator
    /// (`sep`: the separator's bytes as a little-endian word, and its
    /// length), its record, and the queue aggregates.
    #[inline(always)]
    fn append(
        &mut self,
        now: Micros,
        packet: &[u8],
        tos: u8,
        (sep, k): (u32, usize),
        opportunistic: bool,
        carry: bool,
    ) {
        let len = packet.len();
        let c = k + len;
        self.bytes.push_prefixed_word(sep, k, packet);
        self.q.push_back(Entry {
            arrival: now,
            len: len as u32,
            cost: c as u32,
            tos,
            opportunistic,
            carry,
        });
        self.queued_bytes += len;
        self.cost_sum += c;
        if opportunistic {
            self.opportunistic += 1;
            self.clear_calm();
        }
        self.nocarry += !carry as usize;
        self.not_ect += (tos & 3 == 0) as usize;
        self.arrival_sum = self.arrival_sum.wrapping_add(now);
        debug_assert!(self.aggregates_hold());
    }

    /// Takes the aggregates of the `n` records just removed from the front
    /// of `q` out of the queue's: their lengths, costs, opportunistic and
    /// non-carriable counts and arrival times summed.
    #[inline(always)]
    fn forget_front(&mut self, n: usize, removed: Removed) {
        self.queued_bytes -= removed.bytes;
        self.cost_sum -= removed.cost;
        self.opportunistic -= removed.opportunistic;
        self.nocarry -= removed.nocarry;
        self.not_ect -= removed.not_ect;
        self.arrival_sum = self.arrival_sum.wrapping_sub(removed.arrivals);
        self.flush_pending = self.flush_pending.saturating_sub(n);
        self.sync_calm();
        // The highest TOS may have left; it is exact again once the queue
        // has been empty.
        self.tos_exact &= self.q.is_empty();
        debug_assert!(self.aggregates_hold());
    }

    /// Every aggregate kept over `q` equals its sum over the records (tests).
    fn aggregates_hold(&self) -> bool {
        let mut r = Removed::default();
        let mut tos = 0;
        for e in self.q.iter() {
            r.add(e);
            tos = tos.max(e.tos);
        }
        (
            r.bytes,
            r.cost,
            r.opportunistic,
            r.nocarry,
            r.not_ect,
            r.arrivals,
        ) == (
            self.queued_bytes,
            self.cost_sum,
            self.opportunistic,
            self.nocarry,
            self.not_ect,
            self.arrival_sum,
        ) && (self.q.is_empty()
            || (self.tos_max >= tos && (!self.tos_exact || self.tos_max == tos)))
            && self.calm
                == (!self.in_ready
                    && !self.draining
                    && self.flush_pending == 0
                    && self.cfg.accepts_bundles
                    && self.opportunistic == 0)
            && (self.fast_len == 0 || (self.calm && self.cfg.encoding == Encoding::Native))
            && self.fast_len + 2 <= self.max_packets.max(2)
            && self.fast_len < self.cfg.queue_limit_packets.max(1)
            && self.fast_cost <= self.ready_cost
            && self.fast_cost <= self.cfg.queue_limit_bytes.saturating_add(1)
    }

    /// After a push to this queue with its front unchanged: whether
    /// `Engine::refresh` has anything to do, i.e. `in_ready || link_busy ||
    /// ready_reason(..).is_some()` with `q` not empty. Its common case, in
    /// line: a calm queue on an idle link in fixed mode that has not reached
    /// its size.
    #[inline(always)]
    fn refresh_after_push(&self, calm_link: bool, link_busy: bool, mode: LinkMode) -> bool {
        debug_assert_eq!(calm_link, !link_busy && mode == LinkMode::Fixed);
        let refresh = !(self.calm && calm_link) || self.size_ready();
        debug_assert_eq!(
            refresh,
            self.in_ready || link_busy || self.ready_reason(link_busy, mode).is_some()
        );
        refresh
    }

    /// Payload + outer overhead of a bundle holding the whole queue.
    #[inline]
    fn wire_estimate(&self) -> usize {
        self.cfg.outer_overhead + self.fixed_cost + self.cost_sum
    }

    fn update_fixed_cost(&mut self) {
        let enc = self.cfg.encoding;
        let first_extra = match self.q.front() {
            Some(e) => cost(enc, e.len as usize, true).saturating_sub(e.cost as usize),
            None => 0,
        };
        let fixed_cost = header_len(enc) + first_extra;
        // (Unchanged in the native and kau encodings, whose first packet
        // costs what a later one does: nothing to recompute then.)
        if fixed_cost != self.fixed_cost {
            self.fixed_cost = fixed_cost;
            self.sync();
        }
    }

    /// Minimum size, maximum size or packet count reached.
    #[inline]
    fn size_ready(&self) -> bool {
        let ready = self.q.len() >= self.max_packets || self.cost_sum >= self.ready_cost;
        debug_assert_eq!(ready, {
            let est = self.wire_estimate();
            // A bundle exactly at the maximum is full: nothing else can join it.
            self.q.len() >= self.cfg.max_packets.clamp(1, MAX_PACKETS_PER_BUNDLE)
                || est >= self.cfg.min_size
                || est >= self.cfg.max_size
        });
        ready
    }

    /// Why this queue may send now, apart from its hold time (the deadline heap's job).
    #[inline]
    fn ready_reason(&self, link_busy: bool, mode: LinkMode) -> Option<Reason> {
        if self.q.is_empty() {
            return None;
        }
        if self.draining || self.flush_pending > 0 {
            return Some(Reason::Flush);
        }
        if !self.cfg.accepts_bundles {
            return Some(Reason::NotAccepted);
        }
        if self.size_ready() {
            return Some(Reason::Size);
        }
        if !link_busy && (mode != LinkMode::Fixed || self.opportunistic > 0) {
            return Some(Reason::Idle);
        }
        None
    }

    fn deadline(&self) -> Option<Micros> {
        self.q.front().map(|e| {
            e.arrival
                .saturating_add(self.cfg.hold_time)
                .min(self.budget_due)
        })
    }
}

/// Hold times of consecutive packets of one bundle, recorded per run of equal
/// histogram bucket (values need not be ordered; a value outside the current
/// bucket ends the run and starts a new one).
struct HoldRun {
    bucket: usize,
    /// The current bucket holds the values `lo..=hi`.
    lo: u64,
    hi: u64,
    count: u64,
    sum: u64,
}

impl HoldRun {
    #[inline]
    fn new(h: &Histogram, first: u64) -> Self {
        let mut r = HoldRun {
            bucket: 0,
            lo: 0,
            hi: 0,
            count: 0,
            sum: 0,
        };
        r.enter(h, first);
        r
    }
    /// Makes the bucket of `value` the current one.
    #[inline]
    fn enter(&mut self, h: &Histogram, value: u64) {
        let b = h.bucket(value);
        self.bucket = b;
        self.lo = match b.checked_sub(1) {
            Some(p) => h.bounds[p].saturating_add(1),
            None => 0,
        };
        self.hi = h.bounds.get(b).copied().unwrap_or(u64::MAX);
    }
    #[inline(always)]
    fn add(&mut self, h: &mut Histogram, hold: u64) {
        if hold < self.lo || hold > self.hi {
            self.change(h, hold);
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(hold);
    }
    #[inline(never)]
    fn change(&mut self, h: &mut Histogram, hold: u64) {
        self.finish(h);
        self.enter(h, hold);
    }
    #[inline]
    fn finish(&mut self, h: &mut Histogram) {
        if self.count > 0 {
            h.record_many(self.bucket, self.count, self.sum);
            self.count = 0;
            self.sum = 0;
        }
    }
}

/// Records the hold time (`now` minus arrival) of every packet in `q`, in
/// `h`, given the sum of their arrival times. Arrival times are
/// non-decreasing along a queue, so when the first and the last packet's
/// hold times fall in the same bucket, every one does, and the bucket gets
/// them all at once: their count and the sum of their hold times,
/// `len * now - arrivals` (computed modulo 2^64, exact when no hold time
/// sum can exceed 64 bits; otherwise, as when the buckets differ, the packets
/// are recorded in runs, whose sums saturate).
fn record_holds(q: &Ring<Entry>, now: Micros, arrivals: u64, h: &mut Histogram) {
    let (a, b) = q.as_slices();
    let (Some(first), Some(last)) = (a.first(), b.last().or(a.last())) else {
        return;
    };
    let mut run = HoldRun::new(h, now.saturating_sub(first.arrival));
    let n = q.len() as u64;
    if now >= last.arrival
        && now - last.arrival >= run.lo
        && (now - first.arrival).checked_mul(n).is_some()
    {
        // Every hold time lies between the last's and the first's, so in the run's bucket.
        debug_assert!(a
            .iter()
            .chain(b)
            .all(|e| (run.lo..=run.hi).contains(&(now - e.arrival))));
        run.count = n;
        run.sum = n.wrapping_mul(now).wrapping_sub(arrivals);
    } else {
        for e in a.iter().chain(b) {
            run.add(h, now.saturating_sub(e.arrival));
        }
    }
    run.finish(h);
}

#[inline]
fn header_len(enc: Encoding) -> usize {
    match enc {
        Encoding::Native => wire::native::HEADER_LEN,
        Encoding::Kau => wire::kau::HEADER_LEN,
        Encoding::Simplemux => wire::simplemux::HEADER_LEN,
    }
}

#[inline]
fn cost(enc: Encoding, len: usize, first: bool) -> usize {
    match enc {
        Encoding::Native => wire::native::cost(len, first),
        Encoding::Kau => wire::kau::cost(len, first),
        Encoding::Simplemux => wire::simplemux::cost(len, first),
    }
}

/// Ready-heap entry: fullest first (estimated wire bytes), then lower slot index.
type ReadyItem = (usize, Reverse<u32>, u32);

/// The aggregation state machine. See the module documentation.
///
/// Internals: peers live in a slot vector indexed through a small
/// open-addressing table (`table.rs`: one multiply and usually one key
/// comparison per lookup). Two priority queues with lazy invalidation (a
/// generation per slot) find the next peer to serve: the hold-time deadlines
/// (`deadlines.rs`: one valid entry per non-empty peer; O(1) for deadlines
/// created in order, the usual case, O(log n) otherwise) and a max-heap of
/// ready peers keyed by size (O(log n)). Peers that only wait for the link to
/// become idle sit on a wake list that `set_link_busy(false)` drains. No
/// operation on the packet path scans all peers; [`Engine::stats`] sums the
/// peers' statistics when asked.
///
/// The common voice packet (a known peer, UDP/IPv4, ports-only rules, a calm
/// queue in the native encoding that it neither makes ready nor pushes over a
/// limit) takes a shortest path in [`Engine::handle_packet`]: validate,
/// classify by table, append, count. Every other case takes the general
/// code; tests run both against each other.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: PeerTable,
    deadlines: Deadlines,
    ready: BinaryHeap<ReadyItem>,
    ready_count: usize,
    counts: QueueCounts,
    wake: Vec<u32>,
    bypass: Ring<BypassEntry>,
    bypass_bytes: ByteFifo,
    bypass_turn: bool,
    link_busy: bool,
    /// The driver's busy signal (`set_link_busy`, `set_medium`); `link_busy`
    /// is it or `utilisation_high`.
    medium_busy: bool,
    /// [`LinkMode::Adaptive`] and the last utilisation reported by
    /// `set_medium` reached the mode's threshold.
    utilisation_high: bool,
    /// [`LinkMode::Adaptive`]: smoothed utilisation and per-peer flow sketches.
    adaptive_state: policy::AdaptiveState,
    /// `!link_busy && config.link_mode == LinkMode::Fixed`.
    calm_link: bool,
    /// `poll_transmit` has nothing to send while `now` is before this: 0 when
    /// the ready heap or the bypass FIFO is not empty, else the earliest
    /// deadline (`Micros::MAX` if none). Recomputed by `settle`, zeroed
    /// where the ready heap or the bypass FIFO gains an entry.
    quiet_until: Micros,
    now: Micros,
    /// Statistics of freed peer slots and of events no peer was found for;
    /// [`Engine::stats`] adds those of the slots.
    retired: Stats,
    /// `config.classifier` compiled for the UDP/IPv4 fast path.
    udp4_rules: Udp4Rules,
    /// Unit tests: every packet takes the general path.
    #[cfg(test)]
    general_only: bool,
}

/// Packets, bytes and non-empty queues over all peers (bypass FIFO included
/// in the packets and bytes).
#[derive(Debug, Default)]
struct QueueCounts {
    nonempty: usize,
    packets: usize,
    bytes: usize,
}

/// The common case of [`Engine::enqueue`], on the slot itself (so that a
/// caller holding the slot does not look it up again): queue `packet` on `s`
/// when it stays below both queue limits. `None` when it would exceed one
/// (nothing changed), else whether the front changed (the queue was empty).
#[inline(always)]
fn push_within_limits(
    s: &mut Slot,
    counts: &mut QueueCounts,
    now: Micros,
    packet: &[u8],
    tos: u8,
    opportunistic: bool,
    carry: bool,
) -> Option<bool> {
    let len = packet.len();
    // Below both limits after adding it (which implies it is within the
    // byte limit on its own and the packet limit is not zero).
    if s.q.len() >= s.cfg.queue_limit_packets || s.queued_bytes + len > s.cfg.queue_limit_bytes {
        return None;
    }
    let front_changed = s.q.is_empty();
    counts.nonempty += front_changed as usize;
    s.push(now, packet, tos, opportunistic, carry);
    counts.packets += 1;
    counts.bytes += len;
    Some(front_changed)
}

/// Applies `f` to a peer's counters, or to the retired ones when there is no peer.
#[inline]
fn count(retired: &mut Stats, peer: Option<&mut Stats>, f: impl Fn(&mut Counters)) {
    match peer {
        Some(p) => f(&mut p.counters),
        None => f(&mut retired.counters),
    }
}

impl Engine {
    /// A new engine with no peers.
    pub fn new(config: EngineConfig) -> Self {
        Engine {
            udp4_rules: Udp4Rules::new(&config.classifier),
            calm_link: config.link_mode == LinkMode::Fixed,
            quiet_until: Micros::MAX,
            #[cfg(test)]
            general_only: false,
            config,
            slots: Vec::new(),
            free: Vec::new(),
            index: PeerTable::default(),
            deadlines: Deadlines::default(),
            ready: BinaryHeap::new(),
            ready_count: 0,
            counts: QueueCounts::default(),
            wake: Vec::new(),
            bypass: Ring::default(),
            bypass_bytes: ByteFifo::default(),
            bypass_turn: false,
            link_busy: false,
            medium_busy: false,
            utilisation_high: false,
            adaptive_state: Default::default(),
            now: 0,
            retired: Stats::default(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Replaces the classifier, link mode, defaults and limits without losing
    /// queued packets (configuration reload).
    ///
    /// Peers created on demand take the new `peer_defaults` (their queues are
    /// trimmed to the new limits, oldest first); peers configured with
    /// [`Engine::set_peer`] keep their configuration. A smaller `max_peers`
    /// only refuses new peers until the table is small enough.
    pub fn reconfigure(&mut self, config: EngineConfig) {
        self.udp4_rules = Udp4Rules::new(&config.classifier);
        self.config = config;
        if !self.adaptive() {
            self.leave_adaptive();
        }
        self.calm_link = !self.link_busy && self.config.link_mode == LinkMode::Fixed;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if !s.live {
                continue;
            }
            if !s.explicit {
                let cfg = self.config.peer_defaults.clone();
                self.apply_peer_config(i, cfg);
            } else {
                self.refresh(i, true);
            }
        }
        self.settle();
    }

    /// Creates or updates a peer. Fails only when the table is full.
    ///
    /// Updating keeps the queue: packets are re-costed for a new encoding,
    /// trimmed (oldest first) to new limits, and re-timed for a new hold time.
    pub fn set_peer(&mut self, peer: PeerKey, config: PeerConfig) -> Result<(), DropReason> {
        match self.lookup(peer) {
            Some(i) => {
                self.slots[i].explicit = true;
                self.apply_peer_config(i, config);
            }
            None => {
                self.create_peer(peer, config, true)?;
            }
        }
        self.settle();
        Ok(())
    }

    /// Removes a peer; its queued packets leave unbundled first (they are
    /// returned by later `poll_transmit` calls), never silently lost.
    ///
    /// Until its queue has drained, the removed peer's slot still counts
    /// against `max_peers`; a packet for the same key meanwhile creates a new peer.
    pub fn remove_peer(&mut self, peer: PeerKey) {
        let Some(i) = self.lookup(peer) else { return };
        self.index.remove(&peer);
        let s = &mut self.slots[i];
        s.live = false;
        if s.q.is_empty() {
            self.free_slot(i);
        } else {
            s.draining = true;
            s.flush_pending = s.q.len();
            s.sync_calm();
            self.refresh(i, false);
        }
        self.settle();
    }

    /// Changes a peer's maximum bundle size (link adaptation). Unknown peers are ignored.
    pub fn set_peer_max_size(&mut self, peer: PeerKey, max_size: usize) {
        if let Some(i) = self.lookup(peer) {
            if self.slots[i].cfg.max_size != max_size {
                self.slots[i].set_max_size(max_size);
                self.refresh(i, false);
                self.settle();
            }
        }
    }

    /// The configuration of a peer, if known.
    pub fn peer(&self, peer: PeerKey) -> Option<&PeerConfig> {
        self.index.get(&peer).map(|i| &self.slots[i as usize].cfg)
    }

    /// Hands one outgoing IP packet to the engine. The bytes are copied.
    #[inline]
    pub fn handle_packet(
        &mut self,
        now: Micros,
        peer: PeerKey,
        packet: &[u8],
        mark: u32,
    ) -> Verdict {
        self.advance(now);
        // Fast path, the voice case: a known peer and a valid, unfragmented
        // UDP/IPv4 packet with a 20-byte header (`ip::udp4` says which; those
        // are exactly the packets for which `inspect` gives version 4, UDP, no
        // fragment and both ports), no dynamic-marking mark. It does what the
        // general path does for such a packet (counters, the same
        // classification through the compiled rules, an IPv4 packet every
        // encoding can carry, the same queueing), without building a
        // `PacketInfo`. Anything else takes the general path.
        if let Some(i) = self.index.get(&peer) {
            if let Some(u) = ip::udp4(packet) {
                if !(self.config.dynamic_marking && mark & 3 == 3) && self.fast_path_on() {
                    return self.handle_udp4(i as usize, packet, u, mark);
                }
            }
        }
        self.handle_packet_general(peer, packet, mark)
    }

    /// The fast path of [`Engine::handle_packet`] for slot `i`.
    #[inline(always)]
    fn handle_udp4(&mut self, i: usize, packet: &[u8], u: ip::Udp4, mark: u32) -> Verdict {
        let len = packet.len();
        let s = &mut self.slots[i];
        s.stats.counters.packets_in += 1;
        s.stats.counters.bytes_in += len as u64;
        let class = self.udp4_rules.classify(
            u.tos >> 2,
            u.src_port,
            u.dst_port,
            len,
            mark,
            s.cfg.max_size,
        );
        // The shortest path: a voice packet joining a calm queue that it
        // neither makes ready nor pushes over a limit, on a calm link.
        if class == TrafficClass::Bundle
            && len < 0x80
            && s.q.len().wrapping_sub(1) < s.fast_len
            && s.cost_sum + len + 1 < s.fast_cost
            && self.calm_link
        {
            s.push_native_short(self.now, packet, u.tos);
            self.counts.packets += 1;
            self.counts.bytes += len;
            debug_assert!(!s.refresh_after_push(
                self.calm_link,
                self.link_busy,
                self.config.link_mode
            ));
            return Verdict::Queued(class);
        }
        if class == TrafficClass::Bypass {
            return self.enqueue_bypass(i, packet, u.tos >> 2);
        }
        // `enqueue`, on the slot already at hand. An IPv4 packet that is not
        // a bundle: every encoding carries it.
        let opportunistic = class == TrafficClass::Opportunistic;
        let pushed = push_within_limits(
            s,
            &mut self.counts,
            self.now,
            packet,
            u.tos,
            opportunistic,
            true,
        );
        match pushed {
            Some(front_changed) if matches!(self.config.link_mode, LinkMode::Adaptive(_)) => {
                self.note_budget(i, packet, front_changed);
            }
            Some(false)
                if !s.refresh_after_push(self.calm_link, self.link_busy, self.config.link_mode) => {
            }
            Some(front_changed) => self.refresh_out_of_line(i, front_changed),
            None => {
                return match self.enqueue_over_limit(i, packet, u.tos, opportunistic, true) {
                    Verdict::Queued(_) => Verdict::Queued(class),
                    d => d,
                }
            }
        }
        Verdict::Queued(class)
    }

    /// Whether [`Engine::handle_packet`] may take its fast path (unit tests
    /// compare it with the general path by turning it off).
    #[inline(always)]
    fn fast_path_on(&self) -> bool {
        #[cfg(test)]
        {
            !self.general_only
        }
        #[cfg(not(test))]
        {
            true
        }
    }

    /// [`Engine::handle_packet`] for any packet, after `advance`.
    #[inline(never)]
    fn handle_packet_general(&mut self, peer: PeerKey, packet: &[u8], mark: u32) -> Verdict {
        let len = packet.len();
        let existing = self.lookup(peer);
        if len > MAX_BUNDLE {
            return self.drop_arrival(existing, len, DropReason::TooLarge);
        }
        let info = match ip::inspect(packet) {
            Ok(info) => info,
            Err(_) => return self.drop_arrival(existing, len, DropReason::Malformed),
        };
        let i = match existing {
            Some(i) => i,
            None => match self.create_peer(peer, self.config.peer_defaults.clone(), false) {
                Ok(i) => i,
                Err(reason) => return self.drop_arrival(None, len, reason),
            },
        };
        let c = &mut self.slots[i].stats.counters;
        c.packets_in += 1;
        c.bytes_in += len as u64;
        let mut max_changed = false;
        if self.config.dynamic_marking && mark & 3 == 3 {
            let m = ((mark >> 2) & 0xFFFF) as usize;
            let s = &mut self.slots[i];
            if m != 0 && m != s.cfg.max_size {
                s.set_max_size(m);
                max_changed = true;
            }
        }
        let s = &self.slots[i];
        let mut class = self.config.classifier.classify(&info, mark, s.cfg.max_size);
        let carry = s.cfg.encoding.can_carry_info(&info);
        if class != TrafficClass::Bypass && s.cfg.accepts_bundles && !carry {
            class = TrafficClass::Bypass;
        }
        let verdict = if class == TrafficClass::Bypass {
            self.enqueue_bypass(i, packet, info.dscp)
        } else {
            self.enqueue(
                i,
                packet,
                info.dscp << 2 | ip::ecn_of(packet),
                class == TrafficClass::Opportunistic,
                carry,
            )
        };
        if max_changed
            && !matches!(
                verdict,
                Verdict::Queued(TrafficClass::Bundle | TrafficClass::Opportunistic)
            )
        {
            // The new maximum may have made this peer's queue full.
            self.refresh(i, false);
        }
        // No `settle` needed: `reset_deadline` keeps `quiet_until` a lower
        // bound, and `poll_timeout` settles before it answers.
        match verdict {
            Verdict::Queued(_) => Verdict::Queued(class),
            d => d,
        }
    }

    /// Tells the engine whether the link below is busy. Used for
    /// opportunistic packets in every mode and for every packet in
    /// [`LinkMode::HoldWhileBusy`].
    pub fn set_link_busy(&mut self, now: Micros, busy: bool) {
        self.medium_busy = busy;
        self.apply_link_busy(now, busy || self.utilisation_high);
    }

    /// `set_link_busy` with the combined signal.
    fn apply_link_busy(&mut self, now: Micros, busy: bool) {
        self.advance(now);
        if busy == self.link_busy {
            return;
        }
        self.link_busy = busy;
        self.calm_link = !busy && self.config.link_mode == LinkMode::Fixed;
        if !busy {
            let mut wake = core::mem::take(&mut self.wake);
            for &i in &wake {
                let i = i as usize;
                self.slots[i].in_wake = false;
                if !self.slots[i].in_ready {
                    self.refresh(i, false);
                }
            }
            wake.clear();
            self.wake = wake;
        }
        self.settle();
    }

    /// Advances time: queues whose hold time expired become ready (they are
    /// served, oldest deadline first, by the next `poll_transmit`).
    pub fn handle_timeout(&mut self, now: Micros) {
        self.advance(now);
        self.settle();
    }

    /// The earliest time at which [`Engine::handle_timeout`] must be called.
    ///
    /// When something is ready to send already, this is the latest time the
    /// engine has been given (drain `poll_transmit` now); `None` when nothing
    /// is queued. (`&mut self`: it first drops deadline entries gone stale
    /// since the last call, so the answer is exact.)
    pub fn poll_timeout(&mut self) -> Option<Micros> {
        self.settle();
        if self.ready_count > 0 || !self.bypass.is_empty() {
            return Some(self.now);
        }
        self.deadlines.peek().map(|(t, _, _)| t)
    }

    /// Writes the next datagram to send into `buf` (which should hold at least
    /// the largest peer `max_size`). Bypass and bundled output alternate
    /// (round robin); among peers, one whose oldest packet is due goes first,
    /// then the fullest.
    ///
    /// A packet longer than `buf` is dropped ([`DropReason::TooLarge`]).
    #[inline]
    pub fn poll_transmit(&mut self, now: Micros, buf: &mut [u8]) -> Option<Transmit> {
        self.advance(now);
        // Fast path: nothing ready and (the top of the deadline heap being
        // valid, see `settle`) nothing due. `quiet_until` says so in one
        // compare; otherwise the same conditions are checked in full.
        if self.now < self.quiet_until {
            debug_assert!(
                self.ready.is_empty()
                    && self.bypass.is_empty()
                    && self.deadlines.peek().map_or(true, |(t, _, _)| t > self.now)
            );
            return None;
        }
        self.poll_transmit_slow(buf)
    }

    /// [`Engine::poll_transmit`] after `advance`, when something may be due.
    #[inline(never)]
    fn poll_transmit_slow(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        if self.ready.is_empty() && self.bypass.is_empty() {
            match self.deadlines.peek() {
                None => return None,
                Some((t, _, _)) if t > self.now => return None,
                _ => {}
            }
        }
        // (`next_bypass` of an empty FIFO is `None`: not called then.)
        let t = if self.bypass_turn && !self.bypass.is_empty() {
            match self.next_bypass(buf) {
                Some(t) => Some(t),
                None => self.next_bundle(buf),
            }
        } else {
            match self.next_bundle(buf) {
                Some(t) => Some(t),
                None if !self.bypass.is_empty() => self.next_bypass(buf),
                None => None,
            }
        };
        if let Some(t) = &t {
            self.bypass_turn = t.kind != TransmitKind::Bypass;
        }
        self.settle();
        t
    }

    /// Makes every queued packet ready now (clean stop): afterwards
    /// `poll_transmit` drains all queues.
    pub fn flush(&mut self) {
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            if !s.q.is_empty() {
                s.flush_pending = s.q.len();
                s.sync_calm();
                self.refresh(i, false);
            }
        }
        self.settle();
    }

    /// Decodes a bundle received from `peer` with `encoding`, counting the
    /// result in that peer's statistics (or, for an unknown peer, in the
    /// engine's own, see [`Engine::stats`]): a refused bundle under its
    /// reason in `decode_errors`; otherwise the bundle, its delivered packets
    /// and each refused inner packet under its reason in `inner_errors`.
    pub fn receive<'a>(
        &mut self,
        peer: PeerKey,
        encoding: Encoding,
        payload: &'a [u8],
    ) -> Result<Bundle<'a>, DecodeError> {
        let r = encoding.decode(payload);
        self.count_received(peer, &r);
        r
    }

    /// [`Engine::receive`] for a bundle that arrived with `rx` (the outer
    /// header's ECN, the UDP bundle port): see [`Encoding::decode_rx`], which
    /// changes the ECN field of inner packets in place.
    pub fn receive_rx<'a>(
        &mut self,
        peer: PeerKey,
        encoding: Encoding,
        payload: &'a mut [u8],
        rx: RxContext,
    ) -> Result<Bundle<'a>, DecodeError> {
        let r = encoding.decode_rx(payload, rx);
        self.count_received(peer, &r);
        r
    }

    fn count_received(&mut self, peer: PeerKey, r: &Result<Bundle<'_>, DecodeError>) {
        let i = self.lookup(peer);
        let ps = i.map(|i| &mut self.slots[i].stats);
        match r {
            Ok(b) => {
                let n = b.len() as u64;
                let refused = b.framed() != b.len();
                count(&mut self.retired, ps, |c| {
                    c.bundles_received += 1;
                    c.packets_received += n;
                    if refused {
                        for e in b.refused() {
                            c.inner_errors[e.index()] += 1;
                        }
                    }
                });
            }
            Err(e) => count(&mut self.retired, ps, |c| c.decode_errors[e.index()] += 1),
        }
    }

    /// Records that a [`Transmit`] for `peer` holding `packets` packets (a
    /// bundle's count, else 1) could not be sent: counted in that peer's
    /// `send_failed_packets` (or the engine's own, once the peer is gone).
    /// Called on failures only, never on the packet path.
    pub fn report_send_failure(&mut self, peer: PeerKey, packets: u64) {
        let ps = self.lookup(peer).map(|i| &mut self.slots[i].stats);
        count(&mut self.retired, ps, |c| c.send_failed_packets += packets);
    }

    /// Packets and bytes currently queued (all peers and the bypass FIFO).
    pub fn queued(&self) -> (usize, usize) {
        (self.counts.packets, self.counts.bytes)
    }

    /// Totals over all peers: those of the peers there are now plus those
    /// of removed peers and of packets no peer was found for. Summed when
    /// asked (O(peers)), so the packet path counts each event once.
    pub fn stats(&self) -> Stats {
        let mut t = self.retired.clone();
        for s in &self.slots {
            t.merge(&s.stats);
        }
        t
    }

    /// Statistics of one peer.
    pub fn peer_stats(&self, peer: PeerKey) -> Option<&Stats> {
        self.index.get(&peer).map(|i| &self.slots[i as usize].stats)
    }

    /// Known peers, in no particular order.
    pub fn peers(&self) -> impl Iterator<Item = PeerKey> + '_ {
        self.index.keys()
    }

    /// Whether the engine currently believes the link is busy.
    pub fn link_busy(&self) -> bool {
        self.link_busy
    }

    /// Packets and bytes queued for one peer (bypass packets excluded).
    pub fn peer_queued(&self, peer: PeerKey) -> Option<(usize, usize)> {
        self.index.get(&peer).map(|i| {
            let s = &self.slots[i as usize];
            (s.q.len(), s.queued_bytes)
        })
    }

    // -----------------------------------------------------------------------
    // internals
    // -----------------------------------------------------------------------

    #[inline]
    fn advance(&mut self, now: Micros) {
        if now > self.now {
            self.now = now;
        }
    }

    #[inline]
    fn lookup(&mut self, peer: PeerKey) -> Option<usize> {
        self.index.get(&peer).map(|i| i as usize)
    }

    fn create_peer(
        &mut self,
        peer: PeerKey,
        cfg: PeerConfig,
        explicit: bool,
    ) -> Result<usize, DropReason> {
        let used = self.slots.len() - self.free.len();
        if used >= self.config.max_peers {
            return Err(DropReason::PeerTableFull);
        }
        let i = match self.free.pop() {
            Some(i) => {
                let s = &mut self.slots[i as usize];
                debug_assert!(s.q.is_empty() && !s.live);
                s.key = peer;
                s.live = true;
                s.draining = false;
                s.explicit = explicit;
                s.flush_pending = 0;
                s.set_cfg(cfg);
                s.stats.clear();
                i as usize
            }
            None => {
                self.slots.push(Slot::new(peer, cfg, explicit));
                self.slots.len() - 1
            }
        };
        self.index.insert(peer, i as u32);
        Ok(i)
    }

    fn free_slot(&mut self, i: usize) {
        let s = &mut self.slots[i];
        debug_assert!(s.q.is_empty());
        // Its statistics stay in the totals.
        self.retired.merge(&s.stats);
        s.stats.clear();
        s.live = false;
        s.draining = false;
        s.gen = s.gen.wrapping_add(1);
        s.dl_gen = s.dl_gen.wrapping_add(1);
        s.rd_gen = s.rd_gen.wrapping_add(1);
        if s.in_ready {
            s.in_ready = false;
            self.ready_count -= 1;
        }
        s.sync_calm();
        self.free.push(i as u32);
    }

    /// A packet of `len` bytes handed in and dropped at once: counted in and
    /// dropped for slot `slot`, or (no peer) among the retired.
    fn drop_arrival(&mut self, slot: Option<usize>, len: usize, reason: DropReason) -> Verdict {
        let ps = slot.map(|i| &mut self.slots[i].stats);
        count(&mut self.retired, ps, |c| {
            c.packets_in += 1;
            c.bytes_in += len as u64;
        });
        self.drop_new(slot, reason)
    }

    fn drop_new(&mut self, slot: Option<usize>, reason: DropReason) -> Verdict {
        let ps = slot.map(|i| &mut self.slots[i].stats);
        count(&mut self.retired, ps, |c| c.dropped[reason.index()] += 1);
        self.settle();
        Verdict::Dropped(reason)
    }

    fn enqueue_bypass(&mut self, i: usize, packet: &[u8], dscp: u8) -> Verdict {
        if self.bypass.len() >= self.config.bypass_queue_limit {
            return self.drop_new(Some(i), DropReason::BypassQueueFull);
        }
        self.bypass_bytes.push(packet);
        self.quiet_until = 0;
        self.bypass.push_back(BypassEntry {
            len: packet.len() as u32,
            slot: i as u32,
            gen: self.slots[i].gen,
            dscp,
        });
        self.counts.packets += 1;
        self.counts.bytes += packet.len();
        Verdict::Queued(TrafficClass::Bypass)
    }

    /// Queues a bundle- or opportunistic-class packet for slot `i`.
    #[inline(always)]
    fn enqueue(
        &mut self,
        i: usize,
        packet: &[u8],
        tos: u8,
        opportunistic: bool,
        carry: bool,
    ) -> Verdict {
        let s = &mut self.slots[i];
        let pushed = push_within_limits(
            s,
            &mut self.counts,
            self.now,
            packet,
            tos,
            opportunistic,
            carry,
        );
        match pushed {
            Some(front_changed) if matches!(self.config.link_mode, LinkMode::Adaptive(_)) => {
                self.note_budget(i, packet, front_changed);
            }
            Some(false)
                if !s.refresh_after_push(self.calm_link, self.link_busy, self.config.link_mode) => {
            }
            Some(front_changed) => self.refresh_out_of_line(i, front_changed),
            None => return self.enqueue_over_limit(i, packet, tos, opportunistic, carry),
        }
        Verdict::Queued(TrafficClass::Bundle)
    }

    /// [`Engine::enqueue`] when the packet would exceed a queue limit: drop it
    /// or the oldest packets.
    #[cold]
    #[inline(never)]
    fn enqueue_over_limit(
        &mut self,
        i: usize,
        packet: &[u8],
        tos: u8,
        opportunistic: bool,
        carry: bool,
    ) -> Verdict {
        let len = packet.len();
        let s = &self.slots[i];
        if len > s.cfg.queue_limit_bytes {
            return self.drop_new(Some(i), DropReason::QueueBytes);
        }
        if s.cfg.queue_limit_packets == 0 {
            return self.drop_new(Some(i), DropReason::QueuePackets);
        }
        while self.slots[i].q.len() >= self.slots[i].cfg.queue_limit_packets {
            self.drop_front(i, DropReason::QueuePackets);
        }
        while self.slots[i].queued_bytes + len > self.slots[i].cfg.queue_limit_bytes {
            self.drop_front(i, DropReason::QueueBytes);
        }
        let s = &mut self.slots[i];
        let pushed = push_within_limits(
            s,
            &mut self.counts,
            self.now,
            packet,
            tos,
            opportunistic,
            carry,
        );
        debug_assert!(pushed.is_some(), "room was made");
        if self.adaptive() {
            // (Drops may have emptied the queue: the pushed packet may be alone.)
            let alone = self.slots[i].q.len() == 1;
            self.note_budget(i, packet, alone);
        }
        // The front may have changed with the drops.
        self.refresh(i, true);
        Verdict::Queued(TrafficClass::Bundle)
    }

    /// Drops the oldest packet of slot `i` (no deadline/ready bookkeeping).
    fn drop_front(&mut self, i: usize, reason: DropReason) {
        let s = &mut self.slots[i];
        let Some(e) = s.q.pop_front() else { return };
        s.bytes.pop(e.cost as usize);
        let mut r = Removed::default();
        r.add(&e);
        s.forget_front(1, r);
        if s.q.is_empty() {
            self.counts.nonempty -= 1;
        }
        self.counts.packets -= 1;
        self.counts.bytes -= e.len as usize;
        s.stats.counters.dropped[reason.index()] += 1;
    }

    /// Applies a new configuration to slot `i`, keeping its queue.
    fn apply_peer_config(&mut self, i: usize, cfg: PeerConfig) {
        let s = &mut self.slots[i];
        if s.cfg.encoding != cfg.encoding {
            // Re-encode the queue: each packet behind the new encoding's separator.
            let mut fresh = ByteFifo::default();
            let mut sum = 0;
            let mut nocarry = 0;
            let mut off = 0;
            for e in s.q.iter_mut() {
                let (l, old) = (e.len as usize, e.cost as usize);
                let pkt = s.bytes.get(off + old - l, l);
                off += old;
                let (sep, k) = cfg.encoding.later_separator(pkt);
                fresh.push_prefixed(&sep, k, pkt);
                e.cost = (k + l) as u32;
                debug_assert_eq!(e.cost as usize, cost(cfg.encoding, l, false));
                e.carry = cfg.encoding.can_carry(pkt);
                sum += e.cost as usize;
                nocarry += !e.carry as usize;
            }
            s.bytes = fresh;
            s.cost_sum = sum;
            s.nocarry = nocarry;
        }
        s.set_cfg(cfg);
        while self.slots[i].q.len() > self.slots[i].cfg.queue_limit_packets {
            self.drop_front(i, DropReason::QueuePackets);
        }
        while self.slots[i].queued_bytes > self.slots[i].cfg.queue_limit_bytes {
            self.drop_front(i, DropReason::QueueBytes);
        }
        self.refresh(i, true);
    }

    /// Re-establishes slot `i`'s heap and wake-list membership after any change
    /// to its queue, configuration or the link state. `front_changed`: the
    /// oldest packet (hence the deadline) may have changed.
    #[inline(always)]
    fn refresh(&mut self, i: usize, front_changed: bool) {
        if front_changed {
            self.reset_deadline(i);
        }
        let s = &self.slots[i];
        if s.ready_reason(self.link_busy, self.config.link_mode)
            .is_some()
        {
            self.push_ready(i);
        } else if s.in_ready || self.link_busy {
            self.unready(i);
        }
        // else: not ready, not in the ready heap, and the link is idle so
        // there is no wake list to join: nothing to do (the common case).
    }

    #[inline(never)]
    fn refresh_out_of_line(&mut self, i: usize, front_changed: bool) {
        self.refresh(i, front_changed);
    }

    /// The oldest packet of slot `i` changed: new fixed cost and deadline.
    #[inline(never)]
    fn reset_deadline(&mut self, i: usize) {
        let s = &mut self.slots[i];
        // (An empty queue's fixed cost is recomputed when its next first
        // packet arrives, which resets the deadline again.)
        if !s.q.is_empty() {
            s.update_fixed_cost();
        }
        s.dl_gen = s.dl_gen.wrapping_add(1);
        if let Some(d) = s.deadline() {
            self.deadlines.push((d, i as u32, s.dl_gen));
            self.quiet_until = self.quiet_until.min(d);
            if self.deadlines.len() > 2 * self.counts.nonempty + 64 {
                let slots = &self.slots;
                self.deadlines
                    .retain(|&(_, j, g)| slots[j as usize].dl_gen == g);
            }
        }
        // The old entry, now stale, may be the top: `settle` (at the end of
        // every public call that can get here, or lazily in `poll_timeout`)
        // drops it; until then `quiet_until` is a lower bound, which is safe.
    }

    /// Slot `i` is ready: (re)enters the ready heap with its current size.
    #[inline(never)]
    fn push_ready(&mut self, i: usize) {
        let s = &mut self.slots[i];
        s.rd_gen = s.rd_gen.wrapping_add(1);
        let key = s.wire_estimate();
        self.ready.push((key, Reverse(i as u32), s.rd_gen));
        self.quiet_until = 0;
        if !s.in_ready {
            s.in_ready = true;
            s.clear_calm();
            self.ready_count += 1;
        }
        if self.ready.len() > 2 * self.ready_count + 64 {
            let slots = &self.slots;
            self.ready.retain(|(_, Reverse(j), g)| {
                let s = &slots[*j as usize];
                s.in_ready && s.rd_gen == *g
            });
        }
    }

    /// Slot `i` is not ready: leaves the ready set, and waits for an idle link if that would release it.
    #[inline(never)]
    fn unready(&mut self, i: usize) {
        let s = &mut self.slots[i];
        if s.in_ready {
            s.in_ready = false;
            s.rd_gen = s.rd_gen.wrapping_add(1);
            s.sync_calm();
            self.ready_count -= 1;
        }
        self.maybe_wake(i);
    }

    /// Puts slot `i` on the wake list if it waits for the link to become idle.
    fn maybe_wake(&mut self, i: usize) {
        let s = &mut self.slots[i];
        if self.link_busy
            && !s.in_wake
            && !s.q.is_empty()
            && (self.config.link_mode != LinkMode::Fixed || s.opportunistic > 0)
        {
            s.in_wake = true;
            self.wake.push(i as u32);
        }
    }

    /// Why slot `i` may send now, apart from its hold time (the deadline heap's job).
    #[inline]
    fn ready_reason(&self, i: usize) -> Option<Reason> {
        self.slots[i].ready_reason(self.link_busy, self.config.link_mode)
    }

    /// Drops stale entries from the top of the deadlines, so the top is a
    /// valid deadline, and makes `quiet_until` exact again (between calls it
    /// may be a lower bound: every deadline entry is at least `quiet_until`).
    #[inline]
    fn settle(&mut self) {
        while let Some((_, j, g)) = self.deadlines.peek() {
            if self.slots[j as usize].dl_gen == g {
                break;
            }
            self.deadlines.pop();
        }
        self.quiet_until = if self.ready.is_empty() && self.bypass.is_empty() {
            self.deadlines.peek().map_or(Micros::MAX, |(t, _, _)| t)
        } else {
            0
        };
    }

    fn next_bypass(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(e) = self.bypass.pop_front() {
            let len = e.len as usize;
            self.counts.packets -= 1;
            self.counts.bytes -= len;
            let slot = &mut self.slots[e.slot as usize];
            let key = slot.key;
            let ps = (slot.gen == e.gen).then_some(&mut slot.stats);
            if len > buf.len() {
                self.bypass_bytes.pop(len);
                count(&mut self.retired, ps, |c| {
                    c.dropped[DropReason::TooLarge.index()] += 1
                });
                continue;
            }
            buf[..len].copy_from_slice(self.bypass_bytes.get(0, len));
            self.bypass_bytes.pop(len);
            count(&mut self.retired, ps, |c| {
                c.bypass_packets += 1;
                c.bypass_bytes += len as u64;
            });
            return Some(Transmit {
                peer: key,
                len,
                kind: TransmitKind::Bypass,
                dscp: e.dscp,
                ecn: 0,
                reason: Reason::Bypass,
            });
        }
        None
    }

    /// Serves the peer whose oldest packet is due, else the fullest ready peer.
    fn next_bundle(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let now = self.now;
        loop {
            let mut pick = None;
            if let Some((t, j, g)) = self.deadlines.peek() {
                if self.slots[j as usize].dl_gen != g {
                    self.deadlines.pop();
                    continue;
                }
                if t <= now {
                    self.deadlines.pop();
                    let s = &self.slots[j as usize];
                    // A flushing/removed peer's packets count as flushed even when late.
                    let reason = if s.draining || s.flush_pending > 0 {
                        Reason::Flush
                    } else if !s.cfg.accepts_bundles {
                        Reason::NotAccepted
                    } else {
                        Reason::Timeout
                    };
                    pick = Some((j as usize, reason));
                }
            }
            if pick.is_none() {
                let (_, Reverse(j), g) = self.ready.pop()?;
                let j = j as usize;
                let s = &self.slots[j];
                if !s.in_ready || s.rd_gen != g {
                    continue;
                }
                match self.ready_reason(j) {
                    Some(r) => pick = Some((j, r)),
                    None => {
                        // No longer ready (the link became busy again).
                        let s = &mut self.slots[j];
                        s.in_ready = false;
                        s.rd_gen = s.rd_gen.wrapping_add(1);
                        s.sync_calm();
                        self.ready_count -= 1;
                        self.maybe_wake(j);
                        continue;
                    }
                }
            }
            let (j, reason) = pick.expect("picked above");
            let t = self.serve(j, reason, now, buf);
            if self.slots[j].q.is_empty() {
                self.counts.nonempty -= 1;
                if self.slots[j].draining {
                    self.free_slot(j);
                } else {
                    self.refresh(j, true);
                }
            } else {
                self.refresh(j, true);
            }
            if t.is_some() {
                return t;
            }
        }
    }

    /// Sends the next bundle (or single packet) of slot `j`, which is non-empty.
    /// Returns `None` only when the packet at the front was too large for `buf`
    /// and was dropped. Leaves heap bookkeeping (and `nonempty`) to the caller.
    fn serve(&mut self, j: usize, reason: Reason, now: Micros, buf: &mut [u8]) -> Option<Transmit> {
        let s = &mut self.slots[j];
        let key = s.key;
        let enc = s.cfg.encoding;
        let limit = s
            .cfg
            .max_size
            .saturating_sub(s.cfg.outer_overhead)
            .min(buf.len())
            .min(MAX_BUNDLE);
        let maxp = s.max_packets;
        // A bundle only when at least the first two packets go into it (same
        // cost function as the writer's); otherwise the first leaves alone.
        let bundle = s.cfg.accepts_bundles
            && !s.draining
            && maxp >= 2
            && match (s.q.get(0), s.q.get(1)) {
                (Some(a), Some(b)) => {
                    a.carry
                        && b.carry
                        && header_len(enc) + cost(enc, a.len as usize, true) + b.cost as usize
                            <= limit
                }
                _ => false,
            };
        let n: usize;
        let mut tos = 0;
        let mut ecn = 0;
        let inner_bytes: usize;
        // (`limit` holds the header and two packets, so the writer exists.)
        let writer = if bundle {
            BundleWriter::new(enc, &mut buf[..limit])
        } else {
            None
        };
        let (len, kind) = if let Some(mut w) = writer {
            // The queue holds each packet behind its later-packet separator
            // (`Entry::cost` bytes). The first packet is written in its
            // first-packet form; the packets after it are already encoded, so
            // they are copied in one piece once it is known how many fit.
            let src = s.bytes.live();
            let first = *s.q.get(0).expect("checked above: two packets queued");
            let (fl, fc) = (first.len as usize, first.cost as usize);
            // Room for the later packets once the first is written (it is
            // copied with them when its stored form is its first form).
            let first_as_later = enc.first_as_later();
            let room = if first_as_later {
                debug_assert_eq!(cost(enc, fl, true), fc);
                w.remaining() - fc
            } else {
                w.push_checked(&src[fc - fl..fc])
                    .expect("checked above: header and the first two packets fit");
                w.remaining()
            };
            let count = maxp.min(s.q.len());
            let holds = &mut s.stats.hold_time_us;
            let body;
            let removed;
            if count == s.q.len() && s.nocarry == 0 && s.cost_sum - fc <= room {
                // The whole queue fits (the common case): what leaves is the
                // queue's aggregates, no walk needed to find or sum it.
                n = count;
                body = s.cost_sum - fc;
                removed = Removed {
                    bytes: s.queued_bytes,
                    cost: s.cost_sum,
                    opportunistic: s.opportunistic,
                    nocarry: 0,
                    not_ect: s.not_ect,
                    arrivals: s.arrival_sum,
                };
                tos = if s.tos_exact {
                    s.tos_max
                } else {
                    s.q.iter().map(|e| e.tos).max().unwrap_or(0)
                };
                record_holds(&s.q, now, s.arrival_sum, holds);
            } else {
                // Walk while the next packet fits. Arrival times are
                // non-decreasing along the queue, so hold times are
                // non-increasing and their histogram bucket only moves down:
                // record runs of equal buckets at once.
                let mut run = HoldRun::new(holds, now.saturating_sub(first.arrival));
                let mut r = Removed::default();
                r.add(&first);
                tos = first.tos;
                run.add(holds, now.saturating_sub(first.arrival));
                let mut k = 1;
                let mut later = 0usize;
                while k < count {
                    let Some(&e) = s.q.get(k) else { break };
                    let c = e.cost as usize;
                    if !e.carry || later + c > room {
                        break;
                    }
                    later += c;
                    k += 1;
                    r.add(&e);
                    tos = tos.max(e.tos);
                    run.add(holds, now.saturating_sub(e.arrival));
                }
                run.finish(holds);
                n = k;
                body = later;
                removed = r;
            }
            if first_as_later {
                w.push_encoded(&src[..fc + body], n)
            } else {
                w.push_encoded(&src[fc..fc + body], n - 1)
            }
            .expect("the walk kept to the room and packet count left");
            s.q.drop_front(n);
            s.bytes.pop(removed.cost);
            s.forget_front(n, removed);
            inner_bytes = removed.bytes;
            if removed.not_ect == 0 {
                ecn = ip::ecn::ECT0;
            }
            debug_assert!(n >= 2, "the first two packets were checked to fit");
            (
                w.finish(),
                TransmitKind::Bundle {
                    packets: n as u16,
                    encoding: enc,
                },
            )
        } else {
            let e =
                s.q.pop_front()
                    .expect("serve is only called on a non-empty queue");
            let l = e.len as usize;
            let c = e.cost as usize;
            n = 1;
            inner_bytes = l;
            let fits = l <= buf.len();
            if fits {
                buf[..l].copy_from_slice(s.bytes.get(c - l, l));
                tos = e.tos;
                s.stats.hold_time_us.record(now.saturating_sub(e.arrival));
            }
            s.bytes.pop(c);
            let mut r = Removed::default();
            r.add(&e);
            s.forget_front(1, r);
            if !fits {
                self.counts.packets -= 1;
                self.counts.bytes -= l;
                s.stats.counters.dropped[DropReason::TooLarge.index()] += 1;
                return None;
            }
            (l, TransmitKind::Single)
        };
        self.counts.packets -= n;
        self.counts.bytes -= inner_bytes;
        let st = &mut s.stats;
        let c = &mut st.counters;
        if n >= 2 {
            c.aggregated_packets += n as u64;
            c.aggregated_bytes += inner_bytes as u64;
            c.bundles += 1;
            c.bundle_wire_bytes += (len + s.cfg.outer_overhead) as u64;
        } else {
            c.unaggregated_packets += 1;
            c.unaggregated_bytes += inner_bytes as u64;
        }
        match reason {
            Reason::Timeout => c.sent_on_timeout += 1,
            Reason::Size => c.sent_on_size += 1,
            Reason::Idle => c.sent_on_idle += 1,
            Reason::Flush => c.sent_on_flush += 1,
            Reason::NotAccepted | Reason::Bypass => {}
        }
        if n >= 2 {
            st.bundle_packets.record(n as u64);
        }
        Some(Transmit {
            peer: key,
            len,
            kind,
            dscp: tos >> 2,
            ecn,
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::fifo::Ring;
    use super::stats::HOLD_TIME_BOUNDS_US;
    use super::{Entry, Histogram, HoldRun};

    #[test]
    fn record_holds_matches_one_by_one() {
        // Queues of non-decreasing arrival times (small, at bucket edges, and
        // huge, so hold-time sums overflow 64 bits and must saturate), with
        // the arrival sum kept modulo 2^64 as the engine keeps it.
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2_000 {
            let mut q: Ring<Entry> = Ring::default();
            let mut sum = 0u64;
            let mut t = match round % 3 {
                0 => rnd() % 1_000,
                1 => u64::MAX / 2 + rnd() % 1_000,
                _ => rnd() % (u64::MAX / 4),
            };
            for _ in 0..1 + rnd() % 30 {
                t = t.saturating_add(match rnd() % 3 {
                    0 => 0,
                    1 => rnd() % 20,
                    _ => rnd() % (1 << (rnd() % 64)),
                });
                q.push_back(Entry {
                    arrival: t,
                    ..Entry::default()
                });
                sum = sum.wrapping_add(t);
            }
            let now = t.saturating_add(match rnd() % 3 {
                0 => 0,
                1 => rnd() % 200,
                _ => rnd(),
            });
            let mut expect = Histogram::new(HOLD_TIME_BOUNDS_US);
            for e in q.iter() {
                expect.record(now - e.arrival);
            }
            let mut got = Histogram::new(HOLD_TIME_BOUNDS_US);
            super::record_holds(&q, now, sum, &mut got);
            assert_eq!(got, expect, "round {round}");
        }
    }

    #[test]
    fn hold_run_records_like_one_by_one() {
        // Runs of values (mostly non-increasing, as along a queue, sometimes
        // not) give the same histograms as recording each value alone.
        let mut x: u32 = 0x0bad_cafe;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            u64::from(x)
        };
        for _ in 0..500 {
            let mut expect = Histogram::new(HOLD_TIME_BOUNDS_US);
            let mut peer = Histogram::new(HOLD_TIME_BOUNDS_US);
            let mut v = rnd() % 200_000;
            let mut run = HoldRun::new(&peer, v);
            for _ in 0..rnd() % 40 {
                expect.record(v);
                run.add(&mut peer, v);
                v = match rnd() % 4 {
                    0 => v.saturating_sub(rnd() % 3_000),
                    1 => rnd() % 200_000,
                    2 => [0, 10, 11, 50, 100_000, 100_001, u64::MAX][rnd() as usize % 7],
                    _ => v,
                };
            }
            run.finish(&mut peer);
            assert_eq!(peer, expect);
        }
    }
}
