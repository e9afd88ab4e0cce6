//! The receive side of the engine: decoding a bundle a peer sent, with the
//! encoding that peer's slot holds, and counting the result in the peer's
//! statistics.
//!
//! Owns: which encoding a received bundle is decoded with (the peer's, as
//! set by [`Engine::set_peer`]; a caller no longer passes one, as in
//! WireGuard, where the peer owns its keys and `receive(peer, bytes)` needs
//! nothing else) and the receive counters (`bundles_received`,
//! `packets_received`, `decode_errors`, `inner_errors`).
//!
//! The `*_with` variants take the encoding from the caller, for a sender the
//! engine has no slot for: the daemon uses it for a neighbour whose hellos
//! it takes before the neighbour is up (one hello earlier on its side), and
//! tests and fuzzing use it to decode with any encoding. Their result is
//! counted in the engine's own statistics when the peer is unknown.
//!
//! Must not touch: the sending side (queues, deadlines), byte layouts (that
//! is [`crate::wire`]).

use super::{count, Engine, PeerKey};
use crate::wire::{Bundle, DecodeError, Encoding, RxContext};

impl Engine {
    /// Decodes a bundle received from `peer` with the peer's encoding,
    /// counting the result in the peer's statistics: a refused bundle under
    /// its reason in `decode_errors`; otherwise the bundle, its delivered
    /// packets and each refused inner packet under its reason in
    /// `inner_errors`. `None` (nothing decoded, nothing counted) when the
    /// engine has no such peer.
    pub fn receive<'a>(
        &mut self,
        peer: PeerKey,
        payload: &'a [u8],
    ) -> Option<Result<Bundle<'a>, DecodeError>> {
        let i = self.lookup(peer)?;
        let r = self.slots[i].cfg.encoding.decode(payload);
        self.count_received(Some(i), &r);
        Some(r)
    }

    /// [`Engine::receive`] for a bundle that arrived with `rx` (the outer
    /// header's ECN, the UDP bundle port): see [`Encoding::decode_rx`], which
    /// changes the ECN field of inner packets in place.
    pub fn receive_rx<'a>(
        &mut self,
        peer: PeerKey,
        payload: &'a mut [u8],
        rx: RxContext,
    ) -> Option<Result<Bundle<'a>, DecodeError>> {
        let i = self.lookup(peer)?;
        let r = self.slots[i].cfg.encoding.decode_rx(payload, rx);
        self.count_received(Some(i), &r);
        Some(r)
    }

    /// Decodes a bundle from `peer` with `encoding`, whether or not the
    /// engine knows the peer (then counted in the engine's own statistics,
    /// see [`Engine::stats`]). For senders without a slot; see the module
    /// documentation.
    pub fn receive_with<'a>(
        &mut self,
        peer: PeerKey,
        encoding: Encoding,
        payload: &'a [u8],
    ) -> Result<Bundle<'a>, DecodeError> {
        let r = encoding.decode(payload);
        let i = self.lookup(peer);
        self.count_received(i, &r);
        r
    }

    /// [`Engine::receive_with`] with a receive context, as [`Engine::receive_rx`].
    pub fn receive_rx_with<'a>(
        &mut self,
        peer: PeerKey,
        encoding: Encoding,
        payload: &'a mut [u8],
        rx: RxContext,
    ) -> Result<Bundle<'a>, DecodeError> {
        let r = encoding.decode_rx(payload, rx);
        let i = self.lookup(peer);
        self.count_received(i, &r);
        r
    }

    /// Counts a decode result in slot `i`'s statistics, or the engine's own.
    fn count_received(&mut self, i: Option<usize>, r: &Result<Bundle<'_>, DecodeError>) {
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
}
