//! The setups an experiment compares, and each node's daemon configuration
//! under them.
//!
//! Owns: the [`Setup`] names (parse, print, which group a setup is in), the
//! TOML each node's `airpack run` gets per setup ([`daemon_config`]: off,
//! hop-by-hop, end-to-end, hold-while-busy, adaptive, link-adaptive, the
//! downlink-mux family, the gateway pacers) and the lab qdisc a gateway arm
//! puts on the gateway's radio.
//!
//! Must not touch: running anything (the point's flow is
//! [`super::run_point_with`]), the daemon's own config parsing and
//! validation, voice results.

use super::{call_pair, endpoints, ExperimentConfig};
use crate::topology::{Topology, RADIO};
use anyhow::{bail, Result};
use serde::Serialize;
use std::path::Path;

/// How the nodes aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Setup {
    /// No daemon: plain forwarding.
    Off,
    /// Every node aggregates to its next hop (peers = its neighbours), fixed hold time.
    HopByHop,
    /// Call endpoints aggregate to the far endpoint; relays only forward.
    EndToEnd,
    /// Hop-by-hop with `link_mode = "hold-while-busy"`.
    HoldWhileBusy,
    /// Hop-by-hop with `link_mode = "adaptive"`; on the ns-3 air each daemon
    /// reads its node's `NODE.air` counters (`[medium] file`).
    Adaptive,
    /// Hop-by-hop with the fixed hold, peers discovered by hellos instead
    /// of `[[peer]]`s, each link's largest bundle from its hello loss
    /// (link-adaptive size, [`crate::link_size`]); `hop-by-hop` is the
    /// same with a fixed 1500-byte maximum on every link.
    LinkAdaptive,
    /// Infrastructure cell ([`crate::cell`]): `[ap]` on the access point,
    /// `[station]` on every station of a call; a lone packet leaves at once
    /// while the AP's medium is idle (its `NODE.air` file on the ns-3 air).
    DownlinkMux,
    /// As [`Setup::DownlinkMux`] with the loss rule (`ap.loss_aware`, the
    /// daemon's default; the other downlink setups turn it off so that they
    /// stay airtime-only): a station reporting multicast loss above
    /// `ap.loss_limit_pct` is served by unicast.
    DownlinkMuxLoss,
    /// As [`Setup::DownlinkMux`] without the idle release: one frame per
    /// 20 ms interval (or when full).
    DownlinkMuxInterval,
    /// As [`Setup::DownlinkMux`] with `ap.redundancy = true` (each frame
    /// also carries the previous frame's packets when it has room) and the
    /// airtime rule on the preset's rates (`ap.unicast_rate`,
    /// `ap.multicast_rate`, `ap.preamble`: a frame is sent only when it
    /// costs less airtime than unicast).
    DownlinkMuxRed,
    /// As [`Setup::DownlinkMuxRed`] with the loss rule on (what the daemon's
    /// defaults plus `ap.redundancy = true` do): the rule then judges a
    /// station's loss after recovery from the redundant copies.
    DownlinkMuxRedLoss,
    /// `downlink-mux-red` plus uplink aggregation: each station bundles its
    /// calls' uplink packets to the AP (`crate::cell::station_uplink_agg`).
    DownlinkMuxAgg,
    /// `downlink-mux-red` at redundancy depth 2 (the last two frames).
    DownlinkMuxRed2,
    /// `downlink-mux-agg` with `ap.redundancy_partial` (a rotating window of
    /// the previous frame's entries when the whole block does not fit).
    DownlinkMuxAggPartial,
    /// Seed 003's gateway ([`crate::gw`]), arm "no control": no daemon, no
    /// qdisc (as `off`, named for the experiment's table).
    NoControl,
    /// Gateway arm: an HTB at the gateway's radio with voice (DSCP EF) in a
    /// priority class ([`crate::gw::qdisc_script`]).
    VoicePriority,
    /// Gateway arm: the same with TCP in a class at a fixed rate (`--shaper-kbps`).
    FixedShaper,
    /// Gateway arm: the daemon's `[gateway]` role (the voice-adaptive pacer) on the gateway.
    Pacer,
    /// Gateway arm: the pacer plus the TCP Improvement Module with
    /// queue-aware window control (`gateway.tcp_improvement`).
    PacerTim,
    /// Gateway arm (issue 12 point 7(d)): the pacer on the gateway plus
    /// hop-by-hop aggregation in the daemon's default link mode (adaptive,
    /// reading `NODE.air`) on every mesh node behind it, between the mesh
    /// nodes; the gateway itself does not aggregate (its voice monitor reads
    /// the calls' RTP on its radio, which bundles would hide), so the hop
    /// `G - M1` carries single packets.
    PacerAgg,
}

impl Setup {
    /// Parse a setup name.
    pub fn parse(s: &str) -> Result<Setup> {
        Ok(match s.trim() {
            "off" => Setup::Off,
            "hop-by-hop" | "hbh" => Setup::HopByHop,
            "end-to-end" | "e2e" => Setup::EndToEnd,
            "hold-while-busy" | "hwb" => Setup::HoldWhileBusy,
            "adaptive" => Setup::Adaptive,
            "link-adaptive" | "la" => Setup::LinkAdaptive,
            "downlink-mux" | "mux" => Setup::DownlinkMux,
            "downlink-mux-loss" | "mux-loss" => Setup::DownlinkMuxLoss,
            "downlink-mux-interval" | "mux-interval" => Setup::DownlinkMuxInterval,
            "downlink-mux-red" | "mux-red" => Setup::DownlinkMuxRed,
            "downlink-mux-red-loss" | "mux-red-loss" => Setup::DownlinkMuxRedLoss,
            "downlink-mux-agg" | "mux-agg" => Setup::DownlinkMuxAgg,
            "downlink-mux-red2" | "mux-red2" => Setup::DownlinkMuxRed2,
            "downlink-mux-agg-partial" | "mux-agg-partial" => Setup::DownlinkMuxAggPartial,
            "no-control" => Setup::NoControl,
            "voice-priority" => Setup::VoicePriority,
            "fixed-shaper" => Setup::FixedShaper,
            "pacer" => Setup::Pacer,
            "pacer-tim" => Setup::PacerTim,
            "pacer-agg" => Setup::PacerAgg,
            o => bail!("unknown setup {o:?} (off, hop-by-hop, end-to-end, hold-while-busy, adaptive, link-adaptive, downlink-mux, downlink-mux-loss, downlink-mux-interval, downlink-mux-red, downlink-mux-red-loss, downlink-mux-red2, downlink-mux-agg, downlink-mux-agg-partial; gateway presets: no-control, voice-priority, fixed-shaper, pacer, pacer-tim, pacer-agg)"),
        })
    }
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Setup::Off => "off",
            Setup::HopByHop => "hop-by-hop",
            Setup::EndToEnd => "end-to-end",
            Setup::HoldWhileBusy => "hold-while-busy",
            Setup::Adaptive => "adaptive",
            Setup::LinkAdaptive => "link-adaptive",
            Setup::DownlinkMux => "downlink-mux",
            Setup::DownlinkMuxLoss => "downlink-mux-loss",
            Setup::DownlinkMuxInterval => "downlink-mux-interval",
            Setup::DownlinkMuxRed => "downlink-mux-red",
            Setup::DownlinkMuxRedLoss => "downlink-mux-red-loss",
            Setup::DownlinkMuxAgg => "downlink-mux-agg",
            Setup::DownlinkMuxRed2 => "downlink-mux-red2",
            Setup::DownlinkMuxAggPartial => "downlink-mux-agg-partial",
            Setup::NoControl => "no-control",
            Setup::VoicePriority => "voice-priority",
            Setup::FixedShaper => "fixed-shaper",
            Setup::Pacer => "pacer",
            Setup::PacerTim => "pacer-tim",
            Setup::PacerAgg => "pacer-agg",
        }
    }
    /// The arms of seed 003's gateway experiment (need a `gw:N` preset).
    pub fn gateway_arm(self) -> bool {
        matches!(
            self,
            Setup::NoControl
                | Setup::VoicePriority
                | Setup::FixedShaper
                | Setup::Pacer
                | Setup::PacerTim
                | Setup::PacerAgg
        )
    }
    /// The downlink-multiplexing setups (a cell's AP and stations run daemons).
    pub fn downlink(self) -> bool {
        matches!(
            self,
            Setup::DownlinkMux
                | Setup::DownlinkMuxLoss
                | Setup::DownlinkMuxInterval
                | Setup::DownlinkMuxRed
                | Setup::DownlinkMuxRedLoss
                | Setup::DownlinkMuxAgg
                | Setup::DownlinkMuxRed2
                | Setup::DownlinkMuxAggPartial
        )
    }
}

/// The daemon config (daemon contract TOML) of `node` for `setup`, or None
/// if the node runs no daemon in that setup. `air_file`: the node's medium
/// counters file (ns-3 air), given to the adaptive setup's daemon.
pub fn daemon_config(
    cfg: &ExperimentConfig,
    setup: Setup,
    node: &str,
    n: u32,
    socket: &Path,
    air_file: Option<&Path>,
) -> Option<String> {
    let topo = &cfg.topo;
    let idx = |x: &str| topo.nodes.iter().position(|y| y == x).expect("known node");
    let addr = |x: &str| Topology::addr_of(idx(x)).to_string();
    // the gateway's `[gateway]` role (only on the gateway node)
    let pacer = || {
        let g = topo.gw.as_ref()?;
        (node == crate::gw::GW).then(|| {
            crate::gw::pacer_config(
                &socket.to_string_lossy(),
                g,
                &cfg.medium.phy,
                cfg.playout_ms,
                setup == Setup::PacerTim,
            )
        })
    };
    let (mode, link_mode, peers): (&str, &str, Vec<(String, Option<String>)>) = match setup {
        Setup::Off | Setup::NoControl | Setup::VoicePriority | Setup::FixedShaper => return None,
        Setup::Pacer | Setup::PacerTim => return pacer(),
        // pacer-agg: the pacer on the gateway, no daemon on the server
        Setup::PacerAgg if node == crate::gw::GW || node == crate::gw::SERVER => return pacer(),
        Setup::DownlinkMux
        | Setup::DownlinkMuxLoss
        | Setup::DownlinkMuxInterval
        | Setup::DownlinkMuxRed
        | Setup::DownlinkMuxRedLoss
        | Setup::DownlinkMuxAgg
        | Setup::DownlinkMuxRed2
        | Setup::DownlinkMuxAggPartial => {
            let sock = socket.to_string_lossy();
            let ap = topo.wifi.ap.as_deref()?;
            let agg = matches!(setup, Setup::DownlinkMuxAgg | Setup::DownlinkMuxAggPartial);
            if node == ap {
                let release = if setup == Setup::DownlinkMuxInterval {
                    crate::cell::Release::Interval
                } else {
                    crate::cell::Release::Medium
                };
                let f = air_file.map(|f| f.to_string_lossy().into_owned());
                let red = matches!(
                    setup,
                    Setup::DownlinkMuxRed
                        | Setup::DownlinkMuxRedLoss
                        | Setup::DownlinkMuxAgg
                        | Setup::DownlinkMuxRed2
                        | Setup::DownlinkMuxAggPartial
                )
                .then(|| crate::cell::Redundancy {
                    depth: if setup == Setup::DownlinkMuxRed2 {
                        2
                    } else {
                        1
                    },
                    partial: setup == Setup::DownlinkMuxAggPartial,
                    ..crate::cell::Redundancy::of(&cfg.medium.phy, topo.wifi.multicast_mbit)
                });
                let mut s = crate::cell::ap_config(&sock, f.as_deref(), release, red);
                if red.is_none() {
                    // The AP knows its radio's rates, as an operator
                    // configures them: the airtime rule prices frames and
                    // their copies (ap.frame_copies: 2 with the rule on),
                    // and unicast for the loss rule's airtime guard.
                    let r = crate::cell::Redundancy::of(&cfg.medium.phy, topo.wifi.multicast_mbit);
                    s.push_str(&r.rates_toml());
                }
                if !matches!(setup, Setup::DownlinkMuxLoss | Setup::DownlinkMuxRedLoss) {
                    s.push_str("loss_aware = false\n");
                }
                crate::cell::apply_ap_settings(&mut s, &topo.wifi.ap_set);
                if agg {
                    let st: Vec<String> = topo
                        .neighbours(ap)
                        .iter()
                        .filter(|x| endpoints(topo, n).contains(x))
                        .map(|x| addr(x))
                        .collect();
                    s.push_str(&crate::cell::ap_uplink_peers(&st));
                }
                return Some(s);
            }
            if !topo.neighbours(ap).iter().any(|x| x == node) {
                return None; // an outer node (or a node of no BSS)
            }
            // a station: the ports of its calls (one port, or the range
            // spanning them when it has several calls)
            let ports: Vec<u32> = (0..n)
                .filter(|&k| {
                    let (a, b) = call_pair(topo, k);
                    a == node || b == node
                })
                .map(|k| 16000 + 2 * k)
                .collect();
            let (lo, hi) = (*ports.iter().min()?, *ports.iter().max()?);
            let spec = if lo == hi {
                lo.to_string()
            } else {
                format!("\"{lo}-{hi}\"")
            };
            let mut s = crate::cell::station_config(&sock, &addr(ap), &spec);
            if agg {
                s.push_str(&crate::cell::station_uplink_agg(
                    &addr(ap),
                    ports.len() as u32,
                    cfg.interval_ms * 1000,
                ));
            }
            return Some(s);
        }
        Setup::HopByHop
        | Setup::HoldWhileBusy
        | Setup::Adaptive
        | Setup::LinkAdaptive
        | Setup::PacerAgg => (
            "hop-by-hop",
            match setup {
                Setup::HoldWhileBusy => "hold-while-busy",
                Setup::Adaptive | Setup::PacerAgg => "adaptive",
                _ => "fixed",
            },
            if setup == Setup::LinkAdaptive {
                Vec::new() // discovered (a static peer would keep its fixed size)
            } else {
                let v: Vec<(String, Option<String>)> = topo
                    .neighbours(node)
                    .iter()
                    // pacer-agg: the gateway does not aggregate
                    .filter(|nb| setup != Setup::PacerAgg || *nb != crate::gw::GW)
                    .map(|nb| (addr(nb), None))
                    .collect();
                if v.is_empty() && setup == Setup::PacerAgg {
                    return None;
                }
                v
            },
        ),
        Setup::EndToEnd => {
            let mut far: Vec<String> = Vec::new();
            for k in 0..n {
                let (a, b) = call_pair(topo, k);
                let other = if a == node {
                    b
                } else if b == node {
                    a
                } else {
                    continue;
                };
                if !far.iter().any(|f| f == other) {
                    far.push(other.to_string());
                }
            }
            if far.is_empty() {
                return None;
            }
            (
                "end-to-end",
                "fixed",
                far.iter()
                    .map(|f| (addr(f), Some(format!("{}/32", addr(f)))))
                    .collect(),
            )
        }
    };
    let mut s = format!(
        "# generated by airpack lab for node {node}, setup {}\n[daemon]\nmode = \"{mode}\"\ntun = \"airpack0\"\ncontrol_socket = \"{}\"\nlog = \"warn\"\ninterfaces = [\"{RADIO}\"]\n\n[aggregation]\nencoding = \"native\"\nhold_time_us = {}\nlink_mode = \"{link_mode}\"\n\n[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"16000-32000\"\n",
        setup.name(),
        socket.display(),
        cfg.hold_time_us
    );
    if let (Setup::Adaptive | Setup::PacerAgg, Some(f)) = (setup, air_file) {
        s.push_str(&format!("\n[medium]\nfile = \"{}\"\n", f.display()));
    }
    if setup == Setup::LinkAdaptive {
        s.push_str(&crate::link_size::discovery_section(
            cfg.medium.phy.rate_mbps,
        ));
        // On the ns-3 air: the radio's per-peer signal and MAC counters too.
        if let Some(f) = air_file {
            s.push_str(&format!("radio_file = \"{}\"\n", f.display()));
        }
    }
    for (a, allowed) in peers {
        s.push_str(&format!("\n[[peer]]\naddress = \"{a}\"\n"));
        if let Some(al) = allowed {
            s.push_str(&format!("allowed_ips = [\"{al}\"]\n"));
        }
    }
    Some(s)
}

/// The lab qdisc a gateway arm puts on the gateway's radio, if any.
pub(super) fn gateway_shaping(setup: Setup) -> Option<crate::gw::Shaping> {
    match setup {
        Setup::VoicePriority => Some(crate::gw::Shaping::VoicePriority),
        Setup::FixedShaper => Some(crate::gw::Shaping::FixedShaper),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::tests::cfg;

    #[test]
    fn configs_per_setup() {
        let c = cfg();
        let s = Path::new("/tmp/x.sock");
        assert!(daemon_config(&c, Setup::Off, "C", 2, s, None).is_none());
        let hbh = daemon_config(&c, Setup::HopByHop, "C", 2, s, None).unwrap();
        assert_eq!(hbh.matches("[[peer]]").count(), 3, "{hbh}");
        assert!(hbh.contains("link_mode = \"fixed\""));
        // end-to-end spells the fixed hold too (the daemon's default link
        // mode is adaptive hop-by-hop, fixed end-to-end: not relied on here)
        let e2e = daemon_config(&c, Setup::EndToEnd, "A", 2, s, None).unwrap();
        assert!(
            e2e.contains("mode = \"end-to-end\"") && e2e.contains("link_mode = \"fixed\""),
            "{e2e}"
        );
        let ad = daemon_config(
            &c,
            Setup::Adaptive,
            "A",
            2,
            s,
            Some(Path::new("/dev/shm/x/A.air")),
        )
        .unwrap();
        assert!(
            ad.contains("link_mode = \"adaptive\"")
                && ad.contains("[medium]\nfile = \"/dev/shm/x/A.air\"")
        );
        assert!(!daemon_config(&c, Setup::Adaptive, "A", 2, s, None)
            .unwrap()
            .contains("[medium]"));
        let hwb = daemon_config(&c, Setup::HoldWhileBusy, "A", 2, s, None).unwrap();
        assert!(
            hwb.contains("hold-while-busy") && hwb.contains("10.201.0.3"),
            "{hwb}"
        );
        // link-adaptive: the fixed hold, no static peer (it would keep 1500
        // bytes), discovery with the size model at the PHY's rate
        let la = daemon_config(&c, Setup::LinkAdaptive, "C", 2, s, None).unwrap();
        assert!(
            la.contains("mode = \"hop-by-hop\"") && la.contains("link_mode = \"fixed\""),
            "{la}"
        );
        assert!(!la.contains("[[peer]]"), "{la}");
        assert!(
            la.contains("[discovery]\nenabled = true\n")
                && la.contains(&format!("rate_mbps = {}\n", c.medium.phy.rate_mbps)),
            "{la}"
        );
        assert!(!la.contains("radio_file"), "{la}");
        let la3 = daemon_config(
            &c,
            Setup::LinkAdaptive,
            "C",
            2,
            s,
            Some(Path::new("/dev/shm/x/C.air")),
        )
        .unwrap();
        assert!(
            la3.contains("[discovery]\nenabled = true\n")
                && la3.contains("radio_file = \"/dev/shm/x/C.air\"\n"),
            "{la3}"
        );
        assert_eq!(Setup::parse("link-adaptive").unwrap(), Setup::LinkAdaptive);
        assert_eq!(Setup::parse("la").unwrap().name(), "link-adaptive");
        // end-to-end: relay C runs nothing; D talks to A and B; A only to D
        assert!(daemon_config(&c, Setup::EndToEnd, "C", 2, s, None).is_none());
        let d = daemon_config(&c, Setup::EndToEnd, "D", 2, s, None).unwrap();
        assert!(
            d.contains("allowed_ips = [\"10.201.0.1/32\"]") && d.contains("10.201.0.2/32"),
            "{d}"
        );
        let a = daemon_config(&c, Setup::EndToEnd, "A", 1, s, None).unwrap();
        assert_eq!(a.matches("[[peer]]").count(), 1);
        // one call: B is no endpoint
        assert!(daemon_config(&c, Setup::EndToEnd, "B", 1, s, None).is_none());
        for t in [hbh, hwb, d, a] {
            toml::from_str::<toml::Value>(&t).unwrap();
        }
    }

    #[test]
    fn downlink_configs_in_a_cell() {
        let mut c = cfg();
        c.topo = crate::cell::CellSpec::parse("cell:b11:11:2")
            .unwrap()
            .unwrap()
            .topology(3);
        let s = Path::new("/tmp/x.sock");
        let f = Path::new("/dev/shm/x/AP.air");
        let ap = daemon_config(&c, Setup::DownlinkMux, "AP", 3, s, Some(f)).unwrap();
        assert!(
            ap.contains("[ap]")
                && ap.contains("idle_release = true")
                && ap.contains("file = \"/dev/shm/x/AP.air\""),
            "{ap}"
        );
        let ap = daemon_config(&c, Setup::DownlinkMuxInterval, "AP", 3, s, Some(f)).unwrap();
        assert!(
            ap.contains("idle_release = false") && !ap.contains("[medium]"),
            "{ap}"
        );
        // S1 carries calls 0 and 1 (ports 16000, 16002), S2 call 2
        let s1 = daemon_config(&c, Setup::DownlinkMux, "S1", 3, s, None).unwrap();
        assert!(
            s1.contains("ports = \"16000-16002\"") && s1.contains("ap = \"10.201.0.1\""),
            "{s1}"
        );
        let s2 = daemon_config(&c, Setup::DownlinkMux, "S2", 3, s, None).unwrap();
        assert!(s2.contains("ports = 16004"), "{s2}");
        assert!(
            daemon_config(&c, Setup::DownlinkMux, "O1", 3, s, None).is_none(),
            "outer nodes run nothing"
        );
        assert!(daemon_config(&c, Setup::Off, "AP", 3, s, None).is_none());
        for t in [ap, s1, s2] {
            toml::from_str::<toml::Value>(&t).unwrap();
        }
        // no access point, no downlink daemons
        assert!(daemon_config(&cfg(), Setup::DownlinkMux, "C", 2, s, None).is_none());
        assert_eq!(Setup::parse("mux").unwrap(), Setup::DownlinkMux);
        assert!(Setup::DownlinkMuxInterval.downlink() && !Setup::HopByHop.downlink());
        // redundancy: the setup's names, and the airtime rule of the preset's rates
        for n in ["downlink-mux-red", "mux-red"] {
            assert_eq!(Setup::parse(n).unwrap(), Setup::DownlinkMuxRed);
        }
        assert_eq!(Setup::DownlinkMuxRed.name(), "downlink-mux-red");
        assert!(Setup::DownlinkMuxRed.downlink());
        assert!(!daemon_config(&c, Setup::DownlinkMux, "AP", 3, s, Some(f))
            .unwrap()
            .contains("redundancy"));
        c.medium.phy = crate::medium::preset("b11").unwrap();
        let ap = daemon_config(&c, Setup::DownlinkMuxRed, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&ap).unwrap();
        assert_eq!(v["ap"]["redundancy"].as_bool(), Some(true), "{ap}");
        assert_eq!(v["ap"]["idle_release"].as_bool(), Some(true), "{ap}");
        assert_eq!(
            (
                v["ap"]["unicast_rate"].as_float(),
                v["ap"]["multicast_rate"].as_float()
            ),
            (Some(11.0), Some(11.0)),
            "{ap}"
        );
        assert_eq!(
            v["medium"]["file"].as_str(),
            Some("/dev/shm/x/AP.air"),
            "{ap}"
        );
        // the loss rule: on (the daemon's default) with the preset's rates in
        // downlink-mux-loss only; the other downlink setups stay airtime-only
        assert_eq!(Setup::parse("mux-loss").unwrap(), Setup::DownlinkMuxLoss);
        assert!(Setup::DownlinkMuxLoss.downlink());
        let ap = daemon_config(&c, Setup::DownlinkMuxLoss, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&ap).unwrap();
        assert_eq!(v["ap"].get("loss_aware"), None, "{ap}");
        assert_eq!(v["ap"]["unicast_rate"].as_float(), Some(11.0), "{ap}");
        for setup in [Setup::DownlinkMux, Setup::DownlinkMuxRed] {
            let ap = daemon_config(&c, setup, "AP", 3, s, Some(f)).unwrap();
            let v = toml::from_str::<toml::Value>(&ap).unwrap();
            assert_eq!(v["ap"]["loss_aware"].as_bool(), Some(false), "{ap}");
            // the AP knows its radio's rates: the airtime rule prices frames
            // and copies in every downlink setup (once each)
            assert_eq!(v["ap"]["multicast_rate"].as_float(), Some(11.0), "{ap}");
            assert_eq!(ap.matches("unicast_rate").count(), 1, "{ap}");
        }
        // redundancy with the loss rule: downlink-mux-red's AP config
        // without `loss_aware = false` (the daemon's default rule, judged
        // after recovery), the same stations
        for n in ["downlink-mux-red-loss", "mux-red-loss"] {
            assert_eq!(Setup::parse(n).unwrap(), Setup::DownlinkMuxRedLoss);
        }
        assert_eq!(Setup::DownlinkMuxRedLoss.name(), "downlink-mux-red-loss");
        assert!(Setup::DownlinkMuxRedLoss.downlink());
        let rl = daemon_config(&c, Setup::DownlinkMuxRedLoss, "AP", 3, s, Some(f)).unwrap();
        let red = daemon_config(&c, Setup::DownlinkMuxRed, "AP", 3, s, Some(f)).unwrap();
        assert_eq!(
            rl.replace("downlink-mux-red-loss", "downlink-mux-red"),
            red.replace("loss_aware = false\n", ""),
            "{rl}"
        );
        let v = toml::from_str::<toml::Value>(&rl).unwrap();
        assert_eq!(v["ap"].get("loss_aware"), None, "{rl}");
        assert_eq!(v["ap"]["redundancy"].as_bool(), Some(true), "{rl}");
        assert_eq!(v["ap"]["multicast_rate"].as_float(), Some(11.0), "{rl}");
        assert_eq!(
            daemon_config(&c, Setup::DownlinkMuxRedLoss, "S1", 3, s, None),
            daemon_config(&c, Setup::DownlinkMux, "S1", 3, s, None)
        );
        // --ap-set: added to [ap], replacing the setup's own key, stations untouched
        let mut c2 = c.clone();
        c2.topo.wifi.ap_set = crate::cell::ap_settings(&[
            "loss_aware=true".into(),
            "loss_airtime_budget = 0.8".into(),
        ])
        .unwrap();
        let ap = daemon_config(&c2, Setup::DownlinkMux, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&ap).expect("one loss_aware key");
        assert_eq!(v["ap"]["loss_aware"].as_bool(), Some(true), "{ap}");
        assert_eq!(v["ap"]["loss_airtime_budget"].as_float(), Some(0.8), "{ap}");
        assert_eq!(
            v["medium"]["file"].as_str(),
            Some("/dev/shm/x/AP.air"),
            "{ap}"
        );
        assert_eq!(
            daemon_config(&c2, Setup::DownlinkMux, "S1", 3, s, None),
            daemon_config(&c, Setup::DownlinkMux, "S1", 3, s, None)
        );
        let agg = daemon_config(&c2, Setup::DownlinkMuxAgg, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&agg).unwrap();
        assert_eq!(
            v["ap"]["loss_airtime_budget"].as_float(),
            Some(0.8),
            "{agg}"
        );
        for bad in [
            "key=\"x\"",
            "enabled=false",
            "a.b=1",
            "loss_limit_pct",
            "x=[1]",
            "x=bare",
        ] {
            assert!(crate::cell::ap_settings(&[bad.into()]).is_err(), "{bad}");
        }
        // stations are those of downlink-mux (they recover without a key of their own)
        assert_eq!(
            daemon_config(&c, Setup::DownlinkMuxRed, "S1", 3, s, None),
            daemon_config(&c, Setup::DownlinkMux, "S1", 3, s, None)
        );
        // uplink aggregation beside the mux: the AP takes bundles from the
        // stations of the point's calls, a station bundles its calls to the AP
        assert_eq!(Setup::parse("mux-agg").unwrap(), Setup::DownlinkMuxAgg);
        assert_eq!(
            Setup::parse("downlink-mux-red2").unwrap().name(),
            "downlink-mux-red2"
        );
        let ap2 = daemon_config(&c, Setup::DownlinkMuxRed2, "AP", 3, s, Some(f)).unwrap();
        assert_eq!(
            toml::from_str::<toml::Value>(&ap2).unwrap()["ap"]["redundancy"].as_integer(),
            Some(2),
            "{ap2}"
        );
        let app = daemon_config(&c, Setup::DownlinkMuxAggPartial, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&app).unwrap();
        assert_eq!(
            (
                v["ap"]["redundancy_partial"].as_bool(),
                v["peer"].as_array().map(|p| p.len())
            ),
            (Some(true), Some(2)),
            "{app}"
        );
        assert_eq!(
            daemon_config(&c, Setup::DownlinkMuxAggPartial, "S1", 3, s, None),
            daemon_config(&c, Setup::DownlinkMuxAgg, "S1", 3, s, None)
        );
        assert!(Setup::DownlinkMuxAgg.downlink());
        let ap = daemon_config(&c, Setup::DownlinkMuxAgg, "AP", 3, s, Some(f)).unwrap();
        let v = toml::from_str::<toml::Value>(&ap).unwrap();
        assert_eq!(v["ap"]["redundancy"].as_bool(), Some(true), "{ap}");
        let peers: Vec<&str> = v["peer"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["address"].as_str().unwrap())
            .collect();
        assert_eq!(peers, ["10.201.0.2", "10.201.0.3"], "{ap}");
        let s1 = daemon_config(&c, Setup::DownlinkMuxAgg, "S1", 3, s, None).unwrap();
        let v = toml::from_str::<toml::Value>(&s1).unwrap();
        assert_eq!(
            v["aggregation"]["max_packets"].as_integer(),
            Some(2),
            "{s1}"
        );
        assert_eq!(v["peer"][0]["address"].as_str(), Some("10.201.0.1"), "{s1}");
        let s2 = daemon_config(&c, Setup::DownlinkMuxAgg, "S2", 3, s, None).unwrap();
        assert_eq!(
            toml::from_str::<toml::Value>(&s2).unwrap()["aggregation"]["max_packets"].as_integer(),
            Some(1),
            "{s2}"
        );
    }

    #[test]
    fn pacer_agg_paces_at_the_gateway_and_aggregates_behind_it() {
        let mut c = cfg();
        c.topo = crate::gw::GwSpec::parse("gw:3")
            .unwrap()
            .unwrap()
            .topology();
        c.medium.phy = crate::medium::preset("a12").unwrap();
        let s = Path::new("/tmp/x.sock");
        let f = Some(Path::new("/dev/shm/x/M1.air"));
        assert_eq!(Setup::parse("pacer-agg").unwrap().name(), "pacer-agg");
        assert!(Setup::PacerAgg.gateway_arm());
        assert!(daemon_config(&c, Setup::PacerAgg, "S", 4, s, f).is_none());
        let g = daemon_config(&c, Setup::PacerAgg, "G", 4, s, f).unwrap();
        assert_eq!(
            Some(g.clone()),
            daemon_config(&c, Setup::Pacer, "G", 4, s, f)
        );
        assert!(g.contains("[gateway]") && !g.contains("[[peer]]"), "{g}");
        let addr = |x: &str| {
            let i = c.topo.nodes.iter().position(|y| y == x).unwrap();
            Topology::addr_of(i).to_string()
        };
        let peers = |node: &str| -> Vec<String> {
            let t = daemon_config(&c, Setup::PacerAgg, node, 4, s, f).unwrap();
            let v = toml::from_str::<toml::Value>(&t).unwrap();
            assert_eq!(v["daemon"]["mode"].as_str(), Some("hop-by-hop"), "{t}");
            assert_eq!(
                v["aggregation"]["link_mode"].as_str(),
                Some("adaptive"),
                "{t}"
            );
            assert_eq!(
                v["medium"]["file"].as_str(),
                Some("/dev/shm/x/M1.air"),
                "{t}"
            );
            assert!(v.get("gateway").is_none(), "{t}");
            v["peer"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["address"].as_str().unwrap().to_string())
                .collect()
        };
        // M1 aggregates toward M2 only (not toward the gateway)
        assert_eq!(peers("M1"), [addr("M2")]);
        assert_eq!(peers("M2"), [addr("M1"), addr("M3")]);
        assert_eq!(peers("M3"), [addr("M2")]);
        // one hop: M1's only neighbour is the gateway, so no daemon
        c.topo = crate::gw::GwSpec::parse("gw:1")
            .unwrap()
            .unwrap()
            .topology();
        assert!(daemon_config(&c, Setup::PacerAgg, "M1", 4, s, f).is_none());
    }
}
