//! Route and link changes: the route monitor's events, the steered
//! interfaces that follow them, and the watched links' state.
//!
//! Must not touch: the packet path, the engine.

use super::Daemon;
use crate::daemon::config::{Mode, Plan};
use crate::linux::{self, RouteResolver};
use std::net::IpAddr;
use tracing::{debug, info, warn};

impl Daemon {
    /// Route monitor readable: forget the cached next hops the changes can
    /// affect (only those covered by a changed route's prefixes, unless the
    /// change can affect any), re-evaluate steering and watched links.
    pub(super) fn on_route_change(&mut self, now: u64) {
        let t0 = linux::monotonic_micros();
        self.route_change(now);
        let took = linux::monotonic_micros().saturating_sub(t0);
        self.times.max_route_change_us = self.times.max_route_change_us.max(took);
    }

    fn route_change(&mut self, now: u64) {
        match self.monitor.drain() {
            Ok(ch) if ch.any() => {
                if ch.all() {
                    self.resolver.invalidate();
                    self.lookups.invalidate();
                } else {
                    let changed = self.monitor.prefixes();
                    self.resolver.evict(changed);
                    self.lookups.evict(changed);
                }
                // Evicted requests in flight are asked again; packets
                // waiting for them stay parked.
                self.release(now, false);
                self.counters.route_changes += 1;
                self.update_steering(ch.link || ch.overrun);
                if ch.link || ch.overrun {
                    self.discovery_refresh();
                    self.peers.resolve_all(|p| {
                        info!(peer = %p.addr(), interface = ?p.interface(), ifindex = p.scope(), "link-local peer's interface changed");
                    });
                    for l in &mut self.links {
                        let now_up = link_state(&l.name);
                        if now_up != l.up {
                            self.counters.link_transitions += 1;
                            match now_up {
                                Some(true) => info!(interface = %l.name, "link up"),
                                Some(false) => warn!(interface = %l.name, "link down"),
                                None => warn!(interface = %l.name, "link removed"),
                            }
                            l.up = now_up;
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(e) => {
                debug!("route monitor: {e}");
                self.resolver.invalidate();
                self.lookups.invalidate();
                self.update_steering(true);
            }
        }
    }

    /// Keeps the steered interfaces right after a route or link change: in
    /// auto mode the interfaces of the routes to the peers; `links`: also
    /// attach to interfaces that appeared (or were created again).
    pub(super) fn update_steering(&mut self, links: bool) {
        let Some(st) = &mut self.steering else { return };
        let before = st.steered();
        let want = self
            .steer_auto
            .then(|| auto_interfaces(&self.plan, &mut self.resolver, self.tun.ifindex()))
            .filter(|w| *w != st.spec().interfaces);
        let r = match want {
            Some(want) => st.set_interfaces(&want),
            None if links => st.refresh().map(|_| ()),
            None => Ok(()),
        };
        if let Err(e) = r {
            self.counters.steering_errors += 1;
            warn!("steering: {e}");
        }
        let after = st.steered();
        if after != before {
            self.counters.steering_changes += 1;
            info!(steered = ?after, "steered interfaces changed");
        }
    }
}

/// The parts of a steering spec that need a full reinstall when changed.
#[derive(PartialEq, Eq)]
pub(super) struct SteerKey {
    tun: String,
    bypass: u32,
    prio: u16,
    from_tun: bool,
}

impl SteerKey {
    pub(super) fn of(s: &crate::linux::SteerSpec) -> SteerKey {
        SteerKey {
            tun: s.tun.clone(),
            bypass: s.bypass_mark,
            prio: s.priority,
            from_tun: s.steer_from_tun,
        }
    }
}

/// The interfaces to steer when none are configured: those of the kernel's
/// routes to the configured peers (a link-local peer's own interface) and,
/// end-to-end, to the allowed-IPs prefixes. Sorted, without the TUN.
pub(super) fn auto_interfaces(plan: &Plan, resolver: &mut RouteResolver, tun: u32) -> Vec<String> {
    let mut names = Vec::new();
    let mut via = |dst: IpAddr, names: &mut Vec<String>| {
        if let Ok(nh) = resolver.lookup(dst) {
            if !nh.local && nh.oif != tun {
                if let Ok(n) = linux::tun::ifname(nh.oif) {
                    names.push(n);
                }
            }
        }
    };
    for p in &plan.peers {
        match &p.interface {
            Some(i) => names.push(i.clone()),
            None => via(p.address, &mut names),
        }
    }
    if plan.config.daemon.mode == Mode::EndToEnd {
        for (c, _) in plan.allowed_ips.entries() {
            via(c.addr, &mut names);
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Up and running (`Some(true)`), down (`Some(false)`) or missing/unreadable (`None`).
pub(super) fn link_state(name: &str) -> Option<bool> {
    linux::tun::link_up(name).ok().flatten()
}
