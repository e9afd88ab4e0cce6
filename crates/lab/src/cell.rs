//! The infrastructure cell of issue 14 (point 8, seed 002): one access
//! point, one station per call in one collision domain, and outer nodes on
//! wired links behind the access point; calls are between a station and an
//! outer node, so every call's downlink leaves the access point.
//!
//! Owns: the `cell:PHY[:MC]` presets ([`CellSpec`]), the topology of a cell
//! for a given number of calls ([`CellSpec::topology`]: the capacity search
//! builds a cell with exactly as many stations as the point has calls), and
//! the daemon configs of the downlink-multiplexing setup ([`ap_config`],
//! [`station_config`]). Must not touch: the air (ns-3's infrastructure mode,
//! [`crate::air_ns3`]), the search and the reports ([`crate::experiment`]).
//!
//! Model choices (docs/lab.md, "The infrastructure cell"):
//! - one station per call (a phone per person, the realistic cell): a point
//!   with N calls has stations `S1..SN`; every station hears every other
//!   station and the AP (one collision domain, no hidden terminals). The
//!   ns-3 air simulates one reception per frame per radio, so on a 2-core
//!   machine it keeps real time up to about 20 radios at voice capacity;
//!   `cell:PHY:MC:K` puts K calls on each station (`S(k/K + 1)`) to reach
//!   higher call counts with fewer radios (same frames on the air, fewer
//!   contenders: DCF collides less, docs/lab.md);
//! - two outer nodes `O1`, `O2`, each on its own 100 Mbit/s, 1 ms cable to
//!   the AP (the wired segment; the cables never limit a voice cell); call k
//!   is `S(k+1) <-> O(k mod 2 + 1)`;
//! - the AP is node `AP` (10.201.0.1); its MAC queue and every station's
//!   have `--queue-limit` packets, as elsewhere in the lab.

use crate::air_opts::{BssMode, WifiOpts, Wired};
use crate::topology::{Air, Routing, Topology};
use anyhow::{bail, Context, Result};
use serde::Serialize;

/// The access point's node name.
pub const AP: &str = "AP";
/// Outer nodes on the wired side.
pub const OUTER: usize = 2;
/// Cable rate (Mbit/s) and one-way delay (ms) between the AP and each outer node.
pub const WIRED_MBIT: f64 = 100.0;
/// One-way delay of each cable (ms).
pub const WIRED_DELAY_MS: f64 = 1.0;
/// Pre-shared key of the lab's cells (registration tags; lab only).
pub const KEY: &str = "6169727061636b2d6c61622d63656c6c";
/// UDP destination ports the AP steers into its daemon (the calls' ports).
pub const MEDIA_PORTS: &str = "16000-32000";

/// A cell preset: PHY of the cell and rate of its multicast frames.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellSpec {
    /// PHY preset of unicast frames (`b11`, `g54`, ...).
    pub phy: String,
    /// Rate of group-addressed frames (Mbit/s).
    pub multicast_mbit: f64,
    /// Calls per station (1: one phone per station, the realistic cell;
    /// more: fewer radios for the real-time air to simulate at high call
    /// counts, and several calls' uplink on one radio).
    pub calls_per_station: u32,
}

impl CellSpec {
    /// Parse `cell:PHY[:MC[:K]]` (`cell:b11:11`, `cell:b11:2`, `cell:g54:6`,
    /// `cell:b11:11:2`); MC defaults to the PHY's data rate, K (calls per
    /// station) to 1. None if `name` is no cell preset.
    pub fn parse(name: &str) -> Option<Result<CellSpec>> {
        let rest = name.strip_prefix("cell:")?;
        Some((|| {
            let mut it = rest.split(':');
            let phy = it.next().unwrap_or_default().to_string();
            let p = crate::medium::preset(&phy)
                .with_context(|| format!("cell preset {name:?}: unknown PHY {phy:?}"))?;
            let mc = match it.next() {
                Some(m) => m.parse::<f64>().with_context(|| {
                    format!("cell preset {name:?}: multicast rate {m:?} is no number")
                })?,
                None => p.rate_mbps,
            };
            let cps = match it.next() {
                Some(k) => k
                    .parse::<u32>()
                    .ok()
                    .filter(|k| (1..=16).contains(k))
                    .with_context(|| {
                        format!("cell preset {name:?}: calls per station {k:?} must be 1..16")
                    })?,
                None => 1,
            };
            if it.next().is_some() {
                bail!("cell preset {name:?}: use cell:PHY[:MULTICAST_MBIT[:CALLS_PER_STATION]]");
            }
            let ofdm = p.kind == crate::medium::PhyKind::Ofdm;
            if !crate::air_opts::multicast_rates(ofdm).contains(&mc) {
                bail!(
                    "cell preset {name:?}: multicast at {mc} Mbit/s is not a rate of {} on the ns-3 air ({:?}); 802.11g runs as 802.11a there, so a g cell has no 1/2 Mbit/s DSSS rates",
                    p.name,
                    crate::air_opts::multicast_rates(ofdm)
                );
            }
            Ok(CellSpec {
                phy,
                multicast_mbit: mc,
                calls_per_station: cps,
            })
        })())
    }

    /// Name of the preset (`cell-b11-mc11`, `cell-b11-mc11-2perstation`).
    pub fn name(&self) -> String {
        let k = if self.calls_per_station > 1 {
            format!("-{}perstation", self.calls_per_station)
        } else {
            String::new()
        };
        format!("cell-{}-mc{}{k}", self.phy, self.multicast_mbit)
    }

    /// The cell for `calls` calls: the AP, `calls / calls_per_station`
    /// stations (rounded up, at least one), the outer nodes and their
    /// cables, on the ns-3 air in infrastructure mode. Call k is station
    /// `S(k / calls_per_station + 1)` with outer node `O(k mod 2 + 1)`.
    pub fn topology(&self, calls: u32) -> Topology {
        let k = self.calls_per_station.max(1);
        let n = calls.max(1).div_ceil(k) as usize;
        let st: Vec<String> = (1..=n).map(|i| format!("S{i}")).collect();
        let outer: Vec<String> = (1..=OUTER).map(|i| format!("O{i}")).collect();
        let mut nodes = vec![AP.to_string()];
        nodes.extend(st.iter().cloned());
        nodes.extend(outer.iter().cloned());
        let mut links = Vec::new();
        for (i, s) in st.iter().enumerate() {
            links.push([AP.to_string(), s.clone()]);
            for t in &st[i + 1..] {
                links.push([s.clone(), t.clone()]);
            }
        }
        let calls = (0..calls.max(1) as usize)
            .map(|c| [st[c / k as usize].clone(), outer[c % OUTER].clone()])
            .collect();
        Topology {
            name: self.name(),
            nodes,
            links,
            calls,
            routes: vec![],
            phy: Some(self.phy.clone()),
            routing: Routing::Static,
            air: Air::Ns3,
            wifi: WifiOpts {
                mode: BssMode::Infrastructure,
                ap: Some(AP.into()),
                multicast_mbit: Some(self.multicast_mbit),
                ..Default::default()
            },
            wired: outer
                .iter()
                .map(|o| Wired {
                    a: AP.into(),
                    b: o.clone(),
                    rate_mbit: WIRED_MBIT,
                    delay_ms: WIRED_DELAY_MS,
                })
                .collect(),
            cell: Some(self.clone()),
            gw: None,
        }
    }
}

/// The analytic bound of the cell for `codec` (`g729` / `g711`, 20 ms):
/// calls without multiplexing and with it (compact layout, real frames),
/// from [`crate::downlink_bound`] (mean backoff, no collisions).
pub fn bound(spec: &CellSpec, codec: &str) -> Result<(u32, u32)> {
    bound_agg(spec, codec, 1)
}

/// [`bound`] with each station's `k` calls' uplink packets of an interval
/// in one bundle (`k = 1`: [`bound`]; the emulated `downlink-mux-agg` and
/// `cell-sim --uplink-agg` bundle the preset's K).
pub fn bound_agg(spec: &CellSpec, codec: &str, k: u32) -> Result<(u32, u32)> {
    use crate::downlink_bound as b;
    let phy = crate::medium::preset(&spec.phy).context("cell PHY")?;
    let c = match codec {
        "g729" => b::G729,
        "g711" => b::G711,
        o => bail!("no bound for codec {o:?}"),
    };
    Ok((
        b::calls_unicast_agg(&phy, &c, k, 20_000.0),
        b::calls_multiplexed_agg(
            &phy,
            spec.multicast_mbit,
            &c,
            b::Layout::Compact,
            b::Count::Packed,
            k,
            20_000.0,
        ),
    ))
}

/// How the AP decides that its medium is idle for the immediate release of
/// a lone packet (`ap.idle_release`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Idle release on the daemon's medium-aware busy signal (`link_mode =
    /// "adaptive"` reading the AP's `NODE.air` file: MAC queue and utilisation).
    Medium,
    /// No idle release: a frame leaves when full or when its first packet
    /// has waited the interval (20 ms).
    Interval,
}

/// `ap.redundancy` with the airtime rule of the cell's rates (the
/// `downlink-mux-red` setup).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Redundancy {
    /// `ap.unicast_rate`: the PHY's data rate (Mbit/s).
    pub unicast_mbit: f64,
    /// `ap.multicast_rate` (Mbit/s).
    pub multicast_mbit: f64,
    /// `ap.preamble = "short"` (802.11b short preamble PHYs).
    pub short_preamble: bool,
    /// `ap.redundancy` depth (1: `true`, the previous frame only).
    pub depth: u8,
    /// `ap.redundancy_partial`: a rotating window of the previous frame's
    /// entries when its whole block does not fit.
    pub partial: bool,
}

impl Redundancy {
    /// Of the experiment's PHY and the cell's multicast rate (the PHY's
    /// data rate when the topology sets none).
    pub fn of(phy: &crate::medium::Phy, multicast_mbit: Option<f64>) -> Redundancy {
        Redundancy {
            unicast_mbit: phy.rate_mbps,
            multicast_mbit: multicast_mbit.unwrap_or(phy.rate_mbps),
            short_preamble: phy.kind == crate::medium::PhyKind::DsssShort,
            depth: 1,
            partial: false,
        }
    }

    /// `ap.unicast_rate`, `ap.multicast_rate` and `ap.preamble` lines: the
    /// airtime rule on the cell's rates.
    pub fn rates_toml(&self) -> String {
        format!(
            "unicast_rate = {:?}\nmulticast_rate = {:?}\npreamble = \"{}\"\n",
            self.unicast_mbit,
            self.multicast_mbit,
            if self.short_preamble { "short" } else { "long" }
        )
    }
}

/// The AP's daemon config (`[ap]` on radio0). `air_file`: the AP's medium
/// counters (ns-3 air), the busy signal of [`Release::Medium`]; `red`:
/// `ap.redundancy` and the airtime rule on.
pub fn ap_config(
    socket: &str,
    air_file: Option<&str>,
    release: Release,
    red: Option<Redundancy>,
) -> String {
    let mut s = format!(
        "# generated by airpack lab: the cell's access point\n[daemon]\nmode = \"hop-by-hop\"\ntun = \"airpack0\"\ncontrol_socket = \"{socket}\"\nlog = \"warn\"\ninterfaces = [\"{}\"]\n",
        crate::topology::RADIO
    );
    match (release, air_file) {
        (Release::Medium, Some(f)) => s.push_str(&format!(
            "\n[aggregation]\nlink_mode = \"adaptive\"\n\n[medium]\nfile = \"{f}\"\n"
        )),
        (Release::Medium, None) => s.push_str("\n[aggregation]\nlink_mode = \"hold-while-busy\"\n"),
        // The daemon's default link mode (adaptive hop-by-hop) would also
        // read a busy signal; this arm means "no idle release": fixed.
        (Release::Interval, _) => s.push_str("\n[aggregation]\nlink_mode = \"fixed\"\n"),
    }
    s.push_str(&format!(
        "\n[ap]\nenabled = true\ninterfaces = [\"{}\"]\nkey = \"{KEY}\"\nmedia_ports = \"{MEDIA_PORTS}\"\nidle_release = {}\n",
        crate::topology::RADIO,
        release == Release::Medium
    ));
    if let Some(r) = red {
        s.push_str(&format!(
            "redundancy = {}\n{}",
            if r.depth == 1 {
                "true".to_string()
            } else {
                r.depth.to_string()
            },
            r.rates_toml()
        ));
        if r.partial {
            s.push_str("redundancy_partial = true\n");
        }
    }
    s
}

/// `--ap-set KEY=VALUE` options as (key, TOML value), for the AP's `[ap]`
/// table in the downlink setups (e.g. `loss_airtime_budget=0.8`,
/// `loss_limit_pct=2`): the key a bare TOML key, the value a TOML scalar;
/// the keys the lab owns (`enabled`, `interfaces`, `key`, `media_ports`)
/// are refused. The daemon checks the rest.
pub fn ap_settings(opts: &[String]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for o in opts {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--ap-set {o:?}: use KEY=VALUE"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty()
            || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || matches!(k, "enabled" | "interfaces" | "key" | "media_ports")
        {
            bail!("--ap-set {o:?}: {k:?} is not an [ap] setting the lab lets you change");
        }
        match toml::from_str::<toml::Table>(&format!("x = {v}")).map(|t| t.get("x").cloned()) {
            Ok(Some(t)) if !matches!(t, toml::Value::Table(_) | toml::Value::Array(_)) => {}
            _ => bail!("--ap-set {o:?}: {v:?} is not a TOML scalar"),
        }
        out.retain(|(key, _)| key != k);
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// Add `set` to an AP config whose last table is `[ap]` (as
/// [`ap_config`] leaves it), replacing the lines of `[ap]` with the same keys.
pub fn apply_ap_settings(config: &mut String, set: &[(String, String)]) {
    if set.is_empty() {
        return;
    }
    let Some(at) = config.rfind("\n[ap]\n").map(|i| i + 1) else {
        return;
    };
    let kept: String = config[at..]
        .lines()
        .filter(|l| {
            let key = l.split('=').next().unwrap_or("").trim();
            !l.contains('=') || !set.iter().any(|(k, _)| k == key)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    config.truncate(at);
    config.push_str(&kept);
    for (k, v) in set {
        config.push_str(&format!("{k} = {v}\n"));
    }
}

/// A station's daemon config: register `ports` (a TOML value: `16002` or
/// `"16000-16004"`) with the AP at `ap_addr`.
pub fn station_config(socket: &str, ap_addr: &str, ports: &str) -> String {
    format!(
        "# generated by airpack lab: a station of the cell\n[daemon]\nmode = \"hop-by-hop\"\ntun = \"airpack0\"\ncontrol_socket = \"{socket}\"\nlog = \"warn\"\n\n[station]\nenabled = true\ninterface = \"{}\"\nap = \"{ap_addr}\"\nkey = \"{KEY}\"\nports = {ports}\n",
        crate::topology::RADIO
    )
}

/// Uplink aggregation beside the mux (the `downlink-mux-agg` setup, issue
/// 14 point 9): the AP's part. The AP takes hop-by-hop bundles from its
/// stations (`peers`: their addresses) and forwards the inner packets to
/// the wired side as usual; it has no `[[class]]`, so it bundles nothing
/// itself (the downlink is the mux's). Appended to [`ap_config`].
pub fn ap_uplink_peers(peers: &[String]) -> String {
    peers
        .iter()
        .map(|a| format!("\n[[peer]]\naddress = \"{a}\"\n"))
        .collect()
}

/// Uplink aggregation beside the mux: a station's part, appended to
/// [`station_config`]. The station bundles its own calls' uplink packets
/// (UDP in the media range) to the AP, its only next hop: a bundle leaves
/// when it holds `calls` packets (one per call of the station, `max_packets`)
/// or when its first packet has waited one packet interval (`hold_us`,
/// 20 ms: the calls' packets have random phases, so the first waits for
/// the other's). `link_mode = "fixed"`: the count, not the medium, decides.
pub fn station_uplink_agg(ap_addr: &str, calls: u32, hold_us: u32) -> String {
    format!(
        "\n[aggregation]\nencoding = \"native\"\nhold_time_us = {hold_us}\nlink_mode = \"fixed\"\nmax_packets = {}\n\n[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"{MEDIA_PORTS}\"\n\n[[peer]]\naddress = \"{ap_addr}\"\n",
        calls.max(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_refuse_rates_the_air_lacks() {
        let c = CellSpec::parse("cell:b11:2").unwrap().unwrap();
        assert_eq!((c.phy.as_str(), c.multicast_mbit), ("b11", 2.0));
        assert_eq!(
            CellSpec::parse("cell:b11").unwrap().unwrap().multicast_mbit,
            11.0
        );
        assert_eq!(
            CellSpec::parse("cell:g54:6").unwrap().unwrap().name(),
            "cell-g54-mc6"
        );
        assert!(
            CellSpec::parse("cell:g54:2").unwrap().is_err(),
            "no DSSS rates on the ns-3 air's OFDM"
        );
        assert!(CellSpec::parse("cell:b11:6").unwrap().is_err());
        assert!(CellSpec::parse("cell:x").unwrap().is_err());
        assert_eq!(
            CellSpec::parse("cell:b11:11:3")
                .unwrap()
                .unwrap()
                .calls_per_station,
            3
        );
        assert!(CellSpec::parse("cell:b11:11:0").unwrap().is_err());
        assert!(CellSpec::parse("cell:b11:11:2:1").unwrap().is_err());
        assert!(CellSpec::parse("string:1").is_none());
    }

    /// The bounds of docs/results.md's cell table (issue 14 point 10).
    #[test]
    fn bounds_of_the_presets() {
        let b = |p: &str, c: &str| bound(&CellSpec::parse(p).unwrap().unwrap(), c).unwrap();
        assert_eq!(b("cell:b11:11", "g729"), (11, 22));
        assert_eq!(
            b("cell:b11:2:2", "g729"),
            (11, 20),
            "K does not change the airtime"
        );
        assert_eq!(b("cell:b11:11", "g711"), (10, 17));
        assert_eq!(b("cell:b11:2", "g711"), (10, 11));
        assert_eq!(
            b("cell:b11:1", "g711"),
            (10, 8),
            "G.711 with multicast at 1 Mbit/s is below unicast"
        );
        assert!(bound(&CellSpec::parse("cell:b11").unwrap().unwrap(), "g723").is_err());
        let k2 = CellSpec::parse("cell:b11:11:2").unwrap().unwrap();
        assert_eq!(bound_agg(&k2, "g729", 2).unwrap(), (15, 40));
        assert_eq!(
            bound_agg(&k2, "g729", 1).unwrap(),
            bound(&k2, "g729").unwrap()
        );
    }

    #[test]
    fn one_station_per_call_and_calls_to_the_wired_side() {
        let c = CellSpec::parse("cell:b11:11").unwrap().unwrap();
        let t = c.topology(5);
        t.validate().unwrap();
        assert_eq!(t.nodes.len(), 1 + 5 + OUTER);
        assert_eq!(t.calls.len(), 5);
        assert_eq!(t.calls[0], ["S1".to_string(), "O1".to_string()]);
        assert_eq!(t.calls[3], ["S4".to_string(), "O2".to_string()]);
        // one collision domain: every pair of radios hears each other
        assert_eq!(t.links.len(), 5 + 5 * 4 / 2);
        // a call's route runs station -> AP -> outer node
        let nh = t.next_hops();
        assert_eq!(t.path(&nh, "S1", "O1").unwrap(), ["S1", "AP", "O1"]);
        assert_eq!(t.path(&nh, "O2", "S2").unwrap(), ["O2", "AP", "S2"]);
        assert_eq!(Topology::addr_of(0).to_string(), "10.201.0.1", "the AP");
        assert_eq!(
            c.topology(0).nodes.len(),
            1 + 1 + OUTER,
            "at least one station"
        );
        // two calls per station: 5 calls on 3 stations
        let t = CellSpec::parse("cell:b11:11:2")
            .unwrap()
            .unwrap()
            .topology(5);
        t.validate().unwrap();
        assert_eq!(t.nodes.iter().filter(|n| n.starts_with('S')).count(), 3);
        assert_eq!(t.calls.len(), 5);
        assert_eq!(
            (
                t.calls[1][0].as_str(),
                t.calls[2][0].as_str(),
                t.calls[4][0].as_str()
            ),
            ("S1", "S2", "S3")
        );
    }

    #[test]
    fn daemon_configs_parse_as_toml() {
        let red = Redundancy::of(&crate::medium::preset("b11").unwrap(), Some(2.0));
        assert!(!Redundancy::of(&crate::medium::preset("b11").unwrap(), None).short_preamble);
        assert!(Redundancy::of(&crate::medium::preset("b11s").unwrap(), None).short_preamble);
        assert_eq!(
            Redundancy::of(&crate::medium::preset("b11").unwrap(), None).multicast_mbit,
            11.0
        );
        for s in [
            ap_config(
                "/tmp/a.sock",
                Some("/dev/shm/x/AP.air"),
                Release::Medium,
                None,
            ),
            ap_config("/tmp/a.sock", None, Release::Medium, None),
            ap_config("/tmp/a.sock", None, Release::Interval, None),
            ap_config("/tmp/a.sock", None, Release::Medium, Some(red)),
            station_config("/tmp/s.sock", "10.201.0.1", "16002"),
        ] {
            toml::from_str::<toml::Value>(&s).unwrap();
        }
        let a = ap_config(
            "/tmp/a.sock",
            Some("/dev/shm/x/AP.air"),
            Release::Medium,
            None,
        );
        assert!(!a.contains("redundancy"), "redundancy only when asked: {a}");
        assert!(
            a.contains("link_mode = \"adaptive\"")
                && a.contains("file = \"/dev/shm/x/AP.air\"")
                && a.contains("idle_release = true")
        );
        let iv = ap_config("/s", None, Release::Interval, None);
        assert!(iv.contains("idle_release = false"), "{iv}");
        // no busy signal either: the daemon's default link mode is adaptive
        let v = toml::from_str::<toml::Value>(&iv).unwrap();
        assert_eq!(
            v["aggregation"]["link_mode"].as_str(),
            Some("fixed"),
            "{iv}"
        );
        let r = ap_config("/s", None, Release::Medium, Some(red));
        let ap = toml::from_str::<toml::Value>(&r).unwrap()["ap"].clone();
        assert_eq!(ap["redundancy"].as_bool(), Some(true), "{r}");
        assert_eq!(
            (
                ap["unicast_rate"].as_float(),
                ap["multicast_rate"].as_float(),
                ap["preamble"].as_str()
            ),
            (Some(11.0), Some(2.0), Some("long")),
            "{r}"
        );
        assert!(station_config("/s", "10.201.0.1", "16002").contains("ports = 16002"));
        let r2 = ap_config(
            "/s",
            None,
            Release::Medium,
            Some(Redundancy { depth: 2, ..red }),
        );
        let v = toml::from_str::<toml::Value>(&r2).unwrap();
        assert_eq!(v["ap"]["redundancy"].as_integer(), Some(2), "{r2}");
        assert!(v["ap"].get("redundancy_partial").is_none(), "{r2}");
        let rp = ap_config(
            "/s",
            None,
            Release::Medium,
            Some(Redundancy {
                partial: true,
                ..red
            }),
        );
        let v = toml::from_str::<toml::Value>(&rp).unwrap();
        assert_eq!(v["ap"]["redundancy_partial"].as_bool(), Some(true), "{rp}");
        // uplink aggregation beside the mux: the AP takes bundles from its
        // stations, a station bundles its calls to the AP
        let ap = format!(
            "{}{}",
            ap_config("/s", Some("/x/AP.air"), Release::Medium, Some(red)),
            ap_uplink_peers(&["10.201.0.2".into(), "10.201.0.3".into()])
        );
        let v = toml::from_str::<toml::Value>(&ap).unwrap();
        let peers = v["peer"].as_array().unwrap();
        assert_eq!(peers.len(), 2, "{ap}");
        assert_eq!(peers[1]["address"].as_str(), Some("10.201.0.3"));
        assert!(v.get("class").is_none(), "the AP bundles nothing: {ap}");
        assert_eq!(v["ap"]["redundancy"].as_bool(), Some(true));
        let st = format!(
            "{}{}",
            station_config("/s", "10.201.0.1", "\"16000-16002\""),
            station_uplink_agg("10.201.0.1", 2, 20_000)
        );
        let v = toml::from_str::<toml::Value>(&st).unwrap();
        assert_eq!(
            v["aggregation"]["max_packets"].as_integer(),
            Some(2),
            "{st}"
        );
        assert_eq!(v["aggregation"]["hold_time_us"].as_integer(), Some(20_000));
        assert_eq!(v["aggregation"]["link_mode"].as_str(), Some("fixed"));
        assert_eq!(v["class"][0]["ports"].as_str(), Some(MEDIA_PORTS));
        assert_eq!(v["peer"][0]["address"].as_str(), Some("10.201.0.1"));
        assert_eq!(v["station"]["enabled"].as_bool(), Some(true));
    }
}
