//! Topology keys of the ns-3 air (issue 10): the `[wifi]` table (BSS mode,
//! access point, multicast rate) and `[[wired]]` links, and what they mean
//! for the IP level of a [`Topology`] (who is on-link with whom, through
//! which interface).
//!
//! Owns: these types, their validation, the interface names and MACs of
//! wired links, and the IP neighbour relation derived from radio links,
//! BSS membership and wired links ([`Topology::radio_links`],
//! [`Topology::wired_ifaces`], [`Topology::iface_to`]).
//!
//! Must not touch: namespaces or processes ([`crate::topology::Mesh`] and
//! [`crate::air_ns3`] build them from what this module says).

use crate::topology::{Air, Routing, Topology, RADIO};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// 802.11 operating mode of all radios of a topology.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum BssMode {
    /// Independent BSS (`AdhocWifiMac`): every node talks directly to the
    /// nodes it hears.
    #[default]
    Adhoc,
    /// One access point (`ApWifiMac`) and stations (`StaWifiMac`) that
    /// associate with it; station-to-station frames are relayed by the AP
    /// (two transmissions on the air, one IP hop).
    Infrastructure,
}

/// The `[wifi]` table of a topology file (ns-3 air only).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct WifiOpts {
    /// `adhoc` (default) or `infrastructure`.
    #[serde(default)]
    pub mode: BssMode,
    /// The access point's node name (infrastructure mode).
    #[serde(default)]
    pub ap: Option<String>,
    /// PHY rate (Mbit/s) of group-addressed frames (broadcast, multicast):
    /// sent once, without ACK or retries. Default: the lowest rate of the
    /// PHY family (1 for 802.11b, 6 for OFDM), as ns-3 and most drivers do.
    #[serde(default)]
    pub multicast_mbit: Option<f64>,
    /// 802.11n HT (5 GHz, 20 MHz, long guard interval, one stream, QoS MAC)
    /// at MCS 0..=7 for unicast data; the `phy` preset (OFDM) then gives
    /// only the legacy rate of control frames.
    #[serde(default)]
    pub ht_mcs: Option<u8>,
    /// HT: A-MPDU aggregation by the MAC (default on, 65535 bytes).
    #[serde(default)]
    pub ampdu: Option<bool>,
    /// HT: A-MSDU aggregation by the MAC (default off; on: 7935 bytes).
    #[serde(default)]
    pub amsdu: Option<bool>,
    /// Rate control: `constant` (default: the preset's rate) or
    /// `minstrel` (ns-3's Minstrel, Minstrel-HT with `ht_mcs`).
    #[serde(default)]
    pub rate_control: RateControl,
    /// Per-node MAC queue limits (packets), overriding `--queue-limit`.
    #[serde(default)]
    pub queues: std::collections::BTreeMap<String, u32>,
    /// Path loss of individual pairs `[A, B, dB]` (default
    /// [`crate::air_ns3::LINK_LOSS_DB`]); each pair must be a link or
    /// `in_range`.
    #[serde(default)]
    pub link_loss_db: Vec<(String, String, f64)>,
    /// ns-3's frame capture (`SimpleFrameCaptureModel`) on every radio, at
    /// this margin (dB): a receiver locked on a frame switches to a new one
    /// at least this much stronger that arrives within
    /// [`CAPTURE_WINDOW_US`] of the locked frame's start (ns-3's default
    /// window); None: no capture model (ns-3's default). The lab's `:geo`
    /// gateway presets set 10 dB (ns-2's capture threshold).
    #[serde(default)]
    pub capture_db: Option<f64>,
    /// Pairs that hear each other without being neighbours (adhoc only):
    /// their frames take airtime, defer each other's carrier sense and
    /// interfere (at [`crate::air_ns3::LINK_LOSS_DB`] unless
    /// `link_loss_db` says otherwise: below the PHY's detection threshold
    /// a pair only interferes), but the neighbour
    /// filter drops them and no route uses them, as seed 001's testbed,
    /// where all nodes were in range and MAC filtering made the routes.
    /// The tc air ignores it (one collision domain: every pair is in range).
    #[serde(default)]
    pub in_range: Vec<[String; 2]>,
    /// Per-link bit errors (`[[wifi.link]]` tables): frame loss that grows
    /// with the frame's length ([`LinkBer`]).
    #[serde(default, rename = "link")]
    pub link_ber: Vec<LinkBer>,
    /// `--ap-set KEY=VALUE` (`lab run`/`point`): `[ap]` settings added to
    /// (or replacing those of) the access point's daemon config in the
    /// downlink setups ([`crate::cell::ap_settings`]); not a file key.
    #[serde(default, skip_deserializing, skip_serializing_if = "Vec::is_empty")]
    pub ap_set: Vec<(String, String)>,
}

/// One `[[wifi.link]]` table: a bit error rate on the link between `a` and
/// `b` (neighbours or `in_range`). Each data or management frame of n bits
/// (MAC header and FCS included) that the receiver's PHY would otherwise
/// decode is lost with probability `1 - (1 - ber)^n`; ACKs and other
/// control frames are not affected (`crates/lab/ns3/air_ber.cc`). Both
/// directions unless `directional = true` (then only frames from `a` to `b`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkBer {
    /// One end (the transmitter when directional).
    pub a: String,
    /// The other end (the receiver when directional).
    pub b: String,
    /// Bit error rate, 0 <= ber < 0.5.
    pub ber: f64,
    /// Only frames from `a` to `b` (default false: both directions).
    #[serde(default)]
    pub directional: bool,
}

impl WifiOpts {
    /// The bit error rate of frames from `tx` to `rx` (0 if none is set).
    pub fn ber(&self, tx: &str, rx: &str) -> f64 {
        self.link_ber
            .iter()
            .rev()
            .find(|l| (l.a == tx && l.b == rx) || (!l.directional && l.a == rx && l.b == tx))
            .map_or(0.0, |l| l.ber)
    }
}

/// Capture window of [`WifiOpts::capture_db`] (µs): ns-3 3.37's default
/// `SimpleFrameCaptureModel::CaptureWindow` (a preamble's 16 µs).
pub const CAPTURE_WINDOW_US: u32 = 16;

/// How the Wi-Fi MAC picks data rates.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RateControl {
    /// One fixed rate (ns-3's ConstantRateWifiManager).
    #[default]
    Constant,
    /// ns-3's Minstrel (Minstrel-HT for HT): sampling rate adaptation.
    Minstrel,
}

/// One `[[wired]]` link: a point-to-point cable inside ns-3 between
/// interfaces `wiredK` of nodes `a` and `b`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Wired {
    /// One end (node name).
    pub a: String,
    /// The other end.
    pub b: String,
    /// Data rate in Mbit/s (each direction).
    pub rate_mbit: f64,
    /// One-way propagation delay in ms.
    #[serde(default)]
    pub delay_ms: f64,
}

/// Data rates (Mbit/s) ns-3 has for each PHY family, for `multicast_mbit`.
pub fn multicast_rates(ofdm: bool) -> &'static [f64] {
    if ofdm {
        &[6.0, 9.0, 12.0, 18.0, 24.0, 36.0, 48.0, 54.0]
    } else {
        &[1.0, 2.0, 5.5, 11.0]
    }
}

impl Topology {
    /// Whether the air and routing chosen (perhaps on the command line,
    /// after the file was read) can build these keys: they need the ns-3
    /// air, and babeld runs on the radios only. Called by
    /// [`crate::topology::Mesh::build`].
    pub fn check_air_opts_fit(&self) -> Result<()> {
        // `in_range` holds on the tc air anyway (one collision domain)
        let wifi = WifiOpts {
            in_range: Vec::new(),
            ap_set: Vec::new(),
            ..self.wifi.clone()
        };
        let what = if wifi != WifiOpts::default() {
            "the [wifi] table"
        } else if !self.wired.is_empty() {
            "a wired link"
        } else {
            return Ok(());
        };
        if self.air != Air::Ns3 {
            bail!("{what} needs the ns-3 air (air = \"ns3\" or --air ns3)");
        }
        if !self.wired.is_empty() && self.routing == Routing::Babel {
            bail!("babel routing runs on the radios only: no wired links with --routing babel");
        }
        Ok(())
    }

    /// Check the `[wifi]` and `[[wired]]` keys (called by
    /// [`Topology::validate`]).
    pub fn validate_air_opts(&self) -> Result<()> {
        let known = |n: &str| self.nodes.iter().any(|x| x == n);
        if let Some(r) = self.wifi.multicast_mbit {
            if !(r > 0.0 && r.is_finite()) {
                bail!("multicast_mbit must be a PHY rate in Mbit/s");
            }
        }
        let w = &self.wifi;
        if w.ht_mcs.is_some_and(|m| m > 7) {
            bail!("ht_mcs is 0..7 (one spatial stream)");
        }
        if w.ht_mcs.is_none() && (w.ampdu.is_some() || w.amsdu.is_some()) {
            bail!("ampdu and amsdu are HT features: set ht_mcs");
        }
        for (n, q) in &w.queues {
            if !known(n) || *q == 0 {
                bail!("queues: {n:?} = {q} (a node and at least 1 packet)");
            }
        }
        let hears = |a: &str, b: &str| {
            let p = |[x, y]: &[String; 2]| (x == a && y == b) || (x == b && y == a);
            self.links.iter().any(p) || w.in_range.iter().any(p)
        };
        for (a, b, db) in &w.link_loss_db {
            if !hears(a, b) {
                bail!("link_loss_db: {a}-{b} is neither a link nor in_range");
            }
            if !(0.0..=400.0).contains(db) {
                bail!("link_loss_db: {a}-{b}: {db} dB is not in 0..400");
            }
        }
        if let Some(m) = w.capture_db {
            if !(0.0..=50.0).contains(&m) {
                bail!("capture_db: {m} dB is not in 0..50");
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for l in &w.link_ber {
            if !known(&l.a) || !known(&l.b) || l.a == l.b {
                bail!("wifi.link: bad pair {}-{}", l.a, l.b);
            }
            if !hears(&l.a, &l.b) {
                bail!(
                    "wifi.link: {}-{} do not hear each other (not a link nor in_range)",
                    l.a,
                    l.b
                );
            }
            if !(0.0..0.5).contains(&l.ber) {
                bail!(
                    "wifi.link: {}-{}: ber {} is not in [0, 0.5)",
                    l.a,
                    l.b,
                    l.ber
                );
            }
            let dirs = if l.directional {
                vec![(&l.a, &l.b)]
            } else {
                vec![(&l.a, &l.b), (&l.b, &l.a)]
            };
            for d in dirs {
                if !seen.insert(d) {
                    bail!("wifi.link: {}->{} has two bit error rates", d.0, d.1);
                }
            }
        }
        for [a, b] in &w.in_range {
            if !known(a) || !known(b) || a == b {
                bail!("in_range: bad pair {a}-{b}");
            }
            if self
                .links
                .iter()
                .any(|[x, y]| (x == a && y == b) || (x == b && y == a))
            {
                bail!("in_range: {a}-{b} is a link already (neighbours hear each other)");
            }
            if w.mode == BssMode::Infrastructure {
                bail!("in_range is for adhoc meshes");
            }
        }
        match (self.wifi.mode, &self.wifi.ap) {
            (BssMode::Adhoc, Some(_)) => bail!("`ap` needs mode = \"infrastructure\""),
            (BssMode::Adhoc, None) => {}
            (BssMode::Infrastructure, None) => bail!("infrastructure mode needs `ap = NODE`"),
            (BssMode::Infrastructure, Some(ap)) => {
                if !known(ap) {
                    bail!("ap {ap:?} is not a node");
                }
                for n in self.bss_members() {
                    if n != *ap
                        && !self
                            .links
                            .iter()
                            .any(|[a, b]| (a == ap && *b == n) || (*a == n && b == ap))
                    {
                        bail!(
                            "station {n} has radio links but does not hear the access point {ap}"
                        );
                    }
                }
            }
        }
        let mut pairs = std::collections::BTreeSet::new();
        for w in &self.wired {
            if !known(&w.a) || !known(&w.b) || w.a == w.b {
                bail!("bad wired link {}-{}", w.a, w.b);
            }
            if !(w.rate_mbit > 0.0
                && w.rate_mbit <= 100_000.0
                && (0.0..=10_000.0).contains(&w.delay_ms))
            {
                bail!(
                    "wired link {}-{}: rate_mbit in (0, 100000], delay_ms in [0, 10000]",
                    w.a,
                    w.b
                );
            }
            if !pairs.insert((w.a.clone().min(w.b.clone()), w.a.clone().max(w.b.clone()))) {
                bail!("two wired links {}-{}", w.a, w.b);
            }
            if self
                .radio_links()
                .iter()
                .any(|[a, b]| (*a == w.a && *b == w.b) || (*a == w.b && *b == w.a))
            {
                bail!(
                    "{}-{} are radio neighbours and wired: one path per pair, please",
                    w.a,
                    w.b
                );
            }
        }
        Ok(())
    }

    /// Nodes with at least one radio link, in node order (in infrastructure
    /// mode: the BSS, AP included).
    pub fn bss_members(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| self.links.iter().any(|[a, b]| a == *n || b == *n))
            .cloned()
            .collect()
    }

    /// Radio links at the IP level (who is on-link on `radio0`): the
    /// topology's `links` in adhoc mode; in infrastructure mode every pair of
    /// BSS members, since the AP relays between stations.
    pub fn radio_links(&self) -> Vec<[String; 2]> {
        if self.wifi.mode == BssMode::Adhoc {
            return self.links.clone();
        }
        let m = self.bss_members();
        let mut v = Vec::new();
        for (i, a) in m.iter().enumerate() {
            for b in &m[i + 1..] {
                v.push([a.clone(), b.clone()]);
            }
        }
        v
    }

    /// The wired interfaces of `node`: `(ifname, peer, index in wired)`,
    /// named `wired0`, `wired1`, ... in file order.
    pub fn wired_ifaces(&self, node: &str) -> Vec<(String, String, usize)> {
        let mut v = Vec::new();
        for (k, w) in self.wired.iter().enumerate() {
            let peer = if w.a == node {
                &w.b
            } else if w.b == node {
                &w.a
            } else {
                continue;
            };
            v.push((format!("wired{}", v.len()), peer.clone(), k));
        }
        v
    }

    /// MAC of end `b_side` (false: `a`, true: `b`) of wired link `k`:
    /// 02:00:01:KK:KK:0S.
    pub fn wired_mac(k: usize, b_side: bool) -> [u8; 6] {
        [2, 0, 1, (k >> 8) as u8, k as u8, 1 + b_side as u8]
    }

    /// The interface of `node` on which neighbour `nb` is on-link:
    /// `radio0` or a `wiredK`.
    pub fn iface_to(&self, node: &str, nb: &str) -> String {
        self.wired_ifaces(node)
            .into_iter()
            .find(|(_, p, _)| p == nb)
            .map(|(i, _, _)| i)
            .unwrap_or_else(|| RADIO.to_string())
    }

    /// Wired neighbours of `node` (peers of its wired links).
    pub fn wired_neighbours(&self, node: &str) -> Vec<String> {
        self.wired_ifaces(node)
            .into_iter()
            .map(|(_, p, _)| p)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "name = 'g'\nnodes = ['A', 'B', 'G', 'S']\nlinks = [['A', 'G'], ['B', 'G']]\ncalls = [['A', 'B'], ['A', 'S']]\nair = 'ns3'\n";

    #[test]
    fn infrastructure_makes_the_bss_one_ip_link_and_wired_links_route() {
        let t = Topology::from_toml(&format!(
            "{BASE}[wifi]\nmode = 'infrastructure'\nap = 'G'\nmulticast_mbit = 2\n[[wired]]\na = 'G'\nb = 'S'\nrate_mbit = 100\ndelay_ms = 30\n"
        ))
        .unwrap();
        assert_eq!(t.wifi.mode, BssMode::Infrastructure);
        assert_eq!(t.bss_members(), ["A", "B", "G"]);
        // stations are on-link with each other (the AP relays), S only by cable
        assert_eq!(t.neighbours("A"), ["B", "G"]);
        assert!(t.neighbours("S").is_empty());
        assert_eq!(
            t.wired_ifaces("G"),
            [("wired0".to_string(), "S".to_string(), 0)]
        );
        assert_eq!(t.iface_to("S", "G"), "wired0");
        assert_eq!(t.iface_to("A", "G"), RADIO);
        let nh = t.next_hops();
        assert_eq!(t.path(&nh, "A", "B").unwrap(), ["A", "B"]);
        assert_eq!(t.path(&nh, "A", "S").unwrap(), ["A", "G", "S"]);
        assert_eq!(t.path(&nh, "S", "B").unwrap(), ["S", "G", "B"]);
        assert_ne!(Topology::wired_mac(0, false), Topology::wired_mac(0, true));
        // adhoc: links are the IP links, S unreachable without the cable
        let adhoc = Topology::from_toml(&format!(
            "{BASE}[[wired]]\na = 'G'\nb = 'S'\nrate_mbit = 10\n"
        ))
        .unwrap();
        assert_eq!(adhoc.neighbours("A"), ["G"]);
        assert_eq!(
            adhoc.path(&adhoc.next_hops(), "A", "S").unwrap(),
            ["A", "G", "S"]
        );
        assert!(
            Topology::from_toml(BASE).is_err(),
            "S is unreachable without a wired link"
        );
    }

    #[test]
    fn ht_rate_control_queues_and_link_losses_parse() {
        let t = Topology::from_toml(&format!(
            "{BASE}[wifi]\nht_mcs = 3\namsdu = true\nrate_control = 'minstrel'\nqueues = {{ G = 100 }}\n\
             link_loss_db = [['G', 'A', 90.5]]\n[[wired]]\na = 'G'\nb = 'S'\nrate_mbit = 10\n"
        ))
        .unwrap();
        assert_eq!(
            (t.wifi.ht_mcs, t.wifi.ampdu, t.wifi.amsdu),
            (Some(3), None, Some(true))
        );
        assert_eq!(t.wifi.rate_control, RateControl::Minstrel);
        assert_eq!(t.wifi.queues["G"], 100);
        assert_eq!(
            t.wifi.link_loss_db,
            [("G".to_string(), "A".to_string(), 90.5)]
        );
        assert_eq!(t.wifi.capture_db, None);
        // an in_range pair may have its own loss too, and capture is a [wifi] key
        let t = Topology::from_toml(&format!(
            "{BASE}[wifi]\nin_range = [['A', 'B']]\nlink_loss_db = [['B', 'A', 94.0], ['A', 'G', 82]]\n\
             capture_db = 10\n[[wired]]\na = 'G'\nb = 'S'\nrate_mbit = 10\n"
        ))
        .unwrap();
        assert_eq!(
            t.wifi.link_loss_db[0],
            ("B".to_string(), "A".to_string(), 94.0)
        );
        assert_eq!(t.wifi.capture_db, Some(10.0));
        let mut tc = t.clone();
        tc.air = Air::Tc;
        assert!(tc.check_air_opts_fit().is_err(), "capture is an ns-3 key");
    }

    #[test]
    fn link_bit_error_rates_parse_per_direction() {
        // S is reached by cable
        const BASE: &str = "name = 'g'\nnodes = ['A', 'B', 'G', 'S']\nlinks = [['A', 'G'], ['B', 'G']]\ncalls = [['A', 'B'], ['A', 'S']]\nair = 'ns3'\n[[wired]]\na = 'G'\nb = 'S'\nrate_mbit = 10\n";
        let t = Topology::from_toml(&format!(
            "{BASE}[wifi]\n[[wifi.link]]\na = 'A'\nb = 'G'\nber = 1e-4\n\
             [[wifi.link]]\na = 'B'\nb = 'G'\nber = 2e-5\ndirectional = true\n"
        ))
        .unwrap();
        assert_eq!(t.wifi.link_ber.len(), 2);
        assert_eq!(t.wifi.ber("A", "G"), 1e-4);
        assert_eq!(t.wifi.ber("G", "A"), 1e-4, "symmetric by default");
        assert_eq!(t.wifi.ber("B", "G"), 2e-5);
        assert_eq!(t.wifi.ber("G", "B"), 0.0, "directional: B to G only");
        assert_eq!(t.wifi.ber("A", "B"), 0.0);
        let w = "[wifi]\n[[wifi.link]]\n";
        for bad in [
            format!("{BASE}{w}a = 'A'\nb = 'B'\nber = 1e-4\n"), // A, B do not hear each other
            format!("{BASE}{w}a = 'A'\nb = 'X'\nber = 1e-4\n"),
            format!("{BASE}{w}a = 'A'\nb = 'A'\nber = 1e-4\n"),
            format!("{BASE}{w}a = 'A'\nb = 'G'\nber = 0.5\n"),
            format!("{BASE}{w}a = 'A'\nb = 'G'\nber = -1e-4\n"),
            format!("{BASE}{w}a = 'A'\nb = 'G'\nber = 1e-4\nloss = 3\n"),
            format!("{BASE}{w}a = 'A'\nb = 'G'\nber = 1e-4\n[[wifi.link]]\na = 'G'\nb = 'A'\nber = 1e-5\ndirectional = true\n"),
        ] {
            assert!(Topology::from_toml(&bad).is_err(), "accepted:\n{bad}");
        }
        // in range without being neighbours may have errors too
        let t = Topology::from_toml(&format!(
            "{BASE}[wifi]\nin_range = [['A', 'B']]\n[[wifi.link]]\na = 'A'\nb = 'B'\nber = 1e-3\n"
        ))
        .unwrap();
        assert_eq!(t.wifi.ber("B", "A"), 1e-3);
    }

    #[test]
    fn example_topology_file_parses() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../topologies/bss-gateway.toml"
        );
        let t = Topology::from_toml(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(t.neighbours("C"), ["A", "B", "G"]);
        assert_eq!(t.path(&t.next_hops(), "C", "S").unwrap(), ["C", "G", "S"]);
        assert_eq!(t.wired[0].delay_ms, 30.0);
    }

    #[test]
    fn rejects_inconsistent_air_keys() {
        let w = "[[wired]]\na = 'G'\nb = 'S'\nrate_mbit = 10\n";
        for bad in [
            format!("{BASE}[wifi]\nmode = 'infrastructure'\n{w}"), // no ap
            format!("{BASE}[wifi]\nap = 'G'\n{w}"),                // ap in adhoc
            format!("{BASE}[wifi]\nmode = 'infrastructure'\nap = 'X'\n{w}"), // unknown ap
            format!("{BASE}[wifi]\nmode = 'infrastructure'\nap = 'A'\n{w}"), // B does not hear A
            format!("{BASE}[wifi]\nmode = 'mesh'\n{w}"),
            format!("{BASE}[wifi]\nmulticast_mbit = 0\n{w}"),
            format!("{BASE}[wifi]\nht_mcs = 8\n{w}"),
            format!("{BASE}[wifi]\nampdu = false\n{w}"), // not HT
            format!("{BASE}[wifi]\nrate_control = 'arf'\n{w}"),
            format!("{BASE}[wifi]\nqueues = {{ X = 5 }}\n{w}"),
            format!("{BASE}[wifi]\nqueues = {{ A = 0 }}\n{w}"),
            format!("{BASE}[wifi]\nlink_loss_db = [['A', 'B', 70.0]]\n{w}"), // no link
            format!("{BASE}[wifi]\nlink_loss_db = [['A', 'G', -1.0]]\n{w}"),
            format!(
                "{BASE}[wifi]\nin_range = [['A', 'S']]\nlink_loss_db = [['A', 'B', 70.0]]\n{w}"
            ), // neither
            format!("{BASE}[wifi]\ncapture_db = -1\n{w}"),
            format!("{BASE}[wifi]\ncapture_db = 60\n{w}"),
            format!("{BASE}{w}{w}"), // twice
            format!("{BASE}[[wired]]\na = 'G'\nb = 'S'\nrate_mbit = 0\n"), // no rate
            format!("{BASE}[[wired]]\na = 'A'\nb = 'G'\nrate_mbit = 1\n{w}"), // radio + wire
        ] {
            assert!(Topology::from_toml(&bad).is_err(), "accepted:\n{bad}");
        }
        // the air and routing may change after parsing (--air, --routing)
        let mut t = Topology::from_toml(&format!("{BASE}{w}")).unwrap();
        t.check_air_opts_fit().unwrap();
        t.routing = Routing::Babel;
        assert!(t.check_air_opts_fit().is_err());
        t.routing = Routing::Static;
        t.air = Air::Tc;
        assert!(t.check_air_opts_fit().is_err());
    }
}
