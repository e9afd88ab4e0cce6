//! The daemon's configuration: the TOML file, command-line overrides,
//! validation, and conversion into what the engine and the kernel wrappers take.
//!
//! Owns: the config schema (every key an operator can set), error messages
//! that name the key and the line, and the mapping to
//! [`airpack_core::EngineConfig`] / [`airpack_core::PeerConfig`] /
//! classifier rules / the steering rules.
//!
//! Must not touch: sockets, the kernel, the engine at run time. Parsing is
//! pure so it is unit-tested without root.

use crate::linux::{Match, SteerSpec};
use airpack_core::engine::{Classifier, LinkMode, Rule, TrafficClass};
use airpack_core::{Encoding, EngineConfig, PeerConfig};
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::path::PathBuf;

pub mod downlink;

// ---------------------------------------------------------------------------
// Schema
// ---------------------------------------------------------------------------

/// The whole configuration file.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[daemon]`: process, kernel and transport settings.
    #[serde(default)]
    pub daemon: DaemonSection,
    /// `[aggregation]`: engine parameters (defaults for every peer).
    #[serde(default)]
    pub aggregation: AggregationSection,
    /// `[discovery]`: neighbour discovery with hellos (issue 11).
    #[serde(default)]
    pub discovery: DiscoverySection,
    /// `[medium]`: busy-signal sources and the adaptive hold (issue 11).
    #[serde(default)]
    pub medium: MediumSection,
    /// `[ap]`: downlink multiplexer role (issue 14).
    #[serde(default)]
    pub ap: downlink::ApSection,
    /// `[station]`: downlink demultiplexer role (issue 14).
    #[serde(default)]
    pub station: downlink::StationSection,
    /// `[[class]]`: classifier rules, first match wins.
    #[serde(default, rename = "class", skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassSection>,
    /// `[[peer]]`: nodes known to accept bundles.
    #[serde(default, rename = "peer", skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerSection>,
}

/// Hop-by-hop (aggregate toward each next hop) or end-to-end (tunnel to endpoints).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Peer = the kernel's next hop for the destination.
    #[default]
    HopByHop,
    /// Peer = the endpoint whose `allowed_ips` contain the destination.
    EndToEnd,
}

/// How bundles travel to a peer.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// Raw IP with the aggregation protocol number.
    #[default]
    Ip,
    /// UDP to `udp_port`.
    Udp,
}

/// What inner source addresses a peer may send.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SourceCheck {
    /// The kernel's route back to the source goes via that peer (hop-by-hop default).
    Route,
    /// The source is inside the peer's `allowed_ips` (end-to-end default).
    AllowedIps,
    /// No check (only for trusted links; counted nowhere).
    Off,
}

/// Log level names.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Normal operation (default).
    #[default]
    Info,
    /// Per-event detail (no per-packet logs).
    Debug,
    /// Per-packet logs.
    Trace,
}

impl LogLevel {
    /// The `tracing` filter directive.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// Fixed hold time or hold-while-busy.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LinkModeCfg {
    /// Hold until min size, max size or hold time.
    #[default]
    Fixed,
    /// Also release as soon as the link is idle.
    HoldWhileBusy,
    /// Hold only while the medium is busy or highly utilised, within a
    /// per-flow delay budget (`[medium]`; issue 11 point 7).
    Adaptive,
}

/// Bundle encodings as named in the file.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EncodingCfg {
    /// airpack's native format.
    #[default]
    Native,
    /// Seed 001/000 layout (IPv4 only).
    Kau,
    /// Simplemux normal flavour.
    Simplemux,
}

impl From<EncodingCfg> for Encoding {
    fn from(e: EncodingCfg) -> Encoding {
        match e {
            EncodingCfg::Native => Encoding::Native,
            EncodingCfg::Kau => Encoding::Kau,
            EncodingCfg::Simplemux => Encoding::Simplemux,
        }
    }
}

/// Traffic classes as named in the file.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClassCfg {
    /// May wait up to the hold time.
    Bundle,
    /// Joins bundles only while the link is busy.
    Opportunistic,
    /// Never touched.
    Bypass,
}

impl From<ClassCfg> for TrafficClass {
    fn from(c: ClassCfg) -> TrafficClass {
        match c {
            ClassCfg::Bundle => TrafficClass::Bundle,
            ClassCfg::Opportunistic => TrafficClass::Opportunistic,
            ClassCfg::Bypass => TrafficClass::Bypass,
        }
    }
}

/// `[daemon]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonSection {
    /// `hop-by-hop` or `end-to-end`.
    pub mode: Mode,
    /// TUN device name (at most 15 bytes).
    pub tun: String,
    /// MTU of the TUN device (packets larger than this are not steered intact).
    pub tun_mtu: u32,
    /// Queue length of the TUN device, packets (burst absorption before the daemon reads).
    pub tun_txqueuelen: u32,
    /// Unix socket for `airpack stats` / `airpack peers`.
    pub control_socket: PathBuf,
    /// error|warn|info|debug|trace (`RUST_LOG` overrides).
    pub log: LogLevel,
    /// Optional `ADDR:PORT` for a Prometheus `/metrics` endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<String>,
    /// Radio interface(s) whose egress is steered (and whose link state is
    /// watched); empty: the interfaces of the routes to the configured peers.
    pub interfaces: Vec<String>,
    /// Mark on the daemon's own sockets (never steered).
    pub bypass_mark: u32,
    /// tc filter preference of the egress filters airpack versions before
    /// tcx installed (removed at start and by `airpack cleanup`).
    pub filter_priority: u16,
    /// `ip` (raw IP, protocol number) or `udp`.
    pub transport: Transport,
    /// UDP port when `transport = "udp"`.
    pub udp_port: u16,
    /// Real-time priority of the daemon (SCHED_FIFO 1-99; 0 = normal scheduling).
    pub sched_priority: u8,
    /// CPU wake-up latency limit in µs while the daemon runs (PM QoS,
    /// `/dev/cpu_dma_latency`); none: the system's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_latency_us: Option<u32>,
    /// Inner-source check on received bundles (default: `route` hop-by-hop,
    /// `allowed-ips` end-to-end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_check: Option<SourceCheck>,
}

impl Default for DaemonSection {
    fn default() -> Self {
        DaemonSection {
            mode: Mode::HopByHop,
            tun: "airpack0".into(),
            tun_mtu: 1500,
            tun_txqueuelen: 4096,
            control_socket: PathBuf::from("/run/airpack/airpack.sock"),
            log: LogLevel::Info,
            prometheus: None,
            interfaces: Vec::new(),
            bypass_mark: 0x4151,
            filter_priority: 4150,
            transport: Transport::Ip,
            udp_port: 4150,
            sched_priority: 0,
            cpu_latency_us: None,
            source_check: None,
        }
    }
}

/// `[aggregation]`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AggregationSection {
    /// Default bundle encoding.
    pub encoding: EncodingCfg,
    /// IP protocol number of bundles (transport `ip`).
    pub protocol: u8,
    /// Maximum wait of a bundle-class packet (µs).
    pub hold_time_us: u64,
    /// `fixed` or `hold-while-busy`.
    pub link_mode: LinkModeCfg,
    /// Send once a bundle reaches this many bytes (outer header included).
    pub min_size: usize,
    /// Never exceed this many bytes (outer header included).
    pub max_size: usize,
    /// Never more packets than this per bundle.
    pub max_packets: usize,
    /// Per-peer queue limit, bytes.
    pub queue_limit_bytes: usize,
    /// Per-peer queue limit, packets.
    pub queue_limit_packets: usize,
    /// Bound on the engine's peer table.
    pub max_peers: usize,
    /// Seed 001 dynamic marking (max size from the packet mark): refused by
    /// the daemon ([`NO_MARKS`]).
    pub dynamic_marking: bool,
    /// Bound on the engine's bypass FIFO, packets.
    pub bypass_queue_limit: usize,
}

impl Default for AggregationSection {
    fn default() -> Self {
        let p = PeerConfig::default();
        AggregationSection {
            encoding: EncodingCfg::Native,
            protocol: airpack_core::wire::DEFAULT_PROTOCOL,
            hold_time_us: p.hold_time,
            link_mode: LinkModeCfg::Fixed,
            min_size: p.min_size,
            max_size: p.max_size,
            max_packets: p.max_packets,
            queue_limit_bytes: p.queue_limit_bytes,
            queue_limit_packets: p.queue_limit_packets,
            max_peers: 1024,
            dynamic_marking: false,
            bypass_queue_limit: 256,
        }
    }
}

/// `[discovery]`: hellos on each of `daemon.interfaces` find the neighbours
/// that run airpack (hop-by-hop mode; `docs/adaptive.md`). Static `[[peer]]`
/// entries keep their configuration and override what discovery finds.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoverySection {
    /// Send and listen for hellos.
    pub enabled: bool,
    /// UDP port of hellos (source and destination).
    pub port: u16,
    /// IPv4 link-local multicast group hellos are sent to.
    pub group_v4: Ipv4Addr,
    /// Also send and listen for hellos over IPv6 (from the link-local address).
    pub ipv6: bool,
    /// IPv6 link-local multicast group (ff02::/16) of IPv6 hellos.
    pub group_v6: Ipv6Addr,
    /// Hello interval, ms (each hello is sent up to a quarter earlier at random).
    pub interval_ms: u32,
    /// A neighbour that sends no hello for this many of its intervals is gone.
    pub hold_intervals: u32,
    /// Most neighbours held per interface (more are refused and counted).
    pub max_neighbors: usize,
    /// Pre-shared key of the mesh, 32 hexadecimal digits: hellos are
    /// authenticated and unauthenticated ones refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Key id sent with the tags (lets a mesh change keys).
    pub key_id: u8,
    /// Data rate assumed by the size model, Mbit/s (802.11b timing).
    pub rate_mbps: f64,
    /// Smallest bundle size asked of a neighbour, bytes (the largest is
    /// `aggregation.max_size`).
    pub min_size: usize,
}

impl Default for DiscoverySection {
    fn default() -> Self {
        DiscoverySection {
            enabled: false,
            port: 4151,
            group_v4: Ipv4Addr::new(224, 0, 0, 151),
            ipv6: true,
            group_v6: Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x151),
            interval_ms: 1000,
            hold_intervals: 3,
            max_neighbors: 64,
            key: None,
            key_id: 1,
            rate_mbps: 11.0,
            min_size: 128,
        }
    }
}

/// `[medium]`: where the daemon's busy signal comes from and the
/// parameters of `link_mode = "adaptive"` (`docs/adaptive.md`, "Medium-aware
/// hold"). The sockets' unsent bytes are always a source.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MediumSection {
    /// Also count the root qdisc backlog of each of `daemon.interfaces`
    /// (netlink RTM_GETQDISC, read off the loop).
    pub qdisc: bool,
    /// Least time between two qdisc reads while packets are held, µs.
    pub qdisc_interval_us: u64,
    /// A counters file in the lab's `NODE.air` format (`docs/lab.md` 2b),
    /// the lab's stand-in for nl80211 survey data: channel busy/active time
    /// deltas give the medium's utilisation, its MAC queue a backlog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Least time between two reads of `file`, µs (its writer rewrites it
    /// every 20 ms of simulated time).
    pub file_interval_us: u64,
    /// `link_mode = "adaptive"`: utilisation (0-1) at or above which
    /// holding counts as cheap even without a backlog.
    pub busy_utilisation: f64,
    /// `link_mode = "adaptive"`: total hold a packet may accumulate over its
    /// path, µs, split across hops by its TTL.
    pub delay_budget_us: u64,
}

impl Default for MediumSection {
    fn default() -> Self {
        let a = airpack_core::engine::AdaptiveHold::default();
        MediumSection {
            qdisc: true,
            qdisc_interval_us: 500,
            file: None,
            file_interval_us: 5_000,
            busy_utilisation: f64::from(a.busy_utilisation) / 1000.0,
            delay_budget_us: a.delay_budget,
        }
    }
}

/// `[[class]]`: one classifier rule. Every present field must match.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassSection {
    /// bundle | opportunistic | bypass.
    pub class: ClassCfg,
    /// udp | tcp | icmp | icmpv6 | sctp | a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Spec>,
    /// Either port in range ("16000-32000" or 5060).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Spec>,
    /// Source port range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_ports: Option<Spec>,
    /// Destination port range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_ports: Option<Spec>,
    /// DSCP value or range ("46", "40-46").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<Spec>,
    /// Packet length range in bytes ("0-300").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<Spec>,
    /// 4 or 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u8>,
    /// "value/mask" or "value": refused by the daemon ([`NO_MARKS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<Spec>,
}

/// `[[peer]]`: a node known to accept bundles, with optional overrides.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    /// Next hop (hop-by-hop) or tunnel endpoint (end-to-end); a link-local
    /// IPv6 next hop names its interface: `fe80::2%wlan0`.
    pub address: PeerAddress,
    /// End-to-end: destinations behind this endpoint and sources it may send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_ips: Vec<String>,
    /// Per-peer encoding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<EncodingCfg>,
    /// Per-peer hold time (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_time_us: Option<u64>,
    /// Per-peer minimum size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<usize>,
    /// Per-peer maximum size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size: Option<usize>,
    /// Per-peer maximum packets per bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_packets: Option<usize>,
    /// Per-peer queue limit, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_limit_bytes: Option<usize>,
    /// Per-peer queue limit, packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_limit_packets: Option<usize>,
}

/// A value written either as an integer or as a string (`"16000-32000"`,
/// `"0x10/0xff"`, `"udp"`); interpreted by the key that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// An integer.
    Int(i64),
    /// A string.
    Str(String),
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Int(i) => write!(f, "{i}"),
            Spec::Str(s) => f.write_str(s),
        }
    }
}

impl Serialize for Spec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Spec::Int(i) => s.serialize_i64(*i),
            Spec::Str(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for Spec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Spec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or a string such as \"16000-32000\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Spec, E> {
                Ok(Spec::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Spec, E> {
                i64::try_from(v)
                    .map(Spec::Int)
                    .map_err(|_| E::custom("integer out of range"))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Spec, E> {
                Ok(Spec::Str(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------
// Parsed / validated forms
// ---------------------------------------------------------------------------

/// A peer address as written: `10.0.0.2`, `fd00::2`, or a link-local IPv6
/// address with its interface, `fe80::2%wlan0` (the interface is required
/// for fe80::/10 and refused for any other address).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddress {
    /// The address.
    pub ip: IpAddr,
    /// The interface a link-local address is reached through.
    pub interface: Option<String>,
}

/// Whether `ip` is an IPv6 unicast link-local address (fe80::/10), the only
/// kind of peer address that needs an interface.
pub fn is_link_local_v6(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(a) if (a.segments()[0] & 0xffc0) == 0xfe80)
}

impl std::str::FromStr for PeerAddress {
    type Err = String;

    fn from_str(s: &str) -> Result<PeerAddress, String> {
        let (a, iface) = match s.split_once('%') {
            Some((a, i)) => (a, Some(i)),
            None => (s, None),
        };
        let ip: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address (ADDR or fe80::X%IFNAME)"))?;
        let interface = match iface {
            None => None,
            Some(i) => {
                if i.is_empty()
                    || i.len() > 15
                    || i.bytes()
                        .any(|b| b == b'/' || b == b'%' || b.is_ascii_whitespace() || b == 0)
                {
                    return Err(format!(
                        "{s:?}: bad interface name {i:?} (1 to 15 bytes, no '/', '%' or spaces)"
                    ));
                }
                Some(i.to_owned())
            }
        };
        match (is_link_local_v6(ip), &interface) {
            (true, None) => Err(format!(
                "{s:?} is link-local: name its interface, e.g. \"{ip}%wlan0\""
            )),
            (false, Some(_)) => Err(format!(
                "{s:?}: an %interface only applies to link-local IPv6 addresses (fe80::/10)"
            )),
            _ => Ok(PeerAddress { ip, interface }),
        }
    }
}

impl fmt::Display for PeerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.interface {
            Some(i) => write!(f, "{}%{i}", self.ip),
            None => write!(f, "{}", self.ip),
        }
    }
}

impl<'de> Deserialize<'de> for PeerAddress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for PeerAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An IP prefix (`10.1.0.0/24`, `fd00::/64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// Network address (host bits zero).
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl Cidr {
    /// Parses `ADDR/LEN` or a bare address (= host prefix). Host bits must be zero.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .map_err(|_| format!("{s:?}: bad prefix length"))?,
            None => max,
        };
        if prefix > max {
            return Err(format!("{s:?}: prefix length {prefix} > {max}"));
        }
        let c = Cidr { addr, prefix };
        if c.network() != addr {
            return Err(format!(
                "{s:?} has host bits set (did you mean {}/{prefix}?)",
                c.network()
            ));
        }
        Ok(c)
    }

    fn bits(addr: IpAddr) -> u128 {
        match addr {
            IpAddr::V4(a) => u32::from(a) as u128,
            IpAddr::V6(a) => u128::from(a),
        }
    }

    fn mask(&self) -> u128 {
        let width = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.prefix == 0 {
            0
        } else {
            let ones = u128::MAX << (128 - self.prefix as u32);
            ones >> (128 - width)
        }
    }

    fn network(&self) -> IpAddr {
        let n = Self::bits(self.addr) & self.mask();
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4((n as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(n.into()),
        }
    }

    /// Whether `ip` (same family) is inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        if ip.is_ipv4() != self.addr.is_ipv4() {
            return false;
        }
        Self::bits(ip) & self.mask() == Self::bits(self.addr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Longest-prefix match table over the peers' `allowed_ips` (end-to-end).
/// Bounded by the configuration; lookups walk a list sorted longest first.
#[derive(Clone, Debug, Default)]
pub struct AllowedIps {
    entries: Vec<(Cidr, IpAddr)>,
}

impl AllowedIps {
    /// Builds the table; entries with longer prefixes win.
    pub fn new(mut entries: Vec<(Cidr, IpAddr)>) -> Self {
        entries.sort_by_key(|e| std::cmp::Reverse(e.0.prefix));
        AllowedIps { entries }
    }
    /// The endpoint for `dst`, if any prefix contains it.
    pub fn lookup(&self, dst: IpAddr) -> Option<IpAddr> {
        self.entries
            .iter()
            .find(|(c, _)| c.contains(dst))
            .map(|(_, p)| *p)
    }
    /// Every prefix with its endpoint, longest prefixes first.
    pub fn entries(&self) -> impl Iterator<Item = (Cidr, IpAddr)> + '_ {
        self.entries.iter().copied()
    }
    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A configured peer, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerPlan {
    /// Its address.
    pub address: IpAddr,
    /// The interface of a link-local IPv6 address (`fe80::2%wlan0`).
    pub interface: Option<String>,
    /// Its prefixes (end-to-end).
    pub allowed_ips: Vec<Cidr>,
    /// Engine parameters for it (accepts_bundles = true).
    pub config: PeerConfig,
}

/// The validated configuration, in the forms the daemon uses.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The configuration as written (after overrides).
    pub config: Config,
    /// The engine configuration (defaults for on-demand peers do not accept bundles).
    pub engine: EngineConfig,
    /// Configured peers.
    pub peers: Vec<PeerPlan>,
    /// End-to-end routing table.
    pub allowed_ips: AllowedIps,
    /// Steering rules in kernel form, in class order (bypass rules stop the chain).
    pub steer: Vec<Match>,
    /// Effective source check.
    pub source_check: SourceCheck,
    /// Prometheus address, parsed.
    pub prometheus: Option<std::net::SocketAddr>,
    /// `[ap]`, validated (None: role off).
    pub ap: Option<downlink::ApPlan>,
    /// `[station]`, validated (None: role off).
    pub station: Option<downlink::StationPlan>,
}

impl Plan {
    /// Outer header bytes in front of a bundle payload for a peer of this family.
    pub fn outer_overhead(transport: Transport, peer: IpAddr) -> usize {
        let ip = if peer.is_ipv4() { 20 } else { 40 };
        match transport {
            Transport::Ip => ip,
            Transport::Udp => ip + 8,
        }
    }

    /// The largest `max_size` over defaults and peers (buffer sizing).
    pub fn largest_max_size(&self) -> usize {
        self.peers
            .iter()
            .map(|p| p.config.max_size)
            .chain([self.engine.peer_defaults.max_size])
            .max()
            .unwrap_or(1500)
    }

    /// The kernel steering spec.
    pub fn steer_spec(&self) -> SteerSpec {
        let d = &self.config.daemon;
        let mut spec = SteerSpec {
            tun: d.tun.clone(),
            bypass_mark: d.bypass_mark,
            priority: d.filter_priority,
            matches: self.steer.clone(),
            steer_from_tun: d.mode == Mode::HopByHop,
            interfaces: d.interfaces.clone(),
            state: Some(crate::linux::state::Files::for_socket(&d.control_socket)),
        };
        if let Some(ap) = &self.ap {
            // The AP's media ports first (no class rule bypasses them), on
            // the interfaces facing the stations too.
            spec.matches.insert(0, ap.steer_rule());
            for i in &ap.interfaces {
                if !spec.interfaces.contains(i) {
                    spec.interfaces.push(i.clone());
                }
            }
        }
        spec
    }

    /// The configured peer with this address.
    pub fn peer(&self, addr: IpAddr) -> Option<&PeerPlan> {
        self.peers.iter().find(|p| p.address == addr)
    }
}

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

/// Maps a byte offset in `src` to a 1-based line number.
fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The dotted key written on a line (`[section]` context + `key =`), if any.
fn key_at_line(src: &str, line: usize) -> Option<String> {
    let mut section = String::new();
    for (i, l) in src.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            section = t.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
        }
        if i + 1 == line {
            if t.starts_with('[') {
                return Some(section);
            }
            let key = t.split_once('=')?.0.trim().trim_matches('"');
            return Some(if section.is_empty() {
                key.to_owned()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    None
}

/// The line of `key` inside the `index`-th `[section]` / `[[section]]` table.
fn find_key_line(src: &str, section: &str, index: usize, key: &str) -> Option<usize> {
    let mut cur = String::new();
    let mut counts: std::collections::HashMap<String, usize> = Default::default();
    let mut cur_index = 0;
    for (i, l) in src.lines().enumerate() {
        let t = l.trim();
        if t.starts_with('[') {
            cur = t.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
            let c = counts.entry(cur.clone()).or_insert(0);
            cur_index = *c;
            *c += 1;
            continue;
        }
        if cur == section && cur_index == index {
            if let Some((k, _)) = t.split_once('=') {
                if k.trim().trim_matches('"') == key {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

/// Formats a TOML deserialisation error as `FILE:LINE: key `K`: message`.
fn toml_error(path: &str, src: &str, e: &toml::de::Error) -> anyhow::Error {
    let msg = e.message().trim().to_owned();
    match e.span() {
        Some(span) => {
            let line = line_of(src, span.start);
            match key_at_line(src, line) {
                Some(k) if !k.is_empty() => anyhow::anyhow!("{path}:{line}: key `{k}`: {msg}"),
                _ => anyhow::anyhow!("{path}:{line}: {msg}"),
            }
        }
        None => anyhow::anyhow!("{path}: {msg}"),
    }
}

/// A validation error located at a key.
struct Located<'a> {
    path: &'a str,
    src: Option<&'a str>,
}

impl Located<'_> {
    fn err(&self, section: &str, index: usize, key: &str, msg: impl fmt::Display) -> anyhow::Error {
        let dotted = if section.is_empty() {
            key.to_owned()
        } else {
            format!("{section}.{key}")
        };
        let shown = if matches!(section, "class" | "peer") {
            format!("{section}[{index}].{key}")
        } else {
            dotted
        };
        match self.src.and_then(|s| find_key_line(s, section, index, key)) {
            Some(line) => anyhow::anyhow!("{}:{line}: key `{shown}`: {msg}", self.path),
            None => anyhow::anyhow!("{}: key `{shown}`: {msg}", self.path),
        }
    }
}

/// Parses a TOML value given on the command line: a TOML literal when it
/// parses as one (`5000`, `true`, `["a","b"]`, `0x10`), else a plain string.
fn parse_override_value(v: &str) -> toml::Value {
    let doc = format!("v = {v}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(v.to_owned())),
        Err(_) => toml::Value::String(v.to_owned()),
    }
}

/// Applies one `section.key=value` (or `peer.N.key=value`, `class.N.key=value`) override.
pub fn apply_override(table: &mut toml::Table, assignment: &str) -> anyhow::Result<()> {
    let (path, value) = assignment
        .split_once('=')
        .with_context(|| format!("--set {assignment:?}: expected SECTION.KEY=VALUE"))?;
    let parts: Vec<&str> = path.trim().split('.').collect();
    let value = parse_override_value(value.trim());
    match parts.as_slice() {
        [section, key] if !section.is_empty() && !key.is_empty() => {
            let t = table
                .entry(section.to_string())
                .or_insert_with(|| toml::Value::Table(Default::default()));
            let t = t
                .as_table_mut()
                .with_context(|| format!("--set {path}: `{section}` is not a table"))?;
            t.insert(key.to_string(), value);
            Ok(())
        }
        [section, idx, key] => {
            let i: usize = idx
                .parse()
                .with_context(|| format!("--set {path}: {idx:?} is not an index"))?;
            let arr = table
                .entry(section.to_string())
                .or_insert_with(|| toml::Value::Array(Vec::new()));
            let arr = arr
                .as_array_mut()
                .with_context(|| format!("--set {path}: `{section}` is not an array"))?;
            if i > arr.len() || i > 4096 {
                bail!(
                    "--set {path}: index {i} skips entries ({} exist)",
                    arr.len()
                );
            }
            if i == arr.len() {
                arr.push(toml::Value::Table(Default::default()));
            }
            let t = arr[i]
                .as_table_mut()
                .with_context(|| format!("--set {path}: entry is not a table"))?;
            t.insert(key.to_string(), value);
            Ok(())
        }
        _ => bail!("--set {assignment:?}: expected SECTION.KEY=VALUE or peer.N.KEY=VALUE"),
    }
}

/// Appends a peer given as `ADDR` or `ADDR=CIDR,CIDR` (the `--peer` flag).
pub fn add_peer_override(table: &mut toml::Table, spec: &str) -> anyhow::Result<()> {
    let (addr, ips) = match spec.split_once('=') {
        Some((a, i)) => (a.trim(), Some(i)),
        None => (spec.trim(), None),
    };
    let mut peer = toml::Table::new();
    peer.insert("address".into(), toml::Value::String(addr.to_owned()));
    if let Some(ips) = ips {
        let list = ips
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| toml::Value::String(s.to_owned()))
            .collect();
        peer.insert("allowed_ips".into(), toml::Value::Array(list));
    }
    let arr = table
        .entry("peer".to_owned())
        .or_insert_with(|| toml::Value::Array(Vec::new()));
    arr.as_array_mut()
        .context("`peer` is not an array")?
        .push(toml::Value::Table(peer));
    Ok(())
}

/// Where a configuration comes from: a file (optional) plus overrides.
#[derive(Clone, Debug, Default)]
pub struct Source {
    /// The TOML file, if any.
    pub file: Option<PathBuf>,
    /// `section.key=value` overrides, applied in order.
    pub sets: Vec<String>,
    /// `--peer` additions.
    pub peers: Vec<String>,
}

impl Source {
    /// Reads, parses, overrides and validates.
    pub fn load(&self) -> anyhow::Result<Plan> {
        let (name, text) = match &self.file {
            Some(p) => (
                p.display().to_string(),
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading config {}", p.display()))?,
            ),
            None => ("<no config file>".to_owned(), String::new()),
        };
        parse(&name, &text, &self.sets, &self.peers)
    }
}

/// Parses `text` (named `name` in errors), applies overrides, validates.
pub fn parse(name: &str, text: &str, sets: &[String], peers: &[String]) -> anyhow::Result<Plan> {
    // First the file alone, so errors carry its line numbers.
    let file_cfg: Config = toml::from_str(text).map_err(|e| toml_error(name, text, &e))?;
    let config = if sets.is_empty() && peers.is_empty() {
        file_cfg
    } else {
        let mut table: toml::Table = text.parse().map_err(|e| toml_error(name, text, &e))?;
        for s in sets {
            apply_override(&mut table, s)?;
        }
        for p in peers {
            add_peer_override(&mut table, p)?;
        }
        Config::deserialize(toml::Value::Table(table))
            .map_err(|e| anyhow::anyhow!("command-line override: {}", e.message().trim()))?
    };
    // Validation locates keys in the file; keys only set by flags have no line.
    validate(name, Some(text), config)
}

/// Parses a `Spec` range: `"a-b"`, `"a"` or an integer, each within `0..=max`.
fn spec_range(s: &Spec, max: u64) -> Result<RangeInclusive<u64>, String> {
    let num = |t: &str| -> Result<u64, String> {
        let t = t.trim();
        let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            u64::from_str_radix(h, 16)
        } else {
            t.parse::<u64>()
        };
        v.map_err(|_| format!("{t:?} is not a number"))
    };
    let (a, b) = match s {
        Spec::Int(i) if *i < 0 => return Err(format!("{i} is negative")),
        Spec::Int(i) => (*i as u64, *i as u64),
        Spec::Str(t) => match t.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let v = num(t)?;
                (v, v)
            }
        },
    };
    if a > b {
        return Err(format!("range {a}-{b} is empty (start > end)"));
    }
    if b > max {
        return Err(format!("{b} is larger than {max}"));
    }
    Ok(a..=b)
}

fn spec_protocol(s: &Spec) -> Result<u8, String> {
    match s {
        Spec::Int(i) => u8::try_from(*i).map_err(|_| format!("protocol {i} is not in 0-255")),
        Spec::Str(t) => match t.to_ascii_lowercase().as_str() {
            "udp" => Ok(17),
            "tcp" => Ok(6),
            "icmp" => Ok(1),
            "icmpv6" | "ipv6-icmp" => Ok(58),
            "sctp" => Ok(132),
            "udplite" => Ok(136),
            other => other.parse::<u8>().map_err(|_| {
                format!("unknown protocol {t:?} (udp, tcp, icmp, icmpv6, sctp, udplite or 0-255)")
            }),
        },
    }
}

fn spec_mark(s: &Spec) -> Result<(u32, u32), String> {
    let num = |t: &str| -> Result<u32, String> {
        let t = t.trim();
        let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            u32::from_str_radix(h, 16)
        } else {
            t.parse::<u32>()
        };
        v.map_err(|_| format!("{t:?} is not a 32-bit number"))
    };
    match s {
        Spec::Int(i) => u32::try_from(*i)
            .map(|v| (v, u32::MAX))
            .map_err(|_| format!("mark {i} out of range")),
        Spec::Str(t) => match t.split_once('/') {
            Some((v, m)) => {
                let (v, m) = (num(v)?, num(m)?);
                if v & !m != 0 {
                    return Err(format!("mark value {v:#x} has bits outside mask {m:#x}"));
                }
                Ok((v, m))
            }
            None => Ok((num(t)?, u32::MAX)),
        },
    }
}

fn valid_ifname(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 15
        && n != "."
        && n != ".."
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Checks ranges and cross-key rules, and builds the [`Plan`].
pub fn validate(name: &str, src: Option<&str>, config: Config) -> anyhow::Result<Plan> {
    let at = Located { path: name, src };
    let d = &config.daemon;
    let a = &config.aggregation;

    if !valid_ifname(&d.tun) {
        return Err(at.err(
            "daemon",
            0,
            "tun",
            format!(
                "{:?} is not a valid interface name (1-15 of [A-Za-z0-9-_.])",
                d.tun
            ),
        ));
    }
    if !(576..=65_535).contains(&d.tun_mtu) {
        return Err(at.err(
            "daemon",
            0,
            "tun_mtu",
            format!("{} must be in 576-65535", d.tun_mtu),
        ));
    }
    if !(16..=1_000_000).contains(&d.tun_txqueuelen) {
        return Err(at.err(
            "daemon",
            0,
            "tun_txqueuelen",
            format!("{} must be in 16-1000000", d.tun_txqueuelen),
        ));
    }
    for i in &d.interfaces {
        if !valid_ifname(i) {
            return Err(at.err(
                "daemon",
                0,
                "interfaces",
                format!("{i:?} is not a valid interface name"),
            ));
        }
    }
    if d.control_socket.as_os_str().is_empty() {
        return Err(at.err("daemon", 0, "control_socket", "must not be empty"));
    }
    if d.bypass_mark == 0 {
        return Err(at.err("daemon", 0, "bypass_mark", "must be non-zero"));
    }
    if d.filter_priority == 0 {
        return Err(at.err("daemon", 0, "filter_priority", "must be in 1-65535"));
    }
    if d.interfaces.contains(&d.tun) {
        return Err(at.err(
            "daemon",
            0,
            "interfaces",
            format!("{:?} is the TUN device itself", d.tun),
        ));
    }
    if d.sched_priority > 99 {
        return Err(at.err(
            "daemon",
            0,
            "sched_priority",
            format!(
                "{} must be 0 (normal) or 1-99 (SCHED_FIFO)",
                d.sched_priority
            ),
        ));
    }
    if d.transport == Transport::Udp && d.udp_port == 0 {
        return Err(at.err(
            "daemon",
            0,
            "udp_port",
            "must be non-zero with transport = \"udp\"",
        ));
    }
    let prometheus = match &d.prometheus {
        None => None,
        Some(s) => Some(s.parse::<std::net::SocketAddr>().map_err(|_| {
            at.err(
                "daemon",
                0,
                "prometheus",
                format!("{s:?} is not ADDR:PORT (e.g. \"127.0.0.1:9477\")"),
            )
        })?),
    };

    if matches!(a.protocol, 0 | 1 | 4 | 6 | 17 | 41 | 58 | 255) {
        return Err(at.err(
            "aggregation",
            0,
            "protocol",
            format!(
                "{} is a protocol the kernel or other traffic uses; pick an unused one such as 253",
                a.protocol
            ),
        ));
    }
    check_sizes(
        &at,
        "aggregation",
        0,
        a.min_size,
        a.max_size,
        a.max_packets,
        a.hold_time_us,
        a.queue_limit_bytes,
        a.queue_limit_packets,
    )?;
    if a.max_peers == 0 || a.max_peers > 65_536 {
        return Err(at.err(
            "aggregation",
            0,
            "max_peers",
            format!("{} must be in 1-65536", a.max_peers),
        ));
    }
    if a.bypass_queue_limit == 0 || a.bypass_queue_limit > 65_536 {
        return Err(at.err(
            "aggregation",
            0,
            "bypass_queue_limit",
            format!("{} must be in 1-65536", a.bypass_queue_limit),
        ));
    }
    if a.dynamic_marking {
        return Err(at.err("aggregation", 0, "dynamic_marking", NO_MARKS));
    }

    check_discovery(&at, &config)?;
    check_medium(&at, &config)?;
    let ap = downlink::check_ap(&at, &config)?;
    let station = downlink::check_station(&at, &config)?;

    // Classes.
    let mut rules = Vec::new();
    let mut steer = Vec::new();
    for (i, c) in config.classes.iter().enumerate() {
        let e = |key: &str, m: String| at.err("class", i, key, m);
        let version = match c.version {
            None => None,
            Some(v @ (4 | 6)) => Some(v),
            Some(v) => return Err(e("version", format!("{v} must be 4 or 6"))),
        };
        let protocol = c
            .protocol
            .as_ref()
            .map(spec_protocol)
            .transpose()
            .map_err(|m| e("protocol", m))?;
        let port = |key: &str, s: &Option<Spec>| -> anyhow::Result<Option<RangeInclusive<u16>>> {
            s.as_ref()
                .map(|s| spec_range(s, 65_535).map(|r| *r.start() as u16..=*r.end() as u16))
                .transpose()
                .map_err(|m| e(key, m))
        };
        let ports = port("ports", &c.ports)?;
        let src_ports = port("src_ports", &c.src_ports)?;
        let dst_ports = port("dst_ports", &c.dst_ports)?;
        if (ports.is_some() || src_ports.is_some() || dst_ports.is_some())
            && !matches!(protocol, Some(6 | 17 | 132 | 136 | 33))
        {
            let key = if ports.is_some() {
                "ports"
            } else if src_ports.is_some() {
                "src_ports"
            } else {
                "dst_ports"
            };
            return Err(e(
                key,
                "port matches need protocol = \"udp\", \"tcp\", \"sctp\" or \"udplite\"".into(),
            ));
        }
        let dscp = c
            .dscp
            .as_ref()
            .map(|s| spec_range(s, 63).map(|r| *r.start() as u8..=*r.end() as u8))
            .transpose()
            .map_err(|m| e("dscp", m))?;
        let len = c
            .len
            .as_ref()
            .map(|s| spec_range(s, 65_535).map(|r| *r.start() as usize..=*r.end() as usize))
            .transpose()
            .map_err(|m| e("len", m))?;
        let mark = c
            .mark
            .as_ref()
            .map(spec_mark)
            .transpose()
            .map_err(|m| e("mark", m))?;
        if mark.is_some() {
            return Err(e("mark", NO_MARKS.into()));
        }
        let class: TrafficClass = c.class.into();
        rules.push(Rule {
            class,
            version,
            protocol,
            src_ports: src_ports.clone(),
            dst_ports: dst_ports.clone(),
            ports: ports.clone(),
            dscp: dscp.clone(),
            len: len.clone(),
            mark,
        });
        steer.push(Match {
            steer: class != TrafficClass::Bypass,
            protocol,
            ports: ports.map(|r| (*r.start(), *r.end())),
            src_ports: src_ports.map(|r| (*r.start(), *r.end())),
            dst_ports: dst_ports.map(|r| (*r.start(), *r.end())),
            dscp: dscp.map(|r| (*r.start(), *r.end())),
            len: len.map(|r| (*r.start() as u16, *r.end() as u16)),
            version,
            mark,
        });
    }

    // Peers.
    let link_mode = match a.link_mode {
        LinkModeCfg::Fixed => LinkMode::Fixed,
        LinkModeCfg::HoldWhileBusy => LinkMode::HoldWhileBusy,
        LinkModeCfg::Adaptive => LinkMode::Adaptive(airpack_core::engine::AdaptiveHold {
            delay_budget: config.medium.delay_budget_us,
            busy_utilisation: (config.medium.busy_utilisation * 1000.0).round() as u16,
        }),
    };
    let base = PeerConfig {
        encoding: a.encoding.into(),
        accepts_bundles: true,
        hold_time: a.hold_time_us,
        min_size: a.min_size,
        max_size: a.max_size,
        max_packets: a.max_packets,
        outer_overhead: Plan::outer_overhead(d.transport, IpAddr::V4([0, 0, 0, 0].into())),
        queue_limit_bytes: a.queue_limit_bytes,
        queue_limit_packets: a.queue_limit_packets,
    };
    let mut peers: Vec<PeerPlan> = Vec::new();
    let mut table = Vec::new();
    for (i, p) in config.peers.iter().enumerate() {
        let e = |key: &str, m: String| at.err("peer", i, key, m);
        if p.address.ip.is_unspecified()
            || p.address.ip.is_multicast()
            || p.address.ip.is_loopback()
        {
            return Err(e(
                "address",
                format!(
                    "{} cannot be a peer (unspecified, multicast or loopback)",
                    p.address.ip
                ),
            ));
        }
        if peers.iter().any(|q| q.address == p.address.ip) {
            // Peers are keyed by address (also in the engine): the same
            // link-local address on two interfaces is refused too.
            return Err(e(
                "address",
                format!("{} is configured twice", p.address.ip),
            ));
        }
        if peers.len() >= a.max_peers {
            return Err(e(
                "address",
                format!("more peers than aggregation.max_peers = {}", a.max_peers),
            ));
        }
        let mut allowed = Vec::new();
        for s in &p.allowed_ips {
            let c = Cidr::parse(s).map_err(|m| e("allowed_ips", m))?;
            if let Some((_, other)) = table.iter().find(|(t, _): &&(Cidr, IpAddr)| *t == c) {
                return Err(e(
                    "allowed_ips",
                    format!("{c} is already routed to peer {other}"),
                ));
            }
            allowed.push(c);
            table.push((c, p.address.ip));
        }
        if d.mode == Mode::EndToEnd && allowed.is_empty() {
            return Err(e(
                "allowed_ips",
                format!(
                    "end-to-end mode needs allowed_ips for peer {}",
                    p.address.ip
                ),
            ));
        }
        let mut pc = base.clone();
        if let Some(x) = p.encoding {
            pc.encoding = x.into();
        }
        if let Some(x) = p.hold_time_us {
            pc.hold_time = x;
        }
        if let Some(x) = p.min_size {
            pc.min_size = x;
        }
        if let Some(x) = p.max_size {
            pc.max_size = x;
        }
        if let Some(x) = p.max_packets {
            pc.max_packets = x;
        }
        if let Some(x) = p.queue_limit_bytes {
            pc.queue_limit_bytes = x;
        }
        if let Some(x) = p.queue_limit_packets {
            pc.queue_limit_packets = x;
        }
        pc.outer_overhead = Plan::outer_overhead(d.transport, p.address.ip);
        check_sizes(
            &at,
            "peer",
            i,
            pc.min_size,
            pc.max_size,
            pc.max_packets,
            pc.hold_time,
            pc.queue_limit_bytes,
            pc.queue_limit_packets,
        )?;
        if pc.max_size <= pc.outer_overhead + 28 {
            return Err(e(
                "max_size",
                format!(
                    "{} leaves no room after the {}-byte outer header",
                    pc.max_size, pc.outer_overhead
                ),
            ));
        }
        peers.push(PeerPlan {
            address: p.address.ip,
            interface: p.address.interface.clone(),
            allowed_ips: allowed,
            config: pc,
        });
    }

    let source_check = d.source_check.unwrap_or(match d.mode {
        Mode::HopByHop => SourceCheck::Route,
        Mode::EndToEnd => SourceCheck::AllowedIps,
    });
    if source_check == SourceCheck::AllowedIps && peers.iter().any(|p| p.allowed_ips.is_empty()) {
        return Err(at.err(
            "daemon",
            0,
            "source_check",
            "\"allowed-ips\" needs allowed_ips on every peer",
        ));
    }

    let mut defaults = base;
    // Peers not configured never get bundles (never blackhole a node without airpack).
    defaults.accepts_bundles = false;
    let engine = EngineConfig {
        max_peers: a.max_peers,
        peer_defaults: defaults,
        link_mode,
        classifier: Classifier {
            rules,
            default: TrafficClass::Bypass,
        },
        dynamic_marking: a.dynamic_marking,
        bypass_queue_limit: a.bypass_queue_limit,
    };
    Ok(Plan {
        engine,
        peers,
        allowed_ips: AllowedIps::new(table),
        steer,
        source_check,
        prometheus,
        ap,
        station,
        config,
    })
}

/// `[medium]` checks.
fn check_medium(at: &Located<'_>, config: &Config) -> anyhow::Result<()> {
    let m = &config.medium;
    let e = |key: &str, msg: String| at.err("medium", 0, key, msg);
    if !(0.0..=1.0).contains(&m.busy_utilisation) {
        return Err(e(
            "busy_utilisation",
            format!("{} must be in 0-1", m.busy_utilisation),
        ));
    }
    if m.delay_budget_us > 1_000_000 {
        return Err(e(
            "delay_budget_us",
            format!("{} must be at most 1000000", m.delay_budget_us),
        ));
    }
    if !(100..=1_000_000).contains(&m.qdisc_interval_us) {
        return Err(e(
            "qdisc_interval_us",
            format!("{} must be in 100-1000000", m.qdisc_interval_us),
        ));
    }
    if !(100..=1_000_000).contains(&m.file_interval_us) {
        return Err(e(
            "file_interval_us",
            format!("{} must be in 100-1000000", m.file_interval_us),
        ));
    }
    if m.file.as_deref() == Some("") {
        return Err(e("file", "must not be empty".into()));
    }
    Ok(())
}

/// `[discovery]` checks (only when enabled, except the key's syntax).
fn check_discovery(at: &Located<'_>, config: &Config) -> anyhow::Result<()> {
    let d = &config.discovery;
    let e = |key: &str, m: String| at.err("discovery", 0, key, m);
    if let Some(k) = &d.key {
        airpack_core::auth::Key::from_hex(k).map_err(|err| e("key", err.to_string()))?;
    }
    if !d.enabled {
        return Ok(());
    }
    if config.daemon.mode != Mode::HopByHop {
        return Err(e(
            "enabled",
            "discovery needs daemon.mode = \"hop-by-hop\"".into(),
        ));
    }
    if config.daemon.interfaces.is_empty() {
        return Err(e(
            "enabled",
            "discovery needs daemon.interfaces (hellos are sent on each of them)".into(),
        ));
    }
    if d.port == 0
        || (config.daemon.transport == Transport::Udp && d.port == config.daemon.udp_port)
    {
        return Err(e(
            "port",
            format!("{} must be non-zero and not daemon.udp_port", d.port),
        ));
    }
    if d.group_v6.segments()[0] & 0xff0f != 0xff02 {
        return Err(e(
            "group_v6",
            format!(
                "{} is not a link-local multicast group (ff02::/16)",
                d.group_v6
            ),
        ));
    }
    if !d.group_v4.is_multicast() {
        return Err(e(
            "group_v4",
            format!("{} is not a multicast group", d.group_v4),
        ));
    }
    if !(100..=60_000).contains(&d.interval_ms) {
        return Err(e(
            "interval_ms",
            format!("{} must be in 100-60000", d.interval_ms),
        ));
    }
    if !(2..=10).contains(&d.hold_intervals) {
        return Err(e(
            "hold_intervals",
            format!("{} must be in 2-10", d.hold_intervals),
        ));
    }
    if !(1..=255).contains(&d.max_neighbors) {
        return Err(e(
            "max_neighbors",
            format!("{} must be in 1-255", d.max_neighbors),
        ));
    }
    if !(d.rate_mbps >= 0.1 && d.rate_mbps <= 100_000.0) {
        return Err(e(
            "rate_mbps",
            format!("{} must be in 0.1-100000", d.rate_mbps),
        ));
    }
    let max = config.aggregation.max_size;
    if !(68..=max).contains(&d.min_size) {
        return Err(e(
            "min_size",
            format!("{} must be in 68-{max} (aggregation.max_size)", d.min_size),
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn check_sizes(
    at: &Located<'_>,
    section: &str,
    i: usize,
    min_size: usize,
    max_size: usize,
    max_packets: usize,
    hold: u64,
    qb: usize,
    qp: usize,
) -> anyhow::Result<()> {
    if !(68..=65_535).contains(&max_size) {
        return Err(at.err(
            section,
            i,
            "max_size",
            format!("{max_size} must be in 68-65535"),
        ));
    }
    if min_size > max_size {
        return Err(at.err(
            section,
            i,
            "min_size",
            format!("{min_size} is larger than max_size = {max_size}"),
        ));
    }
    if max_packets == 0 || max_packets > airpack_core::wire::MAX_PACKETS_PER_BUNDLE {
        return Err(at.err(
            section,
            i,
            "max_packets",
            format!(
                "{max_packets} must be in 1-{}",
                airpack_core::wire::MAX_PACKETS_PER_BUNDLE
            ),
        ));
    }
    if hold > 1_000_000 {
        return Err(at.err(
            section,
            i,
            "hold_time_us",
            format!("{hold} µs is more than 1 s; voice is useless that late"),
        ));
    }
    if qb < max_size.min(1500) || qb > 16 << 20 {
        return Err(at.err(
            section,
            i,
            "queue_limit_bytes",
            format!(
                "{qb} must be in {}-16777216 (at least one full packet)",
                max_size.min(1500)
            ),
        ));
    }
    if qp == 0 || qp > 65_536 {
        return Err(at.err(
            section,
            i,
            "queue_limit_packets",
            format!("{qp} must be in 1-65536"),
        ));
    }
    Ok(())
}

/// Why `class.mark` and `aggregation.dynamic_marking` are refused.
pub const NO_MARKS: &str = "not supported by the daemon: a packet's mark does not travel through the TUN device, so the daemon cannot see it (a mark rule would steer packets into the daemon that it then classifies as unmarked); match on ports, protocol, DSCP or length instead";

/// Every key the file accepts, as `section.key` (used by the docs check).
pub fn known_keys() -> Vec<String> {
    // Serialise a config with every optional field present and read back its keys,
    // so this list cannot drift from the structs.
    let mut c = Config::default();
    c.daemon.prometheus = Some("127.0.0.1:9477".into());
    c.daemon.source_check = Some(SourceCheck::Route);
    c.daemon.cpu_latency_us = Some(0);
    c.discovery.key = Some("00".repeat(16));
    c.medium.file = Some("/dev/shm/x.air".into());
    c.ap.key = Some("00".repeat(16));
    c.ap.unicast = Some("10.0.0.5:8888".into());
    (c.ap.unicast_rate, c.ap.multicast_rate) = (Some(11.0), Some(1.0));
    c.station.key = Some("00".repeat(16));
    c.station.interface = Some("wlan0".into());
    c.station.ap = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    c.station.ports = Some(Spec::Str("auto".into()));
    c.classes.push(ClassSection {
        class: ClassCfg::Bundle,
        protocol: Some(Spec::Str("udp".into())),
        ports: Some(Spec::Int(1)),
        src_ports: Some(Spec::Int(1)),
        dst_ports: Some(Spec::Int(1)),
        dscp: Some(Spec::Int(1)),
        len: Some(Spec::Int(1)),
        version: Some(4),
        mark: Some(Spec::Int(1)),
    });
    c.peers.push(PeerSection {
        address: "10.0.0.2".parse().unwrap(),
        allowed_ips: vec!["10.1.0.0/24".into()],
        encoding: Some(EncodingCfg::Native),
        hold_time_us: Some(1),
        min_size: Some(1),
        max_size: Some(1),
        max_packets: Some(1),
        queue_limit_bytes: Some(1),
        queue_limit_packets: Some(1),
    });
    let v = toml::Value::try_from(&c).expect("config serialises");
    let mut out = Vec::new();
    if let toml::Value::Table(t) = v {
        for (section, val) in t {
            match val {
                toml::Value::Table(inner) => {
                    out.extend(inner.keys().map(|k| format!("{section}.{k}")))
                }
                toml::Value::Array(arr) => {
                    if let Some(toml::Value::Table(inner)) = arr.first() {
                        out.extend(inner.keys().map(|k| format!("{section}.{k}")));
                    }
                }
                _ => out.push(section),
            }
        }
    }
    out.sort();
    out
}

/// Renders the effective configuration as TOML (for `airpack run --check`).
pub fn render(config: &Config) -> String {
    toml::to_string_pretty(config).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> anyhow::Result<Plan> {
        parse("test.toml", text, &[], &[])
    }

    fn err(text: &str) -> String {
        format!("{:#}", p(text).expect_err("should fail"))
    }

    #[test]
    fn empty_file_gives_defaults() {
        let plan = p("").unwrap();
        assert_eq!(plan.config, Config::default());
        assert_eq!(plan.engine.peer_defaults.hold_time, 5000);
        assert!(
            !plan.engine.peer_defaults.accepts_bundles,
            "unconfigured peers must not get bundles"
        );
        assert!(plan.steer.is_empty());
        assert_eq!(plan.source_check, SourceCheck::Route);
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = err(
            "[daemon]\nmode = \"hop-by-hop\"\n\n[aggregation]\nhold_time_us = 5000\nhodl = 3\n",
        );
        assert!(e.contains("test.toml:6"), "{e}");
        assert!(e.contains("hodl"), "{e}");
        assert!(e.contains("aggregation.hodl"), "{e}");
    }

    #[test]
    fn unknown_section_names_line() {
        let e = err("[daemon]\ntun = \"x0\"\n[agregation]\nmin_size = 3\n");
        assert!(e.contains("test.toml:3"), "{e}");
        assert!(e.contains("agregation"), "{e}");
    }

    #[test]
    fn unknown_key_in_peer_array() {
        let e = err("[[peer]]\naddress = \"10.0.0.2\"\n\n[[peer]]\naddress = \"10.0.0.3\"\nallowed_ip = []\n");
        assert!(e.contains("test.toml:6"), "{e}");
        assert!(e.contains("allowed_ip"), "{e}");
    }

    #[test]
    fn bad_value_type_names_key_and_line() {
        let e = err("[aggregation]\n\nhold_time_us = \"soon\"\n");
        assert!(e.contains("test.toml:3"), "{e}");
        assert!(e.contains("aggregation.hold_time_us"), "{e}");
    }

    #[test]
    fn bad_enum_value() {
        let e = err("[daemon]\nmode = \"sideways\"\n");
        assert!(
            e.contains("test.toml:2") && e.contains("daemon.mode"),
            "{e}"
        );
        assert!(e.contains("end-to-end"), "lists the choices: {e}");
        let e = err("[aggregation]\nencoding = \"zip\"\n");
        assert!(
            e.contains("test.toml:2") && e.contains("aggregation.encoding"),
            "{e}"
        );
    }

    #[test]
    fn medium_keys_and_adaptive_mode() {
        let plan = p("[aggregation]\nlink_mode = \"adaptive\"\nhold_time_us = 10000\n[medium]\nfile = \"/dev/shm/x/A.air\"\nbusy_utilisation = 0.45\ndelay_budget_us = 30000\n").unwrap();
        assert_eq!(
            plan.engine.link_mode,
            LinkMode::Adaptive(airpack_core::engine::AdaptiveHold {
                delay_budget: 30_000,
                busy_utilisation: 450
            })
        );
        assert_eq!(plan.config.medium.file.as_deref(), Some("/dev/shm/x/A.air"));
        assert!(plan.config.medium.qdisc);
        let e = err("[medium]\nbusy_utilisation = 1.5\n");
        assert!(e.contains("medium.busy_utilisation"), "{e}");
        let e = err("[medium]\nqdisc_interval_us = 10\n");
        assert!(e.contains("medium.qdisc_interval_us"), "{e}");
        let e = err("[medium]\nsurvey = true\n");
        assert!(e.contains("survey"), "{e}");
    }

    #[test]
    fn discovery_keys() {
        let plan = p("").unwrap();
        assert!(!plan.config.discovery.enabled);
        let ok = "[daemon]\ninterfaces = [\"wlan0\"]\n[discovery]\nenabled = true\nkey = \"00112233445566778899aabbccddeeff\"\n";
        let plan = p(ok).unwrap();
        assert!(plan.config.discovery.enabled);
        let e = err("[discovery]\nenabled = true\n");
        assert!(
            e.contains("discovery.enabled") && e.contains("daemon.interfaces"),
            "{e}"
        );
        let e = err(
            "[daemon]\nmode = \"end-to-end\"\ninterfaces = [\"w0\"]\n[discovery]\nenabled = true\n",
        );
        assert!(e.contains("hop-by-hop"), "{e}");
        // A bad key is refused even while discovery is off.
        let e = err("[discovery]\nkey = \"0011\"\n");
        assert!(
            e.contains("test.toml:2") && e.contains("discovery.key"),
            "{e}"
        );
        let e = err("[daemon]\ninterfaces = [\"w0\"]\n[discovery]\nenabled = true\ngroup_v4 = \"10.0.0.1\"\n");
        assert!(e.contains("discovery.group_v4"), "{e}");
        let e =
            err("[daemon]\ninterfaces = [\"w0\"]\n[discovery]\nenabled = true\nmin_size = 2000\n");
        assert!(e.contains("discovery.min_size"), "{e}");
        let e =
            err("[daemon]\ninterfaces = [\"w0\"]\n[discovery]\nenabled = true\ninterval_ms = 10\n");
        assert!(e.contains("discovery.interval_ms"), "{e}");
    }

    #[test]
    fn validation_errors_name_key_and_line() {
        let e = err("[aggregation]\nmax_size = 1500\nmin_size = 2000\n");
        assert!(
            e.contains("test.toml:3") && e.contains("aggregation.min_size"),
            "{e}"
        );
        let e = err("[daemon]\nfilter_priority = 3\nbypass_mark = 0\n");
        assert!(
            e.contains("test.toml:3") && e.contains("bypass_mark"),
            "{e}"
        );
        let e = err("[daemon]\nfilter_priority = 0\n");
        assert!(
            e.contains("daemon.filter_priority") && e.contains("1-65535"),
            "{e}"
        );
        let e = err("[daemon]\ninterfaces = [\"wlan0\", \"airpack0\"]\n");
        assert!(e.contains("daemon.interfaces") && e.contains("TUN"), "{e}");
        let e = err("[daemon]\ntun = \"a-very-long-interface-name\"\n");
        assert!(e.contains("daemon.tun"), "{e}");
        let e = err("[aggregation]\nprotocol = 17\n");
        assert!(e.contains("aggregation.protocol"), "{e}");
        let e = err("[aggregation]\nhold_time_us = 5000000\n");
        assert!(e.contains("hold_time_us"), "{e}");
    }

    #[test]
    fn link_local_peer_addresses() {
        let plan =
            p("[[peer]]\naddress = \"fe80::2%wlan0\"\n[[peer]]\naddress = \"fd00::2\"\n").unwrap();
        assert_eq!(plan.peers[0].address, "fe80::2".parse::<IpAddr>().unwrap());
        assert_eq!(plan.peers[0].interface.as_deref(), Some("wlan0"));
        assert_eq!(plan.peers[1].interface, None);
        assert_eq!(plan.config.peers[0].address.to_string(), "fe80::2%wlan0");
        // Round trip through the serialized form.
        let back: PeerAddress = "fe80::2%wlan0".parse().unwrap();
        assert_eq!(back, plan.config.peers[0].address);
        let e = err("[[peer]]\naddress = \"fe80::2\"\n");
        assert!(
            e.contains("test.toml:2") && e.contains("peer.address") && e.contains("interface"),
            "{e}"
        );
        let e = err("[[peer]]\naddress = \"10.0.0.2%eth0\"\n");
        assert!(e.contains("link-local"), "{e}");
        let e = err("[[peer]]\naddress = \"fe80::2%\"\n");
        assert!(e.contains("interface name"), "{e}");
        let e = err("[[peer]]\naddress = \"fe80::2%a-very-long-interface\"\n");
        assert!(e.contains("interface name"), "{e}");
        // The engine keys peers by address: one link-local address on two
        // interfaces is refused.
        let e = err("[[peer]]\naddress = \"fe80::2%a0\"\n[[peer]]\naddress = \"fe80::2%b0\"\n");
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn peer_errors() {
        let e = err("[[peer]]\naddress = \"10.0.0.300\"\n");
        assert!(
            e.contains("test.toml:2") && e.contains("peer.address"),
            "{e}"
        );
        let e = err("[[peer]]\naddress = \"10.0.0.2\"\n[[peer]]\naddress = \"10.0.0.2\"\n");
        assert!(
            e.contains("test.toml:4") && e.contains("peer[1].address") && e.contains("twice"),
            "{e}"
        );
        let e = err("[[peer]]\naddress = \"10.0.0.2\"\nallowed_ips = [\"10.1.0.1/24\"]\n");
        assert!(e.contains("test.toml:3") && e.contains("host bits"), "{e}");
        let e = err("[[peer]]\naddress = \"10.0.0.2\"\nallowed_ips = [\"10.1.0.0/33\"]\n");
        assert!(e.contains("allowed_ips") && e.contains("33"), "{e}");
        let e = err("[daemon]\nmode = \"end-to-end\"\n[[peer]]\naddress = \"10.0.0.2\"\n");
        assert!(e.contains("allowed_ips") && e.contains("end-to-end"), "{e}");
        let e = err("[[peer]]\naddress = \"10.0.0.2\"\nmax_size = 40\n");
        assert!(e.contains("peer[0].max_size"), "{e}");
        let e = err("[[peer]]\naddress = \"224.0.0.1\"\n");
        assert!(e.contains("multicast"), "{e}");
    }

    #[test]
    fn class_errors() {
        let e = err("[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"32000-16000\"\n");
        assert!(
            e.contains("test.toml:4") && e.contains("class[0].ports") && e.contains("empty"),
            "{e}"
        );
        let e = err("[[class]]\nclass = \"bundle\"\nports = \"5060\"\n");
        assert!(
            e.contains("class[0].ports") && e.contains("protocol"),
            "{e}"
        );
        let e = err("[[class]]\nclass = \"bundle\"\ndscp = \"70\"\n");
        assert!(e.contains("class[0].dscp") && e.contains("63"), "{e}");
        let e = err("[[class]]\nclass = \"bundle\"\nprotocol = \"gre\"\n");
        assert!(e.contains("class[0].protocol"), "{e}");
        let e = err("[[class]]\nclass = \"sometimes\"\n");
        assert!(
            e.contains("test.toml:2") && e.contains("class.class"),
            "{e}"
        );
        let e = err("[[class]]\nclass = \"bundle\"\nmark = \"0x11/0x10\"\n");
        assert!(e.contains("class[0].mark"), "{e}");
        // Well-formed, but the TUN does not carry the mark: refused, with the reason.
        let e = err("[[class]]\nclass = \"bundle\"\nmark = \"0x10/0xff\"\n");
        assert!(e.contains("class[0].mark") && e.contains("TUN"), "{e}");
        let e = err("[aggregation]\ndynamic_marking = true\n");
        assert!(e.contains("dynamic_marking") && e.contains("TUN"), "{e}");
    }

    #[test]
    fn converts_to_engine_config() {
        let plan = p(r#"
[daemon]
mode = "hop-by-hop"
transport = "udp"
filter_priority = 0x10
bypass_mark = 0x11
cpu_latency_us = 0
[aggregation]
encoding = "simplemux"
hold_time_us = 2000
link_mode = "hold-while-busy"
min_size = 1000
max_size = 1200
max_packets = 32
queue_limit_bytes = 10000
queue_limit_packets = 100
max_peers = 8
[[class]]
class = "bypass"
protocol = "udp"
dst_ports = 5353
[[class]]
class = "bundle"
protocol = "udp"
ports = "16000-32000"
dscp = "46"
len = "0-300"
version = 4
[[class]]
class = "opportunistic"
protocol = "tcp"
[[peer]]
address = "10.0.0.2"
hold_time_us = 1000
[[peer]]
address = "fd00::2"
encoding = "native"
"#)
        .unwrap();
        let e = &plan.engine;
        assert_eq!(e.link_mode, LinkMode::HoldWhileBusy);
        assert_eq!(e.max_peers, 8);
        assert_eq!(e.peer_defaults.encoding, Encoding::Simplemux);
        assert_eq!(e.peer_defaults.hold_time, 2000);
        assert_eq!(e.peer_defaults.min_size, 1000);
        assert_eq!(e.peer_defaults.max_size, 1200);
        assert_eq!(e.peer_defaults.max_packets, 32);
        assert_eq!(e.peer_defaults.queue_limit_bytes, 10000);
        assert_eq!(e.peer_defaults.queue_limit_packets, 100);
        assert!(!e.peer_defaults.accepts_bundles);
        assert_eq!(e.classifier.rules.len(), 3);
        let r = &e.classifier.rules[1];
        assert_eq!(r.class, TrafficClass::Bundle);
        assert_eq!(r.protocol, Some(17));
        assert_eq!(r.ports, Some(16000..=32000));
        assert_eq!(r.dscp, Some(46..=46));
        assert_eq!(r.len, Some(0..=300));
        assert_eq!(r.version, Some(4));
        assert_eq!(r.mark, None);
        assert_eq!(e.classifier.rules[0].dst_ports, Some(5353..=5353));
        assert_eq!(e.classifier.rules[2].class, TrafficClass::Opportunistic);
        // Steering keeps every rule in order; bypass rules stop the chain.
        assert_eq!(plan.steer.len(), 3);
        assert!(!plan.steer[0].steer);
        assert_eq!(plan.steer[0].dst_ports, Some((5353, 5353)));
        assert!(plan.steer[1].steer);
        assert_eq!(plan.steer[1].ports, Some((16000, 32000)));
        assert_eq!(plan.steer[1].mark, None);
        let spec = plan.steer_spec();
        assert_eq!((spec.bypass_mark, spec.priority), (0x11, 0x10));
        assert_eq!(plan.config.daemon.cpu_latency_us, Some(0));
        assert!(
            spec.interfaces.is_empty(),
            "none configured: the daemon finds them"
        );
        assert!(
            spec.steer_from_tun,
            "hop-by-hop re-aggregates forwarded packets"
        );
        // Peers: overrides and transport overhead per family.
        assert_eq!(plan.peers.len(), 2);
        let p0 = &plan.peers[0].config;
        assert!(p0.accepts_bundles);
        assert_eq!(p0.hold_time, 1000);
        assert_eq!(p0.encoding, Encoding::Simplemux);
        assert_eq!(p0.outer_overhead, 28, "UDP over IPv4");
        let p1 = &plan.peers[1].config;
        assert_eq!(p1.encoding, Encoding::Native);
        assert_eq!(p1.hold_time, 2000);
        assert_eq!(p1.outer_overhead, 48, "UDP over IPv6");
    }

    #[test]
    fn end_to_end_allowed_ips_lpm() {
        let plan = p(r#"
[daemon]
mode = "end-to-end"
[[peer]]
address = "10.0.0.2"
allowed_ips = ["10.1.0.0/16"]
[[peer]]
address = "10.0.0.3"
allowed_ips = ["10.1.2.0/24", "fd00:1::/64"]
"#)
        .unwrap();
        let t = &plan.allowed_ips;
        assert_eq!(
            t.lookup("10.1.2.9".parse().unwrap()),
            Some("10.0.0.3".parse().unwrap())
        );
        assert_eq!(
            t.lookup("10.1.3.9".parse().unwrap()),
            Some("10.0.0.2".parse().unwrap())
        );
        assert_eq!(t.lookup("10.2.0.1".parse().unwrap()), None);
        assert_eq!(
            t.lookup("fd00:1::5".parse().unwrap()),
            Some("10.0.0.3".parse().unwrap())
        );
        assert_eq!(t.lookup("fd00:2::5".parse().unwrap()), None);
        assert_eq!(plan.source_check, SourceCheck::AllowedIps);
    }

    #[test]
    fn cidr() {
        let c = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(c.contains("1.2.3.4".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let c = Cidr::parse("10.0.0.7").unwrap();
        assert_eq!(c.prefix, 32);
        assert!(c.contains("10.0.0.7".parse().unwrap()));
        assert!(!c.contains("10.0.0.8".parse().unwrap()));
        assert!(Cidr::parse("::/0")
            .unwrap()
            .contains("fd00::1".parse().unwrap()));
        assert!(Cidr::parse("fd00::1/64").is_err());
        assert!(Cidr::parse("x/3").is_err());
    }

    #[test]
    fn overrides() {
        let text = "[aggregation]\nhold_time_us = 5000\n";
        let sets = vec![
            "aggregation.hold_time_us=2500".to_owned(),
            "daemon.mode=end-to-end".to_owned(),
            "daemon.interfaces=[\"veth0\",\"veth1\"]".to_owned(),
            "daemon.bypass_mark=0x99".to_owned(),
            "peer.0.hold_time_us=100".to_owned(),
        ];
        let peers = vec!["10.0.0.9=10.9.0.0/24,fd00:9::/64".to_owned()];
        // peer.0 created by --set, then --peer appends peer 1. Peer 0 lacks an address.
        let e = parse("t.toml", text, &sets, &peers).unwrap_err();
        assert!(format!("{e:#}").contains("address"), "{e:#}");
        let sets = &sets[..4];
        let plan = parse("t.toml", text, sets, &peers).unwrap();
        assert_eq!(plan.engine.peer_defaults.hold_time, 2500);
        assert_eq!(plan.config.daemon.mode, Mode::EndToEnd);
        assert_eq!(plan.config.daemon.interfaces, vec!["veth0", "veth1"]);
        assert_eq!(plan.config.daemon.bypass_mark, 0x99);
        assert_eq!(plan.peers[0].address, "10.0.0.9".parse::<IpAddr>().unwrap());
        assert_eq!(plan.peers[0].allowed_ips.len(), 2);
        // A bad override is an error that names the flag.
        let e = parse(
            "t.toml",
            text,
            &["aggregation.hold_time_us=soon".into()],
            &[],
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("override"), "{e:#}");
        let e = parse("t.toml", text, &["aggregation.nope=1".into()], &[]).unwrap_err();
        assert!(format!("{e:#}").contains("nope"), "{e:#}");
        assert!(apply_override(&mut toml::Table::new(), "novalue").is_err());
    }

    #[test]
    fn known_keys_cover_the_schema() {
        let keys = known_keys();
        for k in [
            "daemon.mode",
            "daemon.prometheus",
            "daemon.source_check",
            "aggregation.hold_time_us",
            "class.mark",
            "peer.allowed_ips",
            "peer.queue_limit_packets",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
        }
        // Every known key is accepted by the parser (no key listed that the schema rejects).
        assert!(!keys
            .iter()
            .any(|k| k.ends_with(".classes") || k.ends_with(".peers")));
    }

    #[test]
    fn render_roundtrips() {
        let plan = p("[daemon]\nprometheus = \"127.0.0.1:9000\"\n[[class]]\nclass = \"bundle\"\nprotocol = \"udp\"\nports = \"1-2\"\n[[peer]]\naddress = \"10.0.0.2\"\n").unwrap();
        let text = render(&plan.config);
        let again = p(&text).unwrap();
        assert_eq!(again.config, plan.config);
    }
}
