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
//! on bundle:     engine.receive(peer, bytes)   (decoded with the peer's encoding)
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
//!   the driver says so or the medium's smoothed utilisation (`set_medium`)
//!   reaches a threshold; a packet is held only when its peer has company
//!   (another flow within one to two hold times, or a saturated medium), and
//!   a queue's deadline is also bounded by each queued packet's share of the
//!   per-flow delay budget (Timeout).
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
mod receive;
mod service;
mod slot;
pub mod spurt;
pub mod stats;
mod table;

use classify::Udp4Rules;
pub use classify::{Classifier, Rule, TrafficClass};
pub use policy::AdaptiveHold;
pub use stats::{Counters, DropReason, Histogram, Stats};

use crate::wire::{ip, Encoding, MAX_BUNDLE};
use crate::Micros;
use core::cmp::Reverse;
use core::net::IpAddr;
use deadlines::Deadlines;
use fifo::{ByteFifo, Ring};
use slot::{BypassEntry, Slot};
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
}
