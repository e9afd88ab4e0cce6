//! Seed 003's scenario (issue 12, point 6): a server on the wired side of a
//! mesh gateway, a string of wireless hops behind the gateway, voice calls
//! and TCP downloads from the wired side into the mesh.
//!
//! Owns: the `gw:N[:DELAY_MS[:RATE_MBIT]][:cs2|:geo]` presets ([`GwSpec`]), their
//! topology ([`GwSpec::topology`]), and what the gateway arms of an
//! experiment put on the gateway `G`: the qdiscs of `voice-priority` and
//! `fixed-shaper` ([`qdisc_script`]) and the daemon config of `pacer`
//! ([`pacer_config`]). Must not touch: the TCP flows themselves
//! ([`crate::tcp_bulk`]), the gateway role (the daemon's `[gateway]`), the
//! search and reports ([`crate::experiment`]).
//!
//! Model (docs/lab.md, "The gateway scenario"):
//! - `S` (the server, also the wired phones' node) sits on a point-to-point
//!   cable to the gateway `G` (`[[wired]]`, default 100 Mbit/s, 30 ms one way:
//!   the seed's Internet delay); `G` then `M1 .. MN` form a string of N radio
//!   hops (adhoc, 802.11a 12 Mbit/s `a12`, neighbours only hear neighbours:
//!   spatial reuse and hidden terminals from 3 hops on, as in `string:N`);
//! - with `:cs2` ([`GwSpec::cs2`], seed 003's testbed), nodes two hops apart
//!   also hear each other (`[wifi] in_range`: airtime, carrier sense and
//!   interference, no route); nodes three or more hops apart still do not
//!   (the seed's "interference but no carrier sense" at three hops is not
//!   expressible with `in_range`, which is all or nothing);
//! - with `:geo` ([`GwSpec::geo`], seed 003's ns-2 geometry: two-ray ground,
//!   power ~ d^-4), every pair of radio nodes k >= 2 hops apart is
//!   `in_range` at the neighbours' loss [`GEO_LOSS_DB`] plus
//!   [`geo_extra_db`]`(k)` (12 dB at two hops: sensed; 19 dB at three: below
//!   ns-3's preamble detection threshold, so only interfering), and every
//!   radio has a frame capture model ([`GEO_CAPTURE_DB`]);
//! - every call is `S <-> MN` (seed 003: VoIP between the wired side and a
//!   client at the end of the string, across all N hops), every TCP flow a
//!   bulk transfer `S -> MN`.

use crate::air_opts::Wired;
use crate::medium::Phy;
use crate::topology::{Air, Routing, Topology};
use anyhow::{bail, Context, Result};
use serde::Serialize;

/// The gateway's node name.
pub const GW: &str = "G";
/// The wired server's node name.
pub const SERVER: &str = "S";
/// Default one-way delay of the wired link (ms): seed 003's Internet delay.
pub const DEFAULT_DELAY_MS: f64 = 30.0;
/// Default rate of the wired link (Mbit/s): never the bottleneck.
pub const DEFAULT_WIRED_MBIT: f64 = 100.0;
/// First TCP port of the bulk flows (flow k uses `TCP_PORT + k`).
pub const TCP_PORT: u16 = 5201;
/// HTB handle the lab's own gateway qdiscs use on `G`'s radio.
pub const HANDLE: &str = "1b0";
/// `:geo`: path loss between radio neighbours (dB). ns-3 3.37's YansWifiPhy
/// sends at 16.02 dBm (TxPowerStart/End), detects a preamble from -82 dBm
/// (ThresholdPreambleDetectionModel: MinimumRssi -82 dBm, SNR >= 4 dB),
/// senses energy from -62 dBm (CcaEdThreshold) and ignores signals below
/// -101 dBm (RxSensitivity); noise floor -94 dBm (20 MHz, 7 dB noise
/// figure). At 82 dB: neighbours -66 dBm (SNR 28 dB), two hops (+12 dB)
/// -78 dBm (detected, 4 dB above the threshold: carrier sense), three hops
/// (+19 dB) -85 dBm (3 dB below it: not detected, not sensed, interferes),
/// four (+24) -90 and five (+28) -94 dBm (interfering, above -101).
pub const GEO_LOSS_DB: f64 = 82.0;
/// `:geo`: frame capture margin (dB), ns-2's capture threshold (10).
pub const GEO_CAPTURE_DB: f64 = 10.0;

/// `:geo`: extra loss (dB) of a pair `k` radio hops apart over neighbours,
/// two-ray ground (power ~ d^-4): 40 log10(k) rounded, 12 / 19 / 24 / 28 dB
/// at 2 / 3 / 4 / 5 hops.
pub fn geo_extra_db(k: usize) -> f64 {
    (40.0 * (k as f64).log10()).round()
}

/// A gateway preset and the experiment's gateway options.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GwSpec {
    /// Wireless hops behind the gateway (1..=5).
    pub hops: usize,
    /// One-way delay of the wired link (ms).
    pub wired_delay_ms: f64,
    /// Rate of the wired link (Mbit/s).
    pub wired_mbit: f64,
    /// TCP bulk flows `S -> MN` during each point (0: none).
    pub tcp_flows: u32,
    /// Congestion control of the senders (`TCP_CONGESTION`: cubic, reno).
    pub tcp_cc: String,
    /// `fixed-shaper`: the TCP class's rate (kbit/s).
    pub shaper_kbps: u64,
    /// Root rate of the gateway's qdiscs (kbit/s): the rate a radio driver's
    /// backpressure would let the qdisc see; default [`one_hop_kbps`].
    pub link_kbps: Option<u64>,
    /// `pacer`: the controller's initial TCP rate (kbit/s).
    pub pacer_initial_kbps: u64,
    /// `pacer`: the rate controller (`gateway.controller`: search, seed).
    pub pacer_controller: String,
    /// `pacer`: extra `[gateway]` settings (key, TOML value), checked by
    /// [`pacer_settings`]; they override the arm's own.
    pub pacer_set: Vec<(String, String)>,
    /// Calls joining and leaving during a point (`lab point --calls-at`);
    /// None: all calls start and end together.
    pub schedule: Option<crate::experiment::Schedule>,
    /// Seed 003's testbed relations (`:cs2`): nodes two hops apart on the
    /// radio string are in carrier-sense range (`[wifi] in_range`), not
    /// hidden from each other; false: only neighbours hear each other.
    pub cs2: bool,
    /// Seed 003's ns-2 geometry (`:geo`): nodes k >= 2 hops apart in range
    /// at [`GEO_LOSS_DB`] + [`geo_extra_db`]`(k)`, neighbours at
    /// [`GEO_LOSS_DB`], frame capture at [`GEO_CAPTURE_DB`].
    pub geo: bool,
}

impl GwSpec {
    /// Parse `gw:N[:DELAY_MS[:RATE_MBIT]][:cs2|:geo]`; None if `name` is
    /// no gateway preset. TCP options take their defaults (no flows, cubic).
    pub fn parse(name: &str) -> Option<Result<GwSpec>> {
        let rest = name.strip_prefix("gw:")?;
        Some((|| {
            let (rest, cs2, geo) = if let Some(r) = rest.strip_suffix(":cs2") {
                (r, true, false)
            } else if let Some(r) = rest.strip_suffix(":geo") {
                (r, false, true)
            } else {
                (rest, false, false)
            };
            let mut it = rest.split(':');
            let hops = it
                .next()
                .unwrap_or_default()
                .parse::<usize>()
                .ok()
                .filter(|h| (1..=5).contains(h))
                .with_context(|| format!("gateway preset {name:?}: N must be 1..5 hops"))?;
            let num = |v: Option<&str>, what: &str, dflt: f64, lo: f64, hi: f64| -> Result<f64> {
                match v {
                    None => Ok(dflt),
                    Some(s) => s
                        .parse::<f64>()
                        .ok()
                        .filter(|x| (lo..=hi).contains(x))
                        .with_context(|| format!("gateway preset {name:?}: {what} {s:?} must be a number in {lo}..={hi}")),
                }
            };
            let wired_delay_ms = num(it.next(), "wired delay (ms)", DEFAULT_DELAY_MS, 0.0, 1000.0)?;
            let wired_mbit = num(
                it.next(),
                "wired rate (Mbit/s)",
                DEFAULT_WIRED_MBIT,
                0.1,
                10_000.0,
            )?;
            if it.next().is_some() {
                bail!("gateway preset {name:?}: use gw:HOPS[:DELAY_MS[:RATE_MBIT]][:cs2|:geo]");
            }
            Ok(GwSpec {
                hops,
                wired_delay_ms,
                wired_mbit,
                tcp_flows: 0,
                tcp_cc: "cubic".into(),
                shaper_kbps: 1000,
                link_kbps: None,
                pacer_initial_kbps: 64,
                pacer_controller: "search".into(),
                pacer_set: Vec::new(),
                schedule: None,
                cs2,
                geo,
            })
        })())
    }

    /// Name of the preset (`gw3`, `gw3-d10`, `gw3-d30-r10`, `gw4-cs2`,
    /// `gw4-geo`).
    pub fn name(&self) -> String {
        let mut s = format!("gw{}", self.hops);
        if self.wired_delay_ms != DEFAULT_DELAY_MS || self.wired_mbit != DEFAULT_WIRED_MBIT {
            s.push_str(&format!("-d{}", self.wired_delay_ms));
        }
        if self.wired_mbit != DEFAULT_WIRED_MBIT {
            s.push_str(&format!("-r{}", self.wired_mbit));
        }
        if self.cs2 {
            s.push_str("-cs2");
        }
        if self.geo {
            s.push_str("-geo");
        }
        s
    }

    /// The far mesh node (`MN`): every call's and every flow's mesh end.
    pub fn mesh_end(&self) -> String {
        format!("M{}", self.hops)
    }

    /// The topology: `S` -cable- `G` -radio- `M1` -radio- ... `MN`, 802.11a
    /// 12 Mbit/s on the ns-3 air, calls `S <-> MN`; with `cs2`, each pair
    /// two radio hops apart (`G`-`M2`, `M1`-`M3`, ...) in range; with `geo`,
    /// every pair two or more hops apart in range at its geometric loss,
    /// and frame capture.
    pub fn topology(&self) -> Topology {
        let mut nodes = vec![SERVER.to_string(), GW.to_string()];
        nodes.extend((1..=self.hops).map(|i| format!("M{i}")));
        let links = (1..=self.hops)
            .map(|i| [nodes[i].clone(), nodes[i + 1].clone()])
            .collect();
        // radio nodes G, M1 .. MN are nodes[1..=hops+1]
        let far = |k: usize| (1..=self.hops + 1 - k).map(move |i| (i, i + k));
        let mut in_range = Vec::new();
        let mut link_loss_db = Vec::new();
        let mut capture_db = None;
        if self.cs2 {
            in_range.extend(far(2).map(|(i, j)| [nodes[i].clone(), nodes[j].clone()]));
        }
        if self.geo {
            // k = 1: the neighbours (links already), at the base loss
            for k in 1..=self.hops {
                for (i, j) in far(k) {
                    if k >= 2 {
                        in_range.push([nodes[i].clone(), nodes[j].clone()]);
                    }
                    link_loss_db.push((
                        nodes[i].clone(),
                        nodes[j].clone(),
                        GEO_LOSS_DB + geo_extra_db(k),
                    ));
                }
            }
            capture_db = Some(GEO_CAPTURE_DB);
        }
        Topology {
            name: self.name(),
            calls: vec![[SERVER.to_string(), self.mesh_end()]],
            nodes,
            links,
            routes: vec![],
            phy: Some("a12".into()),
            routing: Routing::Static,
            air: Air::Ns3,
            wifi: crate::air_opts::WifiOpts {
                in_range,
                link_loss_db,
                capture_db,
                ..Default::default()
            },
            wired: vec![Wired {
                a: GW.into(),
                b: SERVER.into(),
                rate_mbit: self.wired_mbit,
                delay_ms: self.wired_delay_ms,
            }],
            cell: None,
            gw: Some(self.clone()),
        }
    }

    /// Root rate of the gateway's qdiscs (kbit/s) on `phy`.
    pub fn link_kbps(&self, phy: &Phy) -> u64 {
        self.link_kbps.unwrap_or_else(|| one_hop_kbps(phy))
    }
}

/// IP-level rate of one saturated hop of 1500-byte TCP segments on `phy`,
/// with one 52-byte ACK exchange per two segments (delayed ACKs), from the
/// airtime model (docs/lab.md section 1), in kbit/s. At `a12`: 9 266.
pub fn one_hop_kbps(phy: &Phy) -> u64 {
    let t = phy.exchange_us(1500) + phy.exchange_us(52) / 2.0;
    (8.0 * 1500.0 / t * 1000.0).round() as u64
}

/// Which lab qdisc the gateway gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shaping {
    /// HTB with voice (DSCP EF) in a priority class, everything else in a
    /// lower-priority class, both up to the root rate.
    VoicePriority,
    /// As `VoicePriority`, with TCP in a class of its own at a fixed rate
    /// (a 50-packet pfifo leaf: this kernel has no fq_codel, sfq or cake).
    FixedShaper,
}

/// `tc -batch` lines (without `-n`) putting the lab's gateway qdisc on
/// `dev`: root HTB `1b0:` at `link_kbps` (the qdisc sees a queue only when
/// it sends faster than that), voice (`ip tos 0xb8/0xfc`, DSCP EF, which
/// `airpack voip` marks) in `1b0:10` (prio 0), TCP in `1b0:20` (prio 1; at
/// `shaper_kbps` with `FixedShaper`, else up to the root), the rest in
/// `1b0:30` (prio 1).
pub fn qdisc_script(dev: &str, how: Shaping, link_kbps: u64, shaper_kbps: u64) -> String {
    let h = HANDLE;
    let l = link_kbps.max(1);
    let tcp_rate = match how {
        Shaping::VoicePriority => l,
        Shaping::FixedShaper => shaper_kbps.clamp(1, l),
    };
    let mut s = format!("qdisc replace dev {dev} root handle {h}: htb default 30\n");
    s += &format!("class add dev {dev} parent {h}: classid {h}:1 htb rate {l}kbit ceil {l}kbit burst 1600 cburst 1600 quantum 1514\n");
    s += &format!("class add dev {dev} parent {h}:1 classid {h}:10 htb rate {l}kbit ceil {l}kbit prio 0 burst 1600 cburst 1600 quantum 1514\n");
    let tcp_ceil = if how == Shaping::FixedShaper {
        tcp_rate
    } else {
        l
    };
    s += &format!("class add dev {dev} parent {h}:1 classid {h}:20 htb rate {}kbit ceil {tcp_ceil}kbit prio 1 burst 1600 cburst 1600 quantum 1514\n", tcp_rate.min(l / 2).max(1).min(tcp_ceil));
    s += &format!("class add dev {dev} parent {h}:1 classid {h}:30 htb rate {}kbit ceil {l}kbit prio 1 burst 1600 cburst 1600 quantum 1514\n", (l / 10).max(1));
    s += &format!("qdisc add dev {dev} parent {h}:10 handle 1b1: pfifo limit 100\n");
    match how {
        Shaping::FixedShaper => {
            s += &format!("qdisc add dev {dev} parent {h}:20 handle 1b2: pfifo limit 50\n")
        }
        Shaping::VoicePriority => {
            s += &format!("qdisc add dev {dev} parent {h}:20 handle 1b2: pfifo limit 100\n")
        }
    }
    s += &format!("qdisc add dev {dev} parent {h}:30 handle 1b3: pfifo limit 100\n");
    s += &format!("filter add dev {dev} parent {h}: protocol ip prio 1 u32 match ip tos 0xb8 0xfc flowid {h}:10\n");
    s += &format!("filter add dev {dev} parent {h}: protocol ip prio 2 u32 match ip protocol 6 0xff flowid {h}:20\n");
    s
}

/// `--pacer-set KEY=VALUE` options as (key, TOML value): the key a bare
/// TOML key, the value a TOML scalar; `enabled`, `interface` and tables
/// are refused (the arm owns them). The daemon checks the rest.
pub fn pacer_settings(opts: &[String]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for o in opts {
        let (k, v) = o
            .split_once('=')
            .with_context(|| format!("--pacer-set {o:?}: use KEY=VALUE"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty()
            || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || matches!(k, "enabled" | "interface" | "voice" | "tcp")
        {
            bail!("--pacer-set {o:?}: {k:?} is not a [gateway] setting the lab lets you change");
        }
        let t: toml::Value = toml::from_str(&format!("x = {v}"))
            .with_context(|| format!("--pacer-set {o:?}: {v:?} is not a TOML value"))?;
        if matches!(t["x"], toml::Value::Table(_) | toml::Value::Array(_)) {
            bail!("--pacer-set {o:?}: a scalar value please");
        }
        out.retain(|(key, _)| key != k);
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// The gateway daemon's config for the `pacer` arm: the `[gateway]` role on
/// `G`'s radio (the interface facing the mesh), voice = the lab's call ports
/// (RTP and RTCP, 16000-32000), every TCP flow paced, the controller
/// `pacer_controller` (`search` or `seed`) with the seed's bands
/// (defaults), rates between 64 kbit/s and the root rate.
/// `tim` (the `pacer-tim` arm): also the TCP Improvement Module
/// (`tcp_improvement`) with queue-aware window control, local recovery and
/// redundant retransmission drop at their defaults (q_min 2, q_max 6).
pub fn pacer_config(socket: &str, spec: &GwSpec, phy: &Phy, playout_ms: u32, tim: bool) -> String {
    let l = spec.link_kbps(phy);
    let mut arm: Vec<(String, String)> = vec![
        ("controller".into(), format!("{:?}", spec.pacer_controller)),
        (
            "initial_rate_kbps".into(),
            spec.pacer_initial_kbps.clamp(64, l).to_string(),
        ),
        ("min_rate_kbps".into(), "64".into()),
        ("max_rate_kbps".into(), l.to_string()),
        ("playout_ms".into(), format!("{:?}", playout_ms as f64)),
        (
            "wired_delay_ms".into(),
            format!("{:?}", spec.wired_delay_ms),
        ),
    ];
    if tim {
        for k in [
            "tcp_improvement",
            "window_control",
            "local_recovery",
            "redundant_drop",
        ] {
            arm.push((k.into(), "true".into()));
        }
    }
    arm.retain(|(k, _)| !spec.pacer_set.iter().any(|(s, _)| s == k));
    let lines: String = arm
        .iter()
        .chain(&spec.pacer_set)
        .map(|(k, v)| format!("{k} = {v}\n"))
        .collect();
    format!(
        "# generated by airpack lab: the gateway pacer (seed 003)\n[daemon]\ntun = \"airpack0\"\ncontrol_socket = \"{socket}\"\nlog = \"warn\"\n\n[gateway]\nenabled = true\ninterface = \"{}\"\nlink_rate_mbps = {:?}\n{lines}\n[[gateway.voice]]\nprotocol = \"udp\"\nports = \"16000-32000\"\n",
        crate::topology::RADIO,
        l as f64 / 1000.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_refuse_bad_values() {
        let g = GwSpec::parse("gw:3").unwrap().unwrap();
        assert_eq!((g.hops, g.wired_delay_ms, g.wired_mbit), (3, 30.0, 100.0));
        assert_eq!(g.name(), "gw3");
        let g = GwSpec::parse("gw:2:10:20").unwrap().unwrap();
        assert_eq!((g.hops, g.wired_delay_ms, g.wired_mbit), (2, 10.0, 20.0));
        assert_eq!(g.name(), "gw2-d10-r20");
        assert_eq!(GwSpec::parse("gw:1:5").unwrap().unwrap().name(), "gw1-d5");
        for bad in [
            "gw:0",
            "gw:6",
            "gw:x",
            "gw:1:-1",
            "gw:1:30:0",
            "gw:1:30:10:1",
            "gw:",
        ] {
            assert!(GwSpec::parse(bad).unwrap().is_err(), "{bad}");
        }
        assert!(GwSpec::parse("string:2").is_none());
        // seed 003's testbed relations: a trailing `:cs2`
        let g = GwSpec::parse("gw:4:30:cs2").unwrap().unwrap();
        assert_eq!((g.hops, g.wired_delay_ms, g.cs2), (4, 30.0, true));
        assert_eq!(g.name(), "gw4-cs2");
        let g = GwSpec::parse("gw:3:cs2").unwrap().unwrap();
        assert_eq!((g.hops, g.wired_delay_ms, g.cs2), (3, 30.0, true));
        assert_eq!(
            GwSpec::parse("gw:2:10:20:cs2").unwrap().unwrap().name(),
            "gw2-d10-r20-cs2"
        );
        assert!(!GwSpec::parse("gw:4:30").unwrap().unwrap().cs2);
        // seed 003's ns-2 geometry: a trailing `:geo`
        let g = GwSpec::parse("gw:4:30:geo").unwrap().unwrap();
        assert_eq!(
            (g.hops, g.wired_delay_ms, g.cs2, g.geo),
            (4, 30.0, false, true)
        );
        assert_eq!(g.name(), "gw4-geo");
        assert_eq!(
            GwSpec::parse("gw:2:10:20:geo").unwrap().unwrap().name(),
            "gw2-d10-r20-geo"
        );
        assert!(!GwSpec::parse("gw:4:30:cs2").unwrap().unwrap().geo);
        for bad in [
            "gw:cs2",
            "gw:4:cs2:30",
            "gw:4:cs3",
            "gw:4:30:cs2:cs2",
            "gw:4:30:10:1:cs2",
            "gw:geo",
            "gw:4:geo:30",
            "gw:4:30:cs2:geo",
            "gw:4:30:geo:cs2",
            "gw:4:30:geo:geo",
        ] {
            assert!(GwSpec::parse(bad).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn cs2_puts_nodes_two_hops_apart_in_range_and_only_those() {
        let t = GwSpec::parse("gw:4:30:cs2").unwrap().unwrap().topology();
        t.validate().unwrap();
        t.check_air_opts_fit().unwrap();
        let pair = |a: &str, b: &str| [a.to_string(), b.to_string()];
        assert_eq!(
            t.wifi.in_range,
            [pair("G", "M2"), pair("M1", "M3"), pair("M2", "M4")]
        );
        routes_as_the_plain_string(&t);
        // three hops apart stays out of range (no carrier sense, no interference)
        for (a, b) in [("G", "M3"), ("M1", "M4"), ("G", "M4"), ("S", "M1")] {
            assert!(
                !t.wifi
                    .in_range
                    .iter()
                    .any(|p| p.contains(&a.to_string()) && p.contains(&b.to_string())),
                "{a}-{b}"
            );
        }
        // the ns-3 air gets each pair as a heard link at the links' loss
        let conf = a12_config_text(&t);
        let links: Vec<&str> = conf.lines().filter(|l| l.starts_with("link ")).collect();
        assert_eq!(links.len(), 4 + 3, "{conf}");
        // node indices: S 0, G 1, M1 2 ... M4 5
        for (a, b) in [(1, 3), (2, 4), (3, 5)] {
            assert!(
                links
                    .iter()
                    .any(|l| l.starts_with(&format!("link {a} {b} "))),
                "{conf}"
            );
        }
        // one hop: nothing two hops apart
        let one = GwSpec::parse("gw:1:cs2").unwrap().unwrap().topology();
        assert!(one.wifi.in_range.is_empty());
        one.validate().unwrap();
    }

    /// The ns-3 air's config of `t` on seed 003's 802.11a 12 Mbit/s PHY.
    fn a12_config_text(t: &Topology) -> String {
        let opts = crate::topology::MediumOpts {
            phy: crate::medium::preset("a12").unwrap(),
            queue_limit: 50,
            loss_pct: 0.0,
        };
        crate::air_ns3_conf::bare_config_text(t, &opts)
    }

    /// `t` (a `gw:4:30` variant) has the plain string's links, cable and
    /// routes: being in range is not a route.
    fn routes_as_the_plain_string(t: &Topology) {
        let plain = GwSpec::parse("gw:4:30").unwrap().unwrap().topology();
        assert!(plain.wifi.in_range.is_empty());
        assert_eq!(t.links, plain.links);
        assert_eq!(t.wired, plain.wired);
        let nh = t.next_hops();
        assert_eq!(
            t.path(&nh, "S", "M4").unwrap(),
            ["S", "G", "M1", "M2", "M3", "M4"]
        );
        assert!(!t.neighbours("G").contains(&"M2".to_string()));
    }

    #[test]
    fn geo_puts_every_pair_in_range_at_its_two_ray_loss_with_capture() {
        assert_eq!([2, 3, 4, 5].map(geo_extra_db), [12.0, 19.0, 24.0, 28.0]);
        let t = GwSpec::parse("gw:4:30:geo").unwrap().unwrap().topology();
        t.validate().unwrap();
        t.check_air_opts_fit().unwrap();
        routes_as_the_plain_string(&t);
        // every radio pair is heard: 4 links, 3 + 2 + 1 in range; S only by cable
        assert_eq!(t.wifi.in_range.len(), 6);
        assert!(!t.wifi.in_range.iter().any(|p| p.contains(&"S".to_string())));
        let loss = |a: &str, b: &str| {
            t.wifi
                .link_loss_db
                .iter()
                .find(|(x, y, _)| (x == a && y == b) || (x == b && y == a))
                .map(|l| l.2)
        };
        for (a, b, db) in [
            ("G", "M1", 82.0),
            ("M3", "M4", 82.0),
            ("G", "M2", 94.0),
            ("M2", "M4", 94.0),
            ("G", "M3", 101.0),
            ("M1", "M4", 101.0),
            ("G", "M4", 106.0),
        ] {
            assert_eq!(loss(a, b), Some(db), "{a}-{b}");
        }
        assert_eq!(loss("S", "G"), None);
        assert_eq!(t.wifi.capture_db, Some(GEO_CAPTURE_DB));
        // received powers at ns-3's 16.02 dBm: neighbours loud, two hops
        // detected (>= -82 dBm), three hops not, four still above -101 dBm
        let rx = |db: f64| 16.0206 - db;
        assert!(rx(GEO_LOSS_DB) - (-94.0) > 20.0);
        assert!(rx(GEO_LOSS_DB + geo_extra_db(2)) >= -82.0 + 3.0);
        assert!(rx(GEO_LOSS_DB + geo_extra_db(3)) <= -82.0 - 2.0);
        assert!(rx(GEO_LOSS_DB + geo_extra_db(5)) > -101.0);
        // the ns-3 air: 10 links at their losses, capture on
        let conf = a12_config_text;
        let c = conf(&t);
        let links: Vec<&str> = c.lines().filter(|l| l.starts_with("link ")).collect();
        // node indices: S 0, G 1, M1 2 ... M4 5
        assert_eq!(
            links,
            [
                "link 1 2 82",
                "link 2 3 82",
                "link 3 4 82",
                "link 4 5 82",
                "link 1 3 94",
                "link 2 4 94",
                "link 3 5 94",
                "link 1 4 101",
                "link 2 5 101",
                "link 1 5 106"
            ],
            "{c}"
        );
        assert!(c.lines().any(|l| l == "capture 10 16"), "{c}");
        // without :geo the air's config has neither
        let p = conf(&GwSpec::parse("gw:4:30").unwrap().unwrap().topology());
        assert!(!p.contains("capture") && !p.contains(" 82\n"), "{p}");
        let one = GwSpec::parse("gw:1:geo").unwrap().unwrap().topology();
        assert!(one.wifi.in_range.is_empty());
        one.validate().unwrap();
    }

    #[test]
    fn the_string_hangs_behind_the_gateway_and_calls_cross_it() {
        let t = GwSpec::parse("gw:3").unwrap().unwrap().topology();
        t.validate().unwrap();
        assert_eq!(t.nodes, ["S", "G", "M1", "M2", "M3"]);
        assert_eq!(t.links.len(), 3, "radio hops G-M1-M2-M3");
        assert_eq!(t.wired.len(), 1);
        assert_eq!((t.wired[0].delay_ms, t.wired[0].rate_mbit), (30.0, 100.0));
        assert_eq!(t.calls, [["S".to_string(), "M3".to_string()]]);
        assert_eq!(t.phy.as_deref(), Some("a12"));
        assert_eq!(t.air, Air::Ns3);
        let nh = t.next_hops();
        assert_eq!(
            t.path(&nh, "S", "M3").unwrap(),
            ["S", "G", "M1", "M2", "M3"]
        );
        assert_eq!(
            t.path(&nh, "M3", "S").unwrap(),
            ["M3", "M2", "M1", "G", "S"]
        );
        // only neighbours hear each other (spatial reuse from 3 hops on)
        assert!(!t.neighbours("G").contains(&"M2".to_string()));
    }

    #[test]
    fn one_hop_rate_of_a12_is_below_the_phy_rate() {
        let a12 = crate::medium::preset("a12").unwrap();
        let k = one_hop_kbps(&a12);
        assert!((8000..10_000).contains(&k), "{k}");
        let mut g = GwSpec::parse("gw:1").unwrap().unwrap();
        assert_eq!(g.link_kbps(&a12), k);
        g.link_kbps = Some(5000);
        assert_eq!(g.link_kbps(&a12), 5000);
    }

    #[test]
    fn qdiscs_put_voice_first_and_shape_tcp_only_in_the_shaper() {
        let v = qdisc_script("radio0", Shaping::VoicePriority, 9000, 2000);
        assert!(
            v.contains("classid 1b0:10 htb rate 9000kbit ceil 9000kbit prio 0"),
            "{v}"
        );
        assert!(v.contains("match ip tos 0xb8 0xfc flowid 1b0:10"));
        assert!(
            v.contains("classid 1b0:20 htb rate 4500kbit ceil 9000kbit prio 1"),
            "{v}"
        );
        assert!(v.contains("parent 1b0:20 handle 1b2: pfifo limit 100"));
        let f = qdisc_script("radio0", Shaping::FixedShaper, 9000, 2000);
        assert!(
            f.contains("classid 1b0:20 htb rate 2000kbit ceil 2000kbit prio 1"),
            "{f}"
        );
        assert!(f.contains("parent 1b0:20 handle 1b2: pfifo limit 50"));
        assert!(f.contains("match ip protocol 6 0xff flowid 1b0:20"));
        // a shaper above the root is held at the root
        assert!(qdisc_script("r", Shaping::FixedShaper, 9000, 20_000)
            .contains("classid 1b0:20 htb rate 4500kbit ceil 9000kbit"));
    }

    #[test]
    fn pacer_config_is_a_gateway_on_the_radio() {
        let a12 = crate::medium::preset("a12").unwrap();
        let mut g = GwSpec::parse("gw:2").unwrap().unwrap();
        g.pacer_initial_kbps = 800;
        let s = pacer_config("/tmp/g.sock", &g, &a12, 60, false);
        let v: toml::Value = toml::from_str(&s).unwrap();
        let gw = &v["gateway"];
        assert_eq!(gw["enabled"].as_bool(), Some(true));
        assert_eq!(gw["interface"].as_str(), Some("radio0"));
        assert_eq!(gw["initial_rate_kbps"].as_integer(), Some(800));
        assert_eq!(gw["controller"].as_str(), Some("search"));
        assert_eq!(
            gw["max_rate_kbps"].as_integer(),
            Some(one_hop_kbps(&a12) as i64)
        );
        assert_eq!(gw["wired_delay_ms"].as_float(), Some(30.0));
        assert_eq!(gw["voice"][0]["ports"].as_str(), Some("16000-32000"));
        assert!(gw.get("tcp_improvement").is_none(), "{s}");
        // pacer-tim: the same plus the TCP Improvement Module
        let t: toml::Value =
            toml::from_str(&pacer_config("/tmp/g.sock", &g, &a12, 60, true)).unwrap();
        let gt = &t["gateway"];
        assert_eq!(gt["tcp_improvement"].as_bool(), Some(true));
        assert_eq!(gt["window_control"].as_bool(), Some(true));
        assert_eq!(gt["initial_rate_kbps"].as_integer(), Some(800));
        assert_eq!(gt["voice"][0]["ports"].as_str(), Some("16000-32000"));
        // --pacer-set: added, overriding the arm's own, refused when unsafe
        g.pacer_set = pacer_settings(&[
            "mos_percentile=0.25".into(),
            "min_rate_kbps = 296".into(),
            "max_rate_kbps=296".into(),
        ])
        .unwrap();
        let s = pacer_config("/tmp/g.sock", &g, &a12, 60, false);
        let p: toml::Value = toml::from_str(&s).expect(&s);
        let gp = &p["gateway"];
        assert_eq!(gp["mos_percentile"].as_float(), Some(0.25));
        assert_eq!(gp["min_rate_kbps"].as_integer(), Some(296));
        assert_eq!(gp["max_rate_kbps"].as_integer(), Some(296));
        assert_eq!(gp["initial_rate_kbps"].as_integer(), Some(800));
        for bad in [
            "enabled=false",
            "interface=\"x\"",
            "x",
            "a b=1",
            "q=[1]",
            "q={a=1}",
            "q=nope",
        ] {
            assert!(pacer_settings(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
