//! Configured peers as the event loop sees them: encoding, the interface of
//! a link-local peer, and the receive-side check of an inner packet's source.
//!
//! Must not touch: the engine's per-peer queues, sockets.

use crate::daemon::config::{Plan, SourceCheck};
use crate::linux::{self, RouteResolver};
use airpack_core::Encoding;
use std::collections::HashMap;
use std::net::IpAddr;
use tracing::warn;

/// What the loop needs to know about a configured peer.
#[derive(Clone, Debug)]
pub(super) struct PeerEntry {
    pub(super) encoding: Encoding,
    /// The interface of a link-local IPv6 peer (`fe80::2%wlan0`).
    pub(super) interface: Option<String>,
    /// Its index (0 while the interface does not exist); re-read on link changes.
    pub(super) ifindex: u32,
}

impl PeerEntry {
    /// Whether this peer is the one reached through (or heard on) interface
    /// `ifindex`: any interface for a global address; for a link-local one
    /// only its own (an unresolved interface matches nothing).
    pub(super) fn via(&self, ifindex: u32) -> bool {
        self.interface.is_none() || (self.ifindex != 0 && self.ifindex == ifindex)
    }

    /// sin6_scope_id to send with (0: none).
    pub(super) fn scope(&self) -> u32 {
        if self.interface.is_some() {
            self.ifindex
        } else {
            0
        }
    }

    /// Re-reads the interface index; true when it changed.
    pub(super) fn resolve(&mut self) -> bool {
        let idx = self
            .interface
            .as_deref()
            .map_or(0, |n| linux::tun::ifindex(n).unwrap_or(0));
        std::mem::replace(&mut self.ifindex, idx) != idx
    }
}

pub(super) fn peer_map(plan: &Plan) -> HashMap<IpAddr, PeerEntry> {
    plan.peers
        .iter()
        .map(|p| {
            let mut e = PeerEntry {
                encoding: p.config.encoding,
                interface: p.interface.clone(),
                ifindex: 0,
            };
            e.resolve();
            if let (Some(i), 0) = (&e.interface, e.ifindex) {
                warn!(peer = %p.address, interface = %i, "interface of link-local peer does not exist (yet)");
            }
            (p.address, e)
        })
        .collect()
}

/// Whether `peer` may send inner packets from `inner_src`; `peer_if` is the
/// interface of a link-local peer (0: any), which the route back to
/// `inner_src` must use too.
pub(super) fn source_allowed(
    plan: &Plan,
    resolver: &mut RouteResolver,
    peer: IpAddr,
    peer_if: u32,
    inner_src: IpAddr,
) -> bool {
    match plan.source_check {
        SourceCheck::Off => true,
        SourceCheck::AllowedIps => plan.allowed_ips.lookup(inner_src) == Some(peer),
        SourceCheck::Route => match resolver.lookup(inner_src) {
            Ok(nh) => !nh.local && nh.addr == peer && (peer_if == 0 || nh.oif == peer_if),
            Err(_) => false,
        },
    }
}
