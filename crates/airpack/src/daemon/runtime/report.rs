//! Answers to control requests: the `stats`, `peers` and `/metrics`
//! documents, built from the engine's and the daemon's counters.
//!
//! Must not touch: the packet path (nothing here runs per packet).

use super::{link_mode_name, mode_name, Daemon};
use crate::daemon::control::Request;
use crate::daemon::stats;
use crate::linux::monotonic_micros;
use serde_json::{json, Value};
use std::net::IpAddr;

impl Daemon {
    pub(super) fn answer(&mut self, req: Request) -> (bool, Vec<u8>) {
        // The kernel's counters of the TUN (its queue toward the daemon can
        // overflow before the daemon sees a packet): read per request.
        self.tun_link = self.resolver.link_stats(self.tun.ifindex()).ok();
        match req {
            Request::Stats => (true, self.stats_bytes()),
            Request::Peers => (true, self.peers_bytes()),
            Request::Metrics => (true, self.metrics_bytes()),
            Request::Bad(r) => (
                false,
                serde_json::to_vec(&json!({"error": format!("unknown request {r:?} (expected \"stats\" or \"peers\")")}))
                    .unwrap_or_default(),
            ),
        }
    }

    pub(super) fn sorted_peers(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.engine.peers().collect();
        v.sort();
        v
    }

    /// The `airpack stats --json` document without `peers`.
    pub(super) fn stats_head(&self) -> serde_json::Map<String, Value> {
        let mut total = stats::stats_json(&self.engine.stats());
        total.insert("daemon".into(), stats::daemon_json(&self.counters));
        let (qp, qb) = self.engine.queued();
        let head = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "mode": mode_name(self.plan.config.daemon.mode),
            "link_mode": link_mode_name(self.plan.config.aggregation.link_mode),
            "link_busy": self.link_busy,
            "uptime_s": (monotonic_micros().saturating_sub(self.started)) as f64 / 1e6,
            "queued": {"packets": qp, "bytes": qb},
            "links": self.links.iter().map(|l| json!({"interface": l.name, "up": l.up})).collect::<Vec<_>>(),
            "steered_interfaces": self.steering.as_ref().map(|s| s.steered()).unwrap_or_default(),
            "tun": self.tun_link.as_ref().map(|l| json!({
                "name": self.tun.name(),
                "queue_drops": l.tx_dropped,
                "read_by_daemon": l.tx_packets,
                "written_by_daemon": l.rx_packets,
                "rx_dropped": l.rx_dropped,
            })),
            "routes": self.routes_json(),
            "total": total,
        });
        match head {
            Value::Object(m) => m,
            _ => unreachable!("json! object"),
        }
    }

    /// The TUN path's next-hop lookups and the packets that waited for them.
    pub(super) fn routes_json(&self) -> Value {
        let s = self.lookups.stats();
        json!({
            "cached": self.lookups.cached(),
            "pending": self.lookups.pending(),
            "requests": s.requests,
            "answers": s.answers,
            "answered_at_once": s.answered_at_once,
            "input_fallbacks": s.input_fallbacks,
            "stale_replies": s.stale_replies,
            "timeouts": s.timeouts,
            "unavailable": s.unavailable,
            "overruns": s.overruns,
            "malformed": s.malformed,
            "evicted": s.evicted,
            "flushes": s.flushes,
            "capacity_evictions": s.capacity_evictions,
            "max_send_us": s.max_send_us,
            "max_route_change_us": self.park.counters.max_route_change_us,
            "park": self.park.json(),
        })
    }

    /// One element of the stats document's `peers`.
    pub(super) fn stats_peer(&self, p: IpAddr) -> Value {
        let mut m = self
            .engine
            .peer_stats(p)
            .map(stats::stats_json)
            .unwrap_or_default();
        m.insert("peer".into(), self.peer_name(p).into());
        m.insert("configured".into(), self.peers.contains_key(&p).into());
        Value::Object(m)
    }

    /// The `airpack stats --json` document, serialized peer by peer (see
    /// [`stats::write_with_peers`]: no whole-document tree).
    pub fn stats_bytes(&self) -> Vec<u8> {
        let peers = self.sorted_peers();
        let mut out = Vec::new();
        stats::write_with_peers(&mut out, &self.stats_head(), peers.len(), |i| {
            self.stats_peer(peers[i])
        });
        out
    }

    /// The `/metrics` text, peer by peer.
    pub(super) fn metrics_bytes(&self) -> Vec<u8> {
        let mut out = String::new();
        stats::prometheus_head(&Value::Object(self.stats_head()), &mut out);
        for p in self.sorted_peers() {
            stats::prometheus_peer(&self.stats_peer(p), &mut out);
        }
        out.into_bytes()
    }

    /// A peer as `airpack stats`/`peers` name it: its address, with
    /// `%interface` for a link-local one (the config syntax).
    pub(super) fn peer_name(&self, p: IpAddr) -> String {
        match self.peers.get(&p).and_then(|e| e.interface.as_deref()) {
            Some(i) => format!("{p}%{i}"),
            None => p.to_string(),
        }
    }

    /// The `airpack peers --json` document, serialized peer by peer.
    pub fn peers_bytes(&self) -> Vec<u8> {
        let peers = self.sorted_peers();
        let mut head = serde_json::Map::new();
        head.insert(
            "mode".into(),
            mode_name(self.plan.config.daemon.mode).into(),
        );
        let mut out = Vec::new();
        stats::write_with_peers(&mut out, &head, peers.len(), |i| {
            let p = peers[i];
            {
                let cfg = self.engine.peer(p);
                let plan = self.plan.peer(p);
                let c = self
                    .engine
                    .peer_stats(p)
                    .map(|s| s.counters.clone())
                    .unwrap_or_default();
                json!({
                    "peer": self.peer_name(p),
                    "configured": plan.is_some(),
                    "accepts_bundles": cfg.map(|c| c.accepts_bundles),
                    "encoding": cfg.map(|c| c.encoding.name()),
                    "hold_time_us": cfg.map(|c| c.hold_time),
                    "min_size": cfg.map(|c| c.min_size),
                    "max_size": cfg.map(|c| c.max_size),
                    "max_packets": cfg.map(|c| c.max_packets),
                    "outer_overhead": cfg.map(|c| c.outer_overhead),
                    "allowed_ips": plan.map(|p| p.allowed_ips.iter().map(|c| c.to_string()).collect::<Vec<_>>()).unwrap_or_default(),
                    "packets_in": c.packets_in,
                    "bundles": c.bundles,
                    "aggregation_ratio": c.aggregation_ratio(),
                    "bundles_received": c.bundles_received,
                })
            }
        });
        out
    }
}
