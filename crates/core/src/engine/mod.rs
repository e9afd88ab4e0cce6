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
//! on timer:      engine.handle_timeout(now)
//! after each:    while let Some(t) = engine.poll_transmit(now, &mut buf) { send(&buf[..t.len]) }
//!                arm timer at engine.poll_timeout()
//! on stop:       engine.flush(); drain poll_transmit
//! ```

pub mod classify;
pub mod stats;

pub use classify::{Classifier, Rule, TrafficClass};
pub use stats::{Counters, DropReason, Histogram, Stats};

use crate::wire::{Bundle, DecodeError, Encoding};
use crate::Micros;
use core::net::IpAddr;

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
}

/// Result of [`Engine::handle_packet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Queued (possibly ready to transmit already).
    Queued(TrafficClass),
    /// Dropped and counted.
    Dropped(DropReason),
}

/// The aggregation state machine. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
}

impl Engine {
    /// A new engine with no peers.
    pub fn new(config: EngineConfig) -> Self {
        Engine { config }
    }

    /// The configuration in force.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Replaces the classifier, link mode, defaults and limits without losing
    /// queued packets (configuration reload).
    pub fn reconfigure(&mut self, config: EngineConfig) {
        self.config = config;
        todo!("engine::reconfigure")
    }

    /// Creates or updates a peer. Fails only when the table is full.
    pub fn set_peer(&mut self, peer: PeerKey, config: PeerConfig) -> Result<(), DropReason> {
        let _ = (peer, config);
        todo!("engine::set_peer")
    }

    /// Removes a peer; its queued packets leave unbundled first (they are
    /// returned by later `poll_transmit` calls), never silently lost.
    pub fn remove_peer(&mut self, peer: PeerKey) {
        let _ = peer;
        todo!("engine::remove_peer")
    }

    /// Changes a peer's maximum bundle size (link adaptation).
    pub fn set_peer_max_size(&mut self, peer: PeerKey, max_size: usize) {
        let _ = (peer, max_size);
        todo!("engine::set_peer_max_size")
    }

    /// The configuration of a peer, if known.
    pub fn peer(&self, peer: PeerKey) -> Option<&PeerConfig> {
        let _ = peer;
        todo!("engine::peer")
    }

    /// Hands one outgoing IP packet to the engine. The bytes are copied.
    pub fn handle_packet(&mut self, now: Micros, peer: PeerKey, packet: &[u8], mark: u32) -> Verdict {
        let _ = (now, peer, packet, mark);
        todo!("engine::handle_packet")
    }

    /// Tells the engine whether the link below is busy (only used in
    /// [`LinkMode::HoldWhileBusy`]).
    pub fn set_link_busy(&mut self, now: Micros, busy: bool) {
        let _ = (now, busy);
        todo!("engine::set_link_busy")
    }

    /// Advances time: queues whose hold time expired become ready.
    pub fn handle_timeout(&mut self, now: Micros) {
        let _ = now;
        todo!("engine::handle_timeout")
    }

    /// The earliest time at which [`Engine::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<Micros> {
        todo!("engine::poll_timeout")
    }

    /// Writes the next datagram to send into `buf` (which should hold at least
    /// the largest peer `max_size`). Bypass and bundled output alternate
    /// (round robin); among peers, one whose oldest packet is due goes first,
    /// then the fullest.
    pub fn poll_transmit(&mut self, now: Micros, buf: &mut [u8]) -> Option<Transmit> {
        let _ = (now, buf);
        todo!("engine::poll_transmit")
    }

    /// Makes every queued packet ready now (clean stop): afterwards
    /// `poll_transmit` drains all queues.
    pub fn flush(&mut self) {
        todo!("engine::flush")
    }

    /// Decodes a bundle received from `peer` with `encoding`, counting the
    /// result in that peer's and the total statistics.
    pub fn receive<'a>(
        &mut self,
        peer: PeerKey,
        encoding: Encoding,
        payload: &'a [u8],
    ) -> Result<Bundle<'a>, DecodeError> {
        let _ = (peer, encoding, payload);
        todo!("engine::receive")
    }

    /// Packets and bytes currently queued (all peers and the bypass FIFO).
    pub fn queued(&self) -> (usize, usize) {
        todo!("engine::queued")
    }

    /// Totals over all peers.
    pub fn stats(&self) -> &Stats {
        todo!("engine::stats")
    }

    /// Statistics of one peer.
    pub fn peer_stats(&self, peer: PeerKey) -> Option<&Stats> {
        let _ = peer;
        todo!("engine::peer_stats")
    }

    /// Known peers, in no particular order.
    pub fn peers(&self) -> impl Iterator<Item = PeerKey> + '_ {
        core::iter::empty()
    }
}
