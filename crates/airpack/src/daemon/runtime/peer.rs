//! The daemon's peers: one [`Peer`] per next hop (hop-by-hop) or tunnel
//! endpoint (end-to-end) that bundles go to and are accepted from, static
//! (`[[peer]]`) or discovered, and [`Peers`], the table of them with the
//! allowed-source prefix trie and the receive-side source check.
//!
//! ## Who owns what (issue 11 point 2)
//!
//! Before, a peer's facts lay in five places: this module's `PeerEntry`
//! (encoding, interface, ifindex) in a `HashMap` built from the plan; the
//! engine's slot (the same encoding again, sizes, queues, counters), to
//! which `receive(peer, encoding, bytes)` had the encoding handed back by
//! the caller; the plan's `allowed_ips` trie and `SourceCheck`, consulted
//! through the plan; discovery's neighbour tables, whose events inserted and
//! removed `PeerEntry`s (a lost neighbour left no trace); and the engine's
//! per-peer statistics, the only per-peer counters. Now, as in WireGuard's
//! peer model (a peer owns its endpoint, allowed IPs and counters; the
//! device's `receive(peer, bytes)` needs nothing else):
//!
//! | fact | owner |
//! |---|---|
//! | address, interface and its index (the IPv6 scope), link state (static, discovered, lost), daemon-side counters | [`Peer`] |
//! | allowed source prefixes | [`Peer::allowed`] lists them; [`Peers`] keeps one longest-prefix trie over all peers' prefixes (`airpack_core::prefix`, via `AllowedIps`), since a prefix belongs to the peer with the longest match among all (WireGuard's allowed-IPs semantics: a peer may not send from a more specific prefix another peer owns) |
//! | which source check applies | [`Peers`] (from the plan) |
//! | encoding, sizes, queues, engine counters | the engine's slot: set by `Engine::set_peer`, used by `Engine::receive(peer, bytes)` |
//! | neighbour state (hellos, link quality, bidirectionality) | discovery's tables; their events move a peer between link states here |
//!
//! Static peers override: discovery never changes a static peer's
//! configuration (it only counts its neighbour going up and down). A lost
//! discovered peer stays here (not in the engine: its packets leave
//! unbundled, and its bundles are refused) so its counters survive its
//! return; at most `discovery.max_neighbors` lost peers are kept, the
//! longest lost dropped first.
//!
//! Must not touch: the engine's queues, sockets (the caller resolves
//! interface names here, on link changes only).

use crate::daemon::config::{AllowedIps, Cidr, Plan, SourceCheck};
use crate::linux::{self, RouteResolver};
use std::collections::HashMap;
use std::net::IpAddr;
use tracing::warn;

/// How a peer came to be and whether it is usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LinkState {
    /// A `[[peer]]`: always a peer, whatever discovery says.
    Static,
    /// A neighbour discovery found up (a bidirectional hello exchange).
    Discovered,
    /// A discovered neighbour that went down (since this many µs): not a
    /// peer until it comes back.
    Lost(u64),
}

impl LinkState {
    /// The name `airpack peers` shows.
    pub(super) fn name(self) -> &'static str {
        match self {
            LinkState::Static => "static",
            LinkState::Discovered => "discovered",
            LinkState::Lost(_) => "lost",
        }
    }
}

/// A peer's daemon-side counters (its engine counters are in the engine's
/// slot). Touched off the common packet path only: on refusals and on
/// neighbour events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PeerCounters {
    /// Inner packets of its bundles dropped by the source check.
    pub(super) spoofed_source: u64,
    /// Its bundles refused for a bad authentication tag.
    pub(super) auth_failed: u64,
    /// Its bundles refused as replayed.
    pub(super) replayed: u64,
    /// Times discovery found it up (a static peer's neighbour too).
    pub(super) neighbor_ups: u64,
    /// Times discovery lost it.
    pub(super) neighbor_downs: u64,
}

/// One peer. See the module documentation.
#[derive(Clone, Debug)]
pub(super) struct Peer {
    addr: IpAddr,
    /// The interface of a link-local IPv6 peer (`fe80::2%wlan0`).
    interface: Option<String>,
    /// Its index (0 while the interface does not exist); re-read on link changes.
    ifindex: u32,
    /// Its allowed source prefixes (static peers; reports and routes).
    allowed: Vec<Cidr>,
    state: LinkState,
    pub(super) counters: PeerCounters,
}

impl Peer {
    /// Its address.
    pub(super) fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The interface name of a link-local peer.
    pub(super) fn interface(&self) -> Option<&str> {
        self.interface.as_deref()
    }

    /// Its allowed source prefixes.
    pub(super) fn allowed(&self) -> &[Cidr] {
        &self.allowed
    }

    /// Its link state.
    pub(super) fn state(&self) -> LinkState {
        self.state
    }

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
    fn resolve(&mut self) -> bool {
        let idx = self
            .interface
            .as_deref()
            .map_or(0, |n| linux::tun::ifindex(n).unwrap_or(0));
        std::mem::replace(&mut self.ifindex, idx) != idx
    }
}

/// The daemon's peer table. See the module documentation.
#[derive(Debug)]
pub(super) struct Peers {
    map: HashMap<IpAddr, Peer>,
    /// Every static peer's allowed prefixes, longest match wins.
    allowed: AllowedIps,
    check: SourceCheck,
    /// Lost peers kept at most.
    lost_cap: usize,
}

impl Peers {
    /// The static peers of `plan` for which `accepted` holds (those the
    /// engine has a slot for), with no discovered ones yet.
    pub(super) fn from_plan(plan: &Plan, accepted: impl Fn(IpAddr) -> bool) -> Peers {
        let mut map = HashMap::with_capacity(plan.peers.len());
        for p in plan.peers.iter().filter(|p| accepted(p.address)) {
            let mut e = Peer {
                addr: p.address,
                interface: p.interface.clone(),
                ifindex: 0,
                allowed: p.allowed_ips.clone(),
                state: LinkState::Static,
                counters: PeerCounters::default(),
            };
            e.resolve();
            if let (Some(i), 0) = (&e.interface, e.ifindex) {
                warn!(peer = %p.address, interface = %i, "interface of link-local peer does not exist (yet)");
            }
            map.insert(p.address, e);
        }
        Peers {
            map,
            allowed: plan.allowed_ips.clone(),
            check: plan.source_check,
            lost_cap: plan.config.discovery.max_neighbors,
        }
    }

    /// A reload: the static peers of `new` (those `accepted`) replace the
    /// old ones, keeping the counters of those that stay; discovered and
    /// lost peers that are not static now stay as they are (discovery
    /// re-applies its up neighbours afterwards).
    pub(super) fn reload(&mut self, new: &Plan, accepted: impl Fn(IpAddr) -> bool) {
        let mut next = Peers::from_plan(new, accepted);
        for (addr, old) in self.map.drain() {
            match next.map.get_mut(&addr) {
                Some(p) => p.counters = old.counters,
                None if old.state != LinkState::Static => {
                    next.map.insert(addr, old);
                }
                None => {}
            }
        }
        *self = next;
    }

    /// A usable peer (static or discovered) with this address.
    #[inline]
    pub(super) fn get(&self, addr: &IpAddr) -> Option<&Peer> {
        self.map
            .get(addr)
            .filter(|p| !matches!(p.state, LinkState::Lost(_)))
    }

    /// Whether `addr` is a static peer.
    pub(super) fn is_static(&self, addr: IpAddr) -> bool {
        self.map
            .get(&addr)
            .is_some_and(|p| p.state == LinkState::Static)
    }

    /// Every peer, lost ones included, in no particular order.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = &Peer> {
        self.map.values()
    }

    /// Counts on a usable peer's counters (a no-op for anyone else).
    pub(super) fn count(&mut self, addr: IpAddr, f: impl FnOnce(&mut PeerCounters)) {
        if let Some(p) = self
            .map
            .get_mut(&addr)
            .filter(|p| !matches!(p.state, LinkState::Lost(_)))
        {
            f(&mut p.counters);
        }
    }

    /// The tunnel endpoint whose allowed prefixes hold `dst` (end-to-end).
    #[inline]
    pub(super) fn endpoint(&self, dst: IpAddr) -> Option<IpAddr> {
        self.allowed.lookup(dst)
    }

    /// Whether `peer` may send inner packets from `inner_src`; `peer_if` is
    /// the interface of a link-local peer (0: any), which the route back to
    /// `inner_src` must use too.
    pub(super) fn source_allowed(
        &self,
        resolver: &mut RouteResolver,
        peer: IpAddr,
        peer_if: u32,
        inner_src: IpAddr,
    ) -> bool {
        match self.check {
            SourceCheck::Off => true,
            SourceCheck::AllowedIps => self.allowed.lookup(inner_src) == Some(peer),
            SourceCheck::Route => match resolver.lookup(inner_src) {
                Ok(nh) => !nh.local && nh.addr == peer && (peer_if == 0 || nh.oif == peer_if),
                Err(_) => false,
            },
        }
    }

    /// Discovery found `addr` up (or changed), heard on `interface` (its
    /// name and index, for a link-local neighbour): a new or lost peer
    /// becomes a discovered one. A static peer only counts it (`first`: the
    /// neighbour was not up before).
    pub(super) fn discovered(
        &mut self,
        addr: IpAddr,
        interface: Option<(String, u32)>,
        first: bool,
    ) {
        let (interface, ifindex) = match interface {
            Some((n, i)) => (Some(n), i),
            None => (None, 0),
        };
        let p = self.map.entry(addr).or_insert_with(|| Peer {
            addr,
            interface: None,
            ifindex: 0,
            allowed: Vec::new(),
            state: LinkState::Lost(0),
            counters: PeerCounters::default(),
        });
        if p.state == LinkState::Static {
            p.counters.neighbor_ups += u64::from(first);
            return;
        }
        if matches!(p.state, LinkState::Lost(_)) || first {
            p.counters.neighbor_ups += 1;
        }
        p.state = LinkState::Discovered;
        p.interface = interface;
        p.ifindex = ifindex;
    }

    /// Discovery lost `addr` at `now`: a discovered peer becomes lost (kept
    /// for its counters, bounded); a static one only counts it.
    pub(super) fn lost(&mut self, addr: IpAddr, now: u64) {
        let Some(p) = self.map.get_mut(&addr) else {
            return;
        };
        p.counters.neighbor_downs += 1;
        if p.state == LinkState::Discovered {
            p.state = LinkState::Lost(now);
            self.trim_lost();
        }
    }

    /// Drops the longest-lost peers beyond `lost_cap` (on neighbour loss
    /// only: a scan of the table is fine there).
    fn trim_lost(&mut self) {
        let lost = |p: &Peer| match p.state {
            LinkState::Lost(t) => Some(t),
            _ => None,
        };
        while self.map.values().filter(|p| lost(p).is_some()).count() > self.lost_cap {
            let oldest = self
                .map
                .values()
                .filter_map(|p| lost(p).map(|t| (t, p.addr)))
                .min();
            match oldest {
                Some((_, a)) => self.map.remove(&a),
                None => break,
            };
        }
    }

    /// Re-reads every link-local peer's interface index (link changes);
    /// calls `changed` for each peer whose index changed.
    pub(super) fn resolve_all(&mut self, mut changed: impl FnMut(&Peer)) {
        for p in self.map.values_mut() {
            if p.resolve() {
                changed(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::config;

    fn plan(text: &str) -> Plan {
        config::parse("test", text, &[], &[]).unwrap()
    }

    const E2E: &str = r#"
[daemon]
mode = "end-to-end"
[[peer]]
address = "192.0.2.1"
allowed_ips = ["10.0.0.0/8"]
[[peer]]
address = "192.0.2.2"
allowed_ips = ["10.1.0.0/16"]
"#;

    fn a(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn allowed_sources_follow_the_longest_prefix_over_all_peers() {
        let p = Peers::from_plan(&plan(E2E), |_| true);
        let mut r = RouteResolver::new(0).unwrap_or_else(|_| panic!("netlink"));
        let (one, two) = (a("192.0.2.1"), a("192.0.2.2"));
        assert!(p.source_allowed(&mut r, one, 0, a("10.2.0.1")));
        // 10.1.x belongs to peer two (the longer prefix), not to one.
        assert!(!p.source_allowed(&mut r, one, 0, a("10.1.0.1")));
        assert!(p.source_allowed(&mut r, two, 0, a("10.1.0.1")));
        assert!(!p.source_allowed(&mut r, two, 0, a("172.16.0.1")));
        assert_eq!(p.endpoint(a("10.1.2.3")), Some(two));
        assert_eq!(p.get(&one).map(Peer::allowed).map(<[Cidr]>::len), Some(1));
    }

    #[test]
    fn discovered_peers_are_lost_and_return_with_their_counters() {
        let mut p = Peers::from_plan(&plan(E2E), |_| true);
        let n = a("192.0.2.9");
        p.discovered(n, None, true);
        assert_eq!(p.get(&n).map(Peer::state), Some(LinkState::Discovered));
        p.count(n, |c| c.spoofed_source += 3);
        p.lost(n, 5);
        assert!(p.get(&n).is_none(), "a lost peer is no peer");
        p.count(n, |c| c.spoofed_source += 100);
        p.discovered(n, None, true);
        let c = p.get(&n).unwrap().counters;
        assert_eq!(
            (c.spoofed_source, c.neighbor_ups, c.neighbor_downs),
            (3, 2, 1)
        );
        // A changed (not first) event of an up peer counts nothing.
        p.discovered(n, None, false);
        assert_eq!(p.get(&n).unwrap().counters.neighbor_ups, 2);
    }

    #[test]
    fn static_peers_override_discovery() {
        let mut p = Peers::from_plan(&plan(E2E), |_| true);
        let s = a("192.0.2.1");
        p.discovered(s, Some(("wlan0".into(), 7)), true);
        p.lost(s, 1);
        let e = p.get(&s).expect("still a peer");
        assert_eq!(e.state(), LinkState::Static);
        assert_eq!(e.interface(), None);
        assert_eq!((e.counters.neighbor_ups, e.counters.neighbor_downs), (1, 1));
        assert!(p.is_static(s));
    }

    #[test]
    fn lost_peers_are_bounded_longest_lost_first() {
        let mut pl = plan(E2E);
        pl.config.discovery.max_neighbors = 2;
        let mut p = Peers::from_plan(&pl, |_| true);
        let ns: Vec<IpAddr> = (1..=3).map(|i| a(&format!("198.51.100.{i}"))).collect();
        for (t, n) in ns.iter().enumerate() {
            p.discovered(*n, None, true);
            p.lost(*n, t as u64);
        }
        let kept: Vec<IpAddr> = {
            let mut v: Vec<IpAddr> = p
                .iter()
                .filter(|e| e.state().name() == "lost")
                .map(Peer::addr)
                .collect();
            v.sort();
            v
        };
        assert_eq!(kept, ns[1..]);
        assert_eq!(p.iter().count(), 4, "two static, two lost");
    }

    #[test]
    fn reload_keeps_counters_and_discovered_peers() {
        let mut p = Peers::from_plan(&plan(E2E), |_| true);
        let (one, two, n) = (a("192.0.2.1"), a("192.0.2.2"), a("192.0.2.9"));
        p.count(one, |c| c.auth_failed += 1);
        p.count(two, |c| c.auth_failed += 1);
        p.discovered(n, None, true);
        let fewer = E2E.replace("address = \"192.0.2.2\"", "address = \"192.0.2.3\"");
        p.reload(&plan(&fewer), |a| a != IpAddr::from([192, 0, 2, 3]));
        assert_eq!(p.get(&one).unwrap().counters.auth_failed, 1);
        assert!(p.get(&two).is_none(), "removed from the configuration");
        assert!(p.get(&a("192.0.2.3")).is_none(), "refused by the engine");
        assert_eq!(p.get(&n).map(Peer::state), Some(LinkState::Discovered));
    }
}
