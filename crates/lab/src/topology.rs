//! Topologies and the emulated 802.11 mesh built from them.
//!
//! Owns: the topology description (presets `seed001`, `seed000`, `string:N`
//! and a TOML file format), static shortest-path routes, and [`Mesh`]: the
//! namespaces, interfaces, qdiscs and nftables rules of one emulated
//! collision domain, plus reading the frame counters of the air.
//!
//! Model (docs/lab.md): every node's radio `radio0` is a macvlan in VEPA mode
//! on one shared lower device `air` in a hub namespace. `air` is a veth whose
//! peer is a bridge port with hairpin on, so every frame a node sends leaves
//! through `air`'s egress and is reflected back to the destination macvlan.
//! `air`'s root HTB has the PHY rate and a size table overhead equal to the
//! per-frame airtime in bytes ([`crate::medium`]), so it serializes the
//! airtime of every transmission of every node. One HTB child class per node
//! (u32 match on the source MAC) with a pfifo leaf is the node's MAC queue;
//! backlogged nodes share the air round robin, and while a frame waits there
//! it stays charged to its socket (SIOCOUTQ > 0: the hold-while-busy signal).
//! Neighbours: an nftables netdev ingress chain on each radio drops frames
//! from non-neighbour MACs (and optionally a random fraction of frames).
//!
//! Must not touch: aggregation (the daemon) or traffic (the voip tool); it
//! never uses addresses outside the namespaces it creates.

use crate::medium::Phy;
use crate::netns::{self, Netns};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A topology: nodes, who hears whom, and which node pairs call each other.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Name (for reports).
    pub name: String,
    /// Node names (letters, digits, `_`; at most 10 characters).
    pub nodes: Vec<String>,
    /// Undirected neighbour pairs (nodes that hear each other).
    pub links: Vec<[String; 2]>,
    /// Call endpoint pairs; call k uses pair k mod len.
    pub calls: Vec<[String; 2]>,
    /// Optional explicit routes `[node, destination, next hop]` overriding
    /// the shortest path.
    #[serde(default)]
    pub routes: Vec<[String; 3]>,
    /// Optional default PHY preset name (`b2`, ...).
    #[serde(default)]
    pub phy: Option<String>,
    /// How routes are made: `static` (default: shortest paths computed
    /// here) or `babel` (one babeld per node, see [`crate::babel`]).
    #[serde(default)]
    pub routing: Routing,
    /// The air between the radios: `tc` (default: the HTB hub below) or
    /// `ns3` (ns-3's 802.11 model, [`crate::air_ns3`]).
    #[serde(default)]
    pub air: Air,
    /// ns-3 air only: BSS mode, access point, multicast rate (`[wifi]`
    /// table, [`crate::air_opts`]).
    #[serde(default)]
    pub wifi: crate::air_opts::WifiOpts,
    /// ns-3 air only: point-to-point cables (`[[wired]]`, [`crate::air_opts`]).
    #[serde(default)]
    pub wired: Vec<crate::air_opts::Wired>,
    /// An infrastructure cell preset (`cell:PHY[:MC]`, [`crate::cell`]):
    /// the experiment builds it with one station per call of each point.
    #[serde(skip)]
    pub cell: Option<crate::cell::CellSpec>,
    /// Seed 003's gateway preset (`gw:N`, [`crate::gw`]): its TCP flows and
    /// gateway arms.
    #[serde(skip)]
    pub gw: Option<crate::gw::GwSpec>,
}

/// Which air carries the radios' frames.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Air {
    /// One HTB serialising all airtime (fast, one collision domain).
    #[default]
    Tc,
    /// ns-3's Wi-Fi model in one real-time process ([`crate::air_ns3`]).
    Ns3,
}

impl Air {
    /// Parse `tc` or `ns3`.
    pub fn parse(s: &str) -> Result<Air> {
        Ok(match s.trim() {
            "tc" => Air::Tc,
            "ns3" | "ns-3" => Air::Ns3,
            o => bail!("unknown air {o:?} (tc, ns3)"),
        })
    }
}

/// How the mesh's routes are made.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Routing {
    /// Static shortest-path routes ([`Topology::next_hops`]).
    #[default]
    Static,
    /// babeld on every node's radio (routes learned over the emulated air).
    Babel,
}

impl Routing {
    /// Parse `static` or `babel`.
    pub fn parse(s: &str) -> Result<Routing> {
        Ok(match s.trim() {
            "static" => Routing::Static,
            "babel" | "babeld" => Routing::Babel,
            o => bail!("unknown routing {o:?} (static, babel)"),
        })
    }
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Routing::Static => "static",
            Routing::Babel => "babel",
        }
    }
}

impl Topology {
    /// A named preset: `seed001`, `seed000`, `string:N` (N = 1..=5 hops).
    pub fn preset(name: &str) -> Result<Topology> {
        if let Some(g) = crate::gw::GwSpec::parse(name) {
            let t = g?.topology();
            t.validate()?;
            return Ok(t);
        }
        if let Some(c) = crate::cell::CellSpec::parse(name) {
            let t = c?.topology(1);
            t.validate()?;
            return Ok(t);
        }
        let s = |v: &str| v.to_string();
        let l = |a: &str, b: &str| [s(a), s(b)];
        let t = match name {
            "seed001" => Topology {
                name: s("seed001"),
                nodes: vec![s("A"), s("B"), s("C"), s("D")],
                links: vec![l("A", "C"), l("B", "C"), l("C", "D")],
                calls: vec![l("A", "D"), l("B", "D")],
                routes: vec![],
                phy: Some(s("b2")),
                routing: Routing::Static,
                air: Air::Tc,
                // all four were in range; MAC filtering made the routes
                wifi: crate::air_opts::WifiOpts {
                    in_range: vec![l("A", "B"), l("A", "D"), l("B", "D")],
                    ..Default::default()
                },
                wired: vec![],
                cell: None,
                gw: None,
            },
            "seed000" => Topology {
                name: s("seed000"),
                nodes: vec![s("A"), s("B"), s("C"), s("D")],
                links: vec![l("A", "B"), l("B", "C"), l("B", "D")],
                calls: vec![l("A", "C"), l("A", "D")],
                routes: vec![],
                phy: Some(s("b2")),
                routing: Routing::Static,
                air: Air::Tc,
                wifi: Default::default(),
                wired: vec![],
                cell: None,
                gw: None,
            },
            _ => {
                let Some(n) = name.strip_prefix("string:") else {
                    bail!("unknown topology preset {name:?} (seed001, seed000, string:N, cell:PHY[:MULTICAST_MBIT], gw:N[:DELAY_MS[:RATE_MBIT]][:cs2|:geo])")
                };
                let hops: usize = n.parse().context("string:N needs a number of hops")?;
                if !(1..=5).contains(&hops) {
                    bail!("string:N supports 1 to 5 hops");
                }
                let nodes: Vec<String> = (0..=hops).map(|i| format!("N{i}")).collect();
                let links = (0..hops)
                    .map(|i| [nodes[i].clone(), nodes[i + 1].clone()])
                    .collect();
                Topology {
                    name: format!("string{hops}"),
                    calls: vec![[nodes[0].clone(), nodes[hops].clone()]],
                    nodes,
                    links,
                    routes: vec![],
                    phy: Some(s("b2")),
                    routing: Routing::Static,
                    air: Air::Tc,
                    wifi: Default::default(),
                    wired: vec![],
                    cell: None,
                    gw: None,
                }
            }
        };
        t.validate()?;
        Ok(t)
    }

    /// Parse a TOML topology file (see docs/lab.md).
    pub fn from_toml(text: &str) -> Result<Topology> {
        let t: Topology = toml::from_str(text).context("bad topology file")?;
        t.validate()?;
        Ok(t)
    }

    /// Check names, references and connectivity.
    pub fn validate(&self) -> Result<()> {
        if self.nodes.len() < 2 || self.nodes.len() > 200 {
            bail!("a topology needs 2 to 200 nodes");
        }
        for n in &self.nodes {
            if n.is_empty()
                || n.len() > 10
                || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                bail!("bad node name {n:?} (letters, digits, _; at most 10)");
            }
            if n == "air" {
                bail!("node name `air` is reserved");
            }
        }
        let idx = self.index();
        if idx.len() != self.nodes.len() {
            bail!("duplicate node names");
        }
        let known = |n: &String| idx.contains_key(n.as_str());
        for [a, b] in &self.links {
            if !known(a) || !known(b) || a == b {
                bail!("bad link {a}-{b}");
            }
        }
        if self.calls.is_empty() {
            bail!("a topology needs at least one call pair");
        }
        for [a, b] in &self.calls {
            if !known(a) || !known(b) || a == b {
                bail!("bad call pair {a}-{b}");
            }
        }
        self.validate_air_opts()?;
        for [n, d, v] in &self.routes {
            if !known(n) || !known(d) || !known(v) {
                bail!("bad route {n} -> {d} via {v}");
            }
            if !self.neighbours(n).contains(v) && !self.wired_neighbours(n).contains(v) {
                bail!("route {n} -> {d} via {v}: {v} is not a neighbour of {n}");
            }
        }
        let nh = self.next_hops();
        for [a, b] in &self.calls {
            if self.path(&nh, a, b).is_none() {
                bail!("no route from {a} to {b}");
            }
        }
        Ok(())
    }

    fn index(&self) -> BTreeMap<&str, usize> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect()
    }

    /// Neighbours of `node` on its radio (IP level: in infrastructure mode
    /// the whole BSS, [`Topology::radio_links`]), in node order.
    pub fn neighbours(&self, node: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .radio_links()
            .iter()
            .filter_map(|[a, b]| {
                if a == node {
                    Some(b.clone())
                } else if b == node {
                    Some(a.clone())
                } else {
                    None
                }
            })
            .collect();
        let idx = self.index();
        v.sort_by_key(|n| idx[n.as_str()]);
        v.dedup();
        v
    }

    /// Next hop table: `(node, destination) -> next hop`: shortest paths in
    /// hops, made unique by giving link k (in file order, first 100 links) the
    /// tiny extra weight 2^k, so that the path a -> b is exactly the reverse
    /// of b -> a (the daemon accepts an inner packet only from the neighbour
    /// its own route to the source goes through) and every sub-path of a
    /// route is the route of its ends. Explicit `routes` override.
    pub fn next_hops(&self) -> BTreeMap<(String, String), String> {
        let idx = self.index();
        let n = self.nodes.len();
        let mut adj: Vec<Vec<(usize, u128)>> = vec![Vec::new(); n];
        let mut seen = std::collections::BTreeSet::new();
        let mut k = 0u32;
        // radio links at the IP level, then wired links (crate::air_opts)
        let wired = self.wired.iter().map(|w| [w.a.clone(), w.b.clone()]);
        for [a, b] in &self
            .radio_links()
            .into_iter()
            .chain(wired)
            .collect::<Vec<_>>()
        {
            let (x, y) = (idx[a.as_str()], idx[b.as_str()]);
            if x == y || !seen.insert((x.min(y), x.max(y))) {
                continue;
            }
            let w = (1u128 << 110) + if k < 100 { 1u128 << k } else { 0 };
            k += 1;
            adj[x].push((y, w));
            adj[y].push((x, w));
        }
        let mut t = BTreeMap::new();
        for s in 0..n {
            // Dijkstra (n <= 200): distance and first hop of every node
            let mut dist = vec![u128::MAX; n];
            let mut first = vec![usize::MAX; n];
            let mut done = vec![false; n];
            dist[s] = 0;
            while let Some(u) = (0..n)
                .filter(|&i| !done[i] && dist[i] != u128::MAX)
                .min_by_key(|&i| (dist[i], i))
            {
                done[u] = true;
                for &(v, w) in &adj[u] {
                    let nd = dist[u] + w;
                    if nd < dist[v] {
                        dist[v] = nd;
                        first[v] = if u == s { v } else { first[u] };
                    }
                }
            }
            for (d, &via) in first.iter().enumerate() {
                if d != s && via != usize::MAX {
                    t.insert(
                        (self.nodes[s].clone(), self.nodes[d].clone()),
                        self.nodes[via].clone(),
                    );
                }
            }
        }
        for [n, d, v] in &self.routes {
            t.insert((n.clone(), d.clone()), v.clone());
        }
        t
    }

    /// Call pairs whose route one way is not the reverse of the other way
    /// (possible only with explicit `routes` or more than 100 links). With
    /// aggregation hop-by-hop, the daemon's source check drops such traffic.
    pub fn asymmetric_calls(&self) -> Vec<(String, String)> {
        let nh = self.next_hops();
        self.calls
            .iter()
            .filter(|[a, b]| {
                let (Some(p), Some(mut q)) = (self.path(&nh, a, b), self.path(&nh, b, a)) else {
                    return true;
                };
                q.reverse();
                p != q
            })
            .map(|[a, b]| (a.clone(), b.clone()))
            .collect()
    }

    /// The node path from `a` to `b` under `nh` (None if unreachable/looping).
    pub fn path(
        &self,
        nh: &BTreeMap<(String, String), String>,
        a: &str,
        b: &str,
    ) -> Option<Vec<String>> {
        let mut p = vec![a.to_string()];
        let mut cur = a.to_string();
        while cur != b {
            cur = nh.get(&(cur.clone(), b.to_string()))?.clone();
            if p.contains(&cur) || p.len() > self.nodes.len() {
                return None;
            }
            p.push(cur.clone());
        }
        Some(p)
    }

    /// Radio address of node `i` (index): 10.201.0.(i+1), only ever used
    /// inside the lab's namespaces.
    pub fn addr_of(i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 201, ((i + 1) / 250) as u8, ((i + 1) % 250) as u8)
    }

    /// Radio MAC of node `i`: 02:00:00:00:HH:LL.
    pub fn mac_of(i: usize) -> [u8; 6] {
        [2, 0, 0, 0, ((i + 1) >> 8) as u8, (i + 1) as u8]
    }
}

/// Format a MAC address.
pub fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Options of the emulated medium.
#[derive(Debug, Clone)]
pub struct MediumOpts {
    /// PHY preset.
    pub phy: Phy,
    /// Per-node MAC queue limit in packets.
    pub queue_limit: u32,
    /// Random frame loss in percent (0 = none), applied at every receiver.
    pub loss_pct: f64,
}

/// One node of a built mesh.
#[derive(Debug)]
pub struct MeshNode {
    /// Node name.
    pub name: String,
    /// Its namespace.
    pub ns: Netns,
    /// Radio address.
    pub addr: Ipv4Addr,
    /// Radio MAC.
    pub mac: [u8; 6],
    /// HTB class id of its MAC queue on `air` (`1:<n>`).
    pub classid: String,
}

/// A built mesh; torn down on drop.
#[derive(Debug)]
pub struct Mesh {
    /// The routing daemons (`routing = babel`), stopped first on drop.
    pub babel: Option<crate::babel::Babel>,
    /// The ns-3 process when `topo.air` is `ns3` (then `hub` stays empty);
    /// stopped before the namespaces go.
    pub ns3: Option<crate::air_ns3::Ns3Air>,
    /// The topology it was built from.
    pub topo: Topology,
    /// Medium options.
    pub opts: MediumOpts,
    /// Nodes in topology order (dropped before the hub).
    pub nodes: Vec<MeshNode>,
    /// The hub namespace holding `air` (the collision domain).
    pub hub: Netns,
    /// Namespace prefix (`ap-<pid>-<k>-`).
    pub prefix: String,
}

static MESH_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Radio interface name inside every node.
pub const RADIO: &str = "radio0";

impl Mesh {
    /// Build `topo` on a fresh set of namespaces.
    pub fn build(topo: &Topology, opts: &MediumOpts) -> Result<Mesh> {
        topo.validate()?;
        topo.check_air_opts_fit()?;
        let k = MESH_COUNTER.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{}{k}-", netns::own_prefix());
        let hub = Netns::create(&format!("{prefix}air"))?;
        if topo.air == Air::Ns3 {
            let (nodes, air) = crate::air_ns3::build_nodes(topo, opts, &prefix)?;
            let mut mesh = Mesh {
                babel: None,
                ns3: Some(air),
                topo: topo.clone(),
                opts: opts.clone(),
                nodes,
                hub,
                prefix,
            };
            mesh.configure_nodes()?;
            mesh.start_routing()?;
            return Ok(mesh);
        }
        // no IPv6 chatter in the hub
        hub.sysctl(&[
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])?;
        hub.ip(&["link", "add", "air", "type", "veth", "peer", "name", "airr"])?;
        hub.ip(&[
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        ])?;
        hub.ip(&["link", "set", "airr", "master", "br0"])?;
        hub.ip(&[
            "link",
            "set",
            "dev",
            "airr",
            "type",
            "bridge_slave",
            "hairpin",
            "on",
        ])?;
        for d in ["br0", "airr", "air"] {
            hub.ip(&["link", "set", d, "up"])?;
        }
        // The air: HTB at the PHY rate, size table = per-frame airtime.
        let phy = opts.phy;
        let rate = format!("{}bit", phy.rate_bps());
        let overhead = phy.stab_overhead_bytes().to_string();
        // Burst of one small frame: after an idle period one frame passes at
        // once, every further frame waits for its airtime.
        let burst = format!("{}b", 74 + phy.stab_overhead_bytes());
        let n = topo.nodes.len();
        hub.tc(&[
            "qdisc", "add", "dev", "air", "root", "handle", "1:", "stab", "overhead", &overhead,
            "htb", "default", "ffff",
        ])?;
        hub.tc(&[
            "class", "add", "dev", "air", "parent", "1:", "classid", "1:1", "htb", "rate", &rate,
            "ceil", &rate, "burst", &burst, "cburst", &burst,
        ])?;
        let share = format!("{}bit", (phy.rate_bps() / n as u64).max(8000));
        // DRR quantum of one full frame: backlogged nodes take turns frame by frame
        let quantum = (1514 + phy.stab_overhead_bytes()).to_string();
        let limit = opts.queue_limit.max(1).to_string();
        let mut nodes = Vec::with_capacity(n);
        let mut hub = hub;
        let build_nodes = (|| -> Result<()> {
            for (i, name) in topo.nodes.iter().enumerate() {
                let cid = format!("1:{:x}", i + 16);
                let mac = Topology::mac_of(i);
                hub.tc(&[
                    "class", "add", "dev", "air", "parent", "1:1", "classid", &cid, "htb", "rate",
                    &share, "ceil", &rate, "burst", &burst, "cburst", &burst, "quantum", &quantum,
                ])?;
                hub.tc(&[
                    "qdisc", "add", "dev", "air", "parent", &cid, "pfifo", "limit", &limit,
                ])?;
                let m4 = format!("0x{:02x}{:02x}{:02x}{:02x}", mac[0], mac[1], mac[2], mac[3]);
                let m2 = format!("0x{:02x}{:02x}", mac[4], mac[5]);
                hub.tc(&[
                    "filter",
                    "add",
                    "dev",
                    "air",
                    "parent",
                    "1:",
                    "protocol",
                    "all",
                    "prio",
                    "1",
                    "u32",
                    "match",
                    "u32",
                    &m4,
                    "0xffffffff",
                    "at",
                    "-8",
                    "match",
                    "u16",
                    &m2,
                    "0xffff",
                    "at",
                    "-4",
                    "flowid",
                    &cid,
                ])?;
                let ns = Netns::create(&format!("{prefix}{name}"))?;
                let tmp = format!("r{i}");
                hub.ip(&[
                    "link",
                    "add",
                    "link",
                    "air",
                    "name",
                    &tmp,
                    "address",
                    &mac_str(mac),
                    "type",
                    "macvlan",
                    "mode",
                    "vepa",
                ])?;
                hub.ip(&["link", "set", &tmp, "netns", ns.name()])?;
                ns.ip(&["link", "set", &tmp, "name", RADIO])?;
                nodes.push(MeshNode {
                    name: name.clone(),
                    ns,
                    addr: Topology::addr_of(i),
                    mac,
                    classid: cid,
                });
            }
            Ok(())
        })();
        if let Err(e) = build_nodes {
            drop(nodes);
            hub.leak();
            let _ = netns::run("ip", &["netns", "del", &format!("{prefix}air")]);
            return Err(e);
        }
        let mut mesh = Mesh {
            babel: None,
            ns3: None,
            topo: topo.clone(),
            opts: opts.clone(),
            nodes,
            hub,
            prefix,
        };
        mesh.configure_nodes()?;
        mesh.start_routing()?;
        Ok(mesh)
    }

    fn start_routing(&mut self) -> Result<()> {
        let (topo, mesh) = (self.topo.clone(), self);
        if topo.routing == Routing::Babel {
            let list: Vec<(&str, &Netns, usize)> = mesh
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), &n.ns, i))
                .collect();
            let b = crate::babel::Babel::start(&mesh.prefix, &list)?;
            mesh.babel = Some(b);
            let d = mesh.wait_converged(crate::babel::CONVERGE_TIMEOUT)?;
            if let Some(b) = mesh.babel.as_mut() {
                b.converged_in = Some(d);
            }
        }
        Ok(())
    }

    fn configure_nodes(&mut self) -> Result<()> {
        let nh = self.topo.next_hops();
        let babel = self.topo.routing == Routing::Babel;
        let idx: BTreeMap<&str, usize> = self
            .topo
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        for node in &self.nodes {
            let ns = &node.ns;
            ns.sysctl(&[
                "net.ipv4.ip_forward=1",
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.default.rp_filter=0",
                "net.ipv4.conf.all.send_redirects=0",
                "net.ipv4.conf.default.send_redirects=0",
                "net.ipv4.conf.all.accept_redirects=0",
            ])?;
            if babel {
                // babeld speaks over IPv6 link-local multicast: keep IPv6 on
                // the radio, without router solicitations or DAD probes
                ns.sysctl(&[
                    "net.ipv6.conf.radio0.accept_ra=0",
                    "net.ipv6.conf.radio0.router_solicitations=0",
                    "net.ipv6.conf.radio0.dad_transmits=0",
                ])?;
            } else {
                // no IPv6 chatter (RS, MLD, DAD) on the air; IPv6 stays on
                // elsewhere (the daemon's TUN)
                ns.sysctl(&["net.ipv6.conf.radio0.disable_ipv6=1"])?;
            }
            ns.ip(&["addr", "add", &format!("{}/32", node.addr), "dev", RADIO])?;
            // Marks do not cross the air: macvlan and the hub's veth pair keep
            // skb->mark, so a sender's SO_MARK (e.g. the daemon's bypass mark)
            // would reach the receiver's netfilter. Clear it on reception.
            // Then the neighbour filter and optional random loss, before the
            // link comes up.
            let nbs = self.topo.neighbours(&node.name);
            let macs: Vec<String> = nbs
                .iter()
                .map(|n| mac_str(Topology::mac_of(idx[n.as_str()])))
                .collect();
            let nb_rule = if macs.is_empty() {
                "counter name nonneighbour drop".to_string()
            } else {
                format!(
                    "ether saddr != {{ {} }} counter name nonneighbour drop",
                    macs.join(", ")
                )
            };
            let loss_rule = if self.opts.loss_pct > 0.0 {
                let thr = (self.opts.loss_pct.clamp(0.0, 100.0) * 10_000.0).round() as u64;
                format!("numgen random mod 1000000 < {thr} counter name randomloss drop")
            } else {
                String::new()
            };
            let rules = format!(
                "table netdev airlab {{\n counter nonneighbour {{ }}\n counter randomloss {{ }}\n chain rx {{\n  type filter hook ingress device \"{RADIO}\" priority -500; policy accept;\n  meta mark set 0x0\n  {nb_rule}\n  {loss_rule}\n }}\n}}\n"
            );
            ns.nft(&rules)?;
            ns.ip(&["link", "set", RADIO, "up"])?;
            // static neighbours (ARP) and, unless babeld makes them, routes
            for nb in &nbs {
                let j = idx[nb.as_str()];
                let a = Topology::addr_of(j).to_string();
                ns.ip(&[
                    "neigh",
                    "replace",
                    &a,
                    "lladdr",
                    &mac_str(Topology::mac_of(j)),
                    "dev",
                    RADIO,
                    "nud",
                    "permanent",
                ])?;
                if babel {
                    continue;
                }
                ns.ip(&[
                    "route",
                    "add",
                    &format!("{a}/32"),
                    "dev",
                    RADIO,
                    "scope",
                    "link",
                    "src",
                    &node.addr.to_string(),
                ])?;
            }
            // wired links (ns-3 air): an unnumbered point-to-point device
            // per cable, the peer on-link behind it (crate::air_opts)
            let wired = self.topo.wired_ifaces(&node.name);
            for (dev, peer, k) in &wired {
                let b_side = self.topo.wired[*k].b == *peer;
                let a = Topology::addr_of(idx[peer.as_str()]).to_string();
                ns.sysctl(&[&format!("net.ipv6.conf.{dev}.disable_ipv6=1")])?;
                ns.ip(&["link", "set", dev, "up"])?;
                ns.ip(&[
                    "neigh",
                    "replace",
                    &a,
                    "lladdr",
                    &mac_str(Topology::wired_mac(*k, b_side)),
                    "dev",
                    dev,
                    "nud",
                    "permanent",
                ])?;
                ns.ip(&[
                    "route",
                    "add",
                    &format!("{a}/32"),
                    "dev",
                    dev,
                    "scope",
                    "link",
                    "src",
                    &node.addr.to_string(),
                ])?;
            }
            for (j, d) in self.topo.nodes.iter().enumerate() {
                if babel
                    || *d == node.name
                    || nbs.contains(d)
                    || wired.iter().any(|(_, p, _)| p == d)
                {
                    continue;
                }
                if let Some(h) = nh.get(&(node.name.clone(), d.clone())) {
                    let via = Topology::addr_of(idx[h.as_str()]).to_string();
                    let dev = self.topo.iface_to(&node.name, h);
                    ns.ip(&[
                        "route",
                        "add",
                        &format!("{}/32", Topology::addr_of(j)),
                        "via",
                        &via,
                        "dev",
                        &dev,
                        "src",
                        &node.addr.to_string(),
                    ])?;
                }
            }
        }
        Ok(())
    }

    /// The next hop table installed in the nodes' kernels:
    /// `(node, destination) -> next hop node`, for destinations that are
    /// lab nodes reached through a gateway that is a lab node's radio
    /// address. Errors on a gateway that is not (e.g. an IPv6 next hop).
    pub fn installed_next_hops(&self) -> Result<BTreeMap<(String, String), String>> {
        let by_addr: BTreeMap<String, &str> = self
            .nodes
            .iter()
            .map(|n| (n.addr.to_string(), n.name.as_str()))
            .collect();
        let mut t = BTreeMap::new();
        for n in &self.nodes {
            let out = n.ns.ip(&["-4", "route", "show", "dev", RADIO])?;
            for (dest, via) in crate::babel::parse_routes(&out) {
                let Some(d) = by_addr.get(&dest) else {
                    continue;
                };
                let Some(v) = by_addr.get(&via) else {
                    bail!(
                        "{}: route to {dest} via {via}, not a lab node's radio address",
                        n.name
                    );
                };
                t.insert((n.name.clone(), d.to_string()), v.to_string());
            }
        }
        Ok(t)
    }

    /// Wait until every node has a route to every other node (babeld),
    /// within `timeout`. The error names the missing routes.
    pub fn wait_converged(&mut self, timeout: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        loop {
            if let Some(b) = self.babel.as_mut() {
                b.check_running()?;
            }
            let nh = self.installed_next_hops()?;
            let mut missing = Vec::new();
            for a in &self.topo.nodes {
                for b in &self.topo.nodes {
                    if a != b && self.topo.path(&nh, a, b).is_none() {
                        missing.push(format!("{a}->{b}"));
                    }
                }
            }
            if missing.is_empty() {
                return Ok(t0.elapsed());
            }
            if netns::interrupted() {
                bail!("interrupted");
            }
            if t0.elapsed() > timeout {
                let logs = match &self.babel {
                    Some(b) => self
                        .topo
                        .nodes
                        .iter()
                        .map(|n| format!("--- babeld on {n}:\n{}", b.log_tail(n)))
                        .collect::<Vec<_>>()
                        .join(""),
                    None => String::new(),
                };
                bail!(
                    "routing did not converge within {:.0} s: no route {} (paths follow the installed routes)\n{logs}",
                    timeout.as_secs_f64(),
                    missing.join(", ")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Node pairs `(a, b)` whose installed route a -> b is not the reverse
    /// of b -> a (the hop-by-hop daemon's source check drops such traffic).
    pub fn asymmetric_installed_routes(&self) -> Result<Vec<(String, String)>> {
        let nh = self.installed_next_hops()?;
        let mut v = Vec::new();
        for (i, a) in self.topo.nodes.iter().enumerate() {
            for b in &self.topo.nodes[i + 1..] {
                let p = self.topo.path(&nh, a, b);
                let q = self.topo.path(&nh, b, a).map(|mut q| {
                    q.reverse();
                    q
                });
                if p.is_none() || p != q {
                    v.push((a.clone(), b.clone()));
                }
            }
        }
        Ok(v)
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&MeshNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Frames sent on the air so far, per node (from the HTB class counters).
    pub fn frames_on_air(&self) -> Result<BTreeMap<String, u64>> {
        if let Some(a) = &self.ns3 {
            return a.per_node("mac_tx");
        }
        let out = self.hub.tc(&["-s", "class", "show", "dev", "air"])?;
        let per_class = parse_tc_class_packets(&out);
        Ok(self
            .nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    per_class.get(&n.classid).copied().unwrap_or(0),
                )
            })
            .collect())
    }

    /// Frames dropped by the per-node MAC queues so far, per node.
    pub fn queue_drops(&self) -> Result<BTreeMap<String, u64>> {
        if let Some(a) = &self.ns3 {
            return a.per_node("drop_queue");
        }
        let out = self.hub.tc(&["-s", "class", "show", "dev", "air"])?;
        let per_class = parse_tc_class_drops(&out);
        Ok(self
            .nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    per_class.get(&n.classid).copied().unwrap_or(0),
                )
            })
            .collect())
    }
}

/// Parse `tc -s class show` output into `classid -> packets sent`.
pub fn parse_tc_class_packets(out: &str) -> BTreeMap<String, u64> {
    parse_tc_class(out, |l| {
        let mut it = l.split_whitespace();
        while let Some(w) = it.next() {
            if w == "bytes" {
                return it.next()?.parse().ok();
            }
        }
        None
    })
}

/// Parse `tc -s class show` output into `classid -> packets dropped`.
pub fn parse_tc_class_drops(out: &str) -> BTreeMap<String, u64> {
    parse_tc_class(out, |l| {
        let i = l.find("(dropped ")?;
        l[i + 9..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    })
}

fn parse_tc_class(out: &str, f: impl Fn(&str) -> Option<u64>) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    let mut cur: Option<String> = None;
    for l in out.lines() {
        let t = l.trim_start();
        if t.starts_with("class ") {
            cur = t.split_whitespace().nth(2).map(str::to_string);
        } else if t.starts_with("Sent ") {
            if let (Some(c), Some(v)) = (cur.as_ref(), f(t)) {
                m.insert(c.clone(), v);
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_route_through_relays() {
        let t = Topology::preset("seed001").unwrap();
        let nh = t.next_hops();
        assert_eq!(t.path(&nh, "A", "D").unwrap(), ["A", "C", "D"]);
        assert_eq!(t.path(&nh, "D", "B").unwrap(), ["D", "C", "B"]);
        let t = Topology::preset("seed000").unwrap();
        let nh = t.next_hops();
        assert_eq!(t.path(&nh, "A", "D").unwrap(), ["A", "B", "D"]);
        let t = Topology::preset("string:5").unwrap();
        assert_eq!(t.path(&t.next_hops(), "N0", "N5").unwrap().len(), 6);
        assert!(Topology::preset("string:6").is_err());
        assert!(Topology::preset("nope").is_err());
    }

    #[test]
    fn routes_are_symmetric_and_consistent() {
        // a 3x3 grid has many equal-length paths
        let mut links = Vec::new();
        let name = |r: usize, c: usize| format!("N{}", r * 3 + c);
        for r in 0..3 {
            for c in 0..3 {
                if c < 2 {
                    links.push([name(r, c), name(r, c + 1)]);
                }
                if r < 2 {
                    links.push([name(r, c), name(r + 1, c)]);
                }
            }
        }
        let t = Topology {
            name: "g".into(),
            nodes: (0..9).map(|i| format!("N{i}")).collect(),
            links,
            calls: vec![["N0".into(), "N8".into()]],
            routes: vec![],
            phy: None,
            routing: Routing::Static,
            air: Air::Tc,
            wifi: Default::default(),
            wired: vec![],
            cell: None,
            gw: None,
        };
        let nh = t.next_hops();
        for a in &t.nodes {
            for b in &t.nodes {
                if a == b {
                    continue;
                }
                let p = t.path(&nh, a, b).unwrap();
                let mut q = t.path(&nh, b, a).unwrap();
                q.reverse();
                assert_eq!(p, q, "{a}->{b}");
                assert_eq!(
                    p.len(),
                    1 + (a[1..].parse::<i32>().unwrap() / 3 - b[1..].parse::<i32>().unwrap() / 3)
                        .unsigned_abs() as usize
                        + (a[1..].parse::<i32>().unwrap() % 3 - b[1..].parse::<i32>().unwrap() % 3)
                            .unsigned_abs() as usize,
                    "{a}->{b} not shortest"
                );
                // every suffix of a route is the route of its ends
                for w in 1..p.len() - 1 {
                    assert_eq!(t.path(&nh, &p[w], b).unwrap(), p[w..].to_vec());
                }
            }
        }
        assert!(t.asymmetric_calls().is_empty());
        let mut forced = t.clone();
        forced.routes = vec![
            ["N0".into(), "N8".into(), "N3".into()],
            ["N8".into(), "N0".into(), "N7".into()],
        ];
        let nh = forced.next_hops();
        let p = forced.path(&nh, "N0", "N8").unwrap();
        let mut q = forced.path(&nh, "N8", "N0").unwrap();
        q.reverse();
        if p != q {
            assert_eq!(
                forced.asymmetric_calls(),
                [("N0".to_string(), "N8".to_string())]
            );
        }
    }

    #[test]
    fn toml_roundtrip_and_validation() {
        let text = r#"
name = "tri"
nodes = ["X", "Y", "Z"]
links = [["X", "Y"], ["Y", "Z"], ["X", "Z"]]
calls = [["X", "Z"]]
routes = [["X", "Z", "Y"]]
"#;
        let t = Topology::from_toml(text).unwrap();
        assert_eq!(t.path(&t.next_hops(), "X", "Z").unwrap(), ["X", "Y", "Z"]);
        assert_eq!(t.routing, Routing::Static);
        let b = Topology::from_toml(&format!("{text}routing = \"babel\"\n")).unwrap();
        assert_eq!(b.routing, Routing::Babel);
        assert!(Topology::from_toml(&format!("{text}routing = \"ospf\"\n")).is_err());
        assert_eq!(Routing::parse("babel").unwrap(), Routing::Babel);
        assert_eq!(Routing::parse("static").unwrap().name(), "static");
        assert!(Routing::parse("rip").is_err());
        assert!(
            Topology::from_toml("name='a'\nnodes=['A','B']\nlinks=[]\ncalls=[['A','B']]").is_err()
        );
        assert!(Topology::from_toml(
            "name='a'\nnodes=['A','B']\nlinks=[['A','B']]\ncalls=[['A','B']]\nbogus=1"
        )
        .is_err());
        assert!(Topology::from_toml(
            "name='a'\nnodes=['A','A']\nlinks=[['A','A']]\ncalls=[['A','A']]"
        )
        .is_err());
    }

    #[test]
    fn parses_tc_counters() {
        let out = "class htb 1:10 parent 1:1 leaf 8001: prio 0 rate 1Mbit ceil 2Mbit burst 1739b cburst 1739b \n Sent 516668 bytes 1728 pkt (dropped 1273, overlimits 1717 requeues 0) \n backlog 0b 0p requeues 0\nclass htb 1:1 root rate 2Mbit\n Sent 9 bytes 3 pkt (dropped 0, overlimits 0 requeues 0) \n";
        let p = parse_tc_class_packets(out);
        assert_eq!(p["1:10"], 1728);
        assert_eq!(p["1:1"], 3);
        assert_eq!(parse_tc_class_drops(out)["1:10"], 1273);
    }
}
