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

mod address;
pub mod downlink;
pub mod gateway;
mod load;
#[cfg(test)]
mod tests;
mod validate;

pub use address::{is_link_local_v6, AllowedIps, Cidr, PeerAddress, PeerPlan, Plan};
pub use load::{add_peer_override, apply_override, parse, Source};
use load::{spec_mark, spec_protocol, spec_range, valid_ifname, Located};
pub use validate::validate;

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
    /// `[gateway]`: voice-adaptive gateway pacer role (issue 12).
    #[serde(default)]
    pub gateway: gateway::GatewaySection,
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

/// When bundle-class packets wait: the fixed hold, hold-while-busy or the
/// medium-aware adaptive hold. Unset in the file, it follows `daemon.mode`
/// ([`LinkModeCfg::default_for`]).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LinkModeCfg {
    /// Hold until min size, max size or hold time.
    Fixed,
    /// Also release as soon as the link is idle.
    HoldWhileBusy,
    /// Hold only while the medium is busy or highly utilised, within a
    /// per-flow delay budget (`[medium]`; issue 11 point 7).
    Adaptive,
}

impl LinkModeCfg {
    /// The link mode when `aggregation.link_mode` is not set: `adaptive`
    /// hop-by-hop (each node sees the medium its bundles cross, and on a
    /// node without medium figures adaptive degrades to its backlog sources:
    /// `docs/adaptive.md`, "Default and degraded operation"); `fixed`
    /// end-to-end (the hold is paid once for the whole path, whose links'
    /// media the endpoints cannot see, so adaptive would rarely hold there).
    pub fn default_for(mode: Mode) -> LinkModeCfg {
        match mode {
            Mode::HopByHop => LinkModeCfg::Adaptive,
            Mode::EndToEnd => LinkModeCfg::Fixed,
        }
    }
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
    /// `fixed`, `hold-while-busy` or `adaptive`; unset: `adaptive`
    /// hop-by-hop, `fixed` end-to-end ([`LinkModeCfg::default_for`]; the
    /// validated plan carries the effective mode, `Plan::link_mode`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_mode: Option<LinkModeCfg>,
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
            link_mode: None,
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
    /// Radio figures for the link-quality estimate: `"nl80211"` (station
    /// info and survey of each of `daemon.interfaces`; an interface that is
    /// not a wireless one is counted and skipped) or `"off"` (hellos only).
    pub radio: RadioCfg,
    /// A counters file in the lab's `NODE.air` format (`docs/lab.md` 2b)
    /// whose `peer` lines stand in for nl80211 station info (the lab's
    /// ns-3 air); replaces `radio` when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub radio_file: Option<String>,
    /// How often the radio figures are read, ms.
    pub radio_interval_ms: u32,
    /// Noise floor assumed when the radio reports none, dBm.
    pub noise_dbm: i8,
}

/// `discovery.radio`: where radio figures come from.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum RadioCfg {
    /// nl80211 station dump and survey (generic netlink).
    #[default]
    Nl80211,
    /// No radio figures: hello loss only.
    Off,
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
            radio: RadioCfg::Nl80211,
            radio_file: None,
            radio_interval_ms: 1000,
            noise_dbm: airpack_core::neighbor::radio::DEFAULT_NOISE_DBM,
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
    /// nl80211 survey channel busy/active time of each of
    /// `daemon.interfaces` as the medium's utilisation: `auto` reads it when
    /// `link_mode` is `adaptive` and `file` is unset (the file, when set,
    /// takes precedence); interfaces that are not wireless count as idle.
    pub survey: SurveyCfg,
    /// Least time between two survey reads, µs (the counters count whole
    /// milliseconds: a 50 ms window resolves 2 %).
    pub survey_interval_us: u64,
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
            survey: SurveyCfg::Auto,
            survey_interval_us: 50_000,
            busy_utilisation: f64::from(a.busy_utilisation) / 1000.0,
            delay_budget_us: a.delay_budget,
        }
    }
}

/// `medium.survey`: whether nl80211 survey busy time is a utilisation source.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SurveyCfg {
    /// On with `link_mode = "adaptive"`, listed interfaces and no `file`.
    #[default]
    Auto,
    /// Never read.
    Off,
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

/// Why `class.mark` and `aggregation.dynamic_marking` are refused.
pub const NO_MARKS: &str = "not supported by the daemon: a packet's mark does not travel through the TUN device, so the daemon cannot see it (a mark rule would steer packets into the daemon that it then classifies as unmarked); match on ports, protocol, DSCP or length instead";

/// Every key the file accepts, as `section.key` (used by the docs check).
pub fn known_keys() -> Vec<String> {
    // Serialise a config with every optional field present and read back its keys,
    // so this list cannot drift from the structs.
    let mut c = Config::default();
    c.daemon.prometheus = Some("127.0.0.1:9477".into());
    c.daemon.source_check = Some(SourceCheck::Route);
    c.aggregation.link_mode = Some(LinkModeCfg::Adaptive);
    c.gateway.mos_percentile = Some(0.25);
    c.gateway.mos_rank_base = Some(8);
    c.daemon.cpu_latency_us = Some(0);
    c.discovery.key = Some("00".repeat(16));
    c.discovery.radio_file = Some("/dev/shm/x.air".into());
    c.medium.file = Some("/dev/shm/x.air".into());
    c.ap.key = Some("00".repeat(16));
    c.ap.unicast = Some("10.0.0.5:8888".into());
    (c.ap.unicast_rate, c.ap.multicast_rate) = (Some(11.0), Some(1.0));
    c.ap.frame_copies = Some(2);
    c.station.key = Some("00".repeat(16));
    c.station.interface = Some("wlan0".into());
    c.station.ap = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    c.station.ports = Some(Spec::Str("auto".into()));
    c.gateway.interface = Some("mesh0".into());
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
