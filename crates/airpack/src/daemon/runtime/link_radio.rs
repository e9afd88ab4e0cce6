//! The radio side of neighbour discovery (issue 11 point 4): starts the
//! radio figures' reader (`discovery.radio`, `discovery.radio_file`), and at
//! each discovery turn hands its newest reading to the neighbour tables,
//! with the mean length of the frames the engine sent each neighbour since
//! the previous reading (what the MAC counters' loss is measured on).
//!
//! Owns: [`LinkRadio`] (the reader and the per-neighbour counter baselines,
//! bounded) and the `radio` object of `airpack peers --json`. Must not
//! touch: the size model (`airpack_core::neighbor`), the netlink parsing
//! (`crate::linux::radio`).

use super::super::config::{Plan, RadioCfg};
use crate::linux::radio::{RadioMonitor, RadioSpec};
use airpack_core::neighbor::radio::RadioReport;
use airpack_core::neighbor::table::Table;
use airpack_core::Engine;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;
use tracing::warn;

/// Most neighbours whose engine counters are remembered between readings.
const MAX_BASELINES: usize = 4096;

/// The radio reader of a daemon with discovery on.
pub(super) struct LinkRadio {
    monitor: RadioMonitor,
    source: &'static str,
    seen: u64,
    /// Engine counters at the previous reading: (bytes, frames) per peer.
    base: HashMap<IpAddr, (u64, u64)>,
    /// Reports handed to a table that held the neighbour.
    pub applied: u64,
}

impl LinkRadio {
    /// The reader `[discovery]` configures, if any (a reader that cannot
    /// start is logged and left out: hellos alone still work).
    pub(super) fn start(plan: &Plan) -> Option<LinkRadio> {
        let c = &plan.config.discovery;
        let (spec, source) = match (&c.radio_file, c.radio) {
            (Some(f), _) => (RadioSpec::File(f.into()), "file"),
            (None, RadioCfg::Nl80211) => (RadioSpec::Nl80211, "nl80211"),
            (None, RadioCfg::Off) => return None,
        };
        let interval = Duration::from_millis(u64::from(c.radio_interval_ms));
        match RadioMonitor::start(
            plan.config.daemon.interfaces.clone(),
            spec,
            interval,
            c.noise_dbm,
        ) {
            Ok(monitor) => Some(LinkRadio {
                monitor,
                source,
                seen: 0,
                base: HashMap::new(),
                applied: 0,
            }),
            Err(e) => {
                warn!("no radio figures for the link estimate: {e}");
                None
            }
        }
    }

    /// Hands a new reading, if any, to `tables` (ifindex, is IPv6, table).
    pub(super) fn apply<'a>(
        &mut self,
        engine: &Engine,
        tables: impl Iterator<Item = (u32, bool, &'a mut Table)>,
    ) {
        let Some(r) = self.monitor.reading_after(self.seen) else {
            return;
        };
        self.seen = r.generation;
        let mut reports: Vec<(u32, IpAddr, RadioReport)> = r.entries;
        if self.base.len() > MAX_BASELINES {
            self.base.clear();
        }
        for (_, ip, rep) in reports.iter_mut() {
            let Some(s) = engine.peer_stats(*ip) else {
                continue;
            };
            // Every packet handed to the engine leaves in a bundle or alone
            // (queued alone, passed back to the kernel, bypassed): one frame
            // per bundle plus one per packet outside bundles.
            let c = &s.counters;
            let bytes = c.bundle_wire_bytes + c.bytes_in.saturating_sub(c.aggregated_bytes);
            let frames = c.bundles + c.packets_in.saturating_sub(c.aggregated_packets);
            if let Some((b0, f0)) = self.base.insert(*ip, (bytes, frames)) {
                if frames > f0 && bytes >= b0 {
                    rep.frame_len = Some(((bytes - b0) / (frames - f0)).min(65_535) as u16);
                }
            }
        }
        for (ifindex, v6, table) in tables {
            for (ix, ip, rep) in &reports {
                if *ix == ifindex && ip.is_ipv6() == v6 && table.radio_report(*ip, rep) {
                    self.applied += 1;
                }
            }
        }
    }

    /// The `radio` object of `airpack peers --json`.
    pub(super) fn json(&self) -> Value {
        let s = self.monitor.stats();
        json!({
            "source": self.source,
            "readings": s.rounds,
            "stations": s.stations,
            "matched": s.matched,
            "applied": self.applied,
            "errors": {
                "no_nl80211": s.no_nl80211,
                "not_wireless": s.not_wireless,
                "netlink": s.netlink_errors,
                "file": s.file_errors,
                "left_out": s.left_out,
            },
        })
    }
}
