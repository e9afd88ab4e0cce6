//! SIGHUP: re-reading the configuration while running, keeping what needs a
//! restart and updating steering, engine and peers in place.
//!
//! Must not touch: the packet path.

use super::routing::{auto_interfaces, SteerKey};
use super::Daemon;
use crate::linux::Steering;
use tracing::{error, info, warn};

impl Daemon {
    /// SIGHUP: re-reads the configuration; a bad one is logged and ignored.
    pub(super) fn reload(&mut self, now: u64) {
        let mut new = match self.source.load() {
            Ok(p) => p,
            Err(e) => {
                self.counters.reload_errors += 1;
                error!("reload rejected, keeping the running configuration: {e:#}");
                return;
            }
        };
        // The mesh key also sizes every peer's outer overhead (its bundle
        // trailer) in the new plan: a change needs a restart, like the rest
        // of [discovery], so the whole reload is refused.
        if new.bundle_key != self.plan.bundle_key {
            self.counters.reload_errors += 1;
            error!("reload rejected, keeping the running configuration: discovery.key changes need a restart");
            return;
        }
        // Keys bound to open descriptors need a restart; keep their old values.
        {
            let (o, n) = (&self.plan.config, &mut new.config);
            let mut kept = Vec::new();
            macro_rules! keep {
                ($($f:ident).+) => {
                    if o.$($f).+ != n.$($f).+ {
                        kept.push(stringify!($($f).+));
                        n.$($f).+ = o.$($f).+.clone();
                    }
                };
            }
            keep!(daemon.tun);
            keep!(daemon.tun_mtu);
            keep!(daemon.tun_txqueuelen);
            keep!(daemon.control_socket);
            keep!(daemon.prometheus);
            keep!(daemon.transport);
            keep!(daemon.udp_port);
            keep!(daemon.log);
            keep!(daemon.sched_priority);
            keep!(daemon.cpu_latency_us);
            keep!(aggregation.protocol);
            keep!(discovery);
            if !kept.is_empty() {
                warn!(
                    "reload: {} only take effect after a restart; keeping the running values",
                    kept.join(", ")
                );
            }
        }
        new.prometheus = self.plan.prometheus;
        // `[gateway]`: its controller settings in place, the rest kept.
        self.reload_gateway(&mut new);
        // The downlink roles: applied (rebuilt) or refused, before the
        // steering follows `new` (it carries the AP's media ports).
        let downlink: Vec<String> = [
            self.reload_ap(&mut new, now),
            self.reload_station(&mut new, now),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut changed = crate::daemon::config_diff::changes(&self.plan.config, &new.config);
        changed.extend(downlink);
        let mut new_spec = new.steer_spec();
        self.steer_auto = new_spec.interfaces.is_empty();
        if self.steer_auto {
            new_spec.interfaces = auto_interfaces(&new, &mut self.resolver, self.tun.ifindex());
        }
        if let Some(st) = &mut self.steering {
            let old = st.spec().clone();
            let r = if SteerKey::of(&old) == SteerKey::of(&new_spec) {
                let r = if old.matches != new_spec.matches {
                    st.update_matches(&new_spec.matches)
                } else {
                    Ok(())
                };
                r.and(st.set_interfaces(&new_spec.interfaces))
            } else {
                // Mark, priority or mode changed: remove and install anew.
                let st = self.steering.take().expect("present");
                if let Err(e) = st.remove() {
                    warn!("removing old steering: {e}");
                }
                Steering::install(&new_spec).map(|s| {
                    self.steering = Some(s);
                })
            };
            if let Err(e) = r {
                self.counters.reload_errors += 1;
                error!("reload: steering update failed ({e}); packets may not be steered until the next reload");
            }
        } else {
            // A previous reload failed to reinstall the steering: try again.
            match Steering::install(&new_spec) {
                Ok(s) => self.steering = Some(s),
                Err(e) => {
                    self.counters.reload_errors += 1;
                    error!("reload: installing steering failed ({e}); packets are not steered");
                }
            }
        }
        self.engine.reconfigure(new.engine.clone());
        for old in &self.plan.peers {
            if new.peer(old.address).is_none() {
                // Queued packets for it leave unbundled, never lost.
                self.engine.remove_peer(old.address);
            }
        }
        for p in &new.peers {
            if let Err(r) = self.engine.set_peer(p.address, p.config.clone()) {
                error!("reload: engine refused peer {}: {}", p.address, r.reason());
            }
        }
        if self.hold_while_busy() != super::busy::medium_aware(&new)
            || self.plan.config.medium != new.config.medium
            || self.plan.config.daemon.interfaces != new.config.daemon.interfaces
            || super::busy::survey_wanted(&self.plan) != super::busy::survey_wanted(&new)
        {
            // Sources as the new configuration says (the qdisc and survey readers restart).
            self.busy_sources = super::busy::BusySources::new(&new);
            self.medium = Default::default();
            self.link_busy = false;
            self.engine.set_link_busy(now, false);
        }
        let engine = &self.engine;
        self.peers.reload(&new, |a| engine.peer(a).is_some());
        self.resolver.invalidate();
        self.lookups.invalidate();
        self.plan = new;
        // Discovered neighbours that are not static now are peers again.
        self.reapply_discovered(now);
        self.counters.reloads += 1;
        let changed = if changed.is_empty() {
            "nothing changed".to_owned()
        } else {
            changed.join("; ")
        };
        info!(
            peers = self.plan.peers.len(),
            "configuration reloaded: {changed}"
        );
    }
}
